"""Validity: is a run valid, and what the host's disturbance could have added to it (pure
functions)."""
