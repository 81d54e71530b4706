"""Tuning jobs the server runs itself: datasets, workloads, artifacts, workers, the runner."""
