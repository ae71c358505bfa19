"""Command-line edge of this package (placeholder until its issue lands)."""

from __future__ import annotations

import argparse


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add this package's subcommands to ``testbed``."""
