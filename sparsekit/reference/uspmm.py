"""Reference USpMM: ``C = A @ B`` with a uniform-sparse ``A`` in ELL format.

The executable specification of ``sparsekit/gpu/uspmm.py`` (same names, same arguments,
same result). Source: "Uniform Sparsity in Deep Neural Networks", Section 3
and Listing 1.

The ELL format (``sparsekit.formats.ELL``) stores an ``M x K`` matrix with
exactly ``K'`` entries per row as two ``M x K'`` arrays in column-major
(Fortran) order, the paper's ``ellval`` and ``ellidx``:
``ellval[x*m + row] == values[row, x]`` and ``ellidx[x*m + row] == indices[row, x]``.
Listing 1 loops over the ``K'`` slots ``x`` (line 25) and, for every row at
once, multiplies ``ellval[x, row]`` with row ``ellidx[x, row]`` of ``B`` (lines
26-35). :func:`uspmm` is that loop, vectorised over the rows and columns.

Two layouts
-----------
``uspmm(ell, b)``
    ``b`` is ``K x N`` (``C = A @ B``); the result ``C`` is ``M x N``.
``uspmm_linear(ell, x)``
    the paper's Eq. 1 for a PyTorch ``Linear`` layer, ``Y = X @ W^T`` with the
    weight ``W = A`` (``M x K``, out x in), ``x`` ``N x K`` and ``Y`` ``N x M``,
    all row-major. Eq. 2 rewrites it as ``Y^T = W @ X^T``: a row-major ``N x K``
    ``X`` *is* a column-major ``K x N`` ``X^T``, so this is ``uspmm(ell, x.T).T``
    with no data moved. Listing 1 is written for exactly this case
    (``X[bcol*k + brow]``, ``Y[ccol*m + crow]``).

Precision: products and sums in float64, one rounding to ``b.dtype`` at the
end (``sparsekit/reference/spmm.py`` documents the shared rules and checks).
"""
from __future__ import annotations

import numpy as np

from sparsekit.reference.spmm import check_rhs

__all__ = ["uspmm", "uspmm_linear"]


def uspmm(ell, b: np.ndarray) -> np.ndarray:
    """``C = A @ b`` for a uniform-sparse ``A`` in ELL (``M x K``) and a dense ``b`` (``K x N``).

    Returns ``C`` (``M x N``, C-contiguous) in ``b.dtype``.

    >>> from types import SimpleNamespace
    >>> ell = SimpleNamespace(shape=(2, 3),
    ...     values=np.asfortranarray([[1.0], [2.0]], dtype=np.float32),
    ...     indices=np.asfortranarray([[2], [0]], dtype=np.int32))
    >>> uspmm(ell, np.arange(6, dtype=np.float32).reshape(3, 2))
    array([[4., 5.],
           [0., 2.]], dtype=float32)
    """
    ellval, ellidx = ell.values, ell.indices            # (M, K') each, column-major
    check_rhs(b, shape=ell.shape, dtype=ellval.dtype)
    m, kprime = ellval.shape
    b64 = b.astype(np.float64)
    c = np.zeros((m, b.shape[1]), dtype=np.float64)
    for x in range(kprime):                              # Listing 1, line 25: the K' slots
        aval = ellval[:, x].astype(np.float64)           # line 26: ellval[x*m + crow], every row
        brow = ellidx[:, x]                              # line 27: ellidx[x*m + crow]
        c += aval[:, None] * b64[brow, :]                # lines 29-34: ctmp[i] += aval * X[brow, bcol]
    return c.astype(b.dtype)


def uspmm_linear(ell, x: np.ndarray) -> np.ndarray:
    """``Y = x @ W^T`` (PyTorch ``Linear``, Eq. 1) computed as Eq. 2, ``Y^T = W @ x^T``.

    ``ell`` holds the weight ``W`` (``M x K``: out_features x in_features),
    ``x`` is ``N x K`` row-major; returns ``Y`` (``N x M``, C-contiguous).
    """
    return np.ascontiguousarray(uspmm(ell, x.T).T)
