"""USpMM on tensor cores: ``C = A @ B`` with a uniform-sparse ``A`` in ELL format, densified tile by tile.

Equals :func:`sparsekit.reference.uspmm.uspmm` (same arguments and result contract as
:func:`sparsekit.gpu.uspmm.uspmm`, C-ordered ``b`` only): ``C`` is ``M x N`` in ``b``'s
dtype and array kind, accumulated in float32.

Why: the CUDA-core kernels of :mod:`sparsekit.gpu.uspmm` are capped by the FP32 pipes and
shared-memory bandwidth (``experiments/results/uspmm.md``: the best, "dense_tile",
89.5 us at 1024^3 60% float32, 14% of the speed of light). A tensor core does a
16x8x16 float16 (or 16x8x8 TF32) product per warp instruction. Uniform sparsity
leaves no all-zero 16x8 tile of ``A`` to skip at these densities, so this kernel
does what "dense_tile" does on CUDA cores: it multiplies the densified tile of
``A``, zeros included, and wins by doing that work on tensor cores
(:mod:`sparsekit.gpu.mma`, inline PTX ``mma.sync``).

Precision:

* float16: float16 products are exact, accumulated in float32 by the tensor
  core, rounded once to float16.
* bfloat16: float16's path with the bf16 MMA (``mma...m16n8k16...bf16.bf16.f32``): the same
  tiles, shared memory and defaults, the values moved as their uint16 bits (the kernel never
  sees the ``ml_dtypes`` dtype: :func:`sparsekit.arrays.kernel_dtype`); products exact in
  float32, accumulated in float32, rounded once to bfloat16 to nearest even
  (:func:`sparsekit.gpu.mma.pack_bf16x2`) when ``C`` is stored.
* float32: "3xTF32". TF32 keeps 10 mantissa bits, so each operand is split
  ``x = big + small`` with ``big = tf32(x)``, ``small = tf32(x - big)``
  (:func:`sparsekit.gpu.mma.to_tf32`), and ``C += a_small*b_big + a_big*b_small +
  a_big*b_big`` (three MMAs, products exact in the tensor core, sums float32;
  two when A's values are TF32 numbers, :func:`tf32_exact`: ``a_small`` is 0).
  ``A`` is split once, by the scatter, into a big and a small tile (each
  entry converted once, not once per warp that reads it: ``warps_n`` times);
  ``B`` fragments are split by each warp that reads them (``warps_m``).
  This is NOT float32 accuracy per product: two TF32 pieces hold 22 of float32's
  24 bits, so the dropped ``a_small*b_small`` and the roundings of the small
  pieces leave up to ``3 * 2**-22 * (1 + 2**-10) |a||b|`` (about 12 float32 unit
  roundoffs ``u``; measured on 10^6 random products: 7.5 u at most, 0.84 u on
  average, against 1 u for a float32 product), and each product enters the
  accumulator in three additions. :func:`error_reduction` turns that into the
  reduction length of the float32-accumulation bound of the existing tests.

Algorithm (one block per ``bm x bn`` tile of ``C``; warps ``warps_m x warps_n``,
each owning a ``bm/warps_m x bn/warps_n`` sub-tile as 16x8 MMA tiles; K in
chunks of ``kc`` columns). With ``kgroups = G > 1`` the block holds G such sets of
warps, the K groups (``nthreads = 32 * warps_m * warps_n * G``): each tiles the whole
``bm x bn`` output, and group ``g`` runs the MMAs of K steps ``g, g + G, ...`` of every
chunk into float32 accumulators of its own (step 6). Larger warp tiles issue fewer
fragment loads and B splits per MMA; the groups keep the warps per block (and per SM)
that the smaller warp tiles had. Steps 1, 2, 4 and 5 are shared by all threads:

1. A: every thread owns a segment of one row of the block's A tile (``seg =
   kc * bm / nthreads`` columns; lane ``l`` of a warp owns row ``l`` of 32
   consecutive rows). The entries come from :func:`segment_entries`, the ELL
   regrouped per segment of ``seg`` columns and padded to the fullest
   segment's count ``w`` (a derived array kept on the
   :class:`~sparsekit.gpu.device_ell.DeviceELL`), stored ``[segment, slot, row]`` so that a
   block's rows of one slot are contiguous. (a) ``cp.async`` copies a chunk's
   slots (values and 8-bit offsets, 16 bytes a copy, no registers) into an
   entry stage; (b) one chunk later each thread reads its staged slots into
   registers (all before any store: a store may alias later loads), zeroes
   its segment of a dense A tile and writes the entries into it, in slot
   order (float32: ``tf32(v)`` into the big tile, ``tf32(v - tf32(v))`` into
   the small one). One thread per segment, so zeroing and scattering need no
   barrier between them. The kernel is compiled for ``slots`` (``w`` rounded up to a
   multiple of 4, :func:`scatter_slots`); slots past ``w`` hold stale stage
   contents and are written, branch-free, to a sink element of the thread;
2. B: ``cp.async`` copies the chunk's ``kc x bn`` tile of ``B`` (16-byte
   pieces, zeros past K and N; element by element when rows of ``B`` are not
   16-byte aligned) into a B stage, row-major with rows padded by 8 elements;
3. MMA: each warp loads its A fragments with 32-bit shared reads
   (:func:`sparsekit.gpu.mma.load_b32`; A rows padded by 16 bytes: the 32 lanes hit 32
   banks) and its B fragments with ``ldmatrix...trans`` (float16, two n-tiles
   per instruction) or 32-bit reads (float32: A's big and small fragments as
   stored, B's split into big and small), then runs its MMAs;
4. pipeline: ``stages`` (S) B tiles and entry stages, 2 A tiles.
   In step ``j`` each thread reads the staged slots of chunk ``j+1``, the
   copies of B(j+S-1) and the entries of chunk j+S are issued (one commit
   group), the thread zeroes its segment of the other A tile, the warps
   multiply chunk ``j`` with each K step's MMAs followed by a share of the
   scatter's stores (tensor work and shared-memory stores overlap; with K
   groups each thread spreads its stores over its group's ``kc / (16 G)``
   or ``kc / (8 G)`` K steps), then
   ``cp.async.wait_group S-2`` and one barrier. Global loads are in flight for
   S-2 to S-1 steps, with no registers held for them.
5. shared memory: settings up to 48 KB use static arrays; larger ones carve
   the same buffers from one dynamic buffer, the launcher setting the
   kernel's maximum dynamic shared size first (:data:`SHARED_OPTIN`).
6. K groups (``kgroups > 1``; always the dynamic buffer): after the K loop's
   last barrier (no copy in flight) groups ``1 .. G-1`` write their
   accumulators over the buffer (``(G-1) bm bn`` floats), one barrier, and
   group 0 adds them to its own in group order, ``((acc_0 + acc_1) + acc_2)
   + ...``: a fixed order, so repeats are bit-identical. Group 0 stores ``C``
   (or the K split's partial, which is then the group-summed one).

Index arithmetic is unsigned (:data:`U`): Numba wraps a negative signed index
around the array's length, 64-bit compare/select sequences on every access
(``experiments/results/uspmm_tc.md``: the K loop went from 888 to
about 500 PTX instructions per thread with these changes).

Measured on the H100 (``experiments/results/uspmm_tc.md``): before the unsigned
indexing, the time per block was nearly independent of the number of blocks, the
density and the pipeline depth, and grew with the K columns; the unsigned
indexing and the register-staged scatter took the float16
default from 56.2 to 35.4 us at 1024^3 60% (more warps per block did not help:
the cost per K chunk follows the instructions issued per SM). The K split:
float16 512 x 4608 x 128 81% from 90.6 to 45.9 us with 4 splits, 30.6 with 4 splits of 32 x 128 tiles
two blocks an SM (cuSPARSE CSR 55.1); float32 512 x 4608 x 128 from 294.5 to 80.4 us (8 splits).
float32 with A split at the scatter (results bit-identical
to splitting every fragment): 70.9 against 71.3 us at 1024^3 60% (flat from 60% to 90% sparsity; dense
fp32 cuBLAS 62.8), 870.9 against 898.7 at 1024 x 1024 x 16384, 862.2 against 888.5 at 4096^2 x 1024 90%.
K groups: float32 1024^3 60-85% with 64 x 128 tiles, kc 32, four groups of two
warps of 64 x 64, 4 stages: 60.3-61.1 us against the default's 70.0-70.4 (dense fp32 cuBLAS 61.5-62.4, same
run); two groups of 64 x 32 warps 66.5-67.0; slower than the default past one wave (N = 16384: 909.7 against
861.7) and no gain for float16 (within 2%), so ``DEFAULTS`` keep ``kgroups=1``.

Lean (``experiments/results/uspmm_tc.md``, "float32 lean" and "Lean at the small-grid setting"): the
arithmetic of the kernel before it, bit for bit, in fewer instructions per K chunk. (1) The cp.async copies take
their addresses as bytes: each thread takes the shared and global addresses of its first piece once, before the K loop
(:func:`sparsekit.gpu.mma.shared_addr`, :func:`sparsekit.gpu.mma.global_addr`: inline-asm values the optimiser cannot fold
back), and adds compile-time and per-chunk offsets (:func:`sparsekit.gpu.mma.cp_async16_raw`); the element
indexing of :func:`sparsekit.gpu.mma.cp_async16` had the compiler recompute ``(k0 + r) * n`` in 64 bits for every
copy (about 30 SASS instructions a copy). Needs a thread's pieces to be whole rows of B apart (and,
with several entry pieces a thread, whole segments apart), else those copies stay plain. (2) float32 A
fragments by ``ldmatrix`` (:func:`sparsekit.gpu.mma.ldmatrix_x4`: an x4 of 8 x 4-word rows is an m16n8k8 TF32 A
fragment; two a 16-row tile, big and small, for eight 32-bit loads; the A rows' 16-byte padding keeps
the eight rows of each matrix on distinct banks). (3) The big parts of the 3xTF32 splits (B fragments,
scattered A entries) by :func:`sparsekit.gpu.mma.to_tf32_finite` (2 integer operations against ``cvt.rna``'s 4):
equal for finite values and infinities; for a NaN the big part may differ, but the small part
``to_tf32(x - big)`` is NaN either way, so every MMA that reads it returns NaN as before. SASS per K
chunk (sm_90, offline): the float32 one-wave setting (64 x 128 kc 32 w1x2 kg4) 743 -> 538 instructions
(238 -> 218 registers), ``TC_LARGE`` (64 x 256 kc 16 w1x4, 8 slots) 816 -> 546 (226 -> 217). H100:
one-wave 1024^3 60% 62.3 -> 55.7 us (dense fp32 cuBLAS 62.3), 90% 60.3 ->
55.3, 768 x 768 x 1024 48.8 -> 44.0; 64 x 256 at N = 16384 668.9 -> 598.6 (cuBLAS 681.5), at N = 2048
108.3 -> 102.0. (4) float32 (static instruction counts, not timed): the entry
arrays are padded to the slots the kernel scatters (:func:`segment_entries` with ``pad``), so a chunk's
slots are all entries or padding (or, after the last chunk, all stale): one test a chunk replaces the
sink selects and 64-bit compares of every slot. (5) Where the larger entry stages keep the setting's
resident blocks (:func:`_presplit_fits`: the one-wave setting and the defaults, not ``TC_LARGE``), A's
values come split on the host (``presplit``, :func:`sparsekit.reference.mma.tf32_split`, bit for bit the kernel's split
of a finite value; ELL values are finite), staged as big and small pairs read with one 8-byte load:
the scatter only moves bits. SASS executed per K chunk (sm_90, offline): one-wave 519 -> 422, ``TC_LARGE``
855 -> 771 (its K-step loop runs twice a chunk), the defaults 437 -> 378. Every setting timed
ran faster lean (float32 1.06-1.18x, float16 and bfloat16 1.02-1.11x at the small-grid setting), so the
kernel before it is gone (git keeps it).

``0 * inf`` is NaN: with non-finite values in ``B`` the result differs from the
sparse kernels' where a row of ``A`` does not use them (as for "dense_tile").

K split (``splits``): a grid of few output tiles (1024 x 1024 x 128: 16 tiles of 64 x 128 on 132
SMs; the ResNet-50 layers of the paper's Table 1: 1 to 32) runs K serially in few blocks. With
``splits = s > 1`` the grid gains ``nsplit = min(s, K chunks)`` blocks per tile along z, each
multiplying a run of K chunks into float32 partials (``nsplit x M x N``, kept on the
:class:`~sparsekit.gpu.device_ell.DeviceELL` with a ticket per tile, :func:`sparsekit.gpu.split_k.split_buffers`); the tile's last
block sums them in a fixed order, each thread its own fragment elements (the ticket protocol of
:func:`sparsekit.gpu.uspmm.split_sum`, with the loads of one partial issued together): repeats are
bit-identical, the error bound is unchanged (:func:`error_reduction`). The split is a kernel of its
own; ``splits = 1`` launches the unsplit kernel (its K loop is unchanged).

Tunables: ``bm``, ``bn`` (block tile), ``kc`` (K chunk: multiple of 16 for
float16 and bfloat16, 8 for float32), ``warps_m``, ``warps_n``, ``stages``, ``min_blocks``
(resident blocks per SM the registers are capped for), ``splits`` (K split, above),
``kgroups`` (K groups, step 6; ``kc`` a multiple of ``kgroups`` MMA K steps; 1: the kernel
without them, its code unchanged). :data:`DEFAULTS` per dtype.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from numba import cuda, float32
from numba.core.types import float16, uint8, uint16
from numba.cuda import config as cuda_config

from sparsekit.gpu.inline import inlined
from sparsekit.gpu.mma import (cp_async16, cp_async16_raw, cp_async_commit, cp_async_wait, global_addr, ldmatrix_x4,
                     ldmatrix_x4_trans, load_b32, mma_m16n8k8_tf32_f32, mma_m16n8k16_bf16_f32, mma_m16n8k16_f16_f32,
                     pack_bf16x2, shared_addr, to_tf32, to_tf32_finite)
from sparsekit.gpu.launch import SHARED_LIMIT, SHARED_OPTIN, SMEM_ALIGN
from sparsekit.gpu.launch import DynamicShared as _DynamicShared
from sparsekit.gpu.launch import launch as _launch
from sparsekit.gpu.launch import opt_in as _opt_in
from sparsekit.gpu.device_ell import prepare, rhs
from sparsekit.gpu.launch import WARP_SIZE
from sparsekit.gpu.split_k import split_buffers, split_range, split_ticket
from sparsekit.gpu.vector_loads import aligned, load2, store4, store8
from sparsekit.reference.mma import bf16_pairs, tf32_split
from sparsekit.arrays import cdiv, flat_view, output, result
from sparsekit.checks import BFLOAT16, check_int

__all__ = ["uspmm", "run", "DEFAULTS", "shared_bytes", "segment_entries", "error_reduction", "SPLIT_ERROR_U",
           "MMAS_PER_PRODUCT", "SHARED_OPTIN", "STATIC_LIMIT"]

#: Default tunables per dtype (see the module docstring). float16: 64x128, kc 64, 4 stages (137 KB of
#: dynamic shared memory), the fastest setting on 6 of the 8 problems of its tuning sweep and by geomean
#: (``experiments/results/uspmm_tc.md``: 55.8 us at 1024^3 60%; after the unsigned indexing
#: and the register-staged scatter: 35.4 us, with 16 warps or 2x8 warps no faster). float32: 64x128,
#: kc 16, 4 stages (67 KB, dynamic; 76 KB since the scatter splits A into two tiles, two blocks an SM
#: still fit): 90.9 us at 1024^3 60% against 96.9 for the earlier
#: 64x64 kc 16 3-stage default (both with the unsigned indexing); with two blocks an SM (``min_blocks=2``,
#: K split) 70.7 us against 72.0, and 897.0 against 1068.2 at 1024 x 1024 x 16384.
#: bfloat16: float16's (the same kernel with the bf16 MMA: the same tiles, shared memory and instructions).
DEFAULTS = {
    np.dtype(np.float16): dict(bm=64, bn=128, kc=64, warps_m=2, warps_n=4, stages=4, min_blocks=1, splits=1,
                                 kgroups=1),
    np.dtype(np.float32): dict(bm=64, bn=128, kc=16, warps_m=2, warps_n=4, stages=4, min_blocks=2, splits=1,
                                 kgroups=1),
}
DEFAULTS[BFLOAT16] = dict(DEFAULTS[np.dtype(np.float16)])
#: The 16-bit value dtypes: one MMA of 16 x 8 x 16 a tile and K step, the A tile stored as it is (no split).
HALVES = (np.dtype(np.float16), BFLOAT16)
#: Error of one 3xTF32 product in float32 unit roundoffs u = 2**-24 times |a||b|: with a = ab + as + ar
#: (ab = tf32(a), |as| <= 2**-11 |a|, as's own TF32 rounding |ar| <= 2**-22 |a|) and b likewise, the
#: kernel computes as*bb + ab*bs + ab*bb exactly, missing as*bs + ab*br + ar*bb + (terms below 2**-33):
#: at most 3 * 2**-22 * (1 + 2**-10) |a||b| = 12.01 u |a||b|, rounded up.
SPLIT_ERROR_U = 13
#: The same for :mod:`sparsekit.gpu.uspmm_wgmma`'s ``precision="tf32+bf16"``: ab*bb in TF32 and the two correction terms
#: as bf16 products, bf16(bs) bf16(ab) + bf16(bb) bf16(as) (bs = b - bb unrounded; bf16 rounds to nearest,
#: relative error <= 2**-8): each correction misses at most 2**-11 (1 + 2**-11) (2**-7 + 2**-16) |a||b|, and
#: ar*bb + (as + ar)*bs stay out: 2**-17 (1 + 2**-11)(1 + 2**-9) + 2 * 2**-22 (1 + 2**-11) = 136.3 u |a||b|,
#: rounded up.
SPLIT_ERROR_BF16_U = 137
#: The split's error of each float32 precision (``error_reduction``'s ``precision``; :mod:`sparsekit.gpu.uspmm_wgmma` offers
#: both, this module's kernels the first).
SPLIT_ERRORS_U = {"3xtf32": SPLIT_ERROR_U, "tf32+bf16": SPLIT_ERROR_BF16_U}
#: MMAs a multiply-add's products enter the accumulator through, an accumulator rounding each (``error_reduction``):
#: 3xTF32 three TF32 MMAs an 8-column step; ``"tf32+bf16"`` two, one TF32 (big x big) and one bf16 k16 MMA that
#: holds both correction terms of the same 8 columns. The H100's errors follow the count: on the six problems of
#: ``experiments/results/uspmm_precision.json`` ``"tf32+bf16"``'s largest error is 0.64-0.75 of
#: 3xTF32's, as is 3xTF32's own with a TF32 A (two MMAs, 0.66-0.71): the tensor core truncates its sums, so
#: their errors, one-sided, grow with the number of roundings.
MMAS_PER_PRODUCT = {"3xtf32": 3, "tf32+bf16": 2}
#: Shared memory one block may use: the H100's opt-in maximum (``MAX_SHARED_MEMORY_PER_BLOCK_OPTIN``,
#: 232448 bytes; docs/numba_notes.md). Settings up to :data:`STATIC_LIMIT` use static shared arrays; larger
#: ones one dynamic buffer, with ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`` set on the compiled
#: kernel before the launch (:func:`_opt_in`). A device with a smaller opt-in refuses those at launch.
#: Shared memory of one H100 SM (228 KB; each resident block also takes 1 KB the system reserves): whether
#: the presplit entry stages keep a setting's resident blocks (:func:`_presplit_fits`).
SM_SHARED = 233472
#: The largest static shared footprint (Numba's static arrays stop at 48 KB); a module attribute so the
#: simulator tests can send small settings through the dynamic path.
STATIC_LIMIT = SHARED_LIMIT
#: The kernel's index type: unsigned, so Numba emits no negative-index wraparound (see :func:`_tc_kernel`).
U = np.uint64
U0, U16 = U(0), U(16)


def segment_entries(dell, seg: int, pad: bool = False, split: bool | str = False, classes: int = 0):
    """``(values, offsets)`` on the device, each ``(ceil(K/seg), w, Mp)`` (``Mp``: ``M`` rounded up to
    16, so every 16-byte piece of a slot is aligned; rows past ``M`` empty): row ``r``'s entries with a
    column in segment ``q`` (columns ``[q*seg, (q+1)*seg)``) are ``values[q, w-cnt:, r]`` at columns
    ``q*seg + offsets[q, w-cnt:, r]`` (``cnt`` of them, ascending); ``w`` is the largest ``cnt`` of
    the matrix (at least 1). The first ``w - cnt`` slots are padding (value 0 at offset 0): the
    kernel writes slots in order, so padding lands before any entry and never overwrites one.
    ``pad``: ``w`` raised to :func:`scatter_slots` of it, the slots the kernel scatters, so that every
    scattered slot is an entry or padding (the float32 lean scatter writes them all, no test per slot).
    ``split`` (float32): ``values`` is ``(ceil(K/seg), w, 2 Mp)``, row ``r``'s value ``v`` split as the lean
    kernel splits it (:func:`sparsekit.reference.mma.tf32_split`), ``big`` at ``[..., 2r]`` and ``small`` at ``[..., 2r+1]``:
    twice the rows, each 16-byte piece two rows' pairs, so the kernel copies them as it copies values.
    ``split="bf16"``: ``small`` replaced by the bits of ``(bf16(big), bf16(small))`` (:func:`sparsekit.reference.mma.bf16_pairs`),
    what :mod:`sparsekit.gpu.uspmm_wgmma`'s ``precision="tf32+bf16"`` stores for the bf16 correction products.
    ``classes`` (:mod:`sparsekit.gpu.uspmm_wgmma`: the chunk width ``kc``, a multiple of ``4 seg``): segments of column
    classes instead of column ranges. Chunk ``ch`` (``kc`` columns) has ``tpr = kc / seg`` segments; chunk
    column ``x`` (4-column group ``g = x // 4``) lies in segment ``h = (g // seg) * 4 + x % 4`` at offset
    ``g % seg``: a segment is one column of each of ``seg`` consecutive groups, every fourth column. Needs
    ``pad`` (``w`` even, at most 16). ``values`` is ``(ceil(K/kc), w/2, Mp, tpr, 2, 2)`` (``split``; else without
    the last axis): a chunk's slots ``2i, 2i+1`` of every row's ``tpr`` segments side by side, so the thread of
    item ``row * tpr + segment`` copies and reads 16 bytes of its own per slot pair; ``offsets`` is
    ``(ceil(K/kc), Mp, tpr, ob / 4)`` uint32 (``ob``: :func:`offset_bytes` of ``w``): an item's ``w`` offsets as the
    bytes of one piece (slot ``i`` in byte ``i % 4`` of word ``i // 4``, little-endian; zeros after them).
    Built once per ``seg``, ``pad``, ``split`` and ``classes`` on the host, kept with ``dell``."""
    tpr = classes // seg if classes else 1
    if classes and (classes % (4 * seg) or seg > 16 or not pad):
        raise ValueError(f"classes: the chunk width must be a multiple of 4 seg = {4 * seg}, seg at most 16 and "
                         f"pad set, got {classes}, {seg}, {pad}")

    def build():
        m, k = dell.shape
        idx = dell.host.indices.astype(np.int64)                            # (M, K'), ascending per row
        vals = dell.host.values
        if classes:
            x = idx % classes
            q = idx // classes * tpr + (x // 4) // seg * 4 + x % 4
            off = (x // 4) % seg
            nsub = max(cdiv(k, classes), 1) * tpr
            order = np.argsort(q, axis=1, kind="stable")                    # (by segment; columns stay ascending)
            q, off, idx, vals = (np.take_along_axis(a, order, axis=1) for a in (q, off, idx, vals))
        else:
            q = idx // seg
            off = idx - q * seg
            nsub = max(cdiv(k, seg), 1)
        rows = np.broadcast_to(np.arange(m)[:, None], idx.shape)
        counts = np.bincount((rows * nsub + q).ravel(), minlength=m * nsub).reshape(m, nsub)
        w = max(int(counts.max(initial=0)), 1)
        if pad:
            w = scatter_slots(seg, w)
        first = np.cumsum(counts, axis=1) - counts                          # first slot of (row, segment)
        rank = np.arange(idx.shape[1])[None, :] - first[rows, q]            # place within the segment
        pos = w - counts[rows, q] + rank
        mp = cdiv(m, 16) * 16
        values = np.zeros((nsub, w, mp), dtype=dell.dtype)
        offsets = np.zeros((nsub, w, mp), dtype=np.uint8)
        values[q, pos, rows] = vals
        offsets[q, pos, rows] = off
        if split:                                                           # (padding: 0 splits into 0, 0)
            big, small = tf32_split(values)
            values = np.stack((big, bf16_pairs(big, small) if split == "bf16" else small), axis=-1)
        if classes:                                                         # (chunk, h, slot, row) to
            # (chunk, slot pair, row, h, slot of the pair) and (chunk, row, h, slot)
            nch = nsub // tpr
            values = values.reshape(nch, tpr, w // 2, 2, *values.shape[2:])
            values = np.moveaxis(values, (1, 3), (3, 4))
            packed = np.zeros((nch, mp, tpr, offset_bytes(w)), dtype=np.uint8)
            packed[..., :w] = offsets.reshape(nch, tpr, w, mp).transpose(0, 3, 1, 2)
            return np.ascontiguousarray(values), packed.view(np.uint32)
        return (values.reshape(nsub, w, 2 * mp) if split else values), offsets
    key = (("tc_segment_entries", seg) + (("padded",) if pad else ()) + ((("split", split),) if split else ())
           + ((("classes", classes),) if classes else ()))
    return dell.cached(key, build)


def tf32_exact(dell) -> bool:
    """Whether every value of the float32 matrix ``dell`` is a TF32 number: its 3xTF32 small part
    (:func:`sparsekit.reference.mma.tf32_split`) is zero, as for weights from float16 or bfloat16 or quantised ones. Then every
    ``b_big a_small`` product is zero and a kernel may leave that term out: the same sums, bit for bit. Tested as
    finite values whose 13 low float32 bits are clear (their split keeps them whole, small part 0; a few values near
    the smallest normal also have a zero small part, rounded away, and count as not exact: that only costs the
    skip); an infinity or a NaN splits into a NaN small part: not exact. Checked once per matrix, on the host (a pass
    over the bits: 0.25 ms for 420,000 values, against 8 ms for the split itself)."""
    def check():
        values = np.asarray(dell.host.values, dtype=np.float32)
        return not (values.view(np.uint32) & np.uint32(0x1FFF)).any() and bool(np.isfinite(values).all())
    return dell.cached(("tf32_exact",), check, device=False)


def error_reduction(kprime: int, dtype, precision: str = "3xtf32") -> int:
    """The ``reduction`` to pass to the float32-accumulation bound (``tests/test_spmm.py``,
    ``assert_fp32_accumulated``: ``reduction * u * (|A| @ |B|)``) for this kernel's result.

    float16 and bfloat16: ``kprime``, as for the CUDA-core kernels: products are exact (8 or 11 significant
    bits a factor) and each MMA rounds its sum once, so at most one rounding per stored entry (MMAs over zeros
    add exactly). This is
    the simulator's model (round to nearest); the tensor core truncates its float32 sums, which the
    GPU tests check at real sizes against the same bound.
    float32: ``3 * kprime + SPLIT_ERROR_U``: each product arrives in three MMAs (three
    roundings of the accumulator) and carries the split's error (:data:`SPLIT_ERROR_U`); with
    ``precision="tf32+bf16"`` (:mod:`sparsekit.gpu.uspmm_wgmma`: two MMAs, bf16 corrections,
    :data:`MMAS_PER_PRODUCT`) ``2 * kprime + SPLIT_ERROR_BF16_U``: no looser than 3xTF32's from
    ``kprime`` = 124 on (:func:`sparsekit.gpu.uspmm_wgmma.auto_precision`).

    The same with a K split (``splits > 1``). The bound counts the roundings a product goes through
    after it enters a sum (Higham's ``gamma_d`` with ``d`` at most ``reduction``). With ``nsplit``
    partials, a product among partial ``q``'s ``kq`` entries of its row goes through at most ``kq``
    (float16; ``3 kq`` or ``2 kq`` float32) roundings inside that partial's float32 accumulator, then through the
    float32 additions ``((0 + p_0) + p_1) + ...`` of the split's fixed-order sum: adding a partial of
    no entries of that row (exactly 0) or adding to an exact 0 rounds nothing, so at most one rounding
    per other partial that holds an entry of the row, at most ``kprime - kq`` of them. In all at most
    ``kprime`` (``3 kprime``, ``2 kprime``), as without a split; ``C`` is rounded once to its dtype either way.

    The same with K groups (``kgroups > 1``), by the same count: a group's accumulator is a partial
    over its K steps, and the groups' fixed-order sum ``((acc_0 + acc_1) + ...)`` rounds at most once
    per other group holding an entry of the row (with a split too: the groups' sum is the block's partial).
    """
    if precision not in SPLIT_ERRORS_U:
        raise ValueError(f"precision: one of {tuple(SPLIT_ERRORS_U)}, got {precision!r}")
    if np.dtype(dtype) in HALVES:
        return kprime
    return MMAS_PER_PRODUCT[precision] * kprime + SPLIT_ERRORS_U[precision]


def _geometry(bm: int, bn: int, kc: int, half: bool, nthreads: int) -> dict:
    """Strides and sizes (in elements of the tile dtype) of the shared buffers of one setting.

    A tile rows: ``kc`` columns + 16 bytes, so the 8 rows of a fragment read fall on distinct banks.
    An A buffer (``a_buf``) is one tile (float16) or ``ew = 2`` tiles (float32: the 3xTF32 split made
    by the scatter, ``big`` then ``small`` at ``a_small`` elements after it). After the two A buffers
    ``ew`` sink elements per thread (where the scatter writes its slots past ``w``: big ones first,
    then small ones). B tile rows: ``bn`` columns + 8 elements, so the 8 rows of an ldmatrix
    (float16) and the reads of ``B[t, g]`` (float32) do. Entry stages: ``kc`` slots of ``bm`` rows
    (``tpr`` segments of ``seg``)."""
    item = 2 if half else 4
    ew = 1 if half else 2
    sa = kc + 16 // item
    return dict(ew=ew, sa=sa, a_small=bm * sa, a_buf=ew * bm * sa, a_all=2 * ew * bm * sa + ew * nthreads,
                sbn=bn + 8, b_buf=kc * (bn + 8), e_buf=kc * bm)


def shared_bytes(bm: int, bn: int, kc: int, half: bool, stages: int = 3, nthreads: int = 256,
                 kgroups: int = 1, presplit: bool = False) -> int:
    """Shared memory of one block of ``nthreads`` threads (all ``kgroups`` K groups): two A buffers
    (float32: a big and a small tile each) and the sink, ``stages`` B tiles and ``stages`` entry stages
    (value and 8-bit offset per slot; ``presplit``: two values, big and small); with K groups, at least the
    ``kgroups - 1`` float32 ``bm x bn`` tiles that their sums pass through after the K loop (over the same buffer)."""
    geo = _geometry(bm, bn, kc, half, nthreads)
    item = 2 if half else 4
    return max((geo["a_all"] + stages * geo["b_buf"]) * item + stages * geo["e_buf"] * ((1 + presplit) * item + 1),
               4 * (kgroups - 1) * bm * bn)


def offset_bytes(slots: int) -> int:
    """Bytes of one item's staged offsets in :func:`segment_entries`' ``classes`` layout: ``slots`` bytes rounded up
    to a size ``cp.async`` copies (4, 8 or 16)."""
    return 4 if slots <= 4 else 8 if slots <= 8 else 16


def scatter_slots(seg: int, w: int) -> int:
    """Slots a thread scatters per K chunk, a compile-time constant of the kernel: ``w`` rounded up to a
    multiple of 4, at most ``seg`` (so a few values of ``w`` share one compiled kernel)."""
    return min(seg, -(-max(w, 1) // 4) * 4)


class _Plan(NamedTuple):
    """The compile-time constants of one tunable setting, the kernel's geometry: the tunables, then the
    sizes derived from them (:func:`_plan`, where each is explained). Hashable, so the phases' factories
    below are cached per setting and every kernel built for it shares their device functions."""
    bm: int
    bn: int
    kc: int
    warps_m: int
    warps_n: int
    half: bool
    stages: int
    slots: int
    vec: bool
    kgroups: int
    presplit: bool
    exact_a: bool
    bf16: bool
    nwg: int
    nthreads: int
    gthreads: int
    wtm: int
    wtn: int
    mtiles: int
    ntiles: int
    frag_row: int
    tile_type: object
    mma16: object
    item: int
    vw: int
    ew: int
    sa: int
    a_small: int
    a_buf: int
    a_all: int
    sbn: int
    b_buf: int
    e_buf: int
    all_b: int
    all_e: int
    er: int
    all_ev: int
    eo_byte: int
    pend: int
    tpr: int
    seg: int
    nslots: int
    nvals: int
    kstep: int
    gks: int
    per_ks: int
    zvec: bool
    per_row: int
    bpieces: int
    nbp: int
    b_whole: bool
    vpr: int
    opr: int
    vpieces: int
    opieces: int
    nvp: int
    nop: int
    v_whole: bool
    o_whole: bool
    rstep: int
    b_addresses: bool
    entry_addresses: bool


@functools.cache
def _plan(bm: int, bn: int, kc: int, warps_m: int, warps_n: int, half: bool, stages: int, slots: int, vec: bool,
          kgroups: int, presplit: bool, exact_a: bool, bf16: bool) -> _Plan:
    """Geometry and constants (the kernel's phase 0): the warps' sub-tiles, the shared buffers' strides and
    sizes (:func:`_geometry`), the pipeline's depth, a thread's A segment and staged slots, the 16-byte pieces
    of a chunk's copies and which of them take the lean forms."""
    nwg = warps_m * warps_n                           # warps of one K group
    nthreads = WARP_SIZE * nwg * kgroups
    gthreads = nthreads // kgroups                    # threads of one K group
    wtm, wtn = bm // warps_m, bn // warps_n           # a warp's sub-tile of C
    mtiles, ntiles = wtm // 16, wtn // 8              # its 16x8 MMA tiles
    frag_row = 2 * ntiles                              # a fragment row of this lane: 2 ntiles elements
    tile_type = uint16 if bf16 else float16 if half else float32
    mma16 = mma_m16n8k16_bf16_f32 if bf16 else mma_m16n8k16_f16_f32
    item = 2 if half else 4
    vw = 16 // item                                   # elements per 16-byte copy
    geo = _geometry(bm, bn, kc, half, nthreads)
    ew, sa, a_small, a_buf, a_all, sbn, b_buf, e_buf = (geo[x] for x in ("ew", "sa", "a_small", "a_buf", "a_all", "sbn",
                                                                         "b_buf", "e_buf"))
    all_b, all_e = stages * b_buf, stages * e_buf
    er = 2 if presplit else 1                         # values a slot and row (presplit: big, small)
    all_ev = er * all_e
    eo_byte = (a_all + all_b + all_ev) * item         # dynamic layout: where the offsets start (bytes)
    pend = stages - 2                                 # copy groups left in flight at a step's end
    tpr = nthreads // bm                              # threads per row of the A tile
    seg = kc // tpr                                   # columns of a thread's A segment
    nslots = slots or seg                             # slots scattered per thread and chunk
    nvals = er * nslots                               # their values (presplit: big ones, then small ones)
    kstep = 16 if half else 8                         # columns of one MMA K step
    gks = kc // kstep // kgroups                      # MMA K steps per chunk of one K group
    per_ks = cdiv(nslots, gks)                        # slots stored after each of a group's K steps
    zvec = seg % vw == 0                              # zero the segment with 16-byte stores
    per_row = bn // vw
    bpieces = kc * per_row                            # 16-byte pieces of a B tile
    nbp = cdiv(bpieces, nthreads)
    b_whole = bpieces % nthreads == 0                 # every thread copies nbp pieces
    vpr, opr = er * bm // vw, bm // 16                # 16-byte pieces of one slot's values, offsets
    vpieces, opieces = kc * vpr, kc * opr             # of a chunk's entry stage (all seg slots)
    nvp, nop = cdiv(vpieces, nthreads), cdiv(opieces, nthreads)
    v_whole, o_whole = vpieces % nthreads == 0, opieces % nthreads == 0

    # lean copies: a thread's pieces of a chunk are rows r0, r0 + rstep, ... of one column (B) or slots
    # slot0, slot0 + sstep, ... of one segment position (entries), so one address per thread and array,
    # taken before the K loop, plus compile-time and per-chunk offsets names every copy
    rstep = nthreads // per_row if nthreads % per_row == 0 else 0   # B rows between a thread's pieces
    b_addresses = vec and rstep > 0                   # (the element-wise B copies have no address form)
    entry_addresses = _entry_linear(nvp, vpr, nthreads, seg) and _entry_linear(nop, opr, nthreads, seg)
    return _Plan(bm=bm, bn=bn, kc=kc, warps_m=warps_m, warps_n=warps_n, half=half, stages=stages, slots=slots,
                 vec=vec, kgroups=kgroups, presplit=presplit, exact_a=exact_a, bf16=bf16, nwg=nwg,
                 nthreads=nthreads, gthreads=gthreads, wtm=wtm, wtn=wtn, mtiles=mtiles, ntiles=ntiles,
                 frag_row=frag_row, tile_type=tile_type, mma16=mma16, item=item, vw=vw, ew=ew, sa=sa,
                 a_small=a_small, a_buf=a_buf, a_all=a_all, sbn=sbn, b_buf=b_buf, e_buf=e_buf, all_b=all_b,
                 all_e=all_e, er=er, all_ev=all_ev, eo_byte=eo_byte, pend=pend, tpr=tpr, seg=seg, nslots=nslots,
                 nvals=nvals, kstep=kstep, gks=gks, per_ks=per_ks, zvec=zvec, per_row=per_row, bpieces=bpieces,
                 nbp=nbp, b_whole=b_whole, vpr=vpr, opr=opr, vpieces=vpieces, opieces=opieces, nvp=nvp, nop=nop,
                 v_whole=v_whole, o_whole=o_whole, rstep=rstep, b_addresses=b_addresses,
                 entry_addresses=entry_addresses)


@functools.cache
def _b_copy(plan: _Plan):
    """Step 2, the copies of B: ``issue_b``, one chunk's tile into its stage."""
    kc, stages, vec, nthreads, tile_type = plan.kc, plan.stages, plan.vec, plan.nthreads, plan.tile_type
    item, vw, sbn, b_buf, per_row, bpieces = plan.item, plan.vw, plan.sbn, plan.b_buf, plan.per_row, plan.bpieces
    nbp, b_whole, rstep, b_addresses = plan.nbp, plan.b_whole, plan.rstep, plan.b_addresses

    @inlined
    def issue_b(ch, t, b, n, k, col0, sh_b, lb):
        """Step 2: chunk ``ch``'s ``kc x bn`` tile of B into stage ``ch % stages`` by cp.async (zeros
        past K and N); without 16-byte rows, element by element (plain loads and stores). Offsets are
        written as a per-chunk part plus a per-thread part (hoisted out of the K loop by the compiler).
        With a K split, ``b`` and ``k`` start at the block's first chunk. ``b_addresses``: on byte addresses,
        ``lb`` from the kernel: ``bsh0`` / ``bgl0`` the addresses of this thread's first piece (row
        ``r0``) in stage 0 / in chunk 0 of ``b``, ``colok``: its columns are within N; pieces past K or
        N read nothing (from ``bgl``, ``b[0]``). Else ``lb`` is unused."""
        k0 = ch * U(kc)
        sbase = (ch % U(stages)) * U(b_buf)
        zero = tile_type(0.0)
        if b_addresses:
            r0, colok, bsh0, bgl0, bgl = lb
            krem = k - k0                                                # rows of B left (> 0)
            dst0 = bsh0 + (ch % U(stages)) * U(b_buf * item)
            src0 = bgl0 + k0 * n * U(item)
        for i in range(nbp):
            p = t + U(i * nthreads)
            if b_whole or p < U(bpieces):
                r = p // U(per_row)
                cc = (p % U(per_row)) * U(vw)
                if b_addresses:                                          # row r0 + i * rstep, on addresses
                    ok = colok & (r0 + U(i * rstep) < krem)
                    cp_async16_raw(sh_b, dst0 + U(i * rstep * sbn * item), b,
                                   src0 + U(i * rstep) * n * U(item) if ok else bgl, U16 if ok else U0)
                elif vec:                                                # N % vw == 0: whole pieces
                    ok = (k0 + r < k) & (col0 + cc < n)
                    cp_async16(sh_b, sbase + (r * U(sbn) + cc), b, k0 * n + (r * n + col0 + cc) if ok else U0,
                               U16 if ok else U0)
                else:
                    gk = k0 + r
                    gc = col0 + cc
                    for e in range(vw):
                        ue = U(e)
                        sh_b[sbase + r * U(sbn) + cc + ue] = b[gk * n + gc + ue] if (gk < k) & (gc + ue < n) else zero
    return issue_b


@functools.cache
def _entry_piece_copy(plan: _Plan, npt: int, whole: bool, pieces: int, per_slot: int, rows: int, srows: int):
    """Step 1a, ``copy``, for one of the entry arrays (values: ``rows = vw`` rows a 16-byte piece; 8-bit
    offsets: 16): its ``pieces`` 16-byte pieces of a chunk, ``per_slot`` a slot, ``npt`` a thread
    (``whole``: every thread has all ``npt``), by cp.async into the stage at ``sbase``. ``entry_addresses``:
    on byte addresses (``16 // rows`` bytes an element), ``eb`` (:func:`entry_bases`) and ``sgl``
    (the array's first element) from the kernel (``srows``: the stage's rows a slot, ``bm``, or ``2 bm``
    for presplit values, whose rows, row offset and strides the caller doubles): a thread's pieces are
    slots ``slot0 + i * sstep``
    (``sstep`` a multiple of ``seg`` where ``npt > 1``: the same position ``ii`` in segments
    ``hq0 + i * sstep / seg``), ``dsh0`` / ``sgl0`` the addresses of its first piece in stage 0 / in
    segment 0 of the entry array; pieces past the segments or rows read nothing (from ``sgl``).
    Else ``eb`` and ``sgl`` are unused."""
    nthreads, seg, entry_addresses = plan.nthreads, plan.seg, plan.entry_addresses
    sstep = nthreads // per_slot if nthreads % per_slot == 0 else 0
    size = 16 // rows

    @inlined
    def copy(t, src, row0, w, wmp, nsub, mp, dst, sbase, qb, eb, sgl):
        if entry_addresses:
            hq0, live, dsh0, sgl0 = eb
            nrem = nsub - qb                                         # segments left (> 0)
        for i in range(npt):
            p = t + U(i * nthreads)
            if whole or p < U(pieces):
                slot = p // U(per_slot)
                r = (p % U(per_slot)) * U(rows)
                hq = slot // U(seg)
                ii = slot % U(seg)
                if entry_addresses:                                      # slot slot0 + i * sstep
                    ok = live & (hq0 + U(i * sstep // seg) < nrem)
                    cp_async16_raw(dst, dsh0 + (sbase + U(i * sstep * srows)) * U(size), src,
                                   sgl0 + (qb + U(i * sstep // seg)) * wmp * U(size) if ok else sgl,
                                   U16 if ok else U0)
                elif ii < w:
                    ok = (qb + hq < nsub) & (row0 + r < mp)
                    cp_async16(dst, sbase + (slot * U(srows) + r), src,
                               qb * wmp + (hq * wmp + ii * mp + row0 + r) if ok else U0, U16 if ok else U0)
    return copy


@functools.cache
def _entry_copy(plan: _Plan):
    """Step 1a, the copies of the staged entries: ``entry_bases`` (a thread's lean addresses, taken once
    before the K loop) and ``issue_e``, one chunk's values and offsets into their stage."""
    bm, stages, vw, e_buf, er, tpr, seg = plan.bm, plan.stages, plan.vw, plan.e_buf, plan.er, plan.tpr, plan.seg
    vpr, opr, vpieces, opieces, nvp, nop = plan.vpr, plan.opr, plan.vpieces, plan.opieces, plan.nvp, plan.nop
    v_whole, o_whole = plan.v_whole, plan.o_whole
    copy_values = _entry_piece_copy(plan, nvp, v_whole, vpieces, vpr, vw, er * bm)
    copy_offsets = _entry_piece_copy(plan, nop, o_whole, opieces, opr, 16, bm)

    @inlined
    def entry_bases(t, per_slot, rows, srows, row0, w, mp, wmp, dst, src):
        """This thread's first piece of an entry array (``entry_addresses``): its segment ``hq0``, whether its
        slot holds entries and its rows are within the array (``live``), and the addresses of its destination
        in stage 0 and its source in chunk 0 (used only where ``live``)."""
        slot = t // U(per_slot)
        r = (t % U(per_slot)) * U(rows)
        hq0 = slot // U(seg)
        ii = slot % U(seg)
        live = (ii < w) & (row0 + r < mp)
        return hq0, live, shared_addr(dst, slot * U(srows) + r), global_addr(src, hq0 * wmp + ii * mp + row0 + r)

    @inlined
    def issue_e(ch, t, ev, eo, row0, w, wmp, nsub, mp, sh_ev, sh_eo, le):
        """Step 1a: chunk ``ch``'s entries (segments ``ch*tpr + h``, slots ``i < w``, the block's
        ``bm`` rows) into entry stage ``ch % stages`` by cp.async: slot ``h*seg + i`` of the stage
        holds ``bm`` values and ``bm`` offsets (zeros past the arrays' rows and segments). First the
        value pieces (``vw`` rows each), then the offset pieces (16 rows each), so that a warp's
        lanes take the same path; ``wmp = w * mp`` (the entry arrays' segment stride). With a K
        split, ``ev``, ``eo`` and ``nsub`` start at the block's first chunk. ``le`` (``entry_addresses``): the
        thread's :func:`entry_bases` of the values and the offsets, then the arrays' first elements."""
        sbase = (ch % U(stages)) * U(e_buf)
        qb = ch * U(tpr)                                                 # the chunk's first segment
        copy_values(t, ev, U(er) * row0, w, U(er) * wmp, nsub, U(er) * mp, sh_ev, U(er) * sbase, qb,   # (presplit:
                    le[0], le[2])                                                             # rows of pairs)
        copy_offsets(t, eo, row0, w, wmp, nsub, mp, sh_eo, sbase, qb, le[1], le[3])
    return entry_bases, issue_e


@functools.cache
def _slot_store(plan: _Plan):
    """Step 1b, one staged slot's store into an A tile: ``put`` (float32: the 3xTF32 split of its value)."""
    half, presplit, a_small = plan.half, plan.presplit, plan.a_small

    @inlined
    def put(sh_a, live, x, sink, v, vs):
        """Step 1b, one slot: float16, ``v`` at ``x`` (at ``sink`` unless ``live``); float32 (only where
        ``live``: the padded entry arrays make a whole chunk live or stale), the 3xTF32 split of ``v``,
        ``tf32(v)`` at ``x`` in the big tile and ``tf32(v - tf32(v))`` (the difference is exact) at the same
        place of the small one (``a_small`` further). Splitting here, once per entry, replaces the split of every A
        fragment value by each of the ``warps_n`` warps that read it; the MMAs get the same values.
        ``presplit``: ``v`` and ``vs`` are big and small already (split on the host, bit for bit as here)."""
        if half:
            sh_a[x if live else sink] = v
        elif presplit:
            if live:
                sh_a[x] = v
                sh_a[x + U(a_small)] = vs
        else:
            hi = to_tf32_finite(v)                                       # (small is NaN for Inf/NaN v)
            if live:
                sh_a[x] = hi
                sh_a[x + U(a_small)] = to_tf32(v - hi)
    return put


@functools.cache
def _slot_front(plan: _Plan):
    """Step 1b, the share of the next A tile's stores that follows one MMA K step: ``write_front`` (called
    by the MMA step)."""
    presplit, nslots, gks, per_ks, half = plan.presplit, plan.nslots, plan.gks, plan.per_ks, plan.half
    put = _slot_store(plan)

    @inlined
    def write_front(ks, base, sink, wl, offs, vals, sh_a):
        """Step 1b, stores, the share after the thread's ``ks``-th K step of the chunk (of its group's
        ``gks``): slots ``ks*per_ks ..`` (the first ``per_ks`` of the
        registers, to the sink past ``wl`` or past ``nslots``), then the rest move down ``per_ks``
        places (register renaming once unrolled; the same code for every ``ks``)."""
        for i in range(min(per_ks, nslots)):
            if half:
                live = U(ks * per_ks + i) < wl
            # float32: the entry arrays hold exactly nslots slots a segment (segment_entries' pad), so a chunk's
            # slots are all live (entries or padding) or, after the last chunk, all stale: one test a chunk
            elif gks * per_ks == nslots:                                 # (every share full: no slot past nslots)
                live = wl != U0
            else:
                live = (U(ks * per_ks + i) < U(nslots)) & (wl != U0)
            put(sh_a, live, base + offs[i], sink, vals[i], vals[nslots + i] if presplit else vals[i])
        for i in range(nslots - per_ks):
            offs[i] = offs[i + per_ks]
            vals[i] = vals[i + per_ks]
            if presplit:
                vals[nslots + i] = vals[nslots + i + per_ks]
    return write_front


@functools.cache
def _densify(plan: _Plan):
    """Step 1b, the densify step: the next A tile built from the staged entries, a thread a segment. The K
    loop spreads it out: ``stage_slots`` loads a chunk's slots into registers, ``zero_segment`` clears the
    segment, and the MMA step stores the slots between its K steps (:func:`_slot_front`); ``scatter`` does
    all three at once for the prologue's A tile 0."""
    bm, half, stages, presplit, tile_type = plan.bm, plan.half, plan.stages, plan.presplit, plan.tile_type
    vw, ew, sa, a_small, a_buf, e_buf, seg = plan.vw, plan.ew, plan.sa, plan.a_small, plan.a_buf, plan.e_buf, plan.seg
    nslots, zvec = plan.nslots, plan.zvec
    put = _slot_store(plan)

    @inlined
    def stage_slots(ch, h, arow, offs, vals, sh_ev, sh_eo):
        """Step 1b, loads: this thread's ``nslots`` staged slots of chunk ``ch`` (its segment ``h`` of
        row ``arow``) into registers, all before any store (a store may alias later loads: each slot
        read after the previous store would cost a shared-memory round trip)."""
        e0 = (ch % U(stages)) * U(e_buf) + h * U(seg * bm) + arow
        for i in range(nslots):
            x = e0 + U(i * bm)
            offs[i] = U(sh_eo[x])
            if presplit:                                                 # big, small: vals[i], vals[nslots + i]
                pair = load2(sh_ev, U(2) * x)                            # (one 8-byte load)
                vals[i] = pair[0]
                vals[nslots + i] = pair[1]
            else:
                vals[i] = sh_ev[x]

    @inlined
    def zero_segment(base, sh_a):
        """Step 1b: zero this thread's segment of an A buffer (float32: of both its tiles; 16-byte
        stores where they fit)."""
        zero = tile_type(0.0)                                            # (built here: a global tuple of
        for e in range(ew):                                              # float16 constants is invalid NVVM IR)
            if zvec:
                for z in range(seg // vw):
                    if half:
                        store8(sh_a, base + U(z * vw), (zero, zero, zero, zero, zero, zero, zero, zero))
                    else:
                        store4(sh_a, base + U(e * a_small + z * vw), (zero, zero, zero, zero))
            else:
                for z in range(seg):
                    sh_a[base + U(e * a_small + z)] = zero

    @inlined
    def write_slots(base, sink, wl, offs, vals, sh_a):
        """Step 1b, stores: slot ``i`` to its column of the segment at ``base``, or to this thread's
        ``sink`` element where ``i >= wl`` (past the matrix's ``w``: stale stage contents). Branch-free.
        In order, so padding (value 0 at offset 0, the first ``w - cnt`` slots) never overwrites an entry.
        (Float32 lean: every slot, the entry arrays holding ``nslots`` a segment; used for chunk 0 only.)"""
        for i in range(nslots):
            put(sh_a, U(i) < wl if half else True, base + offs[i], sink, vals[i],
                vals[nslots + i] if presplit else vals[i])

    @inlined
    def scatter(ch, abuf, t, arow, h, w, offs, vals, sh_ev, sh_eo, sh_a):
        """Step 1b in one go (the prologue's A tile 0): stage, zero, write. One thread per segment:
        program order, no barrier between the three."""
        base = abuf * U(a_buf) + arow * U(sa) + h * U(seg)
        stage_slots(ch, h, arow, offs, vals, sh_ev, sh_eo)
        zero_segment(base, sh_a)
        write_slots(base, U(2 * a_buf) + t, w, offs, vals, sh_a)
    return stage_slots, zero_segment, scatter


@functools.cache
def _mma_f16(plan: _Plan):
    """Step 3 for float16 and bfloat16, the MMA step: ``mma_f16``, with the densify step's stores between
    its K steps."""
    kgroups, mtiles, ntiles, mma16, sa, sbn = plan.kgroups, plan.mtiles, plan.ntiles, plan.mma16, plan.sa, plan.sbn
    gks = plan.gks
    write_front = _slot_front(plan)

    @inlined
    def mma_f16(sh_a, sh_b, ab, bb, wm0, wn0, wk0, lane, acc, afr, bfr, nbase, sink, wl, offs, vals):
        """Step 3 (float16; bfloat16 through ``mma16``, the bf16 MMA): the warp's MMAs over one A tile and
        B stage, 16 columns of K at a time (its group's K steps: columns ``wk0 + 16 * kgroups * i``,
        ``wk0 = 16 * group``);
        A fragments by 32-bit shared reads, B fragments (two n-tiles at once) by ldmatrix.trans. After
        each K step's MMAs, that step's share of the next A tile's stores (step 1b, :func:`write_slots`
        into the segment at ``nbase``): the shared-memory stores overlap the tensor-core work."""
        g = lane // U(4)
        tq = lane % U(4)
        arow0 = ab + (wm0 + g) * U(sa) + U(2) * tq + wk0                 # A[g, 2tq] of the warp's first tile
        brow0 = bb + (lane % U16 + wk0) * U(sbn) + wn0 + (lane // U16) * U(8)   # lane l: row l%16, n-tile l//16
        for i in range(gks):
            ks = i * kgroups                                             # (relative to wk0)
            for mt in range(mtiles):                                     # A[r, 2tq..], A[r+8, ..], +8 cols
                o = arow0 + U(mt * 16 * sa + ks * 16)
                afr[mt, 0] = load_b32(sh_a, o)
                afr[mt, 1] = load_b32(sh_a, o + U(8 * sa))
                afr[mt, 2] = load_b32(sh_a, o + U(8))
                afr[mt, 3] = load_b32(sh_a, o + U(8 * sa + 8))
            for nt in range(0, ntiles, 2):                               # rows ks*16 + l%16 of B,
                r = ldmatrix_x4_trans(sh_b, brow0 + U(ks * 16 * sbn + nt * 8))   # n-tile nt + l//16
                bfr[nt, 0] = r[0]
                bfr[nt, 1] = r[1]
                bfr[nt + 1, 0] = r[2]
                bfr[nt + 1, 1] = r[3]
            for mt in range(mtiles):
                for nt in range(ntiles):
                    d = mma16(afr[mt, 0], afr[mt, 1], afr[mt, 2], afr[mt, 3], bfr[nt, 0], bfr[nt, 1],
                              acc[mt, nt, 0], acc[mt, nt, 1], acc[mt, nt, 2], acc[mt, nt, 3])
                    acc[mt, nt, 0] = d[0]
                    acc[mt, nt, 1] = d[1]
                    acc[mt, nt, 2] = d[2]
                    acc[mt, nt, 3] = d[3]
            write_front(i, nbase, sink, wl, offs, vals, sh_a)
    return mma_f16


@functools.cache
def _mma_tf32(plan: _Plan):
    """Step 3 for float32, the 3xTF32 MMA step: ``mma_tf32`` (B fragments split by ``split``), with the
    densify step's stores between its K steps."""
    kgroups, exact_a, mtiles, ntiles = plan.kgroups, plan.exact_a, plan.mtiles, plan.ntiles
    sa, a_small, sbn, gks = plan.sa, plan.a_small, plan.sbn, plan.gks
    write_front = _slot_front(plan)

    @inlined
    def split(x, big, small, i, j):
        """3xTF32 of a B fragment value: ``big[i, j] = tf32(x)``, ``small[i, j] = tf32(x - big)`` (exact difference)."""
        hi = to_tf32_finite(x)                                         # (small is NaN for Inf/NaN x)
        big[i, j] = hi
        small[i, j] = to_tf32(x - hi)

    @inlined
    def mma_tf32(sh_a, sh_b, ab, bb, wn0, wk0, g, tq, acc, afr, afs, bfr, bfs, nbase, sink, wl, offs, vals, ash):
        """Step 3 (float32): 3xTF32 MMAs over one buffer, 8 columns of K at a time (the group's K steps,
        as :func:`mma_f16`; ``wk0 = 8 * group``), each K step followed
        by its share of the next A tile's stores (as :func:`mma_f16`). A fragments come split (the
        scatter's big and small tiles, read as they are by ldmatrix, lane ``l`` at ``ash``, the byte address
        of A[l%8 + 8 (l//8 % 2), 4 (l//16)] of the warp's first tile in A buffer 0); B fragments are split
        here."""
        brow0 = bb + (tq + wk0) * U(sbn) + wn0 + g                       # B[tq, g] of its first n-tile
        for i in range(gks):
            ks = i * kgroups                                             # (relative to wk0)
            for mt in range(mtiles):                                     # A[r, tq], A[r+8, tq], +4 cols
                o = ash + (ab + U(mt * 16 * sa + ks * 8)) * U(4)         # (ash: this lane's ldmatrix row)
                r = ldmatrix_x4(sh_a, o)
                for x in range(4):
                    afr[mt, x] = r[x]
                if not exact_a:                                          # (exact_a: the small tile is unread)
                    q = ldmatrix_x4(sh_a, o + U(a_small * 4))
                    for x in range(4):
                        afs[mt, x] = q[x]
            for nt in range(ntiles):                                     # B[tq, col], B[tq+4, col]
                o = brow0 + U(ks * 8 * sbn + nt * 8)
                split(sh_b[o], bfr, bfs, nt, 0)
                split(sh_b[o + U(4 * sbn)], bfr, bfs, nt, 1)
            for mt in range(mtiles):
                for nt in range(ntiles):
                    # small terms first, then big x big (the largest last: less float32 rounding)
                    d = (acc[mt, nt, 0], acc[mt, nt, 1], acc[mt, nt, 2], acc[mt, nt, 3])
                    if not exact_a:                                      # (a TF32-exact A: a_small is all 0)
                        d = mma_m16n8k8_tf32_f32(afs[mt, 0], afs[mt, 1], afs[mt, 2], afs[mt, 3],
                                                 bfr[nt, 0], bfr[nt, 1], d[0], d[1], d[2], d[3])
                    d = mma_m16n8k8_tf32_f32(afr[mt, 0], afr[mt, 1], afr[mt, 2], afr[mt, 3],
                                             bfs[nt, 0], bfs[nt, 1], d[0], d[1], d[2], d[3])
                    d = mma_m16n8k8_tf32_f32(afr[mt, 0], afr[mt, 1], afr[mt, 2], afr[mt, 3],
                                             bfr[nt, 0], bfr[nt, 1], d[0], d[1], d[2], d[3])
                    acc[mt, nt, 0] = d[0]
                    acc[mt, nt, 1] = d[1]
                    acc[mt, nt, 2] = d[2]
                    acc[mt, nt, 3] = d[3]
            write_front(i, nbase, sink, wl, offs, vals, sh_a)
    return mma_tf32


@functools.cache
def _fragment_store(mtiles: int, ntiles: int, to_bf16: bool):
    """The epilogue's store of a warp's ``mtiles x ntiles`` fragments into a 2-D array: ``to_bf16`` for a
    bfloat16 ``C`` (uint16 bits), else for an array of a dtype the float32 sums are cast to (float32 partials,
    a float16 or float32 ``C``)."""

    @inlined
    def store(out, frag, r0, c0, um, un):
        """A warp's C fragments ``frag[mt, nt, 0..3]`` into the 2-D ``out`` (``um x un`` valid): this
        lane's elements are rows ``r0 + 16 mt + {0, 8}`` (fragment rows g and g+8), columns
        ``c0 + 8 nt + {0, 1}`` (2tq and 2tq+1), rounded to ``out``'s dtype (``to_bf16``: both columns
        rounded to bfloat16, nearest even, by one ``cvt.rn.bf16x2.f32``, stored as two 16-bit halves)."""
        for mt in range(mtiles):
            for nt in range(ntiles):
                col = c0 + U(nt * 8)
                for hh in range(2):
                    rr = r0 + U(mt * 16 + 8 * hh)
                    if rr < um:
                        if to_bf16:
                            pair = pack_bf16x2(frag[mt, nt, 2 * hh], frag[mt, nt, 2 * hh + 1])
                            if col < un:
                                out[rr, col] = uint16(pair & np.uint32(0xFFFF))
                            if col + U(1) < un:
                                out[rr, col + U(1)] = uint16(pair >> np.uint32(16))
                        else:
                            if col < un:
                                out[rr, col] = frag[mt, nt, 2 * hh]
                            if col + U(1) < un:
                                out[rr, col + U(1)] = frag[mt, nt, 2 * hh + 1]
    return store


@functools.cache
def _split_finish(plan: _Plan):
    """The epilogue of a K split: ``finish_split``, the hand-over of the blocks' float32 partials to the
    tile's last block, which sums them (``add_fragments``) and stores ``C``."""
    bf16, mtiles, ntiles, frag_row = plan.bf16, plan.mtiles, plan.ntiles, plan.frag_row
    store_fragments = _fragment_store(mtiles, ntiles, False)  # float32 partials
    store_c = _fragment_store(mtiles, ntiles, bf16)

    @inlined
    def add_fragments(frag, parts, q, r0, c0, um, un, row):
        """``frag += parts[q]`` at this lane's fragment positions of the float32 partials ``parts`` (``um x
        un`` valid, the positions of :func:`store_fragments`). Every load is unconditional, from the position
        clamped into the valid ``um x un`` (a position outside it adds a value that is never stored): loads
        behind per-element bounds branches each waited for the one before (H100 Nsight Compute: the one-wave
        float32 setting's split sum, 128 serial L2 round trips per partial, made a 2-split launch slower than
        the unsplit one). A fragment row's loads go to ``row`` (``2 ntiles`` floats) before its adds: with each
        add beside its load, float16 :data:`sparsekit.tune.TC_LARGE`'s split build spilled (72 bytes, sm_90)."""
        for mt in range(mtiles):
            for hh in range(2):
                rr = min(r0 + U(mt * 16 + 8 * hh), um - U(1))
                for nt in range(ntiles):
                    col = c0 + U(nt * 8)
                    row[2 * nt] = parts[q, rr, min(col, un - U(1))]
                    row[2 * nt + 1] = parts[q, rr, min(col + U(1), un - U(1))]
                for nt in range(ntiles):
                    frag[mt, nt, 2 * hh] += row[2 * nt]
                    frag[mt, nt, 2 * hh + 1] += row[2 * nt + 1]

    @inlined
    def finish_split(c, part, ticket, acc, r0, c0, um, un, nsplit, sh_flag, lead):
        """The end of a K split: this block's fragments (rows ``r0 + 16 mt + {0, 8}``, columns
        ``c0 + 8 nt + {0, 1}``) to ``part[z]``; the ticket of :func:`sparsekit.gpu.uspmm.split_ticket`; the
        block drawing the last one sums ``part[0] + part[1] + ... + part[nsplit-1]`` in that order for
        its own fragment positions, rounds once to ``C``'s dtype and writes ``C``. The order does not
        depend on which block is last: repeats are bit-identical.

        The sum runs in ``acc``'s registers, its own partial read back from ``part[z]`` (stored by this
        thread just before): a second fragment array beside ``acc`` made the one-wave float32 setting
        (64 x 64 warp tiles, :data:`sparsekit.tune.TC_ONE_WAVE`) spill with a split (sm_90: 255 registers,
        348 bytes of spill stores; ``tests/compile/test_uspmm_tc_compile.py``).

        As :func:`sparsekit.gpu.uspmm.split_sum`, but each thread sums its own fragment elements, each partial's
        ``mtiles x ntiles x 4`` loads issued together (:func:`add_fragments`): split_sum walks the tile
        element by element and its loads wait on each other (H100, 03:25
        UTC: 1024 x 1024 x 128 float16 took 37.1 us with 2 splits and 71.2 us with 16, against
        28.3 us unsplit). ``sh_flag``: a shared byte for the block's "last" flag. ``lead``: this
        thread holds the block's sums (K group 0, :func:`reduce_groups`): the others only take part in
        the ticket's barriers."""
        zs = U(cuda.blockIdx.z)
        if lead:
            store_fragments(part[zs], acc, r0, c0, um, un)
        if split_ticket(ticket, nsplit, cuda.blockIdx.x * cuda.gridDim.y + cuda.blockIdx.y, sh_flag) and lead:
            for mt in range(mtiles):
                for nt in range(ntiles):
                    for x in range(4):
                        acc[mt, nt, x] = 0.0
            row = cuda.local.array(frag_row, float32)
            for q in range(nsplit):
                add_fragments(acc, part, U(q), r0, c0, um, un, row)
            store_c(c, acc, r0, c0, um, un)
    return finish_split


@functools.cache
def _group_reduce(plan: _Plan):
    """Step 6, the K groups' sums: ``reduce_groups``."""
    bm, bn, kgroups, gthreads, mtiles = plan.bm, plan.bn, plan.kgroups, plan.gthreads, plan.mtiles
    ntiles = plan.ntiles

    @inlined
    def reduce_groups(acc, grp, tl, red):
        """Step 6, after the K loop's last barrier (no copy in flight, every A tile and stage read):
        the K groups' float32 sums into group 0's registers, in a fixed order, ``acc = ((acc_0 +
        acc_1) + acc_2) + ...`` (repeats bit-identical). Thread ``tl`` of every group holds the same
        fragment positions, so groups ``1 ..`` write their ``acc`` to ``red`` (the dynamic buffer,
        ``bm * bn`` floats a group; element ``e`` of thread ``tl`` at ``e * gthreads + tl``:
        consecutive lanes, consecutive words) and, after a barrier, group 0 reads them in that layout."""
        if grp != U0:
            base = (grp - U(1)) * U(bm * bn) + tl
            for mt in range(mtiles):
                for nt in range(ntiles):
                    for x in range(4):
                        red[base + U(((mt * ntiles + nt) * 4 + x) * gthreads)] = acc[mt, nt, x]
        cuda.syncthreads()
        if grp == U0:
            for q in range(kgroups - 1):
                for mt in range(mtiles):
                    for nt in range(ntiles):
                        for x in range(4):
                            acc[mt, nt, x] += red[tl + U(q * bm * bn + ((mt * ntiles + nt) * 4 + x) * gthreads)]
    return reduce_groups


@functools.cache
def _tc_kernel(bm: int, bn: int, kc: int, warps_m: int, warps_n: int, half: bool, min_blocks: int = 1,
               stages: int = 3, dynamic: bool = False, slots: int = 0, vec: bool = True, ksplit: bool = False,
               kgroups: int = 1, presplit: bool = False, exact_a: bool = False, bf16: bool = False):
    """The tensor-core kernel for one tunable setting (the launcher has checked it): its geometry
    (:func:`_plan`), then a body that runs the phases in order, each a device function of a factory cached
    per setting (:func:`_entry_copy`, :func:`_densify`, :func:`_b_copy`, :func:`_mma_f16` or :func:`_mma_tf32`,
    :func:`_group_reduce`, :func:`_split_finish` or :func:`_fragment_store`).

    ``bf16`` (with ``half``): bfloat16 values as uint16 bits in every array but the float32 partials, the bf16
    MMA in place of the float16 one, and ``C`` rounded to nearest even by :func:`sparsekit.gpu.mma.pack_bf16x2`; the rest is
    the float16 kernel.

    ``exact_a`` (float32): A's values are TF32 numbers (:func:`tf32_exact`), so the ``a_small b_big`` MMA, whose
    products are all zero, is not issued: two MMAs a tile and K step instead of three, the same sums.

    ``dynamic``: the shared buffers are carved from dynamic shared memory (launch with
    :func:`shared_bytes` of it; above 48 KB the launcher opts the kernel in first), else static.
    Lean (module docstring, "Lean"): the cp.async copies on byte addresses taken once per thread
    (:func:`sparsekit.gpu.mma.shared_addr`, :func:`sparsekit.gpu.mma.global_addr`), float32 A fragments by
    ``ldmatrix`` (:func:`sparsekit.gpu.mma.ldmatrix_x4`), the big parts of the 3xTF32 splits by
    :func:`sparsekit.gpu.mma.to_tf32_finite`. Float32 stores every staged slot (no sink): it needs the entry
    arrays of :func:`segment_entries` with ``pad`` (``w`` equal to ``slots``), as the launcher builds them.
    ``presplit`` (float32): A's values arrive split (:func:`segment_entries` with ``split``): the
    entry stages hold big and small side by side and the scatter only moves them (no conversion).
    ``slots``: staged slots each thread scatters per chunk (:func:`scatter_slots`, at least the
    ``w`` of the launch; 0: all ``seg``). ``vec``: rows of ``b`` start on 16-byte boundaries, so B
    moves by 16-byte cp.async (else element by element; a separate kernel, so the common one carries
    no code for it). ``ksplit``: a K split (a separate kernel too, launched with ``nsplit > 1``):
    block ``(x, y, z)`` multiplies only the ``z``-th of ``nsplit`` runs of K chunks
    (:func:`sparsekit.gpu.uspmm._split_range`: chunks ``q0 .. q1-1``; the block's views of ``b`` and the entry
    arrays start at chunk ``q0``, so the copies address the absolute chunk ``q0 + j`` while the
    pipeline's stages follow the relative one ``j``), writes its float32 fragments to ``part[z]``;
    the tile's last block sums the partials in a fixed order (``finish_split``, rounded once to
    ``C``'s dtype). ``kgroups``: K groups of ``warps_m x warps_n`` warps (module docstring, step 6;
    needs ``dynamic``: their sums pass through the dynamic buffer); 1 compiles the kernel without them.

    Arguments, grouped: arrays ``ev``, ``eo`` (:func:`segment_entries` for ``seg``, flattened; float32:
    with ``pad``, and ``split`` where ``presplit``),
    ``b`` (flat ``K*N``, row-major), ``c`` (``M x N``, out), ``part`` (``nsplit x M x N``
    float32), ``ticket`` (one int32 per output tile; both 1-element stand-ins without a split);
    sizes ``m``, ``n``, ``k``, ``w`` (slots per segment), ``nsub`` (segments), ``mp`` (rows of the
    entry arrays), ``nsplit`` (blocks per output tile along K).

    Index arithmetic is unsigned (``U``, with unsigned constants): Numba wraps a negative signed
    index around the array's length, which costs 64-bit compare/select sequences per access
    (``experiments/results/uspmm_tc.md``, the post-LTO PTX reading); unsigned ones cannot be negative.
    """
    if kgroups > 1 and not dynamic:
        raise ValueError("kgroups: the groups' sums go through the dynamic shared buffer (build with dynamic=True)")
    plan = _plan(bm, bn, kc, warps_m, warps_n, half, stages, slots, vec, kgroups, presplit, exact_a, bf16)
    nwg, nthreads, gthreads, wtm, wtn = plan.nwg, plan.nthreads, plan.gthreads, plan.wtm, plan.wtn
    mtiles, ntiles, tile_type, vw, sa, a_buf = plan.mtiles, plan.ntiles, plan.tile_type, plan.vw, plan.sa, plan.a_buf
    a_all, sbn, b_buf, all_b, all_e, er = plan.a_all, plan.sbn, plan.b_buf, plan.all_b, plan.all_e, plan.er
    all_ev, eo_byte, pend, tpr, seg, nslots = plan.all_ev, plan.eo_byte, plan.pend, plan.tpr, plan.seg, plan.nslots
    nvals, kstep, per_row, vpr, opr = plan.nvals, plan.kstep, plan.per_row, plan.vpr, plan.opr
    b_addresses, entry_addresses = plan.b_addresses, plan.entry_addresses
    # the phases, as device functions (steps of the module docstring)
    entry_bases, issue_e = _entry_copy(plan)                             # 1a. entries into their stages
    stage_slots, zero_segment, scatter = _densify(plan)                  # 1b. the next A tile, densified
    issue_b = _b_copy(plan)                                              # 2. B into its stages
    mma_f16, mma_tf32 = _mma_f16(plan), _mma_tf32(plan)                  # 3. the MMAs (with 1b's stores)
    reduce_groups = _group_reduce(plan)                                  # 6. the K groups' sums
    finish_split = _split_finish(plan)                                   # epilogue: a K split's hand-over,
    store_c = _fragment_store(mtiles, ntiles, bf16)                      # or C's store

    @cuda.jit
    def kernel(ev, eo, b, c, part, ticket, m, n, k, w, nsub, mp, nsplit):
        # Geometry: this thread's lane and warp, its K group (6), the warp's sub-tile of C (3), the
        # block's tile and, with a K split, its run of K chunks.
        t = U(cuda.threadIdx.x)
        lane = t % U(WARP_SIZE)
        warp = t // U(WARP_SIZE)
        g = lane // U(4)                                                 # fragment groupID
        tq = lane % U(4)                                                 # threadID_in_group
        if kgroups > 1:                                                  # K group grp: warps grp*nwg ..,
            grp = warp // U(nwg)                                         # the chunks' K steps grp,
            wi = warp % U(nwg)                                           # grp + kgroups, ...
        else:
            grp = U0
            wi = warp
        wm0 = (wi // U(warps_n)) * U(wtm)                                # the warp's sub-tile, in the block
        wn0 = (wi % U(warps_n)) * U(wtn)
        wk0 = grp * U(kstep)                                             # and its first K step's column
        row0 = U(cuda.blockIdx.x) * U(bm)
        col0 = U(cuda.blockIdx.y) * U(bn)
        um, un, uk, uw, unsub, ump = U(m), U(n), U(k), U(w), U(nsub), U(mp)
        uwmp = uw * ump
        if ksplit:                                                       # this block's run of K chunks,
            q0, q1 = split_range((k + kc - 1) // kc, cuda.blockIdx.z, nsplit)
            nchunks = q1 - q0                                            # chunk j of the loop is q0 + j:
            b = b[q0 * kc * n:]                                          # B, K and the entries from chunk
            uk = uk - U(q0 * kc)                                         # q0 on (views: the K loop's code
            ev = ev[q0 * tpr * w * mp * er:]                             # is the unsplit one)
            eo = eo[q0 * tpr * w * mp:]
            unsub = unsub - U(q0 * tpr)
        else:
            nchunks = (k + kc - 1) // kc
        # Shared buffers (5): two A tiles and the sink, the B stages, the entry stages (values, offsets).
        if dynamic:                                                      # one dynamic buffer, carved:
            dyn = cuda.shared.array(0, tile_type, alignment=SMEM_ALIGN)  # [A tiles, sink | B | entry values |
            dyn8 = cuda.shared.array(0, uint8, alignment=SMEM_ALIGN)     #  entry offsets] (16-byte aligned)
            if kgroups > 1:                                              # after the K loop: the groups'
                red = cuda.shared.array(0, float32, alignment=SMEM_ALIGN)   # sums, over all of it
            sh_a = dyn[:a_all]
            sh_b = dyn[a_all:a_all + all_b]
            sh_ev = dyn[a_all + all_b:a_all + all_b + all_ev]
            sh_eo = dyn8[eo_byte:eo_byte + all_e]
        else:
            sh_a = cuda.shared.array(a_all, tile_type, alignment=SMEM_ALIGN)        # 2 dense A tiles, sink
            sh_b = cuda.shared.array(all_b, tile_type, alignment=SMEM_ALIGN)        # `stages` B tiles
            sh_ev = cuda.shared.array(all_ev, tile_type, alignment=SMEM_ALIGN)      # `stages` entry stages:
            sh_eo = cuda.shared.array(all_e, np.uint8, alignment=SMEM_ALIGN)        # values, offsets
        # lean: this thread's copy addresses (1a, 2) and ldmatrix row (3), taken once before the K loop
        if b_addresses:                                                  # this thread's copy addresses
            br0 = t // U(per_row)                                        # (lean): B row and column of its
            bcc = (t % U(per_row)) * U(vw)                               # first piece
            lb = (br0, col0 + bcc < un, shared_addr(sh_b, br0 * U(sbn) + bcc),
                  global_addr(b, br0 * un + col0 + bcc), global_addr(b, U0))
        else:
            lb = (U0, False, np.uint32(0), U0, U0)
        if not half:                                                     # ldmatrix row of lane l (step 3)
            ash = shared_addr(sh_a, (wm0 + lane % U(8) + U(8) * (lane // U(8) % U(2))) * U(sa) + U(4) * (lane // U16)
                              + wk0)
        else:
            ash = np.uint32(0)
        if entry_addresses:
            le = (entry_bases(t, vpr, vw, U(er * bm), U(er) * row0, uw, U(er) * ump, U(er) * uwmp, sh_ev, ev),
                  entry_bases(t, opr, 16, U(bm), row0, uw, ump, uwmp, sh_eo, eo),
                  global_addr(ev, U0), global_addr(eo, U0))
        else:
            le = ((U0, False, np.uint32(0), U0), (U0, False, np.uint32(0), U0), U0, U0)
        # Registers: the A segment this thread densifies (1), the warp's fragments (3), the staged slots (1b).
        arow = t % U(bm)                                                 # this thread's A segment: row arow,
        h = t // U(bm)                                                   # columns h*seg .. (h+1)*seg
        sink = U(2 * a_buf) + t                                          # where slots past w are written
        acc = cuda.local.array((mtiles, ntiles, 4), float32)             # the warp's C fragments
        offs = cuda.local.array(nslots, U)                               # staged slots of the next A tile
        vals = cuda.local.array(nvals, tile_type)
        if half:
            afr = cuda.local.array((mtiles, 4), np.uint32)
            bfr = cuda.local.array((ntiles, 2), np.uint32)
        else:
            afr = cuda.local.array((mtiles, 4), float32)
            afs = cuda.local.array((mtiles, 4), float32)
            bfr = cuda.local.array((ntiles, 2), float32)
            bfs = cuda.local.array((ntiles, 2), float32)
        for mt in range(mtiles):
            for nt in range(ntiles):
                for x in range(4):
                    acc[mt, nt, x] = 0.0
        # Prologue: copy groups {B0, E0, E1}, {B1, E2}, ..., {B(S-2), E(S-1)} in flight, wait for the
        # first, build A tile 0.
        issue_b(U0, t, b, un, uk, col0, sh_b, lb)
        issue_e(U0, t, ev, eo, row0, uw, uwmp, unsub, ump, sh_ev, sh_eo, le)
        if 1 < nchunks:
            issue_e(U(1), t, ev, eo, row0, uw, uwmp, unsub, ump, sh_ev, sh_eo, le)
        cp_async_commit()
        if 1 < stages - 1:
            if 1 < nchunks:
                issue_b(U(1), t, b, un, uk, col0, sh_b, lb)
            if 2 < nchunks:
                issue_e(U(2), t, ev, eo, row0, uw, uwmp, unsub, ump, sh_ev, sh_eo, le)
            cp_async_commit()
        for i in range(2, stages - 1):                                  # (none for the default 3 stages)
            if i < nchunks:
                issue_b(U(i), t, b, un, uk, col0, sh_b, lb)
            if i + 1 < nchunks:
                issue_e(U(i + 1), t, ev, eo, row0, uw, uwmp, unsub, ump, sh_ev, sh_eo, le)
            cp_async_commit()
        cp_async_wait(pend)
        cuda.syncthreads()
        scatter(U0, U0, t, arow, h, uw, offs, vals, sh_ev, sh_eo, sh_a)
        cuda.syncthreads()
        for j in range(nchunks):
            uj = U(j)
            p = uj % U(2)
            # 1b (loads). The staged slots of chunk j+1 (landed before the previous barrier) into
            # registers; after the last chunk they are stale and all go to the sink (wl = 0).
            wl = uw if j + 1 < nchunks else U0
            stage_slots(uj + U(1), h, arow, offs, vals, sh_ev, sh_eo)
            # 4. copies of B(j+S-1) and E(j+S) in flight (their stages were last read before the previous
            # barrier)
            if j + stages - 1 < nchunks:
                issue_b(uj + U(stages - 1), t, b, un, uk, col0, sh_b, lb)
            if j + stages < nchunks:
                issue_e(uj + U(stages), t, ev, eo, row0, uw, uwmp, unsub, ump, sh_ev, sh_eo, le)
            cp_async_commit()
            # 1b (zero). This thread's segment of the other A tile (read last before the previous barrier)
            nbase = (U(1) - p) * U(a_buf) + arow * U(sa) + h * U(seg)
            zero_segment(nbase, sh_a)
            # 3. the MMAs of chunk j, with the stores of 1b (A tile of chunk j+1) between their K steps
            if half:
                mma_f16(sh_a, sh_b, p * U(a_buf), (uj % U(stages)) * U(b_buf), wm0, wn0, wk0, lane, acc, afr, bfr,
                        nbase, sink, wl, offs, vals)
            else:
                mma_tf32(sh_a, sh_b, p * U(a_buf), (uj % U(stages)) * U(b_buf), wn0, wk0, g, tq, acc, afr, afs,
                         bfr, bfs, nbase, sink, wl, offs, vals, ash)
            # every copy group but the newest S-2 done: B(j+1) and E(j+2) are in place for the next step
            cp_async_wait(pend)
            cuda.syncthreads()
        # Epilogue. 6. the K groups' sums into group 0 (fixed order), which stores them: with a K split,
        # through the partials and the tile's ticket to the last block (rounded once), else into C
        if kgroups > 1:
            reduce_groups(acc, grp, t % U(gthreads), red)
        lead = grp == U0
        if ksplit:
            finish_split(c, part, ticket, acc, row0 + wm0 + g, col0 + wn0 + U(2) * tq, um, un, nsplit, sh_eo, lead)
        elif lead:
            store_c(c, acc, row0 + wm0 + g, col0 + wn0 + U(2) * tq, um, un)

    if cuda_config.ENABLE_CUDASIM:                                       # (the simulator has no launch bounds)
        return kernel
    return cuda.jit(launch_bounds=(nthreads, min_blocks))(kernel.py_func)


def _check_tunables(half: bool, bm, bn, kc, warps_m, warps_n, min_blocks, stages=3, splits=1, kgroups=1):
    """The tunables as ints, or a ValueError naming the one that does not fit."""
    bm = check_int(bm, "bm", minimum=16)
    bn = check_int(bn, "bn", minimum=8)
    kc = check_int(kc, "kc", minimum=8)
    warps_m = check_int(warps_m, "warps_m", minimum=1, maximum=32)
    warps_n = check_int(warps_n, "warps_n", minimum=1, maximum=32)
    min_blocks = check_int(min_blocks, "min_blocks", minimum=1, maximum=32)
    stages = check_int(stages, "stages", minimum=2, maximum=8)
    splits = check_int(splits, "splits", minimum=1, maximum=65535)
    kgroups = check_int(kgroups, "kgroups", minimum=1, maximum=32)
    nthreads = WARP_SIZE * warps_m * warps_n * kgroups
    kstep = 16 if half else 8
    if nthreads > 1024:
        raise ValueError(f"warps_m, warps_n, kgroups: a block of 32 * {warps_m} * {warps_n} * {kgroups} = {nthreads} "
                         f"threads exceeds 1024")
    nwide = 16 if half else 8                         # 16-bit B fragments are read two n-tiles at once
    if bm % (16 * warps_m) or bn % (nwide * warps_n):
        raise ValueError(f"bm, bn: each warp's sub-tile (bm/warps_m x bn/warps_n = {bm}/{warps_m} x {bn}/{warps_n}) "
                         f"must be whole 16 x {nwide} tiles")
    if kc % kstep:
        raise ValueError(f"kc: must be a multiple of the MMA's K ({kstep} for {'float16 and bfloat16' if half else 'float32'}), "
                         f"got {kc}")
    if kc % (kstep * kgroups):
        raise ValueError(f"kc, kgroups: the {kgroups} K groups share each chunk's MMA K steps ({kstep} columns each) "
                         f"evenly, so kc must be a multiple of {kstep} * {kgroups} = {kstep * kgroups}; got kc={kc}")
    if nthreads % bm or kc % (nthreads // bm):
        raise ValueError(f"bm, kc: the {nthreads} threads split the A tile into equal row segments: bm must divide "
                         f"{nthreads} and {nthreads}/bm must divide kc; got bm={bm}, kc={kc}")
    if kc * bm // nthreads > 32:
        raise ValueError(f"bm, kc: a thread's segment of kc * bm / {nthreads} = {kc * bm // nthreads} columns is more "
                         f"than the 32 staged slots a thread holds in registers")
    shared = shared_bytes(bm, bn, kc, half, stages, nthreads, kgroups)
    if shared > SHARED_OPTIN:
        raise ValueError(f"bm, bn, kc, stages, kgroups: two A tiles and {stages} stages of the B tile and the entries "
                         f"(or the K groups' sums) need {shared} bytes of shared memory, more than {SHARED_OPTIN}")
    return bm, bn, kc, warps_m, warps_n, min_blocks, stages, splits, kgroups


def _entry_linear(npt: int, per_slot: int, nthreads: int, seg: int) -> bool:
    """Whether a thread's 16-byte pieces of an entry stage (``npt`` of them, ``per_slot`` a slot) are one
    segment position in whole segments apart, so the lean copies take one address per thread."""
    return npt == 1 or (nthreads % per_slot == 0 and (nthreads // per_slot) % seg == 0)


def _presplit_fits(bm: int, bn: int, kc: int, stages: int, nthreads: int, kgroups: int, min_blocks: int) -> bool:
    """Whether float32 takes A's values split on the host (``presplit``): when ``min_blocks`` blocks
    with the larger entry stages still fit in one SM's shared memory (:data:`SM_SHARED`, 1 KB of it
    reserved per block), so the resident blocks the setting asks for stay (``TC_LARGE``, two blocks of
    64 x 256 an SM, would drop to one: it keeps the split in the kernel), and the value copies, twice as
    many pieces, keep their lean addressing (:func:`_entry_linear`; ``TC_LARGE``'s would not)."""
    need = shared_bytes(bm, bn, kc, False, stages, nthreads, kgroups, presplit=True)
    vpr = 2 * bm // 4                                                   # pieces of one slot's pairs
    linear = _entry_linear(cdiv(kc * vpr, nthreads), vpr, nthreads, kc * bm // nthreads)
    return linear and need <= SHARED_OPTIN and min_blocks * (need + 1024) <= SM_SHARED


def uspmm(ell, b, *, config=None, **tunables):
    """``C = A @ b`` on tensor cores for a uniform-sparse ``A`` (``ELL`` or
    :class:`sparsekit.gpu.uspmm.DeviceELL`, ``M x K``) and a dense C-ordered ``b`` (``K x N``,
    ``A``'s dtype: float32, float16 or bfloat16).

    Returns ``C`` (``M x N``, C-ordered, float32 accumulation rounded to ``b``'s
    dtype) in ``b``'s array kind (NumPy, Numba, CuPy, PyTorch). ``config`` is a
    dict of tunables (or None); keyword tunables override it; unset ones come from
    :data:`DEFAULTS` for the dtype (see the module docstring).
    """
    dell = prepare(ell)
    bop, order = rhs(b, dell, "b")
    return result(run(dell, bop, order, config=config, **tunables), like=bop)


def run(dell, bop, order: str, *, config=None, **tunables):
    """The launcher's work after validation: ``C`` as a device array for a prepared ``dell`` and
    ``b``'s Operand (``sparsekit.gpu.uspmm.uspmm`` calls this with the operand it already made, so a
    ``variant="tensor_core"`` call validates and copies ``b`` once)."""
    if order != "C":
        raise ValueError("b: the tensor-core kernel needs a C-ordered (row-major) b; "
                         "use sparsekit.gpu.uspmm.uspmm(variant='listing1') for the column-major layout of Eq. 2")
    half = dell.dtype in HALVES
    opts = dict(DEFAULTS[dell.dtype], **(config or {}), **tunables)
    unknown = set(opts) - set(DEFAULTS[dell.dtype])
    if unknown:
        raise ValueError(f"tunables: unknown {sorted(unknown)}; expected {sorted(DEFAULTS[dell.dtype])}")
    bm, bn, kc, warps_m, warps_n, min_blocks, stages, splits, kgroups = _check_tunables(bool(half), **opts)
    nthreads = WARP_SIZE * warps_m * warps_n * kgroups
    bdev = bop.dev
    m, n = dell.shape[0], bdev.shape[1]
    k = dell.shape[1]
    c = output((m, n), dell.dtype, like=bop, order="C")
    if m and n:
        seg = kc * bm // nthreads
        bw = 16 // dell.dtype.itemsize
        vec_ok = n % bw == 0 and aligned(bdev, bw)
        presplit = not half and _presplit_fits(bm, bn, kc, stages, nthreads, kgroups, min_blocks)
        shared = shared_bytes(bm, bn, kc, bool(half), stages, nthreads, kgroups, presplit)
        dynamic = shared > STATIC_LIMIT or kgroups > 1                  # (K groups sum through the dynamic buffer)
        ev, eo = segment_entries(dell, seg, pad=not half, split=presplit)
        nsub, w, mp = eo.shape
        grid, part, ticket, nsplit = split_buffers(dell, (cdiv(m, bm), cdiv(n, bn)), n, splits, cdiv(k, kc))
        kernel = _tc_kernel(bm, bn, kc, warps_m, warps_n, bool(half), min_blocks, stages, dynamic,
                            scatter_slots(seg, w), vec_ok, nsplit > 1, kgroups, presplit,
                            not half and tf32_exact(dell), dell.dtype == BFLOAT16)
        args = (flat_view(ev), flat_view(eo), flat_view(bdev), c, part, ticket, m, n, k, w, nsub, mp,
                nsplit)
        if dynamic:
            _opt_in(kernel, args, shared)
            kernel = _DynamicShared(kernel, shared)
        _launch(kernel, grid, nthreads, args, "bm, bn, warps_m, warps_n, kgroups")
    return c
