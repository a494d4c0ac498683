"""Numba CPU kernels of the teaching track, named as their references."""
