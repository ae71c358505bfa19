"""Blocks of an experiment spread over a Dask cluster of lab hosts (issue 30)."""
