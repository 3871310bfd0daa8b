"""Sapiens2 demo: models -> pipelines -> render / export, with the UI, the CLI and Ray as front doors."""
