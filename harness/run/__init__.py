"""The run stage: the link (or remote path) up, the stacks started for each planned run, the
machine watched."""
