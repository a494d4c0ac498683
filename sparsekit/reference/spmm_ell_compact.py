"""Reference of ``sparsekit/gpu/spmm_ell_compact.py``: *compact ELL rows*, the padded ELL rows of
``sparsekit/reference/spmm_ell_rows.py`` at 3.25 bytes a stored weight instead of 4, and the linear product
``Y = X W^T`` on them.

A row's stored columns, ascending, are packed greedily into *chunks* of 8 slots. A chunk has one uint16
``base``, the smallest of its columns; each slot a uint8 ``offset`` (its column minus ``base``) and a 16-bit
value. A chunk closes after 8 entries or when the next column is past ``base + 255``; its slots left over are
*unused* (value bits 0, offset 0). Rows are padded to the widest row's chunk count (at least one) with unused
chunks (``base`` 0xFFFF, never a column: ``K <= 65535``). So, for ``M`` rows of ``C`` chunks:

* ``values``: ``M x 8C``, float16 or bfloat16 (16 bytes a chunk: one vector load);
* ``offsets``: ``M x 8C``, uint8 (8 bytes a chunk);
* ``bases``: ``M x C``, uint16 (int16 holding its bits is accepted, as a torch tensor has it).

2 + 1 + 2/8 = 3.25 bytes a slot. At uniform sparsity up to about 96 % every chunk of a row but its last holds
8 entries, so ``8C`` is the ELL width rounded up to 8.

A chunk's used slots come first, in any order: the product does not depend on it, so :func:`from_ell_rows`
chooses it for the ``N = 1`` kernel's gathers of ``x`` from shared memory (:func:`slot_order`: lane ``L`` of
a warp reads slot ``p`` of chunks ``32 s + L`` in one gather, and ascending slots crowd those reads onto few
banks, about 3 passes a gather in the bank model of :func:`gather_passes` against 1.8-2.0 in this order at
4096 columns, 50-90 %; on the H200 the kernel took 0.94-1.03x its time in ascending order, two runs apart). A
slot of a used chunk is used when its offset is not 0 or it is the chunk's first slot of offset 0 (the
base's own entry; offsets are distinct within a chunk), so the structure alone tells stored entries from
padding (:func:`to_ell_rows` keeps a stored zero). The product is ``y[r] = sum of value * x[base + offset]``
over the slots of row ``r`` whose value bits are not 0: unused slots add nothing, not ``0 * x[base]`` (NaN
where that is infinite), and neither does a stored ``+0.0`` weight. Products and sums in float32, one rounding
at the end.

>>> import numpy as np
>>> w = np.zeros((2, 300), np.float16)
>>> w[0, [1, 2, 290]] = 1, 2, 3
>>> w[1, 7] = 4
>>> values, offsets, bases = from_dense(w)
>>> bases
array([[    1,   290],
       [    7, 65535]], dtype=uint16)
>>> offsets[0, [0, 1, 8]]
array([0, 1, 0], dtype=uint8)
>>> bool((to_dense(values, offsets, bases, 300) == w).all())
True
>>> spmm_ell_compact_linear(values, offsets, bases, 300, np.ones((1, 300), np.float16))
array([[6., 4.]], dtype=float16)
"""
from __future__ import annotations

import numpy as np

from sparsekit.checks import HALF_DTYPES, check_array
from sparsekit.reference import spmm_ell_rows
from sparsekit.reference.spmm_ell_rows import (MAX_COLUMNS, ROW_MULTIPLE, check_columns, check_rows,
                                               densify_ell_rows, ell_rows_from_dense)

__all__ = ["from_ell_rows", "to_ell_rows", "from_dense", "to_dense", "spmm_ell_compact_linear", "check_shapes",
           "check_compact", "slot_order", "bank_balanced", "gather_passes", "nbytes", "greedy_chunks", "CHUNK",
           "MAX_OFFSET", "UNUSED_BASE"]

#: Slots a chunk: 16 bytes of 16-bit values, one vector load.
CHUNK = ROW_MULTIPLE
#: The largest offset (uint8): a chunk spans at most 256 columns.
MAX_OFFSET = 255
#: The base of an unused chunk (no column: ``K <= 65535``).
UNUSED_BASE = MAX_COLUMNS
#: 16-bit columns and bases: uint16, or int16 holding their bits.
_BITS16 = (np.dtype(np.uint16), np.dtype(np.int16))


