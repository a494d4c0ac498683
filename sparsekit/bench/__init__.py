"""Benchmarks the ``sparsekit bench`` commands run and the experiments build on.

Each module holds one kernel family's declarative benchmark: problems and providers in, one record per
configuration out (device or wall time with spread, ``correct``), plus :func:`host_bytes`-style estimates of
the host memory a problem takes, which the command line checks before it allocates.

=========================  =====================================================================
:mod:`.spmm`               CSR SpMM: the CPU kernels and the GPU lessons against scipy, BLAS, cuSPARSE
:mod:`.uspmm`              USpMM against cuSPARSE, cuBLAS and the roofline
:mod:`.uspmm_decode`       uniform-sparse half-precision SpMM at LLM decode shapes against dense cuBLAS
:mod:`.sparsify24`         the 2:4 tile sparsifier against PyTorch's, and the share of ``|w|`` its masks keep
=========================  =====================================================================

Numba and the kernels are imported inside the functions: the command line decides on the CUDA simulator
after parsing, and Numba reads that switch once, at its first import.

The helpers they share for arrays on the device and PyTorch (``cuda_torch``, ``torch_tensor``, ``half_b_on_device``,
``to_host``) are in :mod:`sparsekit.arrays`, where :mod:`sparsekit.tune` uses them too.
"""
from __future__ import annotations
