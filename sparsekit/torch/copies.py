"""The copies of a layer's weight that its inference routes read, made from its padded ELL rows with torch ops on
the rows' device: compact ELL rows (:func:`compact_rows`, the ``N = 1`` route) and the TiledBitmap
(:func:`tiled_bitmap`, ``N = 8-64``).

Each equals its format's definition bit for bit: :func:`sparsekit.reference.spmm_ell_compact.from_ell_rows` (sorted
columns packed into chunks of 8, each chunk's slots in
:func:`~sparsekit.reference.spmm_ell_compact.slot_order`) and
:meth:`sparsekit.formats.TiledBitmap.from_coords`. Made on the GPU in small launches instead of on
the host: there a Llama-shaped weight took 0.3-0.8 s as compact rows and 1.7-2.2 s as a TiledBitmap on a 2-core
host, minutes for a whole model. The slot order's greedy takes about 2,700 small launches a block of
:data:`GROUPS_A_BLOCK` gather groups (every group of a block in step: one block up to a 32768 x 16384 weight at
50 %), about 2 KB of scratch a group. Rows whose 8 entries in order span more than 256 columns (none at uniform
sparsity up to about 96 %) go through the reference's greedy packing on the host.
"""
from __future__ import annotations

import numpy as np
import torch

from sparsekit.reference.spmm_ell_compact import (_LEFT, _NO_ENTRY, _PLACE, _PLACED, CHUNK, MAX_OFFSET, UNUSED_BASE,
                                                  greedy_chunks)

__all__ = ["compact_rows", "slot_order", "tiled_bitmap"]

#: Gather groups (32 chunks) the slot order's greedy takes in step: its launches are the same for any count, its
#: scratch about 2 KB a group (128 MB a block at most).
GROUPS_A_BLOCK = 1 << 16
#: The unused chunks' base as int16 bits.
_UNUSED_BITS = UNUSED_BASE - (1 << 16)


def _int16_bits(t: torch.Tensor) -> torch.Tensor:
    """Values 0..65535 as int16 holding their uint16 bits (torch has no uint16 arithmetic)."""
    return torch.where(t >= 1 << 15, t - (1 << 16), t).to(torch.int16)


