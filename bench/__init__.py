"""Benchmarks of the asktell engines and service; run each from the repository root as
``python -m bench.<script>``."""
