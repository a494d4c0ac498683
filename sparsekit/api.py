"""``sparsekit.spmm(a, b)``: one entry point for sparse x dense on the GPU, dispatching on ``a``'s format.

=================================  ==========================================================  ==============
``a``                              kernel                                                      ``b``
=================================  ==========================================================  ==============
:class:`~sparsekit.formats.ELL`    :func:`sparsekit.gpu.uspmm.uspmm` with ``config="auto"`` (the decode   ``K x N``
(uniform sparsity)                 path for half precision at small N, the tensor-core and
                                   CUDA-core kernels elsewhere)
:class:`~sparsekit.formats.TiledCSL`  :func:`sparsekit.gpu.spmm_tiled.spmm_tiled` (float16/bfloat16, N <= 64)  ``K x N``
:class:`~sparsekit.formats.TiledBitmap`  :func:`sparsekit.gpu.spmm_bitmap.spmm_bitmap` (float16/bfloat16, N <= 64)  ``K x N``
:class:`~sparsekit.formats.CSR`    :func:`sparsekit.gpu.spmm.spmm_csr` with its automatic tunables        ``K x N``
:class:`~sparsekit.formats.COO`    :func:`sparsekit.gpu.spmm.spmm_coo` (``config="auto"``: the CSR      ``K x N``
                                   kernels on the same entries; ``config=None``: atomics)
:class:`~sparsekit.formats.BlockedELL`  :func:`sparsekit.gpu.spmm.spmm_blocked_ell` (``config="auto"``:  ``K x N``
                                   the CSR kernels on the same entries; ``config=None``: its own)
=================================  ==========================================================  ==============

A prepared matrix (``sparsekit.gpu.uspmm.prepare``, ``sparsekit.gpu.spmm_tiled.prepare``, ``sparsekit.gpu.spmm_bitmap.prepare``,
``sparsekit.gpu.spmm.prepare``) is taken too and
skips the copy. ``b`` is row-major (ELL also takes column-major), of ``a``'s dtype; the result is ``a @ b``
in ``b``'s array kind (NumPy, Numba, CuPy, PyTorch). Keyword arguments go to the kernel.
"""
from __future__ import annotations

from sparsekit.formats import COO, CSR, ELL, BlockedELL, TiledBitmap, TiledCSL

__all__ = ["spmm"]


def spmm(a, b, **kwargs):
    """``a @ b`` on the GPU (or the CUDA simulator) by the kernel for ``a``'s format (module docstring)."""
    from sparsekit.gpu import spmm as general
    from sparsekit.gpu import spmm_bitmap, spmm_tiled, uspmm

    host = getattr(a, "host", a)
    if isinstance(host, ELL):
        return uspmm.uspmm(a, b, **({"config": "auto"} if not kwargs else kwargs))
    if isinstance(host, TiledCSL):
        return spmm_tiled.spmm_tiled(a, b, **kwargs)
    if isinstance(host, TiledBitmap):
        return spmm_bitmap.spmm_bitmap(a, b, **kwargs)
    if isinstance(host, CSR):
        return general.spmm_csr(a, b, **kwargs)
    if isinstance(host, COO):
        return general.spmm_coo(a, b, **kwargs)
    if isinstance(host, BlockedELL):
        return general.spmm_blocked_ell(a, b, **kwargs)
    raise TypeError(f"a: expected a sparse matrix of sparsekit.formats (ELL, TiledCSL, TiledBitmap, CSR, COO, "
                    f"BlockedELL) or a prepared one, got {type(a).__name__}")