def compact_rows(values: torch.Tensor, indices: torch.Tensor, k: int) -> tuple[torch.Tensor, ...]:
    """Padded ELL rows ``values`` (float16 or bfloat16) / ``indices`` (int16 bits of uint16 columns, ``k`` for
    padding) as compact ELL rows ``(values, offsets, bases)`` on their device: values in their dtype, offsets
    uint8, bases int16 holding the uint16 bits. A row repeating a column is refused."""
    if values.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"values: compact ELL rows hold float16 or bfloat16, got {values.dtype}")
    m, width = indices.shape
    cols, order = torch.sort(indices.int() & 0xFFFF, dim=1, stable=True)     # ascending, padding (k) last
    if m and int(cols[:, -1].max()) > k:
        raise ValueError(f"indices: columns must be below {k} (or {k}, padding)")
    bits = values.detach().view(torch.int16).gather(1, order)
    kept = cols < k
    repeated = kept[:, 1:] & (cols[:, 1:] == cols[:, :-1])
    if bool(repeated.any()):
        r, j = (int(i) for i in torch.nonzero(repeated)[0])
        raise ValueError(f"indices: row {r} stores column {int(cols[r, j])} twice")
    count = kept.sum(dim=1)
    groups = cols.view(m, width // CHUNK, CHUNK)                             # 8 entries in order
    inside = kept.view(groups.shape)
    regular = (~inside | (groups <= groups[:, :, :1] + MAX_OFFSET)).all(dim=2).all(dim=1)
    regular_count = int(torch.where(regular, count, 0).max()) if m else 0
    chunks = max(-(-regular_count // CHUNK), 1)
    irregular = None
    if not bool(regular.all()):                                             # the reference's greedy loop
        rows = torch.nonzero(~regular)[:, 0]
        pad = torch.full((len(rows), CHUNK), k, dtype=cols.dtype, device=cols.device)
        host = [t.cpu().numpy() for t in (torch.cat([cols[rows], pad], 1).int(),
                                          torch.cat([bits[rows], torch.zeros_like(pad, dtype=bits.dtype)], 1),
                                          count[rows])]
        part_values, part_offsets, part_bases = greedy_chunks(host[0], host[1].view(np.uint16), host[2])
        irregular = [torch.from_numpy(np.ascontiguousarray(a)).to(cols.device)
                     for a in (part_values.astype(np.uint16).view(np.int16), part_offsets.astype(np.uint8),
                               part_bases.astype(np.uint16).view(np.int16))]
        chunks = max(chunks, irregular[2].shape[1])
    used = min(chunks, width // CHUNK)                                      # the groups a regular row fills
    group, filled = groups[:, :used], inside[:, :used]
    firsts = group[:, :, :1]
    out_bits = torch.zeros((m, chunks, CHUNK), dtype=torch.int16, device=cols.device)
    out_offsets = torch.zeros((m, chunks, CHUNK), dtype=torch.uint8, device=cols.device)
    out_bases = torch.full((m, chunks), _UNUSED_BITS, dtype=torch.int16, device=cols.device)
    out_bits[:, :used] = torch.where(filled, bits.view(groups.shape)[:, :used], 0)
    out_offsets[:, :used] = torch.where(filled, group - firsts, 0).to(torch.uint8)    # at most 255 here
    out_bases[:, :used] = _int16_bits(torch.where(filled[:, :, 0], firsts[:, :, 0], UNUSED_BASE))
    out_bits, out_offsets = out_bits.view(m, chunks * CHUNK), out_offsets.view(m, chunks * CHUNK)
    if irregular is not None:
        for out, part in zip((out_bits, out_offsets, out_bases), irregular):
            out[rows] = 0 if out is not out_bases else _UNUSED_BITS
            out[rows, :part.shape[1]] = part
    order = slot_order(out_offsets, out_bases)
    at = order.long().reshape(-1, CHUNK) + torch.arange(0, order.numel(), CHUNK, device=order.device)[:, None]
    out_bits, out_offsets = (t.reshape(-1)[at.view(-1)].view(m, chunks * CHUNK) for t in (out_bits, out_offsets))
    return out_bits.view(values.dtype), out_offsets, out_bases


def slot_order(offsets: torch.Tensor, bases: torch.Tensor) -> torch.Tensor:
    """:func:`sparsekit.reference.spmm_ell_compact.slot_order` of compact ELL rows (``offsets`` uint8, ``bases``
    int16 bits), unchecked: ``M x 8C`` int8, the same greedy in the same order, every gather group in step."""
    m, width = offsets.shape
    off, base = offsets.view(m, width // CHUNK, CHUNK), bases.long() & 0xFFFF
    zero = off == 0
    slot = (base != UNUSED_BASE)[:, :, None] & (~zero | (zero & (zero.cumsum(dim=2) == 1)))
    groups = -(-width // (32 * CHUNK))
    banks = torch.full((m, groups * 32 * CHUNK), 32, dtype=torch.uint8, device=offsets.device)
    column = (base & 63)[:, :, None] + off.long()                            # (the bank needs the column mod 64)
    banks[:, :width] = torch.where(slot, (column & 63) >> 1, 32).view(m, width).to(torch.uint8)
    banks = banks.view(m * groups, 32, CHUNK)
    order = torch.cat([_greedy_slots(banks[start:start + GROUPS_A_BLOCK])
                       for start in range(0, m * groups, GROUPS_A_BLOCK)]) if m else banks.to(torch.int8)
    return order.reshape(m, groups * 32 * CHUNK)[:, :width]


def _greedy_slots(banks: torch.Tensor) -> torch.Tensor:
    """The reference's ``_greedy_slots`` (its docstring tells the rule) on ``n x 32 x 8`` banks (int64). A lane's
    candidates lie along the last axis here (group, slot), so a tie goes to the lowest slot as there."""
    n = banks.shape[0]
    device = banks.device
    keys_at = (banks.permute(1, 0, 2).int()                                   # lane, group, slot: its bank's key
               + 33 * torch.arange(n, dtype=torch.int32, device=device)[:, None]).contiguous()
    key = (256 - torch.bincount(keys_at.view(-1), minlength=33 * n)) * _LEFT
    slot_of = torch.arange(CHUNK, dtype=torch.int8, device=device).expand(32, n, CHUNK).contiguous()
    place = torch.arange(n * CHUNK, device=device).view(n, CHUNK)            # in a lane's (group, slot) array
    for p in range(CHUNK - 1):
        key &= 511 * _LEFT                                                   # a new gather: nothing read yet
        key.view(n, 33)[:, 32] = _NO_ENTRY
        here = place[:, p]
        for lane in range(32):
            lane_keys, lane_slots = keys_at[lane].view(-1), slot_of[lane].view(-1)
            best = (key[keys_at[lane, :, p:]] + place[:, p:]).amin(dim=1) & _PLACE
            chosen, moved = lane_keys[best], lane_slots[best]
            lane_keys[best], lane_slots[best] = lane_keys[here], lane_slots[here]
            lane_keys[here], lane_slots[here] = chosen, moved
            key[chosen] += _PLACED + _LEFT                                   # read once more, one left fewer
    return slot_of.permute(1, 0, 2)


def tiled_bitmap(values: torch.Tensor, indices: torch.Tensor, in_features: int):
    """Padded ELL rows (float16 or bfloat16 ``values``, int16 bits of the columns, ``in_features`` for padding;
    no column twice in a row) as a host :class:`~sparsekit.formats.TiledBitmap`: the stored entries, zeros and
    padding left out, built on the rows' device (the weight's 16-bit bits in one padded block, reordered into
    the format's pair words in one permute) and copied to the host once."""
    from sparsekit.checks import BFLOAT16
    from sparsekit.formats import TiledBitmap

    if values.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"values: a TiledBitmap holds float16 or bfloat16, got {values.dtype}")
    if not bool(torch.isfinite(values).all()):
        raise ValueError("values: a TiledBitmap holds finite weights only")
    m, k = values.shape[0], in_features
    height, width = 16 * -(-m // 16), 32 * -(-k // 32)
    cols = indices.long() & 0xFFFF
    ascending = cols.sort(dim=1).values
    if bool(((ascending[:, 1:] == ascending[:, :-1]) & (ascending[:, 1:] < k)).any()):
        raise ValueError("indices: a row stores a column twice (a TiledBitmap holds one weight a position)")
    bits = values.detach().view(torch.int16)
    bits = torch.where((cols < k) & (bits & 0x7FFF != 0), bits, 0)            # +-0.0 and padding: not stored
    block = torch.zeros((height, width + 1), dtype=torch.int16, device=values.device)   # column K: padding
    block[:m].scatter_(1, torch.where(cols < k, cols, width), bits)
    rbs, groups = height // 16, width // 32
    # TiledBitmap._strip_words: row 16 rb + 8 a + g, column 32 G + 8 t + 4 s + 2 b + h is half h of lane 4 g + t
    # of cell a + 2 b of fragment (rb, 2 G + s)
    words = (block[:, :width].reshape(rbs, 2, 8, groups, 4, 2, 2, 2).permute(0, 3, 5, 6, 1, 2, 4, 7)
             .contiguous().view(torch.int32).reshape(rbs * groups * 2, 4, 32))
    stored = words != 0
    lanes = torch.arange(32, dtype=torch.int32, device=values.device)
    masks = (stored.int() << lanes).sum(dim=2, dtype=torch.long) & 0xFFFFFFFF  # bit l: lane l's pair (uint32)
    counts = stored.sum(dim=(1, 2))
    pairs = words[stored]                                                     # fragment, cell, lane order
    offsets = torch.zeros(counts.numel() + 1, dtype=torch.long, device=values.device)
    torch.cumsum(1 + (counts + 3) // 4, dim=0, out=offsets[1:])               # a record: 4 masks, pairs to 16 B
    stream = torch.zeros(int(offsets[-1]) * 4, dtype=torch.long, device=values.device)
    stream[(offsets[:-1, None] * 4 + torch.arange(4, device=values.device)).view(-1)] = masks.view(-1)
    fragment = torch.repeat_interleave(torch.arange(counts.numel(), device=values.device), counts)
    rank = torch.arange(pairs.numel(), device=values.device) - (torch.cumsum(counts, 0) - counts)[fragment]
    stream[offsets[fragment] * 4 + 4 + rank] = pairs.long() & 0xFFFFFFFF
    dtype = np.float16 if values.dtype == torch.float16 else BFLOAT16
    return TiledBitmap(stream.cpu().numpy().astype(np.uint32), offsets.cpu().numpy(), (m, k), dtype)
