"""A campaign: every experiment file of a set, run in turn, with one index and one report."""
