"""Triton kernels behind the CUDA implementations of some ops (tested on CPU with TRITON_INTERPRET=1)."""
