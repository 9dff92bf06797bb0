"""Metrics, cells, statistics and the benchmark runner."""
