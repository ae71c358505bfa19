"""Analysis: per-level statistics against the bounds, arm and order effects, playback."""
