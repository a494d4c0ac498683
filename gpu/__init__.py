"""Numba CUDA kernels, one module per kernel, named as its reference."""
