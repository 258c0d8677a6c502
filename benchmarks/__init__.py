"""pyg_fast benchmarks: timing and recording helpers, benchmark graphs and suites.

Run them with ``python -m benchmarks.run`` (see ``benchmarks/run.py``).
"""
