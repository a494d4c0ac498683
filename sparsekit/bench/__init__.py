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

The helpers they share for arrays on the device (:func:`cuda_torch`, :func:`torch_tensor`, :func:`half_b_on_device`,
:func:`to_host`) sit here, below the benchmarks, so that :mod:`sparsekit.tune` holds a bfloat16 B as they do.
"""
from __future__ import annotations

import os

import numpy as np

from sparsekit.checks import BFLOAT16


def cuda_torch():
    """PyTorch when it is installed and sees a CUDA device (its vendor baselines then run), else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def torch_tensor(x: np.ndarray, torch):
    """The NumPy array ``x`` as a CPU tensor of its dtype and strides, no copy (``torch.from_numpy`` does not know
    ``ml_dtypes.bfloat16``: its bits are viewed as ``torch.bfloat16``)."""
    if x.dtype == BFLOAT16:
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(x)


def half_b_on_device(b16: np.ndarray):
    """``b16`` where the kernels read it without a copy a launch: a PyTorch CUDA tensor when PyTorch sees a GPU
    (bfloat16 has no Numba array), else a Numba device array (float16) or, under the CUDA simulator, the array
    itself (bfloat16: device memory is host memory there)."""
    from numba import cuda

    torch = cuda_torch()
    if torch is not None:
        return torch_tensor(b16, torch).cuda()
    if b16.dtype == np.float16:
        return cuda.to_device(b16)
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return b16
    raise ValueError("b: a bfloat16 B stays on the device as a torch.bfloat16 tensor (Numba has no bfloat16 "
                     "arrays): install PyTorch with CUDA")


def to_host(x):
    """A result on the host as a NumPy array of its dtype: a Numba device array, a PyTorch tensor (bfloat16 as
    ``ml_dtypes.bfloat16``, its bits copied) or an array."""
    if hasattr(x, "copy_to_host"):
        return x.copy_to_host()
    if hasattr(x, "cpu"):                                  # torch tensor (dense result)
        import torch
        host = x.cpu()
        if host.dtype == torch.bfloat16:
            return host.view(torch.int16).numpy().view(BFLOAT16)
        return host.numpy()
    return np.asarray(x)
