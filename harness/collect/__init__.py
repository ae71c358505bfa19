"""The record stage: a run's files (records, events, captures, qlogs) into its typed row and
tables."""
