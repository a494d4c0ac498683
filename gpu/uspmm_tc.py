"""USpMM on tensor cores: ``C = A @ B`` with a uniform-sparse ``A`` in ELL format, densified tile by tile.

Equals :func:`reference.uspmm.uspmm` (same arguments and result contract as
:func:`gpu.uspmm.uspmm`, C-ordered ``b`` only): ``C`` is ``M x N`` in ``b``'s
dtype and array kind, accumulated in float32.

Why: the CUDA-core kernels of :mod:`gpu.uspmm` are capped by the FP32 pipes and
shared-memory bandwidth (``experiments/results/uspmm.md``: the best, "dense_tile",
89.5 us at 1024^3 60% float32, 14% of the speed of light). A tensor core does a
16x8x16 float16 (or 16x8x8 TF32) product per warp instruction. Uniform sparsity
leaves no all-zero 16x8 tile of ``A`` to skip at these densities, so this kernel
does what "dense_tile" does on CUDA cores: it multiplies the densified tile of
``A``, zeros included, and wins by doing that work on tensor cores
(:mod:`gpu.mma`, inline PTX ``mma.sync``).

Precision:

* float16: float16 products are exact, accumulated in float32 by the tensor
  core, rounded once to float16.
* float32: "3xTF32". TF32 keeps 10 mantissa bits, so each operand is split
  ``x = big + small`` with ``big = tf32(x)``, ``small = tf32(x - big)``
  (:func:`gpu.mma.to_tf32`), and ``C += a_small*b_big + a_big*b_small +
  a_big*b_big`` (three MMAs, products exact in the tensor core, sums float32).
  This is NOT float32 accuracy per product: two TF32 pieces hold 22 of float32's
  24 bits, so the dropped ``a_small*b_small`` and the roundings of the small
  pieces leave up to ``3 * 2**-22 * (1 + 2**-10) |a||b|`` (about 12 float32 unit
  roundoffs ``u``; measured on 10^6 random products: 7.5 u at most, 0.84 u on
  average, against 1 u for a float32 product), and each product enters the
  accumulator in three additions. :func:`error_reduction` turns that into the
  reduction length of the float32-accumulation bound of the existing tests.

Algorithm (one block per ``bm x bn`` tile of ``C``; warps ``warps_m x warps_n``,
each owning a ``bm/warps_m x bn/warps_n`` sub-tile as 16x8 MMA tiles):

1. per K chunk of ``kc`` columns, every thread owns a segment of one row of the
   A tile (``seg = kc * bm / nthreads`` columns; lane ``l`` of a warp owns row
   ``l`` of 32 consecutive rows): it reads that row's ELL entries whose column
   falls in the segment, then zeroes its segment of the shared A tile and
   scatters the entries into it. One thread per segment, so zeroing and
   scattering need no barrier between them. The entries come from
   :func:`segment_entries`, the ELL regrouped per segment of ``seg`` columns and
   padded to the fullest segment's count ``w`` (a derived array kept on the
   :class:`~gpu.uspmm.DeviceELL`): stored ``[segment, slot, row]``, so a warp's
   read of slot ``i`` is 32 consecutive rows, one coalesced load, and every
   thread reads ``w`` slots (a row-major ELL read row by row is 32 scattered
   reads per warp load);
2. the ``kc x bn`` tile of ``B`` goes to shared memory as the fragments want
   it: float16 as pairs of rows interleaved (the two halves of a ``b0``/``b1``
   register are adjacent, one 32-bit read); float32 row-major. Rows are padded
   (A by 16 bytes, B by 32 bytes) so each warp's fragment reads hit 32
   different banks;
3. each warp loads its A and B fragments with 32-bit shared reads
   (:func:`gpu.mma.load_b32`) and runs its MMAs;
4. two shared buffers: chunk ``j + 1``'s global loads (entries, B) are in
   flight in registers while the warps multiply chunk ``j``, then written to
   the other buffer; one barrier per chunk (the scheme of
   :func:`gpu.uspmm._dense_tile_kernel`).

``0 * inf`` is NaN: with non-finite values in ``B`` the result differs from the
sparse kernels' where a row of ``A`` does not use them (as for "dense_tile").

Tunables: ``bm``, ``bn`` (block tile), ``kc`` (K chunk: multiple of 16 for
float16, 8 for float32), ``warps_m``, ``warps_n``, ``min_blocks`` (resident
blocks per SM the registers are capped for). :data:`DEFAULTS` per dtype.
"""
from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32
from numba.core.types import float16
from numba.cuda import config as cuda_config

