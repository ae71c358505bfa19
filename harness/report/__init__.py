"""Reports: report.md, its sections and plots, from a result directory."""
