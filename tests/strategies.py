"""Shared hypothesis building blocks: compose these, do not draw by hand.

Keyword-only, small, and each draws the shape first and then data consistent
with it. Values are drawn from a bounded range with no zeros unless asked
(zeros hide unwritten outputs), and never NaN/Inf.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

FLOAT_DTYPES = (np.float16, np.float32, np.float64)


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
        keep = np.zeros(shape, dtype=bool)
        for r in range(m):
            keep[r, rng.choice(k, size=kprime, replace=False)] = True
    else:
        raise ValueError(f"pattern: expected 'unstructured' or 'uniform', got {pattern!r}")
    return np.where(keep, a, np.zeros((), dtype=dtype)).astype(dtype)
