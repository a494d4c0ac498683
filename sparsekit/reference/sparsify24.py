"""Transposable 2:4 sparsification of a weight, packed for both GEMMs (NumPy reference).

What it computes (../shared/papers/semi-structured-24-training.txt, "Handling
the backwards pass" and "Writing the compressed matrices and metadata"): split
``w`` (M x K) into 4x4 tiles and keep, in each tile, at most 2 values per row
and at most 2 per column. Every group of 4 along a row is then 2:4 and so is
every group of 4 along a column, so both ``W`` and ``W^T`` feed the 2:4 sparse
tensor cores (forward ``x W^T`` and backward ``dy W``). Then pack both.

Tile masks (:func:`tile_masks`)
    ``method="greedy"`` -- the post's rule: visit the 16 values of the tile by
    ``|w|`` descending and keep one when its row and its column each hold fewer
    than 2 kept values. The result is maximal (nothing can be added), and every
    maximal mask keeps 7 or 8: greedy keeps 7 in about a sixth of the tiles of
    random weights. Zeros are values like any other: a tile of zeros still
    selects 8.
    Tie rule (``ties``), deterministic either way:

    * ``"index"`` (default): among equal ``|w|``, the lower row-major position
      in the tile (``4*row + col``) is visited first;
    * ``"torch"``: PyTorch's order. Its kernel sorts ``(|w|, position)``
      records ascending with the Bose-Nelson network of
      :func:`sparsekit.sorting_networks.bose_nelson` whose comparators swap
      two records unless the first ``|w|`` is strictly smaller (so equal
      magnitudes are exchanged), then visits from the top. Here the same
      network runs on the same records, so masks match PyTorch's bit for bit
      (``|w|`` compared in the input dtype; ``-0.0`` equals ``0.0``).

    ``method="optimal"`` -- the mask with the largest sum of ``|w|`` among all
    masks allowed (row and column sums <= 2). As ``|w| >= 0`` the best is a
    maximal mask, and there are 186 (:data:`MAXIMAL`): the 90 full patterns
    with every row and column summing to 2 (8 kept) and 96 with 7 kept that no
    full pattern contains (three rows forming a 6-cycle on three columns, the
    fourth row's value in the fourth column). So the optimal sum is never
    below the greedy one.

    ``method="optimal_full"`` -- the best of the 90 full patterns only
    (:data:`PATTERNS`; always 8 kept). It can keep LESS magnitude than greedy:
    when greedy's 7-value mask is one of the 96, no full pattern contains it.

    Scores are float32 sums of row terms, ``((x0 + x1) + x2) + x3``, where
    ``x_r = |w[r, a]| + |w[r, b]|`` for a row keeping columns ``a < b`` and
    ``|w[r, a]|`` for a row keeping one; ties go to the first candidate in
    :data:`MAXIMAL` order (8-value masks first).

Tile bitmask: ``tile_masks[i, j]`` (uint16) has bit ``4*r + c`` set when
``w[4i + r, 4j + c]`` is kept (PyTorch's ``Indices4x4``).

Packed values: ``packed[r, 2g + s] = w[r, 4g + idx_s]`` when that value is kept,
else 0 (same dtype as ``w``), M x K/2; ``packed_t`` is the same for ``W^T``
(K x M/2). ``idx_0 < idx_1`` are the group's two positions: the two kept
columns, or, when fewer are kept, a lone kept column ``c`` pairs as
``(c, c+1)`` for ``c < 2`` and ``(c-1, c)`` for ``c >= 2`` (the slot PyTorch's
packer puts it in), and an empty group is ``(0, 1)``. The filler slot holds 0.

Metadata, bit by bit (CUTLASS ``ColumnMajorInterleaved<2>`` after CUTLASS's
``reorder_meta``; what ``torch._sparse_semi_structured_tile(...,
use_cutlass=True)`` and ``SparseSemiStructuredTensorCUTLASS`` use for fp16 and
bf16; we use the same bits for fp32):

1. Each group of 4 gives a nibble ``idx_0 | idx_1 << 2`` (2 bits each).
2. Logical word ``L[r, c]`` (16 bits) holds the 4 groups of columns
   ``16c .. 16c+15`` of row ``r``: group ``q`` (columns ``16c+4q ..``) in bits
   ``4q .. 4q+3``. ``L`` is M x K/16.
3. Rows are interleaved in groups of 32: ``d = (r & ~31) | (r & 7) << 2 | (r >> 3) & 3``.
4. In each 2x2 block of ``(d, c)`` the two off-diagonal words trade places,
   i.e. the low bit of the row and the low bit of the column swap.
5. Column pairs are stored interleaved, column-major:
   ``offset = (c >> 1) * 2M + 2 * (d & ~1) + 2 * (c & 1) + (d & 1)`` in units
   of 16 bits. So each 32x32 block of ``w`` owns 128 contiguous bytes.

``meta`` is the int16 array (M, K/16) whose C-order memory is that layout;
``meta_t`` the same for ``W^T`` (K, M/16). Shapes: M and K multiples of 32.
PyTorch's tile kernel hands the same bytes out as a ``(M, 2, K/32)`` view of
``(K/32, M, 2)`` storage. On the H100, masks, packed W and packed W^T equal
PyTorch's bit for bit and the metadata equals it in every group keeping 2
(experiments/results/sparsify24.md).

>>> import numpy as np
>>> w = np.random.default_rng(0).standard_normal((32, 64)).astype(np.float16)
>>> s = sparsify24(w)
>>> s
<Sparse24 shape=(32, 64) dtype=float16 method=greedy ties=index kept=0.490>
>>> bool(np.array_equal(s.unpack(), np.where(s.mask, w, 0)))
True
>>> bool(np.array_equal(s.unpack_t(), s.unpack().T))
True
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from sparsekit.checks import check_array, check_divisible
from sparsekit.sorting_networks import bose_nelson

__all__ = ["Sparse24", "sparsify24", "tile_masks", "mask_from_tiles", "pack",
           "meta_offsets", "MAXIMAL", "PATTERNS", "CANDIDATES", "PAIRS", "NIBBLE", "ALIGN", "DTYPES",
           "METHODS", "TIES"]

DTYPES = (np.dtype(np.float16), np.dtype(np.float32))
METHODS = ("greedy", "optimal", "optimal_full")
TIES = ("index", "torch")
#: M and K must be multiples of this (the metadata's 32-row groups and 32-column pairs).
ALIGN = 32

#: The 6 column pairs a row of a pattern can keep, in enumeration order.
PAIRS = tuple(itertools.combinations(range(4), 2))
#: Row terms of a candidate: 0-5 keep a pair of PAIRS, 6-9 keep the single column ``term - 6``.
ROW_TERMS = tuple(PAIRS) + tuple((c,) for c in range(4))


def _enumerate_candidates() -> tuple[np.ndarray, np.ndarray]:
    """Every maximal 4x4 0/1 mask with row and column sums <= 2, and its row terms.

    186 of them: the 90 with all row and column sums 2 (8 kept), then 96 with 7
    kept (3 rows of 2 forming a 6-cycle on 3 columns, plus the fourth row's
    single value in the fourth column: nothing can be added, yet no full
    pattern contains it). Order: 8-value masks first, each group lexicographic
    in the row terms. Returns the uint16 masks (bit ``4r + c``) and the
    (186, 4) row terms.
    """
    found = []
    for terms in itertools.product(range(len(ROW_TERMS)), repeat=4):
        cells = [(r, c) for r, t in enumerate(terms) for c in ROW_TERMS[t]]
        cols = np.bincount([c for _, c in cells], minlength=4)
        if cols.max() > 2:
            continue
        free_rows = [r for r, t in enumerate(terms) if len(ROW_TERMS[t]) == 1]
        if any(cols[c] < 2 for r in free_rows for c in range(4) if c not in ROW_TERMS[terms[r]]):
            continue        # not maximal: a value could be added in a row and column with room
        mask = sum(1 << (4 * r + c) for r, c in cells)
        found.append((-len(cells), terms, mask))
    found.sort()
    return (np.array([f[2] for f in found], np.uint16), np.array([f[1] for f in found], np.int64))


#: (186,) uint16 maximal masks and (186, 4) their row terms (see :func:`_enumerate_candidates`).
MAXIMAL, MAXIMAL_TERMS = _enumerate_candidates()
#: The 90 full patterns (8 kept, every row and column sum 2): the first 90 of MAXIMAL.
PATTERNS, PATTERN_TERMS = MAXIMAL[:90], MAXIMAL_TERMS[:90]
#: Candidates scored by each optimal method.
CANDIDATES = {"optimal": (MAXIMAL, MAXIMAL_TERMS), "optimal_full": (PATTERNS, PATTERN_TERMS)}


def _nibble(pattern: int) -> int:
    """Metadata nibble ``idx0 | idx1 << 2`` of a row group whose kept columns are ``pattern``'s bits."""
    kept = [c for c in range(4) if pattern >> c & 1]
    if len(kept) == 2:
        lo, hi = kept
    elif len(kept) == 1:
        c = kept[0]
        lo, hi = (c, c + 1) if c < 2 else (c - 1, c)
    else:
        lo, hi = 0, 1
    return lo | hi << 2


