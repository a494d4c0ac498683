"""USpMM on the GPU: ``C = A @ B`` with a uniform-sparse ``A`` in ELL format.

Equals :func:`sparsekit.reference.uspmm.uspmm` (and :func:`sparsekit.reference.uspmm.uspmm_linear`
for :func:`uspmm_linear`) within the tolerance of fp32 accumulation. Source:
"Uniform Sparsity in Deep Neural Networks", Section 3, Listing 1, Section 4.3.

Variants (``variant=``; every one takes float32 or float16 ``A``/``B``, ``decode``
and ``tensor_core`` bfloat16 too, and accumulates in float32):

``"listing1"`` (``vecsize=1``): USpMM
    Listing 1 line for line. Blocks of ``32 x NumWarps`` threads with
    ``NumWarps = VSize * NWarp``; a 1-D grid of ``(M/32) x (N/VSize)`` blocks;
    lane ``l`` of every warp owns row ``crow``; warp ``w`` walks the K' slots
    ``w, w + NumWarps, ...`` and multiplies its ``ellval`` element by ``VSize``
    elements of ``B``; the ``NumWarps`` partial sums meet in shared ``sh_c``.
``"listing1"`` with ``vecsize=2`` or ``4``: USpMM-Vec
    the same, but each thread loads ``vecsize`` consecutive rows of
    ``ellval``/``ellidx`` with ONE vector load (:mod:`sparsekit.gpu.vector_loads`), so a
    block covers ``32 * vecsize`` rows and ``sh_c`` is split into ``vecsize``
    parts, one per vector element (Section 3, "Vectorization").
``"pipelined"``: staged tiles (see :func:`_pipelined_kernel`)
    per K chunk, a block stages a ``kc x NT`` tile of ``B`` and its rows'
    entries in that chunk in shared memory; every warp computes several rows
    by ``cols_per_lane`` columns per lane in registers, so a staged entry
    feeds ``NT = 32 * cols_per_lane`` multiply-adds instead of ``VSize``; two
    shared buffers, the next chunk's loads in flight during the multiply,
    one barrier a chunk, 16-byte shared stores and conflict-free reads, each
    row's entries padded to ``unroll`` with entries pointing at a zero row.
``"direct"``: no shared memory (see :func:`_direct_kernel`)
    a warp walks its rows' entries ``unroll`` at a time and reads its 16
    bytes of each needed row of ``B`` straight from L1/L2: no barrier, so rows
    with few entries (high sparsity) do not wait on a staged chunk.
``"dense_tile"``: densified tiles of A (see :func:`_dense_tile_kernel`)
    register outer products over a densified ``A^T`` tile: a loaded ``B``
    element feeds ``rows_per_warp`` multiply-adds, the zeros of A included.
    ``0 * inf`` is NaN: with non-finite values in ``B`` its result differs
    from the sparse kernels' where a row does not use them (finite ``B``:
    same result within float32 accumulation).
``"warp_split"``: small N (see :func:`_warp_split_kernel`)
    a block owns a few rows; its warps split each row's K' entries and sum
    their partial rows in shared memory in a fixed order: a grid of M/R
    blocks of many warps fills the GPU where N = 128 gives too few output
    tiles, with no K split over blocks (no fence, ticket or serial sum).

Which is faster depends on the problem (float32 on the H100,
``experiments/results/uspmm.md``): "dense_tile" from 60% to 80% sparsity at
M, N >= 512 (89.5 us at 1024^3 60%, cuSPARSE 202 us), "direct" at 90-95%
(35.9 us at 1024^3 95%, cuSPARSE 46.6 us). Where the output has fewer tiles
than the GPU has SMs (N = 128 at M <= 2048, 128^3) the pipelined, direct and
dense-tile kernels split each tile's K range over several blocks
(``splits``): at 1024 x 1024 x 128 60% the dense-tile kernel with 4 splits
ran 33.6 us (cuSPARSE 40.7 us; unsplit 71.2 us), the 8-row pipelined kernel
with 4 splits 10.7 us at 128^3. The warp-split kernel beat all of these and
cuSPARSE on every ResNet-50 layer shape of the Table 1 analog (N = 128, 81%):
e.g. 512 x 1024 float32 9.8 us (heuristic's split direct kernel 30.6,
cuSPARSE 20.9; "small-N kernel" in ``experiments/results/uspmm.md``).
:mod:`sparsekit.tune` searches them and :mod:`sparsekit.router` routes
``config="auto"`` by these measurements.

Layouts. ``b`` is ``K x N`` in C **or** F order (nothing else: other strides
are refused, nothing is copied); ``C`` comes back in the same order. The F
case is the paper's Eq. 2 / Listing 1 memory layout (``X[bcol*k + brow]``,
``Y[ccol*m + crow]``): :func:`uspmm_linear` uses it to compute a PyTorch
``Linear`` ``Y = X @ W^T`` from row-major ``X`` (``N x K``) with no transpose.
Listing 1 indexes ``b[brow, bcol]`` and ``c[crow, ccol]``; Numba compiles one
specialisation per memory order. Every other variant needs a C-ordered ``b``.

Paper tunables: ``nwarp`` (NWarp), ``vsize`` (VSize), ``vecsize`` (vecSize).
The paper uses (NWarp, VSize) = (1, 8) for USpMM and (2, 8) for USpMM-Vec in
Section 4.3 (its Section 4.1 swaps them); (1, 8) is the default here.
"""
from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32
from numba.cuda import config as cuda_config

from numba.core.types import float16

from sparsekit.gpu.device_ell import DeviceELL, prepare, rhs
from sparsekit.gpu.inline import inlined
from sparsekit.gpu.launch import SHARED_LIMIT, SMEM_ALIGN, WARP_SIZE, check_int32
from sparsekit.gpu.launch import launch as _launch
from sparsekit.gpu.spmm_bitmap import MAX_N as BITMAP_MAX_N
from sparsekit.gpu.spmm_bitmap import TUNABLES as BITMAP_TUNABLES
from sparsekit.gpu.spmm_bitmap import spmm_bitmap, spmm_bitmap_linear
from sparsekit.gpu.spmm_ell_compact import spmm_ell_compact_linear
from sparsekit.gpu.spmm_ell_rows import MAX_COLUMNS as MAX_ELL_ROWS_K
from sparsekit.gpu.spmm_ell_rows import spmm_ell_rows_linear
from sparsekit.gpu.spmm_tiled import MAX_N as MAX_DECODE_N
from sparsekit.gpu.spmm_tiled import spmm_tiled, spmm_tiled_linear
from sparsekit.gpu.split_k import split_buffers, split_range, split_ticket
from sparsekit.gpu.vector_loads import aligned, load2, load4, load8, store2, store4
from sparsekit.arrays import cdiv, flat_view, operand, output, result
from sparsekit.checks import BFLOAT16, check_divisible, check_int
from sparsekit.router import compact_wins
from sparsekit.tune_cache import resolve, stores

__all__ = ["DeviceELL", "prepare", "uspmm", "uspmm_linear", "split_ticket", "split_sum", "VARIANTS", "WARP_SIZE", "SHARED_LIMIT"]

VARIANTS = ("listing1", "pipelined", "direct", "dense_tile", "warp_split")
_F32 = np.dtype(np.float32).itemsize


# ---------------------------------------------------------------------------
# Listing 1 (USpMM) and its vectorised form (USpMM-Vec)
# ---------------------------------------------------------------------------

