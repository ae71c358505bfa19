"""The engine of the transport testbed: specs, planner, runner, records, analysis, bounds."""

__version__ = "0.1.0"
