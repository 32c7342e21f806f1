"""Exporter adapters: threads and I/O live here, never in the pure core."""
