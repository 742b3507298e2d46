"""Stage 8: results.json, the charts, report.html and the runs table."""
