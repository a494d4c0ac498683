"""Reference of ``sparsekit/gpu/spmm_ell_rows.py``: a linear layer ``Y = X W^T`` whose weight ``W`` (``M x K``) is
stored as padded ELL rows, and the densified ``W``; the order of a row's entries that the ``N = 1`` kernel gathers
best (:func:`gather_order`), and the bank model it is built for (:func:`gather_passes`).

*Padded ELL rows* (the storage of :class:`sparsekit.torch.SparseLinear` for 16-bit weights): ``values``
and ``indices``, both ``M x W`` and row-major, ``W`` a multiple of 8; entry ``j`` of row ``r`` is the
value ``values[r, j]`` at column ``indices[r, j]`` (read as an unsigned 16-bit integer); the column ``K``
marks padding, whose value is ignored. Any pattern fits (rows of unequal length are padded to the longest);
uniform sparsity pads only to the next multiple of 8. Products and sums in float32, one rounding at the end.

>>> import numpy as np
>>> values = np.array([[1, 2, 0, 0, 0, 0, 0, 0], [3, 0, 0, 0, 0, 0, 0, 0]], dtype=np.float16)
>>> indices = np.array([[0, 2, 3, 3, 3, 3, 3, 3], [1, 3, 3, 3, 3, 3, 3, 3]], dtype=np.uint16)
>>> densify_ell_rows(values, indices, 3)
array([[1., 0., 2.],
       [0., 3., 0.]], dtype=float16)
>>> spmm_ell_rows_linear(values, indices, 3, np.ones((1, 3), dtype=np.float16))
array([[3., 3.]], dtype=float16)
"""
from __future__ import annotations

import numpy as np

from sparsekit.checks import HALF_DTYPES, check_array

__all__ = ["densify_ell_rows", "spmm_ell_rows_linear", "ell_rows_from_dense", "ell_rows_from_ell", "check_rows",
           "check_columns", "gather_groups", "gather_passes", "gather_order", "bank_balanced", "read_rows"]

#: Entries a row is padded to a multiple of (16 bytes of 16-bit values: one vector load).
ROW_MULTIPLE = 8
#: The widest ``K``: columns and the padding mark ``K`` are unsigned 16-bit.
MAX_COLUMNS = (1 << 16) - 1


def check_columns(k: int) -> None:
    """``k``, the columns of a padded ELL weight: an integer that 16-bit columns (and the padding mark) hold."""
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or not 0 <= k <= MAX_COLUMNS:
        raise ValueError(f"k: columns must be an integer in 0..{MAX_COLUMNS}, got {k!r}")


def check_rows(values, indices, k: int) -> None:
    """The shapes, dtypes and width of padded ELL rows (index ranges are the caller's: see
    :func:`sparsekit.gpu.spmm_ell_rows.check_indices`)."""
    check_columns(k)
    if tuple(values.shape) != tuple(indices.shape) or len(values.shape) != 2:
        raise ValueError(f"values, indices: must be 2-D of one shape, got {tuple(values.shape)} and "
                         f"{tuple(indices.shape)}")
    if values.shape[1] % ROW_MULTIPLE:
        raise ValueError(f"values: rows must be padded to a multiple of {ROW_MULTIPLE} entries, got "
                         f"{values.shape[1]}")


