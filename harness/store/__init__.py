"""The result store: one experiment's result directory, written atomically."""
