"""The plan stage: the order of runs (blocks, alternation, counterbalancing, re-runs), sans-I/O."""
