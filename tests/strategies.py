"""Shared hypothesis building blocks: compose these, do not draw by hand.

Keyword-only, small, and each draws the shape first and then data consistent
with it. Values are drawn from a bounded range with no zeros unless asked
(zeros hide unwritten outputs), and never NaN/Inf.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

FLOAT_DTYPES = (np.float16, np.float32, np.float64)
#: The 16-bit dtypes of the tensor-core kernels.
HALVES = [np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)]


def dtypes(*, allowed=FLOAT_DTYPES):
    return st.sampled_from([np.dtype(d) for d in allowed])


def dims(*, min_size: int = 1, max_size: int = 40):
    return st.integers(min_value=min_size, max_value=max_size)


@st.composite
def shapes_2d(draw, *, min_size: int = 1, max_size: int = 40, multiple_of=(1, 1)):
    """(rows, cols), each a multiple of ``multiple_of`` (e.g. (1, 4) for 2:4 groups)."""
    rm, cm = multiple_of
    r = draw(st.integers(max(1, -(-min_size // rm)), max(1, max_size // rm))) * rm
    c = draw(st.integers(max(1, -(-min_size // cm)), max(1, max_size // cm))) * cm
    return r, c


@st.composite
def dense_arrays(draw, shape, *, dtype=np.float32, low: float = 0.25, high: float = 2.0):
    """A dense array of ``shape`` with magnitudes in [low, high], random signs, no zeros.

    Distinct-ish magnitudes come from a seeded generator so ties are rare but
    possible (tests that care about ties draw them on purpose).
    """
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    mag = rng.uniform(low, high, size=shape)
    sign = rng.choice([-1.0, 1.0], size=shape)
    return (mag * sign).astype(dtype)


@st.composite
def sparsities(draw, *, low: float = 0.0, high: float = 0.95):
    return draw(st.floats(min_value=low, max_value=high, allow_nan=False, exclude_max=True))


def uniform_mask(rng: np.random.Generator, m: int, k: int, kprime: int) -> np.ndarray:
    """An ``m x k`` boolean mask keeping ``kprime`` columns of every row, drawn by ``rng`` (uniform sparsity)."""
    mask = np.zeros((m, k), dtype=bool)
    for r in range(m):
        mask[r, rng.choice(k, size=kprime, replace=False)] = True
    return mask


@st.composite
def sparse_dense(draw, shape, *, dtype=np.float32, pattern: str = "unstructured"):
    """A dense matrix with zeros placed by ``pattern``.

    ``unstructured``: each entry kept with a drawn density (rows may be empty or full);
    ``uniform``: every row keeps the same number K' of entries (K' may be 0 or all).
    """
    m, k = shape
    a = draw(dense_arrays(shape, dtype=dtype))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if pattern == "unstructured":
        density = draw(st.sampled_from([0.0, 0.1, 0.3, 0.6, 1.0]))
        keep = rng.random(shape) < density
    elif pattern == "uniform":
        kprime = draw(st.integers(0, k))
        keep = uniform_mask(rng, m, k, kprime)
    else:
        raise ValueError(f"pattern: expected 'unstructured' or 'uniform', got {pattern!r}")
    return np.where(keep, a, np.zeros((), dtype=dtype)).astype(dtype)


@st.composite
def conv_shapes(draw, *, max_out: int = 6, max_in: int = 4, max_kernel: int = 3, multiple_of=(1, 1)):
    """A conv weight shape (K, C, R, S); K a multiple of ``multiple_of[0]``, C of ``multiple_of[1]``.

    C being a multiple makes the flattened C*R*S one too (for N:M groups or blocks).
    """
    km, cm = multiple_of
    k = draw(st.integers(1, max(1, max_out // km))) * km
    c = draw(st.integers(1, max(1, max_in // cm))) * cm
    r = draw(st.integers(1, max_kernel))
    s = draw(st.integers(1, max_kernel))
    return k, c, r, s


@st.composite
def weight_dicts(draw, *, max_layers: int = 3, max_size: int = 16, dtype=None):
    """A model ``{"layer0": w0, ...}`` of 2-D weights with different shapes.

    ``dtype=None`` draws one float dtype per layer (mixed models are allowed).
    """
    n = draw(st.integers(1, max_layers))
    layers = {}
    for i in range(n):
        shape = draw(shapes_2d(max_size=max_size))
        dt = draw(dtypes()) if dtype is None else dtype
        layers[f"layer{i}"] = draw(dense_arrays(shape, dtype=dt))
    return layers


@st.composite
def tied_arrays(draw, shape, *, dtype=np.float32, levels: int = 2):
    """An array whose magnitudes take only ``levels`` distinct values (1..levels), random signs.

    Forces ties, to test that pruners break them deterministically.
    """
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    mag = rng.integers(1, levels + 1, size=shape)
    return (mag * rng.choice([-1, 1], size=shape)).astype(dtype)


# --- sparse formats (sparsekit.formats) ---------------------------------------------------------

@st.composite
def _explicit_zeros(draw, dense, mask):
    """Zero some kept entries of ``dense`` (or none), so formats see explicit stored zeros."""
    seed = draw(st.integers(0, 2**32 - 1))
    frac = draw(st.sampled_from([0.0, 0.0, 0.2]))
    zap = mask & (np.random.default_rng(seed).random(mask.shape) < frac)
    return np.where(zap, np.zeros((), dense.dtype), dense).astype(dense.dtype)


@st.composite
def masked_dense(draw, *, pattern: str = "unstructured", dtype=None, max_size: int = 12,
                 block: int = 1, n: int = 2, m: int = 4):
    """``(dense, mask)`` whose mask fits ``pattern``; kept entries may be explicit zeros.

    ``unstructured`` (any rows, empty and full ones included), ``uniform`` (K' per row, for ELL),
    ``blocked_uniform`` (the same count of ``block``-square tiles per block row, for BlockedELL),
    ``block`` (any ``block``-square tiles, for BSR) or ``n_m`` (at most ``n`` of each ``m`` columns).
    The shape is a multiple of ``block`` (or of ``(1, m)`` for ``n_m``).
    """
    dt = draw(dtypes()) if dtype is None else np.dtype(dtype)
    mult = (1, m) if pattern == "n_m" else (block, block)
    shape = draw(shapes_2d(max_size=max_size, multiple_of=mult))
    values = draw(dense_arrays(shape, dtype=dt))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    rows, cols = shape
    if pattern in ("unstructured", "uniform"):
        mask = draw(sparse_dense(shape, dtype=dt, pattern=pattern)) != 0
    elif pattern in ("blocked_uniform", "block"):
        br, bc = rows // block, cols // block
        if pattern == "block":
            tiles = rng.random((br, bc)) < draw(st.sampled_from([0.0, 0.3, 1.0]))
        else:
            kb = draw(st.integers(0, bc))
            tiles = np.zeros((br, bc), dtype=bool)
            for r in range(br):
                tiles[r, rng.choice(bc, size=kb, replace=False)] = True
        mask = np.kron(tiles, np.ones((block, block), dtype=bool)).astype(bool)
        mask &= rng.random(shape) < draw(st.sampled_from([0.5, 1.0]))  # holes inside kept tiles
        # a tile may lose every entry to the holes: keep one so the tile pattern is the one drawn
        lost = tiles & ~mask.reshape(br, block, bc, block).any(axis=(1, 3))
        mask.reshape(br, block, bc, block)[:, 0, :, 0] |= lost
    elif pattern == "n_m":
        kept = rng.integers(0, n + 1, size=(rows, cols // m))
        order = rng.random((rows, cols // m, m)).argsort(axis=2)
        mask = (order < kept[:, :, None]).reshape(shape)
    else:
        raise ValueError(f"pattern: unknown {pattern!r}")
    dense = np.where(mask, values, np.zeros((), dt)).astype(dt)
    return draw(_explicit_zeros(dense, mask)), mask


def csr_matrices(*, dtype=None, max_size: int = 12, index_dtype=np.int32):
    """A :class:`sparsekit.formats.CSR` (unstructured; may hold explicit zeros, empty/full rows)."""
    from sparsekit.formats import CSR
    return masked_dense(dtype=dtype, max_size=max_size).map(
        lambda dm: CSR.from_dense(*dm, index_dtype=index_dtype))


def coo_matrices(*, dtype=None, max_size: int = 12, index_dtype=np.int32):
    """A canonical :class:`sparsekit.formats.COO` (unstructured)."""
    from sparsekit.formats import COO
    return masked_dense(dtype=dtype, max_size=max_size).map(
        lambda dm: COO.from_dense(*dm, index_dtype=index_dtype))


def ell_matrices(*, dtype=None, max_size: int = 12, index_dtype=None):
    """A :class:`sparsekit.formats.ELL` (uniform; K' from 0 to all columns); ``index_dtype=None`` draws int16/int32."""
    from sparsekit.formats import ELL
    idt = st.sampled_from([np.int16, np.int32]) if index_dtype is None else st.just(index_dtype)
    return st.tuples(masked_dense(pattern="uniform", dtype=dtype, max_size=max_size), idt).map(
        lambda a: ELL.from_dense(*a[0], index_dtype=a[1]))


@st.composite
def blocked_ell_matrices(draw, *, dtype=None, max_size: int = 12, blocks=(1, 2, 3, 4)):
    """A :class:`sparsekit.formats.BlockedELL` with a block side drawn from ``blocks``."""
    from sparsekit.formats import BlockedELL
    b = draw(st.sampled_from(blocks))
    dense, mask = draw(masked_dense(pattern="blocked_uniform", dtype=dtype, max_size=max_size, block=b))
    return BlockedELL.from_dense(dense, mask, block=b, index_dtype=draw(st.sampled_from([np.int16, np.int32])))


@st.composite
def nm_matrices(draw, *, dtype=None, max_size: int = 12, nms=((2, 4), (1, 2), (1, 4), (4, 8), (3, 3))):
    """A :class:`sparsekit.formats.NM` with ``(n, m)`` drawn from ``nms`` (groups may keep fewer than n)."""
    from sparsekit.formats import NM
    n, m = draw(st.sampled_from(nms))
    dense, mask = draw(masked_dense(pattern="n_m", dtype=dtype, max_size=max_size, n=n, m=m))
    return NM.from_dense(dense, mask, n=n, m=m)


@st.composite
def bsr_matrices(draw, *, dtype=None, max_size: int = 12, blocks=(1, 2, 3)):
    """A :class:`sparsekit.formats.BSR` with square blocksize drawn from ``blocks``."""
    from sparsekit.formats import BSR
    b = draw(st.sampled_from(blocks))
    dense, mask = draw(masked_dense(pattern="block", dtype=dtype, max_size=max_size, block=b))
    return BSR.from_dense(dense, mask, blocksize=(b, b))


def sparse_matrices(*, dtype=None, max_size: int = 12):
    """Any sparsekit format (one of the builders above)."""
    return st.one_of(csr_matrices(dtype=dtype, max_size=max_size), coo_matrices(dtype=dtype, max_size=max_size),
                     ell_matrices(dtype=dtype, max_size=max_size), blocked_ell_matrices(dtype=dtype, max_size=max_size),
                     nm_matrices(dtype=dtype, max_size=max_size), bsr_matrices(dtype=dtype, max_size=max_size))


@st.composite
def sparse_halves(draw, *, max_rows=40, max_cols=80):
    """A float16 or bfloat16 dense matrix with a random pattern (empty rows and tiles likely)."""
    dtype = draw(st.sampled_from(HALVES))
    m, k = draw(st.integers(1, max_rows)), draw(st.integers(1, max_cols))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    keep = rng.random((m, k)) < draw(st.sampled_from([0.0, 0.1, 0.4, 1.0]))
    values = draw(dense_arrays((m, k), dtype=np.float32)).astype(dtype)
    return np.where(keep, values, np.zeros((), dtype)).astype(dtype)