from gpu.mma import load_b32, mma_m16n8k8_tf32_f32, mma_m16n8k16_f16_f32, to_tf32
from gpu.uspmm import SHARED_LIMIT, SMEM_ALIGN, WARP_SIZE, _b_tile_stager, _launch, _rhs, prepare
from gpu.vector_loads import aligned, load8, store4, store8
from sparsekit.arrays import cdiv, output, result
from sparsekit.checks import check_int

__all__ = ["uspmm", "DEFAULTS", "shared_bytes", "segment_entries", "error_reduction", "SPLIT_ERROR_U"]

#: Default tunables per dtype (see the module docstring).
DEFAULTS = {
    np.dtype(np.float16): dict(bm=128, bn=128, kc=32, warps_m=2, warps_n=4, min_blocks=1),
    np.dtype(np.float32): dict(bm=128, bn=128, kc=16, warps_m=2, warps_n=4, min_blocks=1),
}
#: Error of one 3xTF32 product in float32 unit roundoffs u = 2**-24 times |a||b|: with a = ab + as + ar
#: (ab = tf32(a), |as| <= 2**-11 |a|, as's own TF32 rounding |ar| <= 2**-22 |a|) and b likewise, the
#: kernel computes as*bb + ab*bs + ab*bb exactly, missing as*bs + ab*br + ar*bb + (terms below 2**-33):
#: at most 3 * 2**-22 * (1 + 2**-10) |a||b| = 12.01 u |a||b|, rounded up.
SPLIT_ERROR_U = 13
_PAD = 16            #: bytes added to each row of the shared A tile (fragment reads conflict-free)
_B_PAD_WORDS = 8     #: 32-bit words added to each row of the shared B tile