@functools.cache
def _listing1_kernel(vsize: int, numwarps: int, vecsize: int):
    """Listing 1 for compile-time ``VSize``, ``NumWarps`` (the C++ template
    parameters, line 1) and ``vecSize`` (1 = USpMM, 2 or 4 = USpMM-Vec).

    Arguments, grouped: arrays ``ellval``, ``ellidx`` (flat, column-major:
    element ``x*m + row``), ``b`` (K x N), ``c`` (M x N, out); sizes ``m``,
    ``n``, ``ellwidth`` (K').
    """
    rows_per_warp = WARP_SIZE * vecsize          # rows one block covers
    shc_part = numwarps * WARP_SIZE              # sh_c(X, Y) = sh_c[X + Y*NumWarps*WarpSize], line 18
    shc_size = vsize * shc_part * vecsize        # line 17, split into vecsize parts (USpMM-Vec)
    nctmp = vsize * vecsize                      # line 20 (compile-time array sizes must be constants)

    @cuda.jit
    def kernel(ellval, ellidx, b, c, m, n, ellwidth):
        tid = cuda.threadIdx.x + cuda.blockIdx.x * cuda.blockDim.x       # line 8
        warpid = cuda.threadIdx.x // WARP_SIZE                            # line 9
        lane = cuda.threadIdx.x % WARP_SIZE                               # line 10

        mpad = ((m + rows_per_warp - 1) // rows_per_warp) * rows_per_warp  # line 12
        # line 14 reads "(blockIdx.x*WarpSize)%mpad + tid*WarpSize": the block's
        # 32-row tile plus the thread's LANE (tid*WarpSize would leave the tile).
        crow = (cuda.blockIdx.x * rows_per_warp) % mpad + lane * vecsize
        ccol_base = (tid // (mpad // vecsize * numwarps)) * vsize        # line 15

        sh_c = cuda.shared.array(shc_size, float32)                      # line 17
        ctmp = cuda.local.array(nctmp, float32)                          # line 20
        for i in range(nctmp):                                           # lines 21-22
            ctmp[i] = 0.0
        aval = cuda.local.array(vecsize, float32)
        brow = cuda.local.array(vecsize, np.int32)

        if crow < m:                                                     # line 24
            for x in range(warpid, ellwidth, numwarps):                  # line 25
                at = x * m + crow
                # lines 26-27: this thread's ellval/ellidx elements (vecsize rows)
                if vecsize == 1:
                    aval[0] = float32(ellval[at])
                    brow[0] = ellidx[at]
                elif m % vecsize == 0 and vecsize == 2:                  # one 2-wide load each
                    va, vi = load2(ellval, at), load2(ellidx, at)
                    for e in range(2):
                        aval[e] = float32(va[e])
                        brow[e] = vi[e]
                elif m % vecsize == 0 and vecsize == 4:                  # one 4-wide load each
                    va, vi = load4(ellval, at), load4(ellidx, at)
                    for e in range(4):
                        aval[e] = float32(va[e])
                        brow[e] = vi[e]
                else:                                                    # M % vecSize != 0: scalar, bounded
                    for e in range(vecsize):
                        aval[e] = float32(ellval[at + e]) if crow + e < m else float32(0.0)
                        brow[e] = ellidx[at + e] if crow + e < m else 0
                for e in range(vecsize):
                    for i in range(vsize):                               # line 29
                        bcol = ccol_base + i                             # line 30
                        if bcol < n:                                     # line 31
                            bval = float32(b[brow[e], bcol])             # line 32: X[bcol*k + brow]
                            ctmp[e * vsize + i] += aval[e] * bval        # line 33
        for e in range(vecsize):                                         # lines 38-40
            for i in range(vsize):
                sh_c[cuda.threadIdx.x + (e * vsize + i) * shc_part] = ctmp[e * vsize + i]
        cuda.syncthreads()                                               # line 41
        if warpid < vsize:                                               # line 42
            ccol = ccol_base + warpid                                    # line 47
            for e in range(vecsize):
                cval = float32(0.0)                                      # line 43
                for i in range(numwarps):                                # lines 44-46
                    cval += sh_c[lane + i * WARP_SIZE + (e * vsize + warpid) * shc_part]
                if crow + e < m and ccol < n:                            # line 48: Y[ccol*m + crow]
                    c[crow + e, ccol] = cval

    return kernel


# ---------------------------------------------------------------------------
# Pipelined kernel (past the paper)
# ---------------------------------------------------------------------------

def pipelined_shared_bytes(rows_per_block: int, cols_per_lane: int, kc: int) -> int:
    """Shared memory of one pipelined block: two buffers, each holding a ``(kc + 1) x NT`` float32
    tile of B (its last row zeros, for padding entries), the block's staged entries of one K chunk
    (float32 value, int16 tile offset) and, per row, its entry count and the slot range of a later
    chunk (the same for float16 ``B``: the tile is converted while staged)."""
    nt = WARP_SIZE * cols_per_lane
    return 2 * ((kc + 1) * nt * _F32 + rows_per_block * kc * 6 + rows_per_block * 12)


def _fma_group(width: int):
    """``fma<width>(racc, o, a, v)``: ``racc[o + x] += a * v[x]`` for ``x < width`` (2, 4 or 8), written
    out (a loop over a tuple that the compiler does not unroll indexes it through a chain of branches)."""
    if width == 2:
        @inlined
        def fma(racc, o, a, v):
            racc[o] += a * float32(v[0])
            racc[o + 1] += a * float32(v[1])
    elif width == 4:
        @inlined
        def fma(racc, o, a, v):
            racc[o] += a * float32(v[0])
            racc[o + 1] += a * float32(v[1])
            racc[o + 2] += a * float32(v[2])
            racc[o + 3] += a * float32(v[3])
    else:
        @inlined
        def fma(racc, o, a, v):
            racc[o] += a * float32(v[0])
            racc[o + 1] += a * float32(v[1])
            racc[o + 2] += a * float32(v[2])
            racc[o + 3] += a * float32(v[3])
            racc[o + 4] += a * float32(v[4])
            racc[o + 5] += a * float32(v[5])
            racc[o + 6] += a * float32(v[6])
            racc[o + 7] += a * float32(v[7])
    return fma


def _set_group():
    """``set4(dst, o, v)``: ``dst[o : o + 4] = v`` for a 4-tuple, written out (no tuple index at
    run time)."""
    @inlined
    def set4(dst, o, v):
        dst[o] = v[0]
        dst[o + 1] = v[1]
        dst[o + 2] = v[2]
        dst[o + 3] = v[3]
    return set4


@inlined
def _tile_position(e, row0, col0, tile_cols, m, n):
    """Element ``e`` of a split tile (``tile_cols`` columns from ``(row0, col0)``): its position and that
    position clamped into ``M x N`` (an element past the tile or the matrix reads a valid partial, never stored)."""
    rr = row0 + e // tile_cols
    cc = col0 + e % tile_cols
    return rr, cc, min(rr, m - 1), min(cc, n - 1)


@inlined
def split_sum(c, part, ticket, m, n, nsplit, tile, sh_last, tile_rows, tile_cols):
    """The end of a K-split launch for the CUDA-core kernels (:func:`_c_tile_epilogue`), called by
    every thread after it wrote its partial sums to ``part[blockIdx.z]`` (float32, ``nsplit x M x
    N``), for output tiles of ``tile_rows x tile_cols`` at ``(blockIdx.x * tile_rows, blockIdx.y *
    tile_cols)``: after :func:`split_ticket`, the last block sums ``part[0] + part[1] + ... +
    part[nsplit - 1]`` in that order over the whole tile, the threads along its rows (coalesced), and
    writes ``C`` (rounded to its dtype). Whichever block finishes last, the sum is the same one:
    results are bit-identical from run to run.

    A thread sums 2 elements (``blockDim.x`` apart) at a time, their loads unconditional (clamped
    positions, :func:`_tile_position`) and side by side: one element at a time behind its bounds test,
    a thread had the loads of one element in flight (as the tensor-core split sum had,
    ``sparsekit.gpu.uspmm_tc``'s ``add_fragments``). H100 ("the CUDA-core split sum, two elements a thread" in
    experiments/results/uspmm.md): 1-32% less time with every split setting timed;
    4 elements were faster still for the dense-tile and pipelined kernels but took the direct kernel,
    which has no launch bounds, from 56 to 64 registers (sm_90) and lost to 2 with 8 and 16 splits.
    """
    if split_ticket(ticket, nsplit, tile, sh_last):                      # the last block: fixed-order sum
        row0 = cuda.blockIdx.x * tile_rows
        col0 = cuda.blockIdx.y * tile_cols
        size = tile_rows * tile_cols
        stride = cuda.blockDim.x
        for e0 in range(cuda.threadIdx.x, size, 2 * stride):
            r0, c0, r0c, c0c = _tile_position(e0, row0, col0, tile_cols, m, n)
            r1, c1, r1c, c1c = _tile_position(e0 + stride, row0, col0, tile_cols, m, n)
            t0 = t1 = float32(0.0)
            for q in range(nsplit):
                v0 = part[q, r0c, c0c]
                v1 = part[q, r1c, c1c]
                t0 += v0
                t1 += v1
            if r0 < m and c0 < n:                                        # (e0 < size: the loop's bound)
                c[r0, c0] = t0
            if e0 + stride < size and r1 < m and c1 < n:
                c[r1, c1] = t1


@functools.cache
def _c_tile_epilogue(rows_per_warp: int, cols_per_lane: int, vw: int):
    """``finish(c, part, ticket, acc, row, col, m, n, split, nsplit, tile, sh_last)``: this lane's
    ``rows_per_warp x cols_per_lane`` accumulators into ``C``, for the kernels whose lane owns the
    columns ``col + g * 32 * vw + x`` (``g < cols_per_lane / vw``, ``x < vw``) of rows ``row ..``
    (a block's tile: its warps' rows x ``32 * cols_per_lane`` columns).

    ``nsplit == 1``: written to ``c`` (rows past ``m``, columns past ``n`` skipped).
    ``nsplit > 1``: written to this block's partial tile ``part[split]`` and summed by
    :func:`split_sum`.
    """
    nvec = cols_per_lane // vw
    gstride = WARP_SIZE * vw
    nt = WARP_SIZE * cols_per_lane

    @inlined
    def finish(c, part, ticket, acc, row, col, m, n, split, nsplit, tile, sh_last):
        for r in range(rows_per_warp):                                   # C, or this block's partial
            for g in range(nvec):
                for x in range(vw):
                    cc = col + g * gstride + x
                    if row + r < m and cc < n:
                        if nsplit == 1:
                            c[row + r, cc] = acc[r, g * vw + x]
                        else:
                            part[split, row + r, cc] = acc[r, g * vw + x]
        if nsplit > 1:
            rows = (cuda.blockDim.x // WARP_SIZE) * rows_per_warp        # the block's tile: rows x nt
            split_sum(c, part, ticket, m, n, nsplit, tile, sh_last, rows, nt)

    return finish


@functools.cache
def _b_tile_stager(nt: int, nthreads: int, tile_size: int, half: bool):
    """``(nb, bw, load_b, store_b)``: how the double-buffered kernels move a chunk's tile of ``B``
    (``tile_size`` elements, rows of ``nt``) through registers ``breg`` (``nb x bw`` float32).

    ``load_b(k0, t, b, n, k, interior, col0, breg)`` reads thread ``t``'s 16-byte pieces of rows
    ``k0, k0 + 1, ...`` of ``b`` (float16 converted to float32 here, once per block rather than
    once per multiply-add), zeros past row ``k``; where ``interior`` is false (the last column
    tile of an N that 16-byte reads do not fit) element by element, zeros past column ``n``.
    ``store_b(sh_b, base, t, breg)`` writes them to the tile at ``sh_b[base:]`` with 16-byte stores.
    """
    bw = 8 if half else 4                            # elements per 16-byte global read of B
    bload = {4: load4, 8: load8}[bw]
    in_type = float16 if half else float32
    nb = -(-tile_size // (nthreads * bw))            # 16-byte reads of B per thread per chunk

    @inlined
    def load_b(k0, t, b, n, k, interior, col0, breg):
        zero = in_type(0.0)
        for i in range(nb):
            e = (t + i * nthreads) * bw
            gk = k0 + e // nt
            gc = col0 + e % nt
            if interior and e < tile_size and gk < k:                   # (block-uniform but for the last chunk)
                v = bload(b, gk * n + gc)                                # ld.global.v4
                for j in range(bw):
                    breg[i, j] = float32(v[j])
            elif interior:
                for j in range(bw):
                    breg[i, j] = 0.0
            else:
                for j in range(bw):
                    breg[i, j] = float32(b[gk * n + gc + j] if e < tile_size and gk < k and gc + j < n else zero)

    @inlined
    def store_b(sh_b, base, t, breg):
        for i in range(nb):
            e = (t + i * nthreads) * bw
            if e < tile_size:
                store4(sh_b, base + e, (breg[i, 0], breg[i, 1], breg[i, 2], breg[i, 3]))  # st.shared.v4
                if half:
                    store4(sh_b, base + e + 4, (breg[i, 4], breg[i, 5], breg[i, 6], breg[i, 7]))

    return nb, bw, load_b, store_b


@functools.cache
def _pipelined_kernel(cols_per_lane: int, rows_per_warp: int, numwarps: int, kc: int, unroll: int, half: bool,
                      min_blocks: int = 1):
    """Register-tiled USpMM with double-buffered, software-pipelined staging (``variant="pipelined"``).

    A block owns ``R = numwarps * rows_per_warp`` rows and ``NT = 32 *
    cols_per_lane`` columns of ``C``, a lane ``cols_per_lane`` columns of each
    of its warp's rows, in float32 registers; ``K`` is walked in chunks of
    ``kc`` rows of ``B``, the block's entries of a chunk (indices ascend: for
    row ``r`` one run of slots, ``slot_ptr[row, chunk]`` to ``slot_ptr[row,
    chunk+1]``) staged in shared memory as float32 values and 16-bit offsets
    into the B tile (chunk-relative, so any ``K`` fits). The ceiling is the
    shared-memory read of one ``B`` element per multiply-add (128 bytes per
    clock per SM): a quarter of FP32 peak for float32, half for float16. How
    the staging is scheduled:

    * two shared buffers: while the warps multiply chunk ``j`` out of buffer
      ``j % 2``, the loads of chunk ``j + 1`` (its ``kc x NT`` tile of ``B``,
      16 bytes per load, and the block's entries in it) are already in flight
      into registers; they are written to buffer ``(j + 1) % 2`` after the
      multiply (the tile with 16-byte stores), then ONE barrier per chunk;
    * the slot range of each row in a chunk (``slot_ptr``) is read from global
      memory one chunk earlier still and kept in shared memory, so the entry
      loads of chunk ``j + 1`` depend only on shared memory;
    * each row's staged entries are padded to a multiple of ``unroll`` with
      entries ``(0, zero row)``: the tile has an extra row of zeros, so a padding
      entry adds ``0 * 0`` (exact, whatever B holds); the inner loop reads
      ``unroll`` values and ``unroll`` 16-bit tile offsets with one shared
      vector read each, written out ``unroll`` times, with no remainder loop;
    * lane ``l`` owns the columns ``g * 32 * vw + l * vw + x`` (``vw`` elements
      per 16-byte read, ``g < cols_per_lane / vw``): each shared read of the
      tile is 32 consecutive 16-byte pieces, free of bank conflicts.

    The tile is float32 for both dtypes (float16 ``B`` is converted while
    staged, once per block instead of once per multiply-add). Per entry a lane
    reads ``cols_per_lane`` floats of the tile (``ld.shared.v4``) and does
    ``cols_per_lane`` multiply-adds: shared-memory bandwidth (128 bytes per
    clock per SM) caps the kernel at a quarter of FP32 peak, as it caps any
    kernel that reads one ``B`` element per multiply-add.

    With ``nsplit > 1`` block ``(x, y, z)`` multiplies only the ``z``-th of
    ``nsplit`` runs of K chunks and the tile is finished by
    :func:`_c_tile_epilogue` (fixed-order sum of the partial tiles).

    Arguments, grouped: arrays ``vals``, ``idxs`` (``M x K'`` row-major copies
    of ``ellval``/``ellidx``), ``slot_ptr`` (``M x (nchunks+1)`` int32), ``b``
    (flat ``K*N``, row-major), ``c`` (``M x N``, out), ``part`` (``nsplit x M x
    N`` float32 partial tiles), ``ticket`` (int32 per output tile); sizes ``m``,
    ``n``, ``k``; ``vec_ok`` (rows of ``b`` start on 16-byte boundaries),
    ``nsplit`` (blocks per output tile along K).
    """
    nt = WARP_SIZE * cols_per_lane
    nthreads = numwarps * WARP_SIZE
    rows_per_block = numwarps * rows_per_warp
    vw = min(cols_per_lane, 4)                       # floats per shared read of the B tile (<= 16 bytes)
    vload = {2: load2, 4: load4}[vw]
    fma_v = _fma_group(vw)
    nvec = cols_per_lane // vw                       # 1 or 2 shared reads per entry
    gstride = WARP_SIZE * vw                         # tile columns between a lane's two groups
    uload = {2: load2, 4: load4}[unroll]
    tile_stride = (kc + 1) * nt                      # one buffer's B tile: kc rows, then a row of zeros
    tile_size = kc * nt
    zero_off = kc * nt                               # tile offset of the zero row (padding entries)
    entries = rows_per_block * kc                    # staged entry slots per buffer (at most kc per row)
    nb, bw, load_b, store_b = _b_tile_stager(nt, nthreads, tile_size, half)
    na = -(-entries // nthreads)                     # entry slots per thread per chunk
    two_tiles, two_entries, two_rows = 2 * tile_stride, 2 * entries, 2 * rows_per_block   # both buffers
    finish = _c_tile_epilogue(rows_per_warp, cols_per_lane, vw)

    @inlined
    def load_chunk(q, t, vals, idxs, b, n, k, kb, interior, row0, col0, sh_lo, sh_hi, breg, aval, aoff, acnt):
        """Chunk ``q`` of the block's K range (``b`` and ``k``: the rows of B from ``kb`` on) into
        this thread's registers (its share of the B tile, of the entry slots, and for ``t < R``
        the row's padded count). The slot ranges come from shared memory (``sh_lo``/``sh_hi`` of
        buffer ``q % 2``), so every load here is independent."""
        k0 = q * kc
        sp = (q % 2) * rows_per_block
        load_b(k0, t, b, n, k, interior, col0, breg)                     # the B tile
        for i in range(na):                                              # the entries; past the row's run:
            e = t + i * nthreads                                         # (0, zero row)
            r = e // kc
            aval[i] = 0.0
            aoff[i] = zero_off
            if e < entries:
                s = sh_lo[sp + r] + e % kc
                if s < sh_hi[sp + r]:
                    aval[i] = float32(vals[row0 + r, s])
                    aoff[i] = (idxs[row0 + r, s] - kb - k0) * nt
        if t < rows_per_block:
            cnt = sh_hi[sp + t] - sh_lo[sp + t]
            acnt[0] = (cnt + unroll - 1) // unroll * unroll

    @inlined
    def store_chunk(p, t, breg, aval, aoff, acnt, sh_b, sh_val, sh_off, sh_cnt):
        """The registers of :func:`load_chunk` into buffer ``p`` (the tile 16 bytes per store)."""
        store_b(sh_b, p * tile_stride, t, breg)
        for i in range(na):
            e = t + i * nthreads
            if e < entries:
                sh_val[p * entries + e] = aval[i]
                sh_off[p * entries + e] = aoff[i]
        if t < rows_per_block:
            sh_cnt[p * rows_per_block + t] = acnt[0]

    @inlined
    def fma_entry(racc, a, base, sh_b):
        """``racc += a * (this lane's columns of the tile row at base)``: 1 or 2 shared reads."""
        fma_v(racc, 0, a, vload(sh_b, base))                             # ld.shared.v4
        if nvec == 2:
            fma_v(racc, vw, a, vload(sh_b, base + gstride))

    @cuda.jit
    def kernel(vals, idxs, slot_ptr, b, c, part, ticket, m, n, k, vec_ok, nsplit):
        t = cuda.threadIdx.x
        lane = t % WARP_SIZE
        row0 = cuda.blockIdx.x * rows_per_block
        warp_rb0 = (t // WARP_SIZE) * rows_per_warp                      # this warp's first row, in the block
        col0 = cuda.blockIdx.y * nt
        interior = vec_ok and col0 + nt <= n                             # every B read of the tile is 16 bytes
        # This block's chunks q0 .. q1 - 1 (all of K without a split). Views starting there keep
        # every index below non-negative from 0 up, as without a split (no wraparound code).
        q0, q1 = split_range((k + kc - 1) // kc, cuda.blockIdx.z, nsplit)
        nchunks = q1 - q0
        kb = q0 * kc
        b_k = b[kb * n:]
        k_left = k - kb
        spv = slot_ptr[:, q0:]
        sh_last = cuda.shared.array(1, np.int32)
        sh_b = cuda.shared.array(two_tiles, float32, alignment=SMEM_ALIGN)       # vector reads need 16 bytes
        sh_val = cuda.shared.array(two_entries, float32, alignment=SMEM_ALIGN)
        sh_off = cuda.shared.array(two_entries, np.int16, alignment=SMEM_ALIGN)
        sh_cnt = cuda.shared.array(two_rows, np.int32)
        sh_lo = cuda.shared.array(two_rows, np.int32)                    # slot range of row r in a chunk:
        sh_hi = cuda.shared.array(two_rows, np.int32)                    # buffer (chunk % 2)
        breg = cuda.local.array((nb, bw), float32)                       # the next chunk, in flight
        aval = cuda.local.array(na, float32)
        aoff = cuda.local.array(na, np.int32)
        acnt = cuda.local.array(1, np.int32)
        acc = cuda.local.array((rows_per_warp, cols_per_lane), float32)  # this lane's C tile
        racc = cuda.local.array(cols_per_lane, float32)                   # the row being multiplied
        for r in range(rows_per_warp):
            for j in range(cols_per_lane):
                acc[r, j] = 0.0
        acnt[0] = 0
        row = row0 + t
        # Prologue: the zero rows, the slot ranges of chunks 0 and 1, then chunk 0 into buffer 0.
        for e in range(t, nt, nthreads):
            sh_b[zero_off + e] = 0.0
            sh_b[tile_stride + zero_off + e] = 0.0
        if t < rows_per_block:
            for q in range(2):
                lo = hi = 0
                if row < m and q < nchunks:
                    lo = spv[row, q]
                    hi = spv[row, q + 1]
                sh_lo[q * rows_per_block + t] = lo
                sh_hi[q * rows_per_block + t] = hi
        cuda.syncthreads()
        load_chunk(0, t, vals, idxs, b_k, n, k_left, kb, interior, row0, col0, sh_lo, sh_hi, breg, aval, aoff, acnt)
        store_chunk(0, t, breg, aval, aoff, acnt, sh_b, sh_val, sh_off, sh_cnt)
        cuda.syncthreads()
        lane_base = lane * vw
        for j in range(nchunks):
            p = j % 2
            # 1. issue the loads of chunk j+1 (registers) and the slot ranges of chunk j+2
            if j + 1 < nchunks:
                load_chunk(j + 1, t, vals, idxs, b_k, n, k_left, kb, interior, row0, col0, sh_lo, sh_hi, breg, aval,
                           aoff, acnt)
            lo = hi = 0
            if t < rows_per_block and row < m and j + 2 < nchunks:
                lo = spv[row, j + 2]
                hi = spv[row, j + 3]
            # 2. multiply chunk j: each warp's rows, unroll entries per step
            tb = p * tile_stride + lane_base
            for r in range(rows_per_warp):
                rb = warp_rb0 + r
                e0 = (p * rows_per_block + rb) * kc
                cnt = sh_cnt[p * rows_per_block + rb]
                for x in range(cols_per_lane):                           # registers even where the row loop
                    racc[x] = acc[r, x]                                  # is not unrolled (acc then local)
                for i in range(0, cnt, unroll):
                    va = uload(sh_val, e0 + i)                           # unroll values: ld.shared.v4.f32
                    vo = uload(sh_off, e0 + i)                           # unroll offsets: ld.shared.v2.u32
                    fma_entry(racc, va[0], tb + vo[0], sh_b)             # written out: no tuple index
                    fma_entry(racc, va[1], tb + vo[1], sh_b)             # chosen at run time
                    if unroll == 4:
                        fma_entry(racc, va[2], tb + vo[2], sh_b)
                        fma_entry(racc, va[3], tb + vo[3], sh_b)
                for x in range(cols_per_lane):
                    acc[r, x] = racc[x]
            # 3. chunk j+1 into the other buffer, chunk j+2's slot ranges into this one's
            if j + 1 < nchunks:
                store_chunk(1 - p, t, breg, aval, aoff, acnt, sh_b, sh_val, sh_off, sh_cnt)
            if t < rows_per_block:
                sh_lo[p * rows_per_block + t] = lo
                sh_hi[p * rows_per_block + t] = hi
            cuda.syncthreads()
        finish(c, part, ticket, acc, row0 + warp_rb0, col0 + lane_base, m, n, cuda.blockIdx.z, nsplit,
               cuda.blockIdx.x * cuda.gridDim.y + cuda.blockIdx.y, sh_last)

    if cuda_config.ENABLE_CUDASIM:                                       # (the simulator has no launch bounds)
        return kernel
    return cuda.jit(launch_bounds=(nthreads, min_blocks))(kernel.py_func)   # registers capped for min_blocks/SM


# ---------------------------------------------------------------------------
# Direct kernel (past the paper: no shared memory, for high sparsity)
# ---------------------------------------------------------------------------

@functools.cache
def _direct_kernel(cols_per_lane: int, rows_per_warp: int, unroll: int, half: bool):
    """USpMM with ``B`` read straight from global memory (``variant="direct"``), ``b``/``c`` C-ordered.

    Warp ``w`` owns rows ``w * rows_per_warp ..`` and, in column tile ``blockIdx.y``, ``NT = 32 *
    cols_per_lane`` columns; lane ``l`` owns the columns ``g * 32 * vw + l * vw + x`` (``vw``
    elements per 16-byte read). For each of its rows the warp walks the ``K'`` entries ``unroll``
    at a time: every lane reads the same ``unroll`` (value, index) pairs (one broadcast load each,
    cached), then issues the ``unroll`` independent 16-byte reads of its columns of those rows of
    ``B`` before multiplying. No shared memory and no barrier: nothing waits for a whole chunk,
    which is what a row with few entries (high sparsity) needs; the price is that every entry
    reads its row of the B tile again (from L1 or L2), where the staged kernels reuse it from
    shared memory across the block's rows.

    With ``nsplit > 1`` block ``(x, y, z)`` walks only the ``z``-th of ``nsplit`` runs of each
    row's ``K'`` slots, and the tile is finished by :func:`_c_tile_epilogue`.

    Arguments, grouped: arrays ``vals``, ``idxs`` (``M x K'`` row-major copies of
    ``ellval``/``ellidx``), ``b`` (flat ``K*N``), ``c`` (``M x N``, out), ``part``, ``ticket``
    (as for :func:`_pipelined_kernel`); sizes ``m``, ``n``, ``kprime``; ``vec_ok`` (rows of
    ``b`` start on 16-byte boundaries), ``nsplit``.
    """
    nt = WARP_SIZE * cols_per_lane
    vw = min(cols_per_lane, 8 if half else 4)       # elements per 16-byte read of B
    nvec = cols_per_lane // vw
    gstride = WARP_SIZE * vw
    vload = {2: load2, 4: load4, 8: load8}[vw]
    fma_v = _fma_group(vw)
    in_type = float16 if half else float32
    finish = _c_tile_epilogue(rows_per_warp, cols_per_lane, vw)

    @inlined
    def fma_row(racc, a, b, base, n, interior, gcol):
        """``racc += a * (this lane's columns of B's flat row starting at base)``."""
        for g in range(nvec):
            if interior:
                fma_v(racc, g * vw, a, vload(b, base + g * gstride))        # ld.global.v4
            else:
                for x in range(vw):
                    col = gcol + g * gstride + x
                    racc[g * vw + x] += a * float32(b[base + g * gstride + x] if col < n else in_type(0.0))

    @cuda.jit
    def kernel(vals, idxs, b, c, part, ticket, m, n, kprime, vec_ok, nsplit):
        lane = cuda.threadIdx.x % WARP_SIZE
        row0 = (cuda.grid(1) // WARP_SIZE) * rows_per_warp
        gcol = cuda.blockIdx.y * nt + lane * vw                         # this lane's first column
        interior = vec_ok and cuda.blockIdx.y * nt + nt <= n
        s0, s1 = split_range(kprime, cuda.blockIdx.z, nsplit)          # this block's K' slots
        sh_last = cuda.shared.array(1, np.int32)
        acc = cuda.local.array((rows_per_warp, cols_per_lane), float32)
        racc = cuda.local.array(cols_per_lane, float32)
        for r in range(rows_per_warp):
            row = row0 + r
            for x in range(cols_per_lane):
                racc[x] = 0.0
            if row < m:                                                  # (uniform across the warp)
                vrow = vals[row, s0:s1]                                  # this block's slots of the row
                irow = idxs[row, s0:s1]                                  # (indices from 0: no wraparound)
                cnt = s1 - s0
                s = 0
                while s + unroll <= cnt:                                 # unroll entries: loads first
                    a0 = float32(vrow[s])
                    a1 = float32(vrow[s + 1])
                    o0 = irow[s] * n + gcol
                    o1 = irow[s + 1] * n + gcol
                    if unroll == 4:
                        a2 = float32(vrow[s + 2])
                        a3 = float32(vrow[s + 3])
                        o2 = irow[s + 2] * n + gcol
                        o3 = irow[s + 3] * n + gcol
                    fma_row(racc, a0, b, o0, n, interior, gcol)
                    fma_row(racc, a1, b, o1, n, interior, gcol)
                    if unroll == 4:
                        fma_row(racc, a2, b, o2, n, interior, gcol)
                        fma_row(racc, a3, b, o3, n, interior, gcol)
                    s += unroll
                while s < cnt:                                           # the rest, one at a time
                    fma_row(racc, float32(vrow[s]), b, irow[s] * n + gcol, n, interior, gcol)
                    s += 1
            for x in range(cols_per_lane):
                acc[r, x] = racc[x]
        finish(c, part, ticket, acc, row0, gcol, m, n, cuda.blockIdx.z, nsplit,
               cuda.blockIdx.x * cuda.gridDim.y + cuda.blockIdx.y, sh_last)

    return kernel


# ---------------------------------------------------------------------------
# Densified-tile kernel (past the paper: a loaded B element reused across rows)
# ---------------------------------------------------------------------------

def dense_tile_shared_bytes(rows_per_block: int, cols_per_lane: int, kc: int) -> int:
    """Shared memory of one dense-tile block: two buffers of a ``kc x NT`` float32 tile of B and a
    ``kc x R`` float32 tile of A^T."""
    return 2 * kc * (WARP_SIZE * cols_per_lane + rows_per_block) * _F32


@functools.cache
def _dense_tile_kernel(cols_per_lane: int, rows_per_warp: int, numwarps: int, kc: int, half: bool,
                       min_blocks: int = 1):
    """USpMM on densified tiles of A (``variant="dense_tile"``), ``b``/``c`` C-ordered.

    The kernels above read one ``B`` element per multiply-add, which caps them at a quarter of
    FP32 peak (shared-memory bandwidth). Here a lane keeps a ``rows_per_warp x cols_per_lane``
    tile of ``C`` and, for each ``k`` of a K chunk, reads ``cols_per_lane`` elements of row ``k``
    of the B tile and the ``rows_per_warp`` values ``A[rows, k]`` (two shared vector reads each)
    and does ``rows_per_warp * cols_per_lane`` multiply-adds: every B element feeds
    ``rows_per_warp`` of them. The price: the tile of A is dense, its zeros multiplied too (the
    stored entries scattered into ``A^T``, ``K x M`` float32, built once per matrix), so only a
    fraction ``K'/K`` of the multiply-adds count: it wins where the density ``K'/K`` is above what
    the sparse kernels' quarter-of-peak ceiling gives up. Staging is the pipelined kernel's
    (two buffers, the next chunk's loads in flight during the multiply, one barrier a chunk).

    With ``nsplit > 1`` block ``(x, y, z)`` multiplies only the ``z``-th of ``nsplit`` runs of K
    chunks, and the tile is finished by :func:`_c_tile_epilogue`.

    Arguments, grouped: arrays ``at`` (``K x M`` float32, A transposed and densified), ``b``
    (flat ``K*N``), ``c`` (``M x N``, out), ``part``, ``ticket`` (as for
    :func:`_pipelined_kernel`); sizes ``m``, ``n``, ``k``; ``vec_ok`` (rows of ``b`` start on
    16-byte boundaries), ``nsplit``.
    """
    nt = WARP_SIZE * cols_per_lane
    nthreads = numwarps * WARP_SIZE
    rows_per_block = numwarps * rows_per_warp
    nvec = cols_per_lane // 4                        # 16-byte shared reads of the B tile per k
    gstride = WARP_SIZE * 4
    ra = rows_per_warp // 4                          # 16-byte shared reads of A^T per k
    b_size = kc * nt
    a_size = kc * rows_per_block
    nb, bw, load_b, store_b = _b_tile_stager(nt, nthreads, b_size, half)
    na = -(-a_size // (nthreads * 4))                # 4-float pieces of A^T per thread per chunk
    two_b, two_a = 2 * b_size, 2 * a_size
    set4 = _set_group()
    finish = _c_tile_epilogue(rows_per_warp, cols_per_lane, 4)

    @inlined
    def load_chunk(q, t, at, b, m, n, k, interior, row0, col0, breg, areg):
        """Chunk ``q`` (the B tile and the ``kc x R`` tile of A^T) into this thread's registers."""
        k0 = q * kc
        load_b(k0, t, b, n, k, interior, col0, breg)
        for i in range(na):                                              # A^T rows: consecutive rows of A
            e = (t + i * nthreads) * 4
            gk = k0 + e // rows_per_block
            r = row0 + e % rows_per_block
            for j in range(4):
                areg[i, j] = at[gk, r + j] if e < a_size and gk < k and r + j < m else float32(0.0)

    @inlined
    def store_chunk(p, t, breg, areg, sh_b, sh_a):
        store_b(sh_b, p * b_size, t, breg)
        for i in range(na):
            e = (t + i * nthreads) * 4
            if e < a_size:
                store4(sh_a, p * a_size + e, (areg[i, 0], areg[i, 1], areg[i, 2], areg[i, 3]))

    @inlined
    def outer(acc, av, bv, sh_a, sh_b, ab, bb):
        """``acc += A[rows, k] (x) B[k, lane's columns]``: the two operands read with 16-byte
        shared reads (A's broadcast to the warp), ``rows_per_warp * cols_per_lane`` multiply-adds."""
        for g in range(nvec):
            set4(bv, g * 4, load4(sh_b, bb + g * gstride))               # ld.shared.v4: B[k, lane's cols]
        for g in range(ra):
            set4(av, g * 4, load4(sh_a, ab + g * 4))                     # ld.shared.v4 (broadcast): A[rows, k]
        for r in range(rows_per_warp):
            for x in range(cols_per_lane):
                acc[r, x] += av[r] * bv[x]

    @cuda.jit
    def kernel(at, b, c, part, ticket, m, n, k, vec_ok, nsplit):
        t = cuda.threadIdx.x
        lane = t % WARP_SIZE
        row0 = cuda.blockIdx.x * rows_per_block
        warp_rb0 = (t // WARP_SIZE) * rows_per_warp
        col0 = cuda.blockIdx.y * nt
        interior = vec_ok and col0 + nt <= n
        q0, q1 = split_range((k + kc - 1) // kc, cuda.blockIdx.z, nsplit)   # this block's K chunks,
        nchunks = q1 - q0                                                # through views from its first row
        kb = q0 * kc                                                     # (indices from 0: no wraparound)
        at_k = at[kb:, :]
        b_k = b[kb * n:]
        k_left = k - kb
        sh_last = cuda.shared.array(1, np.int32)
        sh_b = cuda.shared.array(two_b, float32, alignment=SMEM_ALIGN)
        sh_a = cuda.shared.array(two_a, float32, alignment=SMEM_ALIGN)
        breg = cuda.local.array((nb, bw), float32)
        areg = cuda.local.array((na, 4), float32)
        acc = cuda.local.array((rows_per_warp, cols_per_lane), float32)
        av = cuda.local.array(rows_per_warp, float32)
        bv = cuda.local.array(cols_per_lane, float32)
        for r in range(rows_per_warp):
            for x in range(cols_per_lane):
                acc[r, x] = 0.0
        load_chunk(0, t, at_k, b_k, m, n, k_left, interior, row0, col0, breg, areg)
        store_chunk(0, t, breg, areg, sh_b, sh_a)
        cuda.syncthreads()
        for j in range(nchunks):
            p = j % 2
            if j + 1 < nchunks:                                          # next chunk's loads in flight
                load_chunk(j + 1, t, at_k, b_k, m, n, k_left, interior, row0, col0, breg, areg)
            bb = p * b_size + lane * 4
            ab = p * a_size + warp_rb0
            for kk in range(0, kc, 2):                                   # outer products, two k a step
                outer(acc, av, bv, sh_a, sh_b, ab + kk * rows_per_block, bb + kk * nt)
                outer(acc, av, bv, sh_a, sh_b, ab + (kk + 1) * rows_per_block, bb + (kk + 1) * nt)
            if j + 1 < nchunks:
                store_chunk(1 - p, t, breg, areg, sh_b, sh_a)
            cuda.syncthreads()
        finish(c, part, ticket, acc, row0 + warp_rb0, col0 + lane * 4, m, n, cuda.blockIdx.z, nsplit,
               cuda.blockIdx.x * cuda.gridDim.y + cuda.blockIdx.y, sh_last)

    if cuda_config.ENABLE_CUDASIM:
        return kernel
    return cuda.jit(launch_bounds=(nthreads, min_blocks))(kernel.py_func)


# ---------------------------------------------------------------------------
# Warp-split kernel (past the paper: small N, output grids too small to fill the GPU)
# ---------------------------------------------------------------------------

def warp_split_shared_bytes(nwarp: int, rows_per_warp: int, cols_per_lane: int) -> int:
    """Shared memory of one warp-split block: each warp's float32 partial tile of the block's
    ``rows_per_warp`` rows x ``32 * cols_per_lane`` columns (summed in a fixed order at the end)."""
    return nwarp * rows_per_warp * WARP_SIZE * cols_per_lane * _F32


def _put_group(width: int):
    """``put(dst, u, o, v)``: ``dst[u, o + x] = float32(v[x])`` for ``x < width`` (a power of two), as
    two puts of half the width on constant slices of ``v`` down to single stores: every tuple index is
    known at compile time (a loop over a tuple that the compiler does not unroll indexes it through a
    chain of branches, see :func:`_fma_group`)."""
    if width == 1:
        @inlined
        def put(dst, u, o, v):
            dst[u, o] = float32(v[0])
        return put
    half = width // 2
    put_half = _put_group(half)

    @inlined
    def put(dst, u, o, v):
        put_half(dst, u, o, v[:half])
        put_half(dst, u, o + half, v[half:])
    return put


@functools.cache
def _warp_split_kernel(cols_per_lane: int, rows_per_warp: int, numwarps: int, unroll: int, half: bool,
                       min_blocks: int = 1):
    """USpMM for small N with each row's K' entries split over the warps of a block
    (``variant="warp_split"``), ``b``/``c`` C-ordered.

    Why: at N = 128 and M <= 2048 (the ResNet-50 layers of Table 1) the kernels above have fewer
    output tiles than the GPU has SMs and split K over several blocks (``splits``); every such launch
    pays a fence, a ticket and a serial sum of the partial tiles by one block per tile
    (:func:`split_sum`; ncu on the H100, 512 x 1024 x 128 float32, direct kernel with 16 splits: the
    SMs were idle 43% of its 32.5 us), and its blocks walk only a few steps of 4 loads each. Here the
    split stays inside a block: no global hand-over, and ``numwarps`` warps a block.

    Block ``(x, y)`` owns rows ``x * R .. x * R + R - 1`` (``R = rows_per_warp``) and the ``NT = 32
    * cols_per_lane`` columns of column tile ``y``. Warp ``w`` takes the ``w``-th of ``numwarps``
    near-equal runs of each row's K' slots (:func:`_split_range`; indices ascend, so about the
    ``w``-th part of K) for all ``R`` rows; lane ``l`` owns the columns ``g * 32 * vw + l * vw +
    x`` (``vw`` elements per read of at most 16 bytes), as in :func:`_direct_kernel`:

    1. per row, ``unroll`` entries a step: their values and B offsets first (the same address in
       every lane: one broadcast load each, served by L1 after the line's first entry), then the
       ``unroll * cols_per_lane / vw`` vector reads of B into registers, then the multiply-adds,
       so ``unroll`` rows of B are in flight per warp; the last ``< unroll`` entries of the run
       are one guarded step (not one at a time: each would wait a full memory latency);
    2. each warp writes its float32 partial row tile to its own part of shared memory
       (``st.shared.v4``), one barrier;
    3. every thread sums 4 consecutive outputs over the warps in the fixed order ``0, 1, ...,
       numwarps - 1`` (``ld.shared.v4``) and writes them to C: deterministic, no atomics.

    The price against the staged kernels: every entry reads its row of B from L1/L2 (no reuse
    through shared memory), ``M * K' * N`` elements of B in all; at small N the staged kernels'
    reuse needs more rows per block than there are blocks to fill the GPU with. What limits it is
    the latency of those reads (ncu, 512 x 1024 x 128 float32: L2 at 38% of its throughput, 9 of
    16 cycles between a warp's instructions waiting on them).

    Registers decide how many warps an SM holds, and with them the rows of B in flight: the B
    offsets are kept in 32 bits (``K * N < 2**31``, checked by the launcher; 64-bit offsets cost 9
    more registers at ``unroll = 8``), and ``min_blocks`` caps the registers (launch bounds) so that
    that many blocks fit an SM (sm_90, float32, 4 columns a lane: 8 warps at ``unroll = 4`` take 56
    registers, already 4 blocks an SM; at ``unroll = 8`` 85, 80 with ``min_blocks = 3``; no spills).

    Measured (H100, float32, "CUDA-core latency" in ``experiments/results/uspmm.md``): at 128^3 the
    kernel runs 5.0-6.0 us where a probe doing only the two dependent reads and the shared-memory sum
    (no multiply-add) runs 4.46 us and an empty kernel 3.14 us. What did pay: fewer warps a block where the
    grid has many blocks (1024^3 90%, one run: 8 warps 54.0 us, 4 warps 46.3, 2 warps 42.8, cuSPARSE CSR
    69.2; one warp 41.0 in a later run).

    Arguments, grouped: arrays ``vals``, ``idxs`` (``M x K'`` row-major copies of
    ``ellval``/``ellidx``), ``b`` (flat ``K*N``), ``c`` (``M x N``, out); sizes ``m``, ``n``,
    ``kprime``; ``vec_ok`` (rows of ``b`` start on a ``vw``-element boundary).
    """
    nt = WARP_SIZE * cols_per_lane
    nthreads = numwarps * WARP_SIZE
    vw = min(cols_per_lane, 8 if half else 4)       # elements per vector read of B (<= 16 bytes)
    nvec = cols_per_lane // vw
    gstride = WARP_SIZE * vw                         # columns between a lane's two groups (cpl 8, float32)
    vload = {2: load2, 4: load4, 8: load8}[vw]
    put = _put_group(vw)
    in_type = float16 if half else float32
    tile = rows_per_warp * nt                        # outputs of a block
    part_size = numwarps * tile                      # every warp's partial tile: [row, warp, column]

    @inlined
    def entries(vrow, irow, s, n, gcol, av, ov):
        """The values and B offsets of the ``unroll`` entries from slot ``s`` (broadcast loads)."""
        for u in range(unroll):
            av[u] = float32(vrow[s + u])
            ov[u] = irow[s + u] * n + gcol

    @inlined
    def reads(b, ov, bv):
        """The vector reads of B of ``unroll`` entries: that many rows of B in flight."""
        for u in range(unroll):
            for g in range(nvec):
                put(bv, u, g * vw, vload(b, ov[u] + g * gstride))        # ld.global.v4

    @inlined
    def fmas(racc, av, bv):
        """The multiply-adds of ``unroll`` entries, in slot order."""
        for u in range(unroll):
            for x in range(cols_per_lane):
                racc[x] += av[u] * bv[u, x]

    @inlined
    def step_interior(racc, vrow, irow, s, b, n, gcol, av, ov, bv):
        """Phase 1, ``unroll`` entries from slot ``s`` (all inside the run), 16-byte reads of B."""
        entries(vrow, irow, s, n, gcol, av, ov)
        reads(b, ov, bv)
        fmas(racc, av, bv)

    @inlined
    def step_tail(racc, vrow, irow, s, take, b, n, gcol, interior, av, ov, bv):
        """Phase 1, the first ``take`` (< ``unroll``, or any count off the interior) entries from
        slot ``s``, each guarded; off the interior B is read element by element, zero past ``n``."""
        for u in range(unroll):
            if u < take:
                av[u] = float32(vrow[s + u])
                ov[u] = irow[s + u] * n + gcol
        for u in range(unroll):
            if u < take:
                for g in range(nvec):
                    if interior:
                        put(bv, u, g * vw, vload(b, ov[u] + g * gstride))
                    else:
                        for x in range(vw):
                            col = gcol + g * gstride + x
                            bv[u, g * vw + x] = float32(b[ov[u] + g * gstride + x] if col < n else in_type(0.0))
        for u in range(unroll):
            if u < take:
                for x in range(cols_per_lane):
                    racc[x] += av[u] * bv[u, x]

    @inlined
    def put_partial(sh_part, base, racc):
        """This lane's ``cols_per_lane`` sums of one row into the warp's partial (vector stores)."""
        for g in range(nvec):
            o = base + g * gstride
            if vw == 2:
                store2(sh_part, o, (racc[g * 2], racc[g * 2 + 1]))
            else:
                for h in range(vw // 4):
                    q = g * vw + h * 4
                    store4(sh_part, o + h * 4, (racc[q], racc[q + 1], racc[q + 2], racc[q + 3]))

    @cuda.jit
    def kernel(vals, idxs, b, c, m, n, kprime, vec_ok):
        t = cuda.threadIdx.x
        warp = t // WARP_SIZE
        lane = t % WARP_SIZE
        row0 = cuda.blockIdx.x * rows_per_warp
        col0 = cuda.blockIdx.y * nt
        gcol = col0 + lane * vw                                          # this lane's first column
        interior = vec_ok and col0 + nt <= n                             # every read of B is a vector
        s0, s1 = split_range(kprime, warp, numwarps)                    # this warp's run of K' slots
        cnt = s1 - s0
        sh_part = cuda.shared.array(part_size, float32, alignment=SMEM_ALIGN)
        racc = cuda.local.array(cols_per_lane, float32)
        av = cuda.local.array(unroll, float32)
        ov = cuda.local.array(unroll, np.int32)                          # B offsets: K * N < 2**31
        bv = cuda.local.array((unroll, cols_per_lane), float32)
        for r in range(rows_per_warp):
            row = row0 + r
            for x in range(cols_per_lane):
                racc[x] = 0.0
            if row < m:                                                  # (uniform across the block)
                vrow = vals[row, s0:s1]                                  # views from the run's start:
                irow = idxs[row, s0:s1]                                  # indices from 0, no wraparound
                s = 0
                if interior:
                    while s + unroll <= cnt:
                        step_interior(racc, vrow, irow, s, b, n, gcol, av, ov, bv)
                        s += unroll
                while s < cnt:                                           # the rest (all of it off the
                    take = min(cnt - s, unroll)                          # interior), unroll at a time
                    step_tail(racc, vrow, irow, s, take, b, n, gcol, interior, av, ov, bv)
                    s += take
            put_partial(sh_part, (r * numwarps + warp) * nt + lane * vw, racc)   # 2. the warp's partial
        cuda.syncthreads()
        for e in range(t * 4, tile, nthreads * 4):                       # 3. fixed-order sum, 4 outputs
            r = e // nt                                                  #    a thread a step
            j = e % nt
            base = r * numwarps * nt + j
            v = load4(sh_part, base)                                     # warp 0's partial
            c0, c1, c2, c3 = v[0], v[1], v[2], v[3]
            for w in range(1, numwarps):                                 # + warp 1, 2, ... in order
                v = load4(sh_part, base + w * nt)
                c0 += v[0]
                c1 += v[1]
                c2 += v[2]
                c3 += v[3]
            row = row0 + r
            col = col0 + j
            if row < m:
                if col < n:
                    c[row, col] = c0
                if col + 1 < n:
                    c[row, col + 1] = c1
                if col + 2 < n:
                    c[row, col + 2] = c2
                if col + 3 < n:
                    c[row, col + 3] = c3

    if cuda_config.ENABLE_CUDASIM or min_blocks == 1:   # (no bounds: ptxas took 96 registers instead of 86
        return kernel                                    # for 8 warps, unroll 8 with launch_bounds=(256, 1))
    return cuda.jit(launch_bounds=(nthreads, min_blocks))(kernel.py_func)   # registers capped for min_blocks/SM


# ---------------------------------------------------------------------------
# Launchers
# ---------------------------------------------------------------------------

def _launch_listing1(dell, bdev, c, nwarp, vsize, vecsize):
    m, n = c.shape
    numwarps = vsize * nwarp
    threads = WARP_SIZE * numwarps
    if threads > 1024:
        raise ValueError(f"nwarp, vsize: a block of 32 * vsize * nwarp = {threads} threads exceeds 1024")
    shared = vsize * numwarps * WARP_SIZE * vecsize * _F32
    if shared > SHARED_LIMIT:
        raise ValueError(f"nwarp, vsize, vecsize: sh_c needs {shared} bytes of shared memory "
                         f"(vsize * 32 * vsize * nwarp * vecsize * 4), more than {SHARED_LIMIT}")
    ntiles = cdiv(m, WARP_SIZE * vecsize)
    kernel = _listing1_kernel(vsize, numwarps, vecsize)
    args = (dell.arrays["ellval"], dell.arrays["ellidx"], bdev, c, m, n, dell.host.kprime)
    _launch(kernel, ntiles * cdiv(n, vsize), threads, args, "nwarp, vsize, vecsize")


def _row_major_shape(variant, order, m, n, nwarp, rows_per_warp, cols_per_lane):
    """Threads per block and grid of the row-major-B variants (a warp owns ``rows_per_warp`` rows x
    ``32 * cols_per_lane`` columns of C), after the two checks they share."""
    if order != "C":
        raise ValueError(f"b: variant '{variant}' needs a C-ordered (row-major) b; use variant 'listing1' "
                         "for the column-major layout of Eq. 2")
    threads = WARP_SIZE * nwarp
    if threads > 1024:
        raise ValueError(f"nwarp: a block of 32 * nwarp = {threads} threads exceeds 1024")
    return threads, (cdiv(m, nwarp * rows_per_warp), cdiv(n, WARP_SIZE * cols_per_lane))


def _launch_pipelined(dell, bdev, order, c, nwarp, rows_per_warp, cols_per_lane, kc, unroll, min_blocks, splits):
    m, n = c.shape
    k = dell.shape[1]
    half = dell.dtype == np.float16
    threads, grid = _row_major_shape("pipelined", order, m, n, nwarp, rows_per_warp, cols_per_lane)
    if cols_per_lane not in (2, 4, 8):
        raise ValueError(f"cols_per_lane: must be 2, 4 or 8 (vector reads of the B tile), got {cols_per_lane}")
    if unroll not in (2, 4):
        raise ValueError(f"unroll: must be 2 or 4 (one shared vector read of that many entries), got {unroll}")
    check_divisible(kc, unroll, "kc")
    if kc * WARP_SIZE * cols_per_lane > np.iinfo(np.int16).max:
        raise ValueError(f"kc, cols_per_lane: tile offsets up to kc * 32 * cols_per_lane = "
                         f"{kc * WARP_SIZE * cols_per_lane} do not fit the 16-bit staged offsets")
    shared = pipelined_shared_bytes(nwarp * rows_per_warp, cols_per_lane, kc)
    if shared > SHARED_LIMIT:
        raise ValueError(f"kc, cols_per_lane, nwarp, rows_per_warp: two buffers of the B tile and the staged "
                         f"entries need {shared} bytes of shared memory, more than {SHARED_LIMIT}")
    bw = 16 // dell.dtype.itemsize
    vec_ok = n % bw == 0 and aligned(bdev, bw)
    kernel = _pipelined_kernel(cols_per_lane, rows_per_warp, nwarp, kc, unroll, bool(half), min_blocks)
    vals, idxs = dell.row_major()
    grid, part, ticket, nsplit = split_buffers(dell, grid, n, splits, cdiv(k, kc))
    _launch(kernel, grid, threads, (vals, idxs, dell.slot_ptr(kc), flat_view(bdev), c, part, ticket,
                                    m, n, k, vec_ok, nsplit), "nwarp, rows_per_warp, cols_per_lane")


def _check_vector_columns(cols_per_lane, half) -> None:
    """Columns a lane for kernels that read B rows by vector loads: 2, 4 or 8 (float16: 4 or 8)."""
    if cols_per_lane not in (2, 4, 8) or (half and cols_per_lane == 2):
        raise ValueError(f"cols_per_lane: must be 2, 4 or 8 (4 or 8 for float16: vector reads of B), "
                         f"got {cols_per_lane}")


def _launch_direct(dell, bdev, order, c, nwarp, rows_per_warp, cols_per_lane, unroll, splits):
    m, n = c.shape
    half = dell.dtype == np.float16
    threads, grid = _row_major_shape("direct", order, m, n, nwarp, rows_per_warp, cols_per_lane)
    _check_vector_columns(cols_per_lane, half)
    if unroll not in (2, 4):
        raise ValueError(f"unroll: must be 2 or 4, got {unroll}")
    vw = min(cols_per_lane, 8 if half else 4)
    vec_ok = n % vw == 0 and aligned(bdev, vw)
    kernel = _direct_kernel(cols_per_lane, rows_per_warp, unroll, bool(half))
    vals, idxs = dell.row_major()
    kprime = dell.host.kprime
    grid, part, ticket, nsplit = split_buffers(dell, grid, n, splits, kprime)
    _launch(kernel, grid, threads, (vals, idxs, flat_view(bdev), c, part, ticket, m, n, kprime,
                                    vec_ok, nsplit), "nwarp, rows_per_warp, cols_per_lane")


def _launch_dense_tile(dell, bdev, order, c, nwarp, rows_per_warp, cols_per_lane, kc, min_blocks, splits):
    m, n = c.shape
    k = dell.shape[1]
    half = dell.dtype == np.float16
    threads, grid = _row_major_shape("dense_tile", order, m, n, nwarp, rows_per_warp, cols_per_lane)
    if cols_per_lane not in (4, 8) or rows_per_warp not in (4, 8):
        raise ValueError(f"cols_per_lane, rows_per_warp: must be 4 or 8 each (16-byte shared reads), "
                         f"got {cols_per_lane}, {rows_per_warp}")
    check_divisible(kc, 2, "kc")
    shared = dense_tile_shared_bytes(nwarp * rows_per_warp, cols_per_lane, kc)
    if shared > SHARED_LIMIT:
        raise ValueError(f"kc, cols_per_lane, nwarp, rows_per_warp: two buffers of the B and A tiles need "
                         f"{shared} bytes of shared memory, more than {SHARED_LIMIT}")
    bw = 16 // dell.dtype.itemsize
    vec_ok = n % bw == 0 and aligned(bdev, bw)
    kernel = _dense_tile_kernel(cols_per_lane, rows_per_warp, nwarp, kc, bool(half), min_blocks)
    grid, part, ticket, nsplit = split_buffers(dell, grid, n, splits, cdiv(k, kc))
    _launch(kernel, grid, threads, (dell.dense_t(), flat_view(bdev), c, part, ticket, m, n, k, vec_ok, nsplit),
            "nwarp, rows_per_warp, cols_per_lane")


def _launch_warp_split(dell, bdev, order, c, nwarp, rows_per_warp, cols_per_lane, unroll, min_blocks):
    m, n = c.shape
    half = dell.dtype == np.float16
    threads, _ = _row_major_shape("warp_split", order, m, n, nwarp, rows_per_warp, cols_per_lane)
    _check_vector_columns(cols_per_lane, half)
    if unroll not in (2, 4, 8):
        raise ValueError(f"unroll: must be 2, 4 or 8 (rows of B in flight per warp), got {unroll}")
    shared = warp_split_shared_bytes(nwarp, rows_per_warp, cols_per_lane)
    if shared > SHARED_LIMIT:
        raise ValueError(f"nwarp, rows_per_warp, cols_per_lane: the warps' partial tiles need {shared} bytes of "
                         f"shared memory (nwarp * rows_per_warp * 32 * cols_per_lane * 4), more than {SHARED_LIMIT}")
    vw = min(cols_per_lane, 8 if half else 4)
    vec_ok = n % vw == 0 and aligned(bdev, vw)
    kernel = _warp_split_kernel(cols_per_lane, rows_per_warp, nwarp, unroll, bool(half), min_blocks)
    vals, idxs = dell.row_major()
    grid = (cdiv(m, rows_per_warp), cdiv(n, WARP_SIZE * cols_per_lane))   # a block: R rows x NT columns
    _launch(kernel, grid, threads, (vals, idxs, flat_view(bdev), c, m, n, dell.host.kprime, vec_ok),
            "nwarp, rows_per_warp, cols_per_lane")


def default_kc(variant: str, rows_per_block: int, cols_per_lane: int) -> int:
    """Rows of B a shared tile holds when the caller names none: for "pipelined" and "dense_tile" the
    largest of 64, 32, 16 whose two buffers fit :data:`SHARED_LIMIT` (with their own other defaults, 64 asked
    for 69,728 / 67,584 bytes)."""
    need = {"pipelined": pipelined_shared_bytes, "dense_tile": dense_tile_shared_bytes}.get(variant)
    if need is None:
        return 64
    return next((kc for kc in (64, 32, 16) if need(rows_per_block, cols_per_lane, kc) <= SHARED_LIMIT), 16)


def _run(dell, bdev, order, like, *, variant="listing1", nwarp=1, vsize=8, vecsize=1,
         rows_per_warp=4, cols_per_lane=4, kc=None, unroll=4, min_blocks=1, splits=1):
    """Check the tunables, allocate ``C`` in ``order`` and launch; returns the device array. ``kc`` left out:
    64, or for "pipelined" and "dense_tile" the largest of 64, 32, 16 whose block fits the 48 KB of shared
    memory (:func:`default_kc`)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant: must be one of {VARIANTS}, got {variant!r}")
    nwarp = check_int(nwarp, "nwarp", minimum=1, maximum=32)
    vsize = check_int(vsize, "vsize", minimum=1, maximum=32)
    vecsize = check_int(vecsize, "vecsize", minimum=1, maximum=4)
    if vecsize == 3:
        raise ValueError("vecsize: must be 1, 2 or 4, got 3")
    rows_per_warp = check_int(rows_per_warp, "rows_per_warp", minimum=1, maximum=16)
    cols_per_lane = check_int(cols_per_lane, "cols_per_lane", minimum=1, maximum=8)
    kc = default_kc(variant, nwarp * rows_per_warp, cols_per_lane) if kc is None else check_int(kc, "kc", minimum=1)
    splits = check_int(splits, "splits", minimum=1, maximum=64)
    if splits != 1 and variant in ("listing1", "warp_split"):
        raise ValueError(f"splits: variant '{variant}' does not split K (pipelined, direct and dense_tile do), "
                         f"got {splits}")
    m, n = dell.shape[0], bdev.shape[1]
    if variant == "warp_split":
        check_int32(dell.shape[1] * n, "b", "elements (K * N) with variant 'warp_split'",
                    "it keeps offsets into b in 32 bits")
    c = output((m, n), dell.dtype, like=like, order=order)
    if m and n:
        if variant == "listing1":
            _launch_listing1(dell, bdev, c, nwarp, vsize, vecsize)
        elif variant == "pipelined":
            _launch_pipelined(dell, bdev, order, c, nwarp, rows_per_warp, cols_per_lane, kc, unroll,
                              check_int(min_blocks, "min_blocks", minimum=1, maximum=32), splits)
        elif variant == "dense_tile":
            _launch_dense_tile(dell, bdev, order, c, nwarp, rows_per_warp, cols_per_lane, kc,
                               check_int(min_blocks, "min_blocks", minimum=1, maximum=32), splits)
        elif variant == "warp_split":
            _launch_warp_split(dell, bdev, order, c, nwarp, rows_per_warp, cols_per_lane, unroll,
                               check_int(min_blocks, "min_blocks", minimum=1, maximum=32))
        else:
            _launch_direct(dell, bdev, order, c, nwarp, rows_per_warp, cols_per_lane, unroll, splits)
    return c


def uspmm(ell, b, *, config=None, **tunables):
    """``C = A @ b`` for a uniform-sparse ``A`` (``ELL`` or :class:`DeviceELL`, ``M x K``)
    and a dense ``b`` (``K x N``, C or F order, ``A``'s dtype: float32, float16 or bfloat16).

    Returns ``C`` (``M x N``, float32 accumulation rounded to ``b``'s dtype) in
    ``b``'s memory order and array kind (NumPy, Numba, CuPy, PyTorch).

    Tunables: ``variant`` (:data:`VARIANTS`); for "listing1" the paper's
    ``nwarp`` (NWarp, default 1), ``vsize`` (VSize, 8) and ``vecsize``
    (vecSize: 1 = USpMM, 2 or 4 = USpMM-Vec); for the others ``nwarp`` (warps
    per block), ``rows_per_warp`` (4), ``cols_per_lane`` (2, 4 or 8), and as
    they apply ``kc`` ("pipelined", "dense_tile": rows of B per shared tile,
    :func:`default_kc`), ``unroll`` ("pipelined", "direct":
    entries per step, 2 or 4), ``min_blocks`` ("pipelined", "dense_tile", "warp_split":
    resident blocks per SM the registers are capped for) and ``splits``
    ("pipelined", "direct", "dense_tile": the K range of each output tile
    split over that many blocks, their float32 partial tiles summed in a
    fixed order, so results stay bit-identical; for grids too small to fill
    the GPU, e.g. N = 128 at M = 1024); for "warp_split" ``nwarp`` warps
    split each row's K' entries, ``rows_per_warp`` rows a block, ``unroll``
    (2, 4 or 8) rows of B in flight per warp and ``min_blocks`` as above
    (:func:`_warp_split_kernel`); all
    but "listing1" need a C-ordered ``b``. ``config`` is a dict of these, ``"auto"`` for the
    autotuner's cached choice or ``"heuristic"`` for the router's rule
    (:func:`resolved`), instead of keyword tunables. Those may
    choose ``variant="tensor_core"`` (row-major ``b``): the call goes to :func:`sparsekit.gpu.uspmm_tc.uspmm` with
    the other tunables (same result contract), or ``variant="wgmma"`` (float32, row-major ``b``, a compute
    capability 9.0 GPU): :func:`sparsekit.gpu.uspmm_wgmma.uspmm` (its tunables, e.g. ``precision``: "auto", "3xtf32"
    or "tf32+bf16"), or ``variant="decode"`` (float16 or bfloat16, N <= 64): the memory-bound row kernels,
    :mod:`sparsekit.gpu.spmm_ell_compact` at N = 1 where rows hold more than an eighth of K, else
    :mod:`sparsekit.gpu.spmm_ell_rows` (``x`` gathered from shared memory), :mod:`sparsekit.gpu.spmm_tiled` above,
    or ``variant="bitmap"`` (float16 or bfloat16, N <= 64): the weight's entries as a TiledBitmap on tensor cores
    (:mod:`sparsekit.gpu.spmm_bitmap`, with its tunables ``rows``, ``slices``, ``splits``, ``stages``; "decode"
    takes none).
    """
    dell = prepare(ell)
    bop, order = rhs(b, dell, "b")
    if config is not None:
        tunables = dict(resolved(config, dell, bop.dev.shape[1], order), **tunables)
    variant = tunables.get("variant")
    if variant in ("decode", "bitmap"):
        given = sorted(set(tunables) - {"variant"} - (BITMAP_TUNABLES if variant == "bitmap" else set()))
        if given:
            raise TypeError(f"uspmm: variant={variant!r} takes "
                            + (f"only {sorted(BITMAP_TUNABLES)}" if variant == "bitmap" else "no tunables")
                            + f", got {given}")
    if variant == "decode":                        # the memory-bound path of small N (sparsekit.router.DECODE)
        if bop.dev.shape[1] > MAX_DECODE_N:
            raise ValueError(f"b: N = {bop.dev.shape[1]} with the decode kernel (N <= {MAX_DECODE_N}); a "
                             f"{dell.dtype} product of more columns runs on the tensor-core kernel, which takes "
                             f"a row-major (C-ordered) b")
        m, k = dell.shape
        if bop.dev.shape[1] == 1 and k <= MAX_ELL_ROWS_K:     # N = 1: x gathered from shared memory, 1.6x faster
            x = b.reshape(1, k)                                 # (sparse_linear.md)
            if compact_wins(dell.host.values.shape[1], k, m):   # fewer bytes a weight (uspmm_decode.md)
                return spmm_ell_compact_linear(*dell.compact_rows(), k, x).reshape(m, 1)
            return spmm_ell_rows_linear(*dell.ell_rows(), k, x).reshape(m, 1)
        if order == "C":
            return spmm_tiled(dell.tiled_rows(), b)
        return spmm_tiled_linear(dell.tiled_rows(), b.T).T    # a column-major B is a row-major X = B^T
    if variant == "bitmap":                        # the weight's entries on tensor cores (sparsekit.router.BITMAP)
        if bop.dev.shape[1] > BITMAP_MAX_N:
            raise ValueError(f"b: N = {bop.dev.shape[1]} with the bitmap kernel (N <= {BITMAP_MAX_N})")
        kept = {key: v for key, v in tunables.items() if key != "variant"}
        if order == "C":
            return spmm_bitmap(dell.bitmap(), b, **kept)
        return spmm_bitmap_linear(dell.bitmap(), b.T, **kept).T      # a column-major B is a row-major X = B^T
    if dell.dtype == BFLOAT16 and variant != "tensor_core":
        raise ValueError(f"variant: bfloat16 runs on the decode and bitmap kernels only for N <= 64 "
                         f"(variant='decode' or 'bitmap') and on the tensor-core kernel at any N "
                         f"(variant='tensor_core'), got {variant!r}")
    if variant in ("tensor_core", "wgmma"):        # routed (sparsekit.router) or a tuned winner
        if variant == "tensor_core":
            from sparsekit.gpu.uspmm_tc import run as run_tensor
        else:
            from sparsekit.gpu.uspmm_wgmma import run as run_tensor
        return result(run_tensor(dell, bop, order, **{key: v for key, v in tunables.items() if key != "variant"}),
                      like=bop)
    return result(_run(dell, bop.dev, order, bop, **tunables), like=bop)


def resolved(config, dell, n: int, order: str) -> dict:
    """The tunables ``config`` ("auto", "heuristic" or a dict) names for ``dell`` times a ``K x n`` B in
    ``order`` on this device (:func:`sparsekit.tune_cache.resolve`: the tuned winner or the router's
    choice; the wgmma kernel only on a GPU that runs it). A name is resolved once per weight, ``n`` and
    order (a prepared weight lives on one device), and again after this process stores a tuned winner
    (a store by another process is seen by weights prepared after it)."""
    if not (isinstance(config, str) and config in ("auto", "heuristic")):
        return resolve(config, dell, n, order)          # a dict passes through; anything else is refused

    def build():
        from sparsekit.gpu.uspmm_wgmma import supported
        return resolve(config, dell, n, order, wgmma=supported())
    return dict(dell.cached(("config", config, n, order, stores()), build, device=False))


def uspmm_linear(ell, x, **tunables):
    """``Y = x @ W^T`` for a PyTorch ``Linear`` weight ``W`` (``ell``, out x in) and a
    row-major ``x`` (``N x K``): Eq. 2, ``Y^T = W @ x^T``, with no data moved.

    ``x.T`` is a column-major ``K x N`` array, so Listing 1 runs in its own
    layout and writes ``Y^T`` column-major, i.e. ``Y`` row-major (``N x M``).
    Equals :func:`sparsekit.reference.uspmm.uspmm_linear`. Tunables as for :func:`uspmm`
    (variant "listing1" only).
    """
    dell = prepare(ell)
    xop = operand(x, "x", dtypes=(dell.dtype,), ndim=2, shape=(None, dell.shape[1]), order="C")
    yt = _run(dell, xop.dev.T, "F", xop, **tunables)   # Y^T: M x N, column-major
    return result(yt.T, like=xop)
