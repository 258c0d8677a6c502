"""Stand-ins for other libraries' APIs, backed by pyg_fast's kernels."""
