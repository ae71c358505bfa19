"""Base code every layer shares: errors, units, the fixed workloads, Linux helpers.

It imports none of the testbed's other packages, so that netem, the stacks (servers,
clients) and the harness can all depend on it without importing each other both ways.
"""
