"""Benchmark suites. Each module exports ``run(rec, device, quick)``; see ``benchmarks/run.py``."""
