"""Benchmarks of the stacks (``testbed bench stacks``)."""