#: (16,) uint8: metadata nibble of each 4-bit group pattern (patterns with 3+ bits never occur: 0xFF).
NIBBLE = np.array([_nibble(p) if bin(p).count("1") <= 2 else 0xFF for p in range(16)], np.uint8)


def _tiles(w: np.ndarray) -> np.ndarray:
    """(M/4 * K/4, 16) view order: tile (i, j) row-major, then position 4*r + c."""
    m, k = w.shape
    return w.reshape(m // 4, 4, k // 4, 4).transpose(0, 2, 1, 3).reshape(-1, 16)


def _greedy(mag: np.ndarray, ties: str) -> np.ndarray:
    """Greedy masks of (T, 16) magnitudes (float64) -> (T,) uint16."""
    t = mag.shape[0]
    if ties == "index":
        # Descending |w|, stable: equal magnitudes keep ascending position.
        order = np.argsort(-mag, axis=1, kind="stable")
    else:
        # PyTorch's StaticSort: Bose-Nelson network, swap unless strictly smaller.
        vals, pos = mag.copy(), np.broadcast_to(np.arange(16), (t, 16)).copy()
        for i, j in bose_nelson(16).comparators:
            lt = vals[:, i] < vals[:, j]
            vals[:, i], vals[:, j] = np.where(lt, vals[:, i], vals[:, j]), np.where(lt, vals[:, j], vals[:, i])
            pos[:, i], pos[:, j] = np.where(lt, pos[:, i], pos[:, j]), np.where(lt, pos[:, j], pos[:, i])
        order = pos[:, ::-1]  # ascending network output, visited from the largest
    rows = np.zeros((t, 4), np.int64)
    cols = np.zeros((t, 4), np.int64)
    mask = np.zeros(t, np.int64)
    ar = np.arange(t)
    for step in range(16):
        p = order[:, step]
        r, c = p // 4, p % 4
        keep = (rows[ar, r] < 2) & (cols[ar, c] < 2)
        mask |= keep.astype(np.int64) << p
        rows[ar, r] += keep
        cols[ar, c] += keep
    return mask.astype(np.uint16)


def _optimal(mag: np.ndarray, method: str) -> np.ndarray:
    """Best candidate masks of (T, 16) float32 magnitudes -> (T,) uint16 (float32 sums, fixed order)."""
    a = mag.astype(np.float32).reshape(-1, 4, 4)
    # row terms: the 6 pair sums, then the 4 singles (T, row, term)
    terms = np.concatenate([np.stack([a[:, :, i] + a[:, :, j] for i, j in PAIRS], axis=2), a], axis=2)
    masks, t = CANDIDATES[method]
    total = ((terms[:, 0, t[:, 0]] + terms[:, 1, t[:, 1]]) + terms[:, 2, t[:, 2]]) + terms[:, 3, t[:, 3]]
    return masks[np.argmax(total, axis=1)]  # argmax: first of equal maxima


def _check(w, name: str = "w", align: int = 4) -> np.ndarray:
    check_array(w, name, ndim=2, dtypes=DTYPES, finite=True)
    check_divisible(w.shape[0], align, f"{name}.shape[0]")
    check_divisible(w.shape[1], align, f"{name}.shape[1]")
    return w


def _check_options(method: str, ties: str) -> None:
    if method not in METHODS:
        raise ValueError(f"method: must be one of {METHODS}, got {method!r}")
    if ties not in TIES:
        raise ValueError(f"ties: must be one of {TIES}, got {ties!r}")


def tile_masks(w: np.ndarray, *, method: str = "greedy", ties: str = "index") -> np.ndarray:
    """(M/4, K/4) uint16 tile bitmasks of ``w`` (M, K multiples of 4; float16/float32, finite)."""
    _check(w)
    _check_options(method, ties)
    m, k = w.shape
    mag = np.abs(_tiles(w))
    out = _greedy(mag.astype(np.float64), ties) if method == "greedy" else _optimal(mag, method)
    return out.reshape(m // 4, k // 4)


def mask_from_tiles(tm: np.ndarray) -> np.ndarray:
    """Dense bool mask (4 * tm.shape) from tile bitmasks."""
    bits = (tm.astype(np.int64)[:, :, None] >> np.arange(16)) & 1  # (I, J, 16)
    i, j = tm.shape
    return bits.reshape(i, j, 4, 4).transpose(0, 2, 1, 3).reshape(4 * i, 4 * j).astype(bool)


def meta_offsets(m: int, k: int) -> np.ndarray:
    """(m, k/16) int64: where logical metadata word ``L[r, c]`` lives in the stored layout.

    Steps 3-5 of the module docstring (units of 16 bits).
    """
    r = np.arange(m)[:, None]
    c = np.arange(k // 16)[None, :]
    d = (r & ~31) | (r & 7) << 2 | (r >> 3) & 3
    return (c >> 1) * 2 * m + 2 * (d & ~1) + 2 * (c & 1) + (d & 1)


def pack(w: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pack a 2:4-row-valid ``mask`` of ``w``: ``(packed (M, K/2), meta (M, K/16) int16)``.

    M, K multiples of 32; every group of 4 along a row holds at most 2 kept.
    """
    m, k = w.shape
    groups = mask.reshape(m, k // 4, 4).astype(np.int64)
    pattern = groups @ (1 << np.arange(4))
    if np.any(groups.sum(axis=2) > 2):
        raise ValueError("mask: a group of 4 along a row keeps more than 2 values")
    nib = NIBBLE[pattern].astype(np.int64)                # (M, K/4)
    idx = np.stack([nib & 3, nib >> 2], axis=2)           # (M, K/4, 2)
    vals = np.take_along_axis(w.reshape(m, k // 4, 4), idx, axis=2)
    kept = np.take_along_axis(groups, idx, axis=2).astype(bool)
    packed = np.where(kept, vals, np.zeros((), w.dtype)).reshape(m, k // 2)
    logical = (nib.reshape(m, k // 16, 4) << (4 * np.arange(4))).sum(axis=2)  # (M, K/16)
    meta = np.empty(m * k // 16, np.uint16)
    meta[meta_offsets(m, k).ravel()] = logical.ravel()
    return packed, meta.view(np.int16).reshape(m, k // 16)


def unpack_packed(packed: np.ndarray, meta: np.ndarray) -> np.ndarray:
    """Dense (M, K) from a packed array and its stored metadata (zeros where nothing is packed)."""
    m, k = packed.shape[0], 2 * packed.shape[1]
    logical = meta.reshape(-1).view(np.uint16)[meta_offsets(m, k)].astype(np.int64)   # (M, K/16)
    nib = (logical[:, :, None] >> (4 * np.arange(4))) & 15                             # (M, K/16, 4)
    idx = np.stack([nib & 3, nib >> 2], axis=3).reshape(m, k // 4, 2)
    dense = np.zeros((m, k // 4, 4), packed.dtype)
    np.put_along_axis(dense, idx, packed.reshape(m, k // 4, 2), axis=2)
    return dense.reshape(m, k)


@dataclass(frozen=True)
class Sparse24:
    """A weight sparsified to a transposable 2:4 pattern, packed for W and W^T.

    Arrays are NumPy from :func:`sparsify24`; the GPU launcher returns the kind
    of array it was given (the methods below need NumPy).
    """

    tile_masks: object   #: (M/4, K/4) uint16, bit 4*r + c of tile (i, j)
    packed: object       #: (M, K/2), w's dtype: kept values of each row group, in slot order
    meta: object         #: (M, K/16) int16: CUTLASS-layout metadata of ``packed``
    packed_t: object     #: (K, M/2): same for W^T
    meta_t: object       #: (K, M/16) int16: metadata of ``packed_t``
    method: str = "greedy"
    ties: str = "index"

    @property
    def shape(self) -> tuple[int, int]:
        return (self.packed.shape[0], 2 * self.packed.shape[1])

    @property
    def dtype(self):
        return self.packed.dtype

    @property
    def mask(self) -> np.ndarray:
        """Dense bool mask (M, K) of the kept positions."""
        return mask_from_tiles(np.asarray(self.tile_masks))

    def unpack(self) -> np.ndarray:
        """Dense W (M, K) with the dropped values zero, rebuilt from ``packed`` and ``meta``."""
        return unpack_packed(np.asarray(self.packed), np.asarray(self.meta))

    def unpack_t(self) -> np.ndarray:
        """Dense W^T (K, M) rebuilt from ``packed_t`` and ``meta_t``."""
        return unpack_packed(np.asarray(self.packed_t), np.asarray(self.meta_t))

    def validate(self, full: bool = False) -> None:
        """Check shapes and dtypes; ``full`` also checks the pattern and that W^T matches W."""
        m, k = self.shape
        want = {"tile_masks": ((m // 4, k // 4), np.uint16), "packed_t": ((k, m // 2), self.dtype),
                "meta": ((m, k // 16), np.int16), "meta_t": ((k, m // 16), np.int16)}
        for name, (shape, dtype) in want.items():
            a = getattr(self, name)
            if tuple(a.shape) != shape or np.dtype(a.dtype) != np.dtype(dtype):
                raise ValueError(f"{name}: expected shape {shape} dtype {np.dtype(dtype)}, "
                                 f"got {tuple(a.shape)} {a.dtype}")
        if full:
            mask = self.mask
            for axis, what in ((1, "row"), (0, "column")):
                counts = mask.reshape(m // 4, 4, k // 4, 4).sum(axis=3 if axis == 1 else 1)
                if counts.max(initial=0) > 2:
                    raise ValueError(f"tile_masks: a tile {what} keeps more than 2 values")
            dense = self.unpack()
            if np.any(dense[~mask] != 0):
                raise ValueError("packed: a value outside the mask is non-zero")
            if not np.array_equal(dense.T, self.unpack_t()):
                raise ValueError("packed_t: W^T does not match W")

    def __repr__(self) -> str:
        kept = float(np.asarray(self.mask).mean()) if isinstance(self.tile_masks, np.ndarray) else float("nan")
        return (f"<Sparse24 shape={self.shape} dtype={self.dtype} method={self.method} "
                f"ties={self.ties} kept={kept:.3f}>")


def sparsify24(w: np.ndarray, *, method: str = "greedy", ties: str = "index") -> Sparse24:
    """Prune ``w`` to a transposable 2:4 pattern per 4x4 tile and pack W and W^T.

    Parameters
    ----------
    w : (M, K) float16 or float32 NumPy array, finite; M and K multiples of 32.
    method : "greedy" (the post's), "optimal" (best allowed mask) or "optimal_full"
        (best of the 90 masks keeping 8).
    ties : "index" or "torch" (greedy only; see the module docstring).
    """
    _check(w, align=ALIGN)
    _check_options(method, ties)
    tm = tile_masks(w, method=method, ties=ties)
    mask = mask_from_tiles(tm)
    packed, meta = pack(w, mask)
    packed_t, meta_t = pack(np.ascontiguousarray(w.T), np.ascontiguousarray(mask.T))
    return Sparse24(tm, packed, meta, packed_t, meta_t, method, ties)
