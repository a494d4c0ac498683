"""Argument checks shared by every public function.

Each raises ``TypeError`` (wrong kind or dtype) or ``ValueError`` (wrong shape,
range or content) with a message that names the argument, the rule and what
was found, e.g. ``"w: expected a 2-D array, got shape (3, 4, 5)"``. None of them
copies, casts or modifies its input.
"""
from __future__ import annotations

import numbers

import ml_dtypes
import numpy as np

#: NumPy's bfloat16 (``ml_dtypes``): float32's exponent range, 8 significant bits.
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
#: Floating dtypes accepted for weights and dense operands (each kernel's launcher names its own subset).
FLOAT_DTYPES = (np.dtype(np.float16), BFLOAT16, np.dtype(np.float32), np.dtype(np.float64))
#: The 16-bit floating dtypes (half-precision kernels).
HALF_DTYPES = FLOAT_DTYPES[:2]
#: Integer dtypes accepted for sparse indices.
INDEX_DTYPES = (np.dtype(np.int16), np.dtype(np.int32), np.dtype(np.int64))


def _names(dtypes) -> str:
    return ", ".join(np.dtype(d).name for d in dtypes)


def check_array(x, name: str, *, ndim=None, dtypes=FLOAT_DTYPES, shape=None,
                finite: bool = False) -> np.ndarray:
    """Check that ``x`` is a NumPy array of the given rank, dtype and shape.

    ``ndim`` may be an int or a tuple of allowed ranks; ``shape`` may hold
    ``None`` for a free dimension. ``finite=True`` rejects NaN and Inf.
    Returns ``x`` itself (never a copy).
    """
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name}: expected a numpy.ndarray, got {type(x).__name__}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if x.ndim not in allowed:
            want = " or ".join(f"{d}-D" for d in allowed)
            raise ValueError(f"{name}: expected a {want} array, got shape {x.shape}")
    if dtypes is not None and x.dtype not in tuple(np.dtype(d) for d in dtypes):
        raise TypeError(f"{name}: dtype must be one of ({_names(dtypes)}), got {x.dtype}")
    if shape is not None:
        if len(shape) != x.ndim or any(s is not None and s != d for s, d in zip(shape, x.shape)):
            want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
            raise ValueError(f"{name}: expected shape {want}, got {x.shape}")
    if finite and (x.dtype.kind == "f" or x.dtype == BFLOAT16) and x.size and not np.isfinite(x).all():
        bad = int(np.count_nonzero(~np.isfinite(x)))
        raise ValueError(f"{name}: must be finite, found {bad} NaN/Inf value(s)")
    return x


def check_weight(w, name: str = "w", *, conv: bool = True) -> np.ndarray:
    """A weight: 2-D (or 4-D conv ``(K, C, R, S)`` when ``conv``), float, finite."""
    return check_array(w, name, ndim=(2, 4) if conv else 2, finite=True)


def check_sparsity(sparsity, name: str = "sparsity") -> float:
    """A target sparsity: a real number in [0, 1)."""
    if isinstance(sparsity, bool) or not isinstance(sparsity, numbers.Real):
        raise TypeError(f"{name}: expected a real number in [0, 1), got {type(sparsity).__name__}")
    s = float(sparsity)
    if not (0.0 <= s < 1.0):
        raise ValueError(f"{name}: must lie in [0, 1), got {sparsity!r}")
    return s


def check_int(value, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer (not a bool) within [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__}")
    v = int(value)
    if minimum is not None and v < minimum:
        raise ValueError(f"{name}: must be >= {minimum}, got {v}")
    if maximum is not None and v > maximum:
        raise ValueError(f"{name}: must be <= {maximum}, got {v}")
    return v


def check_divisible(size: int, by: int, what: str) -> None:
    """``what`` (e.g. ``"w.shape[1]"``) must be a multiple of ``by``."""
    if size % by:
        raise ValueError(f"{what}: must be divisible by {by}, got {size}")


def check_indices(idx: np.ndarray, name: str, upper: int) -> None:
    """Every entry of ``idx`` lies in [0, upper)."""
    if idx.size == 0:
        return
    lo, hi = int(idx.min()), int(idx.max())
    if lo < 0 or hi >= upper:
        bad = lo if lo < 0 else hi
        raise ValueError(f"{name}: indices must lie in [0, {upper}), found {bad}")


def as_2d(w: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]]:
    """Flatten a conv weight (K, C, R, S) to K x CRS; 2-D passes through.

    Returns the 2-D view and the original shape, so callers can reshape a mask back.
    """
    return (w.reshape(w.shape[0], -1) if w.ndim == 4 else w), w.shape