def ell_rows_from_dense(w: np.ndarray, width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The nonzeros of ``w`` (``M x K``) as padded ELL rows ``(values, indices)``: each row's entries in
    ascending column, padded to ``width`` (default: the longest row, rounded up to a multiple of 8)."""
    m, k = w.shape
    if k > MAX_COLUMNS:
        raise ValueError(f"w: at most {MAX_COLUMNS} columns, got {k}")
    kept = w != 0
    longest = int(kept.sum(axis=1).max()) if m else 0
    width = -(-max(longest, 1) // ROW_MULTIPLE) * ROW_MULTIPLE if width is None else width
    if width < longest or width % ROW_MULTIPLE:
        raise ValueError(f"width: a multiple of {ROW_MULTIPLE} of at least {longest}, got {width}")
    values = np.zeros((m, width), dtype=w.dtype)
    indices = np.full((m, width), k, dtype=np.uint16)
    for r in range(m):
        cols = np.flatnonzero(kept[r])
        values[r, :cols.size], indices[r, :cols.size] = w[r, cols], cols
    return values, indices


def ell_rows_from_ell(ell) -> tuple[np.ndarray, np.ndarray]:
    """An :class:`~sparsekit.formats.ELL`'s rows as padded ELL rows ``(values, indices)``: its ``K'`` entries
    a row in its own order, padded to a multiple of 8 with zeros at column ``K``."""
    m, k = ell.shape
    if k > MAX_COLUMNS:
        raise ValueError(f"ell: at most {MAX_COLUMNS} columns, got {k}")
    kprime = ell.values.shape[1]
    width = -(-max(kprime, 1) // ROW_MULTIPLE) * ROW_MULTIPLE
    values = np.zeros((m, width), dtype=ell.values.dtype)
    indices = np.full((m, width), k, dtype=np.uint16)
    values[:, :kprime], indices[:, :kprime] = ell.values, ell.indices
    return values, indices


def densify_ell_rows(values: np.ndarray, indices: np.ndarray, k: int) -> np.ndarray:
    """``W`` (``M x K``, ``values``' dtype), zeros where no entry is stored."""
    check_array(values, "values", ndim=2, dtypes=HALF_DTYPES)
    check_rows(values, indices, k)
    cols = indices.astype(np.int64) & 0xFFFF
    if (cols > k).any():
        raise ValueError(f"indices: columns must be below {k} (or {k}, padding)")
    rows = np.broadcast_to(np.arange(values.shape[0])[:, None], cols.shape)
    kept = cols < k
    dense = np.zeros((values.shape[0], k), dtype=values.dtype)
    dense[rows[kept], cols[kept]] = values[kept]
    return dense


def spmm_ell_rows_linear(values: np.ndarray, indices: np.ndarray, k: int, x: np.ndarray) -> np.ndarray:
    """``Y = x @ W^T`` (``N x M``) for ``x`` (``N x K``, ``values``' dtype)."""
    w = densify_ell_rows(values, indices, k)
    check_array(x, "x", ndim=2, dtypes=(values.dtype,))
    if x.shape[1] != k:
        raise ValueError(f"x: expected shape (N, {k}), got {x.shape}")
    y = x.astype(np.float32) @ w.astype(np.float32).T
    return np.ascontiguousarray(y.astype(values.dtype))


def read_rows(values: np.ndarray, indices: np.ndarray) -> int:
    """The XOR of every 32-bit word of ``values`` and ``indices`` (16-bit, rows of an even width): what the
    device's read of the rows (:func:`sparsekit.gpu.spmm_ell_rows.read_rows`, the memory floor of the product)
    folds them to, each word read once."""
    words = [np.ascontiguousarray(a).view(np.uint32) for a in (values, indices)]
    return int(np.bitwise_xor.reduce(np.concatenate([w.ravel() for w in words]), initial=np.uint32(0)))


def gather_groups(width: int) -> list[np.ndarray]:
    """The positions of a padded ELL row of ``width`` entries that one gather instruction of the ``N = 1``
    kernel reads together: lane ``L`` of ``sparsekit.gpu.spmm_ell_rows._shared_kernel`` takes positions
    ``8 c .. 8 c + 7`` of chunks ``c = L, L + 32, ...``, so one gather reads positions ``256 s + 8 L + p``
    (``L = 0..31``) for a round ``s`` and an offset ``p``; fewer than 32 in a row's last round."""
    pos = np.arange(width)
    group = pos // (32 * ROW_MULTIPLE) * ROW_MULTIPLE + pos % ROW_MULTIPLE
    return [np.flatnonzero(group == g) for g in np.unique(group)]


def gather_passes(indices: np.ndarray, k: int) -> float:
    """The bank model of the ``N = 1`` kernel's gathers: the mean, over a row's gathers (:func:`gather_groups`)
    that read any column, of the passes shared memory takes, the most distinct 4-byte words one bank holds
    among the gather's columns (``x[col]``, 2 bytes, lies in word ``col // 2``, bank ``(col // 2) % 32``;
    lanes reading one word share its pass). Padding (``col >= k``) reads nothing."""
    cols = np.ascontiguousarray(indices).view(np.uint16).astype(np.int64)
    m = cols.shape[0]
    total = count = 0
    for at in gather_groups(cols.shape[1]):
        words = np.sort(np.where(cols[:, at] < k, cols[:, at] // 2, -1), axis=1)
        distinct = (words >= 0) & np.concatenate([np.ones((m, 1), bool), words[:, 1:] != words[:, :-1]], axis=1)
        per_bank = np.bincount((np.arange(m)[:, None] * 32 + words % 32)[distinct], minlength=32 * m)
        passes = per_bank.reshape(m, 32).max(axis=1)
        total, count = total + passes.sum(), count + (passes > 0).sum()
    return float(total / max(count, 1))


def gather_order(indices: np.ndarray, k: int) -> np.ndarray:
    """For padded ELL rows' ``indices`` (``M x W``, 16-bit columns, ``k`` marking padding), an order of each
    row's entries (``order[r, j]``: the entry that goes to position ``j``) under which the ``N = 1`` kernel's
    gathers of ``x`` from shared memory conflict little on its banks.

    ``x[col]`` (2 bytes) lies in bank ``(col // 2) % 32``; a gather (:func:`gather_groups`) takes as many
    passes as the most distinct 4-byte words one bank holds among its columns (:func:`gather_passes`): about
    3.3 for random columns in any fixed order. Each group, largest first, takes one entry of every bank that
    has entries left, those with the most left first; where fewer banks are left than the group holds,
    padding fills it, then second entries of the fullest banks. About 1.1-1.3 passes a gather at 4096 and
    14336 columns, 50-90 %. (int32 throughout: a row holds at most 65535 entries.)"""
    check_columns(k)
    cols = np.ascontiguousarray(indices).view(np.uint16)
    m, width = cols.shape
    if width % ROW_MULTIPLE:
        raise ValueError(f"indices: rows must be padded to a multiple of {ROW_MULTIPLE} entries, got {width}")
    bank = (cols >> 1 & 31).astype(np.uint8)
    bank[cols >= k] = 32                                              # padding: bank 32, no gather
    by_bank = np.argsort(bank, axis=1, kind="stable").astype(np.int32)   # radix sort of 8-bit keys
    counts = np.bincount((np.arange(m)[:, None] * 33 + bank).ravel(), minlength=m * 33).reshape(m, 33)
    counts = counts.astype(np.int32)
    used = np.zeros_like(counts)
    first = np.cumsum(counts, axis=1, dtype=np.int32) - counts        # each bank's run in by_bank
    order = np.empty((m, width), dtype=np.int32)
    for at in sorted(gather_groups(width), key=len, reverse=True):
        size = at.size
        left = counts[:, :32] - used[:, :32]
        take = left > 0                                               # one of every bank left ...
        if size < 32:                                                 # ... or of the most-left ones
            take &= np.argsort(np.argsort(-left, axis=1, kind="stable"), axis=1) < size
        take = take.astype(np.int32)
        need = size - take.sum(1, dtype=np.int32)
        pads = np.minimum(need, counts[:, 32] - used[:, 32])
        need -= pads
        while need.any():                                             # second entries of the fullest banks
            short = np.flatnonzero(need)
            more = left[short] - take[short]
            extra = (np.argsort(np.argsort(-more, axis=1, kind="stable"), axis=1) < need[short, None]) & (more > 0)
            take[short] += extra
            need[short] -= extra.sum(1, dtype=np.int32)
        take = np.concatenate([take, pads[:, None]], axis=1).ravel()
        runs = np.repeat((first + used).ravel(), take)                # each taken entry's place in by_bank
        runs += np.arange(runs.size, dtype=np.int32) - np.repeat(np.cumsum(take, dtype=np.int32) - take, take)
        order[:, at] = np.take_along_axis(by_bank, runs.reshape(m, size), 1)
        used += take.reshape(m, 33)
    return order


def bank_balanced(values: np.ndarray, indices: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The same padded ELL rows with each row's entries in :func:`gather_order` (the product is the same sum
    in another order: float32, one rounding)."""
    order = gather_order(indices, k)
    return tuple(np.take_along_axis(a, order, 1) for a in (values, indices))
