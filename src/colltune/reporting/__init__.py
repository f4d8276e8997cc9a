"""Reporting what the store holds: the HTML page with plots, CSV, terminal summaries."""