def check_shapes(values, offsets, bases, k: int) -> None:
    """The shapes of compact ELL rows and ``k`` (any array kind: the device launcher checks dtypes)."""
    check_columns(k)
    if len(values.shape) != 2 or tuple(offsets.shape) != tuple(values.shape):
        raise ValueError(f"values, offsets: must be 2-D of one shape, got {tuple(values.shape)} and "
                         f"{tuple(offsets.shape)}")
    m, width = values.shape
    if width % CHUNK:
        raise ValueError(f"values: rows must be whole chunks of {CHUNK} slots, got {width}")
    if tuple(bases.shape) != (m, width // CHUNK):
        raise ValueError(f"bases: expected shape ({m}, {width // CHUNK}) (a base a chunk of {CHUNK} slots), got "
                         f"{tuple(bases.shape)}")


def _bits(values, offsets, bases):
    """Value bits and offsets as ``M x C x 8`` int64, bases as ``M x C`` int64."""
    m, width = values.shape
    shape = (m, width // CHUNK, CHUNK)
    return (values.view(np.uint16).astype(np.int64).reshape(shape), offsets.astype(np.int64).reshape(shape),
            bases.view(np.uint16).astype(np.int64))


def _used(offsets, bases):
    """``(chunk used, slot used)``: ``M x C`` and ``M x C x 8`` booleans (a slot of a used chunk is used when its
    offset is not 0 or it is the chunk's first slot of offset 0, the base's own)."""
    chunk = bases != UNUSED_BASE
    zero = offsets == 0
    words = zero.view(np.uint64)                      # a chunk's 8 booleans as one (little-endian) word ...
    first_zero = (words & -words).view(np.bool_)      # ... of which w & -w keeps the lowest set byte
    slot = chunk[:, :, None] & (~zero | first_zero)
    return chunk, slot


def _slot_columns(offsets, bases, k: int) -> np.ndarray:
    """Each slot's column, ``M x 8C`` uint16, ``k`` where the slot is unused (the marking of padding in padded ELL
    rows)."""
    m, width = offsets.shape
    off, base = offsets.reshape(m, width // CHUNK, CHUNK), bases.view(np.uint16).astype(np.int32)
    _, slot = _used(off, base)
    return np.where(slot, base[:, :, None] + off, k).astype(np.uint16).reshape(m, width)


def _first(mask) -> tuple:
    """The index of the first True of ``mask`` (for error messages)."""
    return tuple(int(i) for i in np.argwhere(mask)[0])


def check_compact(values: np.ndarray, offsets: np.ndarray, bases: np.ndarray, k: int) -> None:
    """Every rule of compact ELL rows (NumPy arrays): dtypes and shapes; used chunks before unused ones in a row,
    their bases below ``k``; unused chunks all zero; in a used chunk a slot of offset 0 (the base is its smallest
    column), the used slots first, offsets distinct, columns ``base + offset`` below ``k``, unused slots' value
    bits 0; each chunk's base past the previous chunk's last column (a row's chunks ascend). A ValueError names
    the array, the rule and where it breaks."""
    check_array(values, "values", ndim=2, dtypes=HALF_DTYPES)
    check_array(offsets, "offsets", ndim=2, dtypes=(np.uint8,))
    check_array(bases, "bases", ndim=2, dtypes=_BITS16)
    check_shapes(values, offsets, bases, k)
    v, off, base = _bits(values, offsets, bases)
    chunk, slot = _used(off, base)
    if (bad := chunk & (base >= k)).any():
        r, c = _first(bad)
        raise ValueError(f"bases: chunk {c} of row {r} starts at column {base[r, c]}, past K - 1 = {k - 1} "
                         f"(an unused chunk's base is {UNUSED_BASE})")
    if (bad := ~chunk[:, :-1] & chunk[:, 1:]).any():
        r, c = _first(bad)
        raise ValueError(f"bases: row {r} has a used chunk ({c + 1}) after an unused one (unused chunks, base "
                         f"{UNUSED_BASE}, end a row)")
    if (bad := ~chunk[:, :, None] & ((v != 0) | (off != 0))).any():
        r, c, s = _first(bad)
        raise ValueError(f"values, offsets: unused chunk {c} of row {r} must be all zero, slot {s} is not")
    if (bad := chunk & (off != 0).all(axis=2)).any():
        r, c = _first(bad)
        raise ValueError(f"offsets: chunk {c} of row {r} has no slot of offset 0 (its base, the smallest column, "
                         f"is one of its entries)")
    if (bad := ~slot[:, :, :-1] & slot[:, :, 1:]).any():
        r, c, s = _first(bad)
        raise ValueError(f"offsets: chunk {c} of row {r} has a used slot ({s + 1}, offset {off[r, c, s + 1]}) "
                         f"after an unused one (offset 0)")
    ranked = np.sort(np.where(slot, off, MAX_OFFSET + 1 + np.arange(CHUNK)), axis=2)   # unused: past every offset
    if (bad := ranked[:, :, 1:] == ranked[:, :, :-1]).any():
        r, c, s = _first(bad)
        raise ValueError(f"offsets: must be distinct within a chunk, chunk {c} of row {r} holds offset "
                         f"{ranked[r, c, s]} twice")
    if (bad := ~slot & (v != 0)).any():
        r, c, s = _first(bad)
        raise ValueError(f"values: unused slot {s} of chunk {c} of row {r} holds nonzero bits")
    cols = base[:, :, None] + off
    if (bad := slot & (cols >= k)).any():
        r, c, s = _first(bad)
        raise ValueError(f"offsets: slot {s} of chunk {c} of row {r} is column {base[r, c]} + {off[r, c, s]} = "
                         f"{cols[r, c, s]}, past K - 1 = {k - 1}")
    last = np.max(np.where(slot, cols, -1), axis=2)                     # each chunk's last column
    if (bad := chunk[:, 1:] & (base[:, 1:] <= last[:, :-1])).any():
        r, c = _first(bad)
        raise ValueError(f"bases: columns must ascend along a row: chunk {c + 1} of row {r} starts at "
                         f"{base[r, c + 1]}, not past the previous chunk's last column {last[r, c]}")


def greedy_chunks(cols: np.ndarray, bits: np.ndarray, count: np.ndarray):
    """The greedy packing of rows of ascending ``cols`` (``count`` a row, then at least 8 of padding) and their
    value ``bits``, all rows in step, a chunk a step: a chunk takes the next 8 entries, or fewer where a column
    is past the first's + 255 (columns ascend, so those that fit are a prefix). Returns ``(values, offsets,
    bases)`` of ``max(chunks, 1)`` chunks."""
    start = np.zeros(cols.shape[0], np.int64)
    window = np.arange(CHUNK)
    chunk_values, chunk_offsets, chunk_bases = [], [], []
    while (start < count).any() or not chunk_bases:
        at = start[:, None] + window
        inside = at < count[:, None]
        cols_at = np.take_along_axis(cols, at, 1)
        fits = inside & (cols_at <= cols_at[:, :1] + MAX_OFFSET)
        chunk_bases.append(np.where(inside[:, 0], cols_at[:, 0], UNUSED_BASE))
        chunk_offsets.append(np.where(fits, cols_at - cols_at[:, :1], 0))
        chunk_values.append(np.where(fits, np.take_along_axis(bits, at, 1), 0))
        start += fits.sum(axis=1)
    return (np.concatenate(chunk_values, axis=1), np.concatenate(chunk_offsets, axis=1),
            np.stack(chunk_bases, axis=1))


def from_ell_rows(values: np.ndarray, indices: np.ndarray, k: int, *,
                  balanced: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Padded ELL rows (``sparsekit.reference.spmm_ell_rows``: any entry order, column ``k`` marking padding) as
    compact ELL rows ``(values, offsets, bases)``: each row's columns sorted, packed greedily into chunks, each
    chunk's slots in :func:`slot_order` (``balanced``, the default) or ascending. A row repeating a column is
    refused (its weight would be two entries).

    Where each 8 entries in order span at most 256 columns (every row at uniform sparsity up to about 96 %)
    greedy chunks are those 8-entry groups, cut by a reshape; the other rows go through the greedy loop."""
    check_array(values, "values", ndim=2, dtypes=HALF_DTYPES)
    check_array(indices, "indices", ndim=2, dtypes=_BITS16)
    check_rows(values, indices, k)
    if (indices.view(np.uint16) > k).any():
        raise ValueError(f"indices: columns must be below {k} (or {k}, padding)")
    m, width = indices.shape
    order = np.argsort(indices.view(np.uint16), axis=1, kind="stable")   # columns ascending, padding last
    cols = np.full((m, width + CHUNK), k, np.int32)                      # (and a chunk's window of padding)
    bits = np.zeros((m, width + CHUNK), np.uint16)
    cols[:, :width] = np.take_along_axis(indices.view(np.uint16), order, 1)
    bits[:, :width] = np.take_along_axis(values.view(np.uint16), order, 1)
    kept = cols < k
    if (bad := kept[:, 1:] & (cols[:, 1:] == cols[:, :-1])).any():
        r, j = _first(bad)
        raise ValueError(f"indices: row {r} stores column {cols[r, j]} twice")
    count = kept.sum(axis=1)
    groups = cols[:, :width].reshape(m, width // CHUNK, CHUNK)             # 8 entries in order
    inside = kept[:, :width].reshape(groups.shape)
    regular = (~inside | (groups <= groups[:, :, :1] + MAX_OFFSET)).all(axis=(1, 2))
    chunks = max(-(-int(count[regular].max()) // CHUNK) if regular.any() else 0, 1)
    if not regular.all():
        irregular = greedy_chunks(cols[~regular], bits[~regular], count[~regular])
        chunks = max(chunks, irregular[2].shape[1])
    out_values = np.zeros((m, chunks * CHUNK), np.uint16)
    out_offsets = np.zeros((m, chunks * CHUNK), np.uint8)
    out_bases = np.full((m, chunks), UNUSED_BASE, np.uint16)
    rows, used = int(regular.sum()), min(chunks, groups.shape[1])   # the groups a regular row fills
    group, filled = groups[regular, :used], inside[regular, :used]
    firsts = group[:, :, 0]
    out_values[regular, :used * CHUNK] = np.where(
        filled, bits[regular, :used * CHUNK].reshape(rows, used, CHUNK), 0).reshape(rows, used * CHUNK)
    out_offsets[regular, :used * CHUNK] = np.where(filled, group - firsts[:, :, None], 0).reshape(rows, used * CHUNK)
    out_bases[regular, :used] = np.where(filled[:, :, 0], firsts, UNUSED_BASE)
    if not regular.all():
        for out, part in zip((out_values, out_offsets, out_bases), irregular):
            out[~regular, :part.shape[1]] = part
    if balanced:
        order = _slot_order(out_offsets, out_bases)
        out_values, out_offsets = _in_slot_order(order, out_values, out_offsets)
    return out_values.view(values.dtype), out_offsets, out_bases


def to_ell_rows(values: np.ndarray, offsets: np.ndarray, bases: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Compact ELL rows as padded ELL rows ``(values, indices)``: each row's entries in ascending column (uint16),
    padded with zeros at column ``k`` to the longest row rounded up to a multiple of 8 (at least 8)."""
    check_compact(values, offsets, bases, k)
    v, off, base = _bits(values, offsets, bases)
    _, slot = _used(off, base)
    shape = values.shape
    used, bits, cols = slot.reshape(shape), v.reshape(shape), (base[:, :, None] + off).reshape(shape)
    longest = int(used.sum(axis=1).max()) if shape[0] else 0
    width = -(-max(longest, 1) // ROW_MULTIPLE) * ROW_MULTIPLE
    if used.shape[1] < width:                                        # no chunk at all: one chunk of padding
        used, cols, bits = (np.pad(a, ((0, 0), (0, width - a.shape[1]))) for a in (used, cols, bits))
    order = np.argsort(np.where(used, cols, k), axis=1, kind="stable")[:, :width]   # ascending, unused last
    taken = np.take_along_axis(used, order, 1)
    out_indices = np.where(taken, np.take_along_axis(cols, order, 1), k).astype(np.uint16)
    out_values = np.where(taken, np.take_along_axis(bits, order, 1), 0).astype(np.uint16)
    return out_values.view(values.dtype), out_indices


def from_dense(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The nonzeros of ``w`` (``M x K``, float16 or bfloat16, ``K <= 65535``) as compact ELL rows."""
    check_array(w, "w", ndim=2, dtypes=HALF_DTYPES)
    return from_ell_rows(*ell_rows_from_dense(w), w.shape[1])


def to_dense(values: np.ndarray, offsets: np.ndarray, bases: np.ndarray, k: int) -> np.ndarray:
    """``W`` (``M x k``, ``values``' dtype), zeros where no entry is stored."""
    return densify_ell_rows(*to_ell_rows(values, offsets, bases, k), k)


def spmm_ell_compact_linear(values: np.ndarray, offsets: np.ndarray, bases: np.ndarray, k: int,
                            x: np.ndarray) -> np.ndarray:
    """``Y = x @ W^T`` (``N x M``) for ``x`` (``N x K``, ``values``' dtype): row ``r`` of ``W`` adds its slots with
    nonzero value bits only (module docstring), float32 sums, one rounding."""
    check_compact(values, offsets, bases, k)
    check_array(x, "x", ndim=2, dtypes=(values.dtype,))
    if x.shape[1] != k:
        raise ValueError(f"x: expected shape (N, {k}), got {x.shape}")
    v, off, base = _bits(values, offsets, bases)
    _, slot = _used(off, base)
    adds = (slot & (v != 0)).reshape(values.shape)
    cols = np.where(adds, (base[:, :, None] + off).reshape(values.shape), 0)
    weights = values.astype(np.float32)
    y = np.empty((x.shape[0], values.shape[0]), np.float32)
    for n, row in enumerate(x.astype(np.float32)):
        y[n] = np.sum(np.where(adds, weights * row[cols], np.float32(0)), axis=1, dtype=np.float32)
    return np.ascontiguousarray(y.astype(values.dtype))


#: Gather groups (32 chunks) :func:`_greedy_slots` orders in step: their keys stay in the cache.
_GROUPS_A_STEP = 2048
#: A bank's key in :func:`_greedy_slots`: its entries placed in this gather (bits 41 on), 256 less its entries
#: left to place (bits 32-40), room for a candidate's place (bits 0-31) to break ties and name the winner.
_PLACED, _LEFT, _PLACE, _NO_ENTRY = 1 << 41, 1 << 32, (1 << 32) - 1, 1 << 62


def _greedy_slots(banks: np.ndarray) -> np.ndarray:
    """For gather groups' banks (``n x 32 x 8`` uint8: group, lane, slot; 32 for an unused slot), each slot's
    entry: ``order[g, L, p]``, the slot of lane ``L``'s chunk whose entry goes to slot ``p`` (int8).

    Slot by slot, lane by lane, every group in step: the lane takes, of its chunk's entries not yet placed, one
    of the bank this slot's gather has read least so far, of those one of the bank with the most entries left
    to place (so that crowded banks spread over the slots), of those the first; the last slot takes the entry
    left. A lane's entries not yet placed stay in its slots past ``p`` (a swap a placement), unused slots last."""
    n = banks.shape[0]
    keys_at = np.empty((32, CHUNK, n), np.intp)                   # lane, slot, group: the index of its bank's key
    np.add(banks.transpose(1, 2, 0), 33 * np.arange(n), out=keys_at)          # (33 a group, the last: unused)
    key = (256 - np.bincount(keys_at.ravel(), minlength=33 * n)) * _LEFT
    slot_of = np.empty((32, CHUNK, n), np.int8)
    slot_of[:] = np.arange(CHUNK, dtype=np.int8)[:, None]
    place = np.arange(CHUNK * n).reshape(CHUNK, n)                          # in a lane's (slot, group) array
    for p in range(CHUNK - 1):
        key &= 511 * _LEFT                                                 # a new gather: nothing read yet
        key[32::33] = _NO_ENTRY
        here = slice(p * n, (p + 1) * n)
        for lane in range(32):
            lane_keys, lane_slots = keys_at[lane].reshape(-1), slot_of[lane].reshape(-1)
            best = (np.take(key, keys_at[lane, p:]) + place[p:]).min(axis=0) & _PLACE
            chosen, moved = lane_keys[best], lane_slots[best]
            lane_keys[best], lane_slots[best] = lane_keys[here], lane_slots[here]
            lane_keys[here], lane_slots[here] = chosen, moved
            key[chosen] += _PLACED + _LEFT                                  # read once more, one left fewer
    return slot_of.transpose(2, 0, 1)


def _slot_order(offsets: np.ndarray, bases: np.ndarray) -> np.ndarray:
    """:func:`slot_order`, unchecked."""
    m, width = offsets.shape
    off, base = offsets.reshape(m, width // CHUNK, CHUNK), bases.view(np.uint16)
    _, slot = _used(off, base)
    groups = -(-width // (32 * CHUNK))
    banks = np.full((m, groups * 32 * CHUNK), 32, np.uint8)                  # 32: an unused slot
    column_mod_64 = (base & 63).astype(np.uint8)[:, :, None] + off          # (uint8 wraps at 256)
    banks[:, :width] = np.where(slot, column_mod_64 >> 1 & 31, 32).reshape(m, width)
    banks = banks.reshape(m * groups, 32, CHUNK)
    order = np.empty(banks.shape, np.int8)
    for start in range(0, len(banks), _GROUPS_A_STEP):
        order[start:start + _GROUPS_A_STEP] = _greedy_slots(banks[start:start + _GROUPS_A_STEP])
    return order.reshape(m, groups * 32 * CHUNK)[:, :width]


def _in_slot_order(order: np.ndarray, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """``arrays`` (``M x 8C``) with each chunk's slots in ``order`` (:func:`slot_order`)."""
    at = (order.reshape(-1, CHUNK) + np.arange(0, order.size, CHUNK)[:, None]).reshape(order.shape)
    return tuple(np.take(a, at) for a in arrays)


def slot_order(values: np.ndarray, offsets: np.ndarray, bases: np.ndarray, k: int) -> np.ndarray:
    """For compact ELL rows, an order of each chunk's slots under which the ``N = 1`` kernel's gathers of ``x``
    from shared memory conflict little on its banks: ``order[r, 8 c + p]`` (``M x 8C`` int8), the slot of chunk
    ``c`` of row ``r`` whose entry goes to its slot ``p``; used slots stay first.

    Lane ``L`` of a warp gathers slot ``p`` of chunks ``32 s + L`` together, the gathers of padded ELL rows of the
    same width (:func:`gather_passes`). Each group of 32 chunks, slot by slot and lane by lane, gives the lane
    the entry of its chunk (of those not yet placed) whose bank that gather has read least, then whose bank has
    the most entries left: 1.8-2.0 passes a gather for random columns at 4096 columns, 50-90 %, against
    about 3 in ascending order (:func:`sparsekit.reference.spmm_ell_rows.gather_order`, free to move an entry
    anywhere in its row, reaches 1.0-1.2)."""
    check_compact(values, offsets, bases, k)
    return _slot_order(offsets, bases)


def bank_balanced(values: np.ndarray, offsets: np.ndarray, bases: np.ndarray,
                  k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The same compact ELL rows with each chunk's slots in :func:`slot_order` (the product is the same sum in
    another order: float32, one rounding), as new arrays."""
    order = slot_order(values, offsets, bases, k)
    return (*_in_slot_order(order, values, offsets), bases.copy())


def gather_passes(values: np.ndarray, offsets: np.ndarray, bases: np.ndarray, k: int) -> float:
    """The bank model of the ``N = 1`` kernel's gathers on compact ELL rows: lane ``L`` reads slot ``p`` of chunk
    ``32 s + L`` (slot ``8 (32 s + L) + p`` of the row), as the padded ELL rows' kernel reads position
    ``256 s + 8 L + p``, so it is :func:`sparsekit.reference.spmm_ell_rows.gather_passes` of the slots' columns
    (unused slots read nothing): the mean passes a gather that reads any column."""
    check_compact(values, offsets, bases, k)
    return spmm_ell_rows.gather_passes(_slot_columns(offsets, bases, k), k)


def nbytes(values, offsets, bases) -> int:
    """Bytes the arrays hold (3.25 a slot), of any array kind with ``nbytes``."""
    return int(values.nbytes) + int(offsets.nbytes) + int(bases.nbytes)
