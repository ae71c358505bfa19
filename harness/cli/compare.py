"""``testbed compare A B``: two result directories (two runs of one experiment, or two
campaigns) level by level (harness.analysis.compare)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _compare(args: argparse.Namespace) -> int:
    from harness.analysis.compare import compare_dirs, levels_frame, markdown
    from harness.store.resultdir import atomic_write_text

    comparison = compare_dirs(Path(args.a), Path(args.b), seed=args.seed)
    if args.json:
        print(json.dumps([c.to_dict() for c in comparison.levels], indent=1, default=str))
    else:
        print(markdown(comparison), end="")
    if args.csv is not None:
        atomic_write_text(Path(args.csv), levels_frame(comparison).to_csv(index=False))
    return 0


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``compare`` to ``testbed``."""
    compare = commands.add_parser(
        "compare",
        help="two result directories (an experiment's or a campaign's) level by level: "
        "medians, B - A with a bootstrap interval, which levels moved beyond their noise",
    )
    compare.add_argument("a", metavar="A", help="results/<experiment>/<stamp> or a campaign dir")
    compare.add_argument("b", metavar="B", help="the same kind of directory, to compare with A")
    compare.add_argument("--json", action="store_true", help="print the levels as JSON")
    compare.add_argument("--csv", default=None, metavar="FILE", help="also write the levels")
    compare.add_argument("--seed", type=int, default=0, help="the bootstrap's seed")
    compare.set_defaults(handler=_compare)