def _geometry(bm: int, bn: int, kc: int, half: bool):
    """(A row stride, A buffer, B row stride, B buffer), strides and sizes in elements of the tile dtype."""
    item = 2 if half else 4
    sa = kc + _PAD // item                            # A: bm rows of kc (+pad) elements
    sbw = bn + _B_PAD_WORDS                           # B: words per row (float16: per pair of rows)
    b_buf = (kc // 2) * sbw * 2 if half else kc * sbw
    return sa, bm * sa, sbw, b_buf


def segment_entries(dell, seg: int):
    """``(values, offsets)`` on the device, each ``(ceil(K/seg), w, M)``: row ``r``'s entries with a
    column in segment ``q`` (columns ``[q*seg, (q+1)*seg)``) are ``values[q, w-cnt:, r]`` at columns
    ``q*seg + offsets[q, w-cnt:, r]`` (``cnt`` of them, ascending); ``w`` is the largest ``cnt`` of
    the matrix (at least 1). The first ``w - cnt`` slots are padding (value 0 at offset 0): the
    kernel writes slots in order, so padding lands before any entry and never overwrites one.
    Built once per ``seg`` on the host, kept with ``dell``."""
    def build():
        m, k = dell.shape
        idx = dell.host.indices.astype(np.int64)                            # (M, K'), ascending per row
        nsub = max(cdiv(k, seg), 1)
        q = idx // seg
        rows = np.broadcast_to(np.arange(m)[:, None], idx.shape)
        counts = np.bincount((rows * nsub + q).ravel(), minlength=m * nsub).reshape(m, nsub)
        w = max(int(counts.max(initial=0)), 1)
        first = np.cumsum(counts, axis=1) - counts                          # first slot of (row, segment)
        rank = np.arange(idx.shape[1])[None, :] - first[rows, q]            # place within the segment
        pos = w - counts[rows, q] + rank
        values = np.zeros((nsub, w, m), dtype=dell.dtype)
        offsets = np.zeros((nsub, w, m), dtype=np.uint8)
        values[q, pos, rows] = dell.host.values
        offsets[q, pos, rows] = idx - q * seg
        return values, offsets
    return dell.cached(("tc_segment_entries", seg), build)


def error_reduction(kprime: int, dtype) -> int:
    """The ``reduction`` to pass to the float32-accumulation bound (``tests/test_spmm.py``,
    ``assert_fp32_accumulated``: ``reduction * u * (|A| @ |B|)``) for this kernel's result.

    float16: ``kprime``, as for the CUDA-core kernels: products are exact and each MMA rounds
    its sum once, so at most one rounding per stored entry (MMAs over zeros add exactly).
    float32: ``3 * kprime + SPLIT_ERROR_U``: each product arrives in three MMAs (three
    roundings of the accumulator) and carries the split's error (:data:`SPLIT_ERROR_U`).
    """
    return kprime if np.dtype(dtype) == np.float16 else 3 * kprime + SPLIT_ERROR_U


def shared_bytes(bm: int, bn: int, kc: int, half: bool) -> int:
    """Shared memory of one block: two buffers of the A tile and the B tile."""
    _, a_buf, _, b_buf = _geometry(bm, bn, kc, half)
    return 2 * (a_buf + b_buf) * (2 if half else 4)


@cuda.jit(device=True, inline=True)
def _set8(dst, i, r, v):
    """``dst[i, r, :] = v`` for an 8-tuple, written out (no tuple index chosen at run time)."""
    dst[i, r, 0] = v[0]
    dst[i, r, 1] = v[1]
    dst[i, r, 2] = v[2]
    dst[i, r, 3] = v[3]
    dst[i, r, 4] = v[4]
    dst[i, r, 5] = v[5]
    dst[i, r, 6] = v[6]
    dst[i, r, 7] = v[7]


@functools.cache
def _tc_kernel(bm: int, bn: int, kc: int, warps_m: int, warps_n: int, half: bool, min_blocks: int = 1):
    """The tensor-core kernel for one tunable setting (the launcher has checked it).

    Arguments, grouped: arrays ``ent_val``, ``ent_off`` (:func:`segment_entries` for
    ``seg``), ``b`` (flat ``K*N``, row-major), ``c`` (``M x N``, out); sizes ``m``, ``n``,
    ``k``; ``vec_ok`` (rows of ``b`` start on 16-byte boundaries).
    """
    nthreads = WARP_SIZE * warps_m * warps_n
    wtm, wtn = bm // warps_m, bn // warps_n           # a warp's sub-tile of C
    mtiles, ntiles = wtm // 16, wtn // 8              # its 16x8 MMA tiles
    tile_type = float16 if half else float32
    sa, a_buf, sbw, b_buf = _geometry(bm, bn, kc, half)
    tpr = nthreads // bm                              # threads per row of the A tile
    seg = kc // tpr                                   # columns of a thread's A segment
    vz = 8 if half else 4                             # elements per 16-byte zero store
    zvec = seg % vz == 0
    two_a, two_b = 2 * a_buf, 2 * b_buf               # both buffers (a compile-time constant for shared.array)
    if half:
        pieces = (kc // 2) * (bn // 8)                # B: (pair of rows, 8 columns) per piece
        nbp = cdiv(pieces, nthreads)
        per_row = bn // 8
    else:
        nb, bw, load_b, _ = _b_tile_stager(bn, nthreads, kc * bn, False)

    @cuda.jit(device=True, inline=True)
    def load_a(ent_val, ent_off, q, row, m, w, av, ac):
        """Step 1a: segment ``q`` of row ``row`` (``w`` slots, padding first) into registers;
        lanes read consecutive rows (coalesced)."""
        for i in range(seg):
            av[i] = tile_type(0.0)
            ac[i] = 0
            if i < w and q < ent_val.shape[0] and row < m:
                av[i] = ent_val[q, i, row]
                ac[i] = ent_off[q, i, row]

    @cuda.jit(device=True, inline=True)
    def store_a(sh_a, base, w, av, ac):
        """Step 1b: zero the segment (16-byte stores), then write its ``w`` slots in order (padding,
        a 0 at offset 0, first). The same thread does both: program order, no barrier."""
        zero = tile_type(0.0)                                            # (built here: a global tuple of
        if zvec:                                                         # float16 constants is invalid NVVM IR)
            for z in range(seg // vz):
                if half:
                    store8(sh_a, base + z * vz, (zero, zero, zero, zero, zero, zero, zero, zero))
                else:
                    store4(sh_a, base + z * vz, (zero, zero, zero, zero))
        else:
            for z in range(seg):
                sh_a[base + z] = zero
        for i in range(seg):
            if i < w:
                sh_a[base + ac[i]] = av[i]

    @cuda.jit(device=True, inline=True)
    def load_b16(k0, t, b, n, k, interior, col0, breg):
        """Step 2a (float16): rows ``2kp``, ``2kp+1`` of the chunk, 8 columns each, per piece."""
        zero = float16(0.0)
        for i in range(nbp):
            e = t + i * nthreads
            gk = k0 + 2 * (e // per_row)
            gc = col0 + (e % per_row) * 8
            for r in range(2):
                if interior and e < pieces and gk + r < k:
                    _set8(breg, i, r, load8(b, (gk + r) * n + gc))          # ld.global.v4
                else:
                    for j in range(8):
                        breg[i, r, j] = (b[(gk + r) * n + gc + j]
                                         if e < pieces and gk + r < k and gc + j < n else zero)

    @cuda.jit(device=True, inline=True)
    def store_b16(sh_b, base, t, breg):
        """Step 2b (float16): interleave the two rows (B[2kp, c], B[2kp+1, c], ...) with two 16-byte stores."""
        for i in range(nbp):
            e = t + i * nthreads
            if e < pieces:
                o = base + ((e // per_row) * sbw + (e % per_row) * 8) * 2
                store8(sh_b, o, (breg[i, 0, 0], breg[i, 1, 0], breg[i, 0, 1], breg[i, 1, 1],
                                 breg[i, 0, 2], breg[i, 1, 2], breg[i, 0, 3], breg[i, 1, 3]))
                store8(sh_b, o + 8, (breg[i, 0, 4], breg[i, 1, 4], breg[i, 0, 5], breg[i, 1, 5],
                                     breg[i, 0, 6], breg[i, 1, 6], breg[i, 0, 7], breg[i, 1, 7]))

    @cuda.jit(device=True, inline=True)
    def store_b32(sh_b, base, t, breg):
        """Step 2b (float32): the stager's 4-float pieces into the padded rows, 16-byte stores."""
        for i in range(nb):
            e = (t + i * nthreads) * 4
            if e < kc * bn:
                store4(sh_b, base + (e // bn) * sbw + e % bn, (breg[i, 0], breg[i, 1], breg[i, 2], breg[i, 3]))

    @cuda.jit(device=True, inline=True)
    def mma_f16(sh_a, sh_b, ab, bb, wm0, wn0, g, tq, acc, afr, bfr):
        """Step 3 (float16): the warp's MMAs over one buffer, 16 columns of K at a time."""
        for ks in range(kc // 16):
            for mt in range(mtiles):                                     # A[r, 2tq..], A[r+8, ..], +8 cols
                o = ab + (wm0 + mt * 16 + g) * sa + ks * 16 + 2 * tq
                afr[mt, 0] = load_b32(sh_a, o)
                afr[mt, 1] = load_b32(sh_a, o + 8 * sa)
                afr[mt, 2] = load_b32(sh_a, o + 8)
                afr[mt, 3] = load_b32(sh_a, o + 8 * sa + 8)
            for nt in range(ntiles):                                     # B[2tq.., col], B[2tq+8.., col]
                o = bb + ((ks * 8 + tq) * sbw + wn0 + nt * 8 + g) * 2
                bfr[nt, 0] = load_b32(sh_b, o)
                bfr[nt, 1] = load_b32(sh_b, o + 8 * sbw)
            for mt in range(mtiles):
                for nt in range(ntiles):
                    d = mma_m16n8k16_f16_f32(afr[mt, 0], afr[mt, 1], afr[mt, 2], afr[mt, 3],
                                             bfr[nt, 0], bfr[nt, 1],
                                             acc[mt, nt, 0], acc[mt, nt, 1], acc[mt, nt, 2], acc[mt, nt, 3])
                    acc[mt, nt, 0] = d[0]
                    acc[mt, nt, 1] = d[1]
                    acc[mt, nt, 2] = d[2]
                    acc[mt, nt, 3] = d[3]

    @cuda.jit(device=True, inline=True)
    def split(x, big, small, i, j):
        """3xTF32: ``big[i, j] = tf32(x)``, ``small[i, j] = tf32(x - big)`` (the difference is exact)."""
        hi = to_tf32(x)
        big[i, j] = hi
        small[i, j] = to_tf32(x - hi)

    @cuda.jit(device=True, inline=True)
    def mma_tf32(sh_a, sh_b, ab, bb, wm0, wn0, g, tq, acc, afr, afs, bfr, bfs):
        """Step 3 (float32): 3xTF32 MMAs over one buffer, 8 columns of K at a time."""
        for ks in range(kc // 8):
            for mt in range(mtiles):                                     # A[r, tq], A[r+8, tq], +4 cols
                o = ab + (wm0 + mt * 16 + g) * sa + ks * 8 + tq
                split(sh_a[o], afr, afs, mt, 0)
                split(sh_a[o + 8 * sa], afr, afs, mt, 1)
                split(sh_a[o + 4], afr, afs, mt, 2)
                split(sh_a[o + 8 * sa + 4], afr, afs, mt, 3)
            for nt in range(ntiles):                                     # B[tq, col], B[tq+4, col]
                o = bb + (ks * 8 + tq) * sbw + wn0 + nt * 8 + g
                split(sh_b[o], bfr, bfs, nt, 0)
                split(sh_b[o + 4 * sbw], bfr, bfs, nt, 1)
            for mt in range(mtiles):
                for nt in range(ntiles):
                    # small terms first, then big x big (the largest last: less float32 rounding)
                    d = mma_m16n8k8_tf32_f32(afs[mt, 0], afs[mt, 1], afs[mt, 2], afs[mt, 3],
                                             bfr[nt, 0], bfr[nt, 1],
                                             acc[mt, nt, 0], acc[mt, nt, 1], acc[mt, nt, 2], acc[mt, nt, 3])
                    d = mma_m16n8k8_tf32_f32(afr[mt, 0], afr[mt, 1], afr[mt, 2], afr[mt, 3],
                                             bfs[nt, 0], bfs[nt, 1], d[0], d[1], d[2], d[3])
                    d = mma_m16n8k8_tf32_f32(afr[mt, 0], afr[mt, 1], afr[mt, 2], afr[mt, 3],
                                             bfr[nt, 0], bfr[nt, 1], d[0], d[1], d[2], d[3])
                    acc[mt, nt, 0] = d[0]
                    acc[mt, nt, 1] = d[1]
                    acc[mt, nt, 2] = d[2]
                    acc[mt, nt, 3] = d[3]

    @cuda.jit
    def kernel(ent_val, ent_off, b, c, m, n, k, vec_ok):
        t = cuda.threadIdx.x
        lane = t % WARP_SIZE
        warp = t // WARP_SIZE
        g = lane // 4                                                    # fragment groupID
        tq = lane % 4                                                    # threadID_in_group
        wm0 = (warp // warps_n) * wtm                                    # the warp's sub-tile, in the block
        wn0 = (warp % warps_n) * wtn
        row0 = cuda.blockIdx.x * bm
        col0 = cuda.blockIdx.y * bn
        interior = vec_ok and col0 + bn <= n                             # every B read of the tile is 16 bytes
        nchunks = (k + kc - 1) // kc
        w = ent_val.shape[1]                                             # slots per segment
        sh_a = cuda.shared.array(two_a, tile_type, alignment=SMEM_ALIGN)
        sh_b = cuda.shared.array(two_b, tile_type, alignment=SMEM_ALIGN)
        # this thread's segment of the A tile: row arow, columns h*seg .. (h+1)*seg of each chunk
        arow = t % bm
        h = t // bm
        row = row0 + arow
        a_seg = arow * sa + h * seg
        av = cuda.local.array(seg, tile_type)                            # the next chunk's entries, in flight
        ac = cuda.local.array(seg, np.int32)
        if half:
            breg = cuda.local.array((nbp, 2, 8), float16)                # the next chunk's B, in flight
        else:
            breg = cuda.local.array((nb, bw), float32)
        acc = cuda.local.array((mtiles, ntiles, 4), float32)             # the warp's C fragments
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
        # Prologue: chunk 0 into buffer 0.
        load_a(ent_val, ent_off, h, row, m, w, av, ac)
        if half:
            load_b16(0, t, b, n, k, interior, col0, breg)
            store_b16(sh_b, 0, t, breg)
        else:
            load_b(0, t, b, n, k, interior, col0, breg)
            store_b32(sh_b, 0, t, breg)
        store_a(sh_a, a_seg, w, av, ac)
        cuda.syncthreads()
        for j in range(nchunks):
            p = j % 2
            # 4. chunk j+1's loads in flight (entries, B)
            if j + 1 < nchunks:
                load_a(ent_val, ent_off, (j + 1) * tpr + h, row, m, w, av, ac)
                if half:
                    load_b16((j + 1) * kc, t, b, n, k, interior, col0, breg)
                else:
                    load_b((j + 1) * kc, t, b, n, k, interior, col0, breg)
            # 3. the MMAs of chunk j
            if half:
                mma_f16(sh_a, sh_b, p * a_buf, p * b_buf, wm0, wn0, g, tq, acc, afr, bfr)
            else:
                mma_tf32(sh_a, sh_b, p * a_buf, p * b_buf, wm0, wn0, g, tq, acc, afr, afs, bfr, bfs)
            # 1b, 2b. chunk j+1 into the other buffer (last read before the previous barrier)
            if j + 1 < nchunks:
                q = 1 - p
                if half:
                    store_b16(sh_b, q * b_buf, t, breg)
                else:
                    store_b32(sh_b, q * b_buf, t, breg)
                store_a(sh_a, q * a_buf + a_seg, w, av, ac)
            cuda.syncthreads()
        # C fragments: rows g and g+8 of each MMA tile, columns 2tq and 2tq+1
        for mt in range(mtiles):
            for nt in range(ntiles):
                r = row0 + wm0 + mt * 16 + g
                col = col0 + wn0 + nt * 8 + 2 * tq
                for hh in range(2):
                    if r + 8 * hh < m:
                        if col < n:
                            c[r + 8 * hh, col] = acc[mt, nt, 2 * hh]
                        if col + 1 < n:
                            c[r + 8 * hh, col + 1] = acc[mt, nt, 2 * hh + 1]

    if cuda_config.ENABLE_CUDASIM:                                       # (the simulator has no launch bounds)
        return kernel
    return cuda.jit(launch_bounds=(nthreads, min_blocks))(kernel.py_func)


def _check_tunables(half: bool, bm, bn, kc, warps_m, warps_n, min_blocks):
    """The tunables as ints, or a ValueError naming the one that does not fit."""
    bm = check_int(bm, "bm", minimum=16)
    bn = check_int(bn, "bn", minimum=8)
    kc = check_int(kc, "kc", minimum=8)
    warps_m = check_int(warps_m, "warps_m", minimum=1, maximum=32)
    warps_n = check_int(warps_n, "warps_n", minimum=1, maximum=32)
    min_blocks = check_int(min_blocks, "min_blocks", minimum=1, maximum=32)
    nthreads = WARP_SIZE * warps_m * warps_n
    kstep = 16 if half else 8
    if nthreads > 1024:
        raise ValueError(f"warps_m, warps_n: a block of 32 * {warps_m} * {warps_n} = {nthreads} threads exceeds 1024")
    if bm % (16 * warps_m) or bn % (8 * warps_n):
        raise ValueError(f"bm, bn: each warp's sub-tile (bm/warps_m x bn/warps_n = {bm}/{warps_m} x {bn}/{warps_n}) "
                         f"must be whole 16 x 8 MMA tiles")
    if kc % kstep:
        raise ValueError(f"kc: must be a multiple of the MMA's K ({kstep} for {'float16' if half else 'float32'}), "
                         f"got {kc}")
    if nthreads % bm or kc % (nthreads // bm):
        raise ValueError(f"bm, kc: the {nthreads} threads split the A tile into equal row segments: bm must divide "
                         f"{nthreads} and {nthreads}/bm must divide kc; got bm={bm}, kc={kc}")
    if kc * bm // nthreads > 256:
        raise ValueError(f"bm, kc: a thread's segment of kc * bm / {nthreads} = {kc * bm // nthreads} columns does not "
                         f"fit the 8-bit offsets of segment_entries (at most 256)")
    shared = shared_bytes(bm, bn, kc, half)
    if shared > SHARED_LIMIT:
        raise ValueError(f"bm, bn, kc: two buffers of the A and B tiles need {shared} bytes of shared memory, "
                         f"more than {SHARED_LIMIT}")
    return bm, bn, kc, warps_m, warps_n, min_blocks


def uspmm(ell, b, *, config=None, **tunables):
    """``C = A @ b`` on tensor cores for a uniform-sparse ``A`` (``ELL`` or
    :class:`gpu.uspmm.DeviceELL`, ``M x K``) and a dense C-ordered ``b`` (``K x N``,
    ``A``'s dtype: float32 or float16).

    Returns ``C`` (``M x N``, C-ordered, float32 accumulation rounded to ``b``'s
    dtype) in ``b``'s array kind (NumPy, Numba, CuPy, PyTorch). ``config`` is a
    dict of tunables (or None); keyword tunables override it; unset ones come from
    :data:`DEFAULTS` for the dtype (see the module docstring).
    """
    dell = prepare(ell)
    bop, order = _rhs(b, dell, "b")
    if order != "C":
        raise ValueError("b: the tensor-core kernel needs a C-ordered (row-major) b; "
                         "use gpu.uspmm.uspmm(variant='listing1') for the column-major layout of Eq. 2")
    half = dell.dtype == np.float16
    opts = dict(DEFAULTS[dell.dtype], **(config or {}), **tunables)
    unknown = set(opts) - set(DEFAULTS[dell.dtype])
    if unknown:
        raise ValueError(f"tunables: unknown {sorted(unknown)}; expected {sorted(DEFAULTS[dell.dtype])}")
    bm, bn, kc, warps_m, warps_n, min_blocks = _check_tunables(bool(half), **opts)
    bdev = bop.dev
    m, n = dell.shape[0], bdev.shape[1]
    k = dell.shape[1]
    c = output((m, n), dell.dtype, like=bop, order="C")
    if m and n:
        seg = kc * bm // (WARP_SIZE * warps_m * warps_n)
        bw = 16 // dell.dtype.itemsize
        vec_ok = n % bw == 0 and aligned(bdev, bw)
        kernel = _tc_kernel(bm, bn, kc, warps_m, warps_n, bool(half), min_blocks)
        ent_val, ent_off = segment_entries(dell, seg)
        _launch(kernel, (cdiv(m, bm), cdiv(n, bn)), WARP_SIZE * warps_m * warps_n,
                (ent_val, ent_off, bdev.reshape(k * n), c, m, n, k, vec_ok),
                "bm, bn, warps_m, warps_n")
    return result(c, like=bop)
