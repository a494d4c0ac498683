"""Memory-bound half-precision SpMM: ``C = A @ B`` (or a linear layer's ``Y = X A^T``) for a TiledCSL ``A``
and small ``N``.

Equals ``reference/spmm_tiled.py``. At the batch sizes of LLM decoding (``N`` from 1 to 64) the product is
bound by reading the weight, :class:`~sparsekit.formats.TiledCSL`'s 4-byte words. Two kernels, chosen by
the matrix's tile shape:

**Rows** (``tile = (1, TK)``, :func:`_row_kernel`): one warp a row, each lane reading 16 bytes (4 words)
at a time with several loads in flight, multiplying each value by its row of ``B`` (gathered from L1/L2)
on CUDA cores into float32 accumulators, then a warp sum. The linear form's ``X`` (``N x K``) is first
staged as ``B = X^T`` with rows padded to 8 halves (:func:`stage_transposed`, a second launch), so a kept
weight reads its ``N`` inputs in 16-byte loads instead of ``N`` scattered 2-byte ones. The fastest at N <= 16 (measured against dense
cuBLAS in ``experiments/results/uspmm_decode.md``); from N = 8 its arithmetic, not the bytes, sets the time.

**Tiles** (``TM >= 16``, :func:`_kernel`): "load as sparse, compute as dense" (Flash-LLM, VLDB 2024), the
arithmetic on tensor cores. Correct at every N up to 64, but on the H200 slower than the rows kernel and
than dense cuBLAS: its time goes to per-tile instructions (zeroing, scattering, copies and their 64-bit
address arithmetic, about 2,500 warp instructions a 64 x 64 tile), not to the weight's bytes:

1. **Copy** (``cp.async``, 16 bytes a thread a step): tile ``t + S - 1``'s words and its slice of ``B`` into
   shared-memory stage ``(t - 1) % S`` while tile ``t`` is multiplied: ``S - 2`` tiles in flight a block.
   Reading the weight at full bandwidth needs tens of kilobytes in flight per SM, so ``S`` grows as the
   tiles thin out with sparsity (:func:`copy_stages`).
2. **Scatter**: each word of tile ``t + 1`` writes its value at its local index of a zeroed ``TM x TK`` dense
   tile (padding words write 0 to a sink past the tile).
3. **Multiply**: each warp owns 16 rows: ``ldmatrix`` (A fragment) and ``ldmatrix.trans`` (B fragments)
   from the dense tile of ``t``, ``mma.sync.m16n8k16`` with float32 accumulators, ``N`` padded to a
   multiple of 8 with zero columns.
4. **Zero** the dense tile of ``t - 1`` for reuse three tiles on. Three dense buffers make one barrier a tile
   enough: a buffer is scattered (before barrier ``t``), multiplied (after it), zeroed (after barrier
   ``t + 1``) and scattered again (after barrier ``t + 2``), each step a barrier from the next.

A block owns ``TM = 16 * warps`` rows and a contiguous range of the row's tiles (split K, ``splits``
blocks a row of tiles, so a 4096-row weight still fills 132 SMs). Each writes its float32 partial sums
to a workspace; the last of a row's blocks to finish (a counter per row of tiles, reset by that block)
adds the partials in split order (:func:`gpu.split_k.split_ticket`), so the result is the same on every run,
and writes ``C`` rounded once to the dtype.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
from numba import cuda, float32, int32, uint16, uint32
from numba.cuda import config as cuda_config

from gpu.inline import inlined
from gpu.mma import (cp_async16, cp_async_commit, cp_async_wait, ldmatrix_x4, ldmatrix_x4_trans,
                     mma_m16n8k16_bf16_f32, mma_m16n8k16_f16_f32, pack_bf16x2, shared_addr, st_shared4, widen_bf16,
                     widen_f16)
from gpu.launch import SHARED_LIMIT, SHARED_OPTIN, SMEM_ALIGN, Buffers, DynamicShared, check_int32, launch, opt_in
from gpu.split_k import split_ticket
from gpu.vector_loads import load4
from sparsekit.arrays import cdiv, flat_view, operand, output, result
from sparsekit.checks import check_int
from sparsekit.formats import TiledCSL

__all__ = ["spmm_tiled", "spmm_tiled_linear", "prepare", "DeviceTiled", "shared_bytes", "padded_n", "MAX_N"]

#: The widest ``B`` this kernel takes (beyond it the product stops being bound by reading the weight).
MAX_N = 64
#: Dense-tile buffers (see step 4).
BUFFERS = 3
#: Shared memory the copy stages of a block may take (three blocks an SM fit beside their dense tiles).
STAGE_BUDGET = 48 * 1024


def padded_n(n: int) -> int:
    """``N`` rounded up to the MMA's width: 8, 16, 32 or 64."""
    return max(8, 1 << (int(n) - 1).bit_length())


def _strides(tm: int, tk: int, npad: int, linear: bool) -> tuple[int, int, int, int]:
    """Shared-memory geometry in 16-bit elements: dense-tile row stride, dense buffer, B row stride, B stage.

    A B slice is ``TK x N`` (``B`` row-major) or ``N x TK`` (``linear``: rows of ``X``). Rows are padded by
    8 elements (16 bytes) so the 8 rows an ``ldmatrix`` reads fall in 8 distinct bank groups; a dense
    buffer has 8 more elements for the sink of padding words."""
    ldw = tk + 8
    ldb = tk + 8 if linear else npad + 8
    return ldw, tm * ldw + 8, ldb, (max(npad, 16) if linear else tk) * ldb   # (an x4 ldmatrix reads 16 rows)


def shared_bytes(tm: int, tk: int, npad: int, max_words: int, linear: bool, stages: int, max_tiles: int) -> int:
    """Dynamic shared memory of a block: three dense tiles, ``stages`` B slices and word stages, then the
    word offsets of the block's (at most ``max_tiles``) tiles."""
    _, wd, _, bt = _strides(tm, tk, npad, linear)
    return 2 * BUFFERS * wd + stages * (2 * bt + 4 * max_words) + 4 * (max_tiles + 1)


def copy_stages(tm: int, tk: int, npad: int, max_words: int, linear: bool) -> int:
    """Copy stages for a block: as many as :data:`STAGE_BUDGET` holds, from 3 to 16."""
    _, _, _, bt = _strides(tm, tk, npad, linear)
    return max(3, min(16, STAGE_BUDGET // (2 * bt + 4 * max_words)))


@functools.cache
def _kernel(warps: int, tk: int, npad: int, bf16: bool, linear: bool, vector_b: bool, stages: int):
    """The kernel for ``warps`` warps (``TM = 16 * warps`` rows), ``TK`` columns a tile, ``N`` padded to
    ``npad``. ``linear``: ``b`` is ``X`` (``N x K``) and the result ``Y = C^T`` (``N x M``), both row-major (a
    linear layer's ``Y = X W^T``); else ``b`` is ``K x N`` and ``C`` ``M x N``, row-major. ``vector_b``: the
    rows of ``b`` are whole 16-byte chunks (``K`` or ``N`` a multiple of 8), copied 16 bytes at a time."""
    tm, nthreads = 16 * warps, 32 * warps
    ldw, wd, ldb, bt = _strides(tm, tk, npad, linear)
    b_base = BUFFERS * wd                      # B stages follow the dense tiles (16-bit elements)
    w_base = (b_base + stages * bt) // 2       # word stages follow B (32-bit elements, 16-byte aligned)
    ahead = stages - 1                         # tile t + ahead is issued at step t
    pending = stages - 3                       # copy groups still in flight once tile t + 1 has landed
    pending0 = stages - 2                      # ... once tile 0 has (before the loop)
    ksteps, nblocks = tk // 16, npad // 8
    nacc = 4 * nblocks                         # float32 accumulators a thread: 4 per 16 x 8 block
    lshift = tk.bit_length() - 1               # local index -> (row, col): TK is a power of two
    mma = mma_m16n8k16_bf16_f32 if bf16 else mma_m16n8k16_f16_f32

    @inlined
    def issue(words, b, s16, s32, o_base, t, k0, k, n, maxw, tid):
        """Step 1: start copying tile ``t``'s words and B slice (columns ``k0 ..`` of A) into stage
        ``t % stages``. (Strided loops are ``while`` loops: Numba's ``range`` with a run-time step
        computes its trip count with a 64-bit division, most of a tile's instructions.)"""
        stage = t % stages
        w0 = s32[o_base + t]
        nchunks = (s32[o_base + t + 1] - w0) // 4
        ch = tid
        while ch < nchunks:
            cp_async16(s32, w_base + stage * maxw + ch * 4, words, w0 + ch * 4, 16)
            ch += nthreads
        dst = b_base + stage * bt
        if linear and vector_b:                  # N rows of X, TK elements each
            ch = tid
            while ch < n * (tk // 8):
                r = ch // (tk // 8)
                col = (ch - r * (tk // 8)) * 8
                live = k0 + col < k
                cp_async16(s16, dst + r * ldb + col, b, r * k + k0 + col if live else 0, 16 if live else 0)
                ch += nthreads
        elif linear:
            e = tid
            while e < n * tk:
                r = e // tk
                col = e - r * tk
                s16[dst + r * ldb + col] = b[r * k + k0 + col] if k0 + col < k else uint16(0)
                e += nthreads
        elif vector_b:                           # TK rows of B, N elements each
            per_row = n // 8
            ch = tid
            while ch < tk * per_row:
                r = ch // per_row
                col = (ch - r * per_row) * 8
                live = k0 + r < k
                cp_async16(s16, dst + r * ldb + col, b, (k0 + r) * n + col if live else 0, 16 if live else 0)
                ch += nthreads
        else:
            e = tid
            while e < tk * n:
                r = e // n
                col = e - r * n
                s16[dst + r * ldb + col] = b[(k0 + r) * n + col] if k0 + r < k else uint16(0)
                e += nthreads
        cp_async_commit()

    @inlined
    def scatter(s16, s32, o_base, t, maxw, tid):
        """Step 2: tile ``t``'s words into its zeroed dense buffer (padding words into the sink)."""
        stage = t % stages
        nw = s32[o_base + t + 1] - s32[o_base + t]
        base = (t % BUFFERS) * wd
        i = tid
        while i < nw:
            w = s32[w_base + stage * maxw + i]
            local = w >> 16
            r = local >> lshift
            s16[base + r * ldw + (local - (r << lshift))] = uint16(w & 0xFFFF)
            i += nthreads

    @inlined
    def multiply(s16, s32, acc, t, warp, lane):
        """Step 3: this warp's 16 rows of the dense tile ``t`` times the B slice, into ``acc``."""
        a_row = (t % BUFFERS) * wd + (warp * 16 + lane % 16) * ldw + (lane // 16) * 8
        # matrix j = lane // 8 of the four: k-half j % 2 and n-block p + j // 2
        if linear:                               # [n][k] rows: plain ldmatrix gives B's "col" fragments
            b_row = b_base + (t % stages) * bt + (lane % 8 + lane // 16 * 8) * ldb + (lane // 8) % 2 * 8
        else:                                    # [k][n] rows: transposed
            b_row = b_base + (t % stages) * bt + (lane % 8 + (lane // 8) % 2 * 8) * ldb + (lane // 16) * 8
        for ks in range(ksteps):
            a0, a1, a2, a3 = ldmatrix_x4(s32, shared_addr(s16, a_row + ks * 16))
            for p in range(0, nblocks, 2):
                if linear:
                    b0, b1, b2, b3 = ldmatrix_x4(s32, shared_addr(s16, b_row + p * 8 * ldb + ks * 16))
                else:
                    b0, b1, b2, b3 = ldmatrix_x4_trans(s16, b_row + ks * 16 * ldb + p * 8)
                d = mma(a0, a1, a2, a3, b0, b1, acc[4 * p], acc[4 * p + 1], acc[4 * p + 2], acc[4 * p + 3])
                for i in range(4):
                    acc[4 * p + i] = d[i]
                if p + 1 < nblocks:
                    q = 4 * (p + 1)
                    d = mma(a0, a1, a2, a3, b2, b3, acc[q], acc[q + 1], acc[q + 2], acc[q + 3])
                    for i in range(4):
                        acc[q + i] = d[i]

    @inlined
    def zero(s32, first, count, tid):
        """Zero ``count`` 32-bit words of shared memory from word ``first`` (a multiple of 4), 16 bytes a
        store, in a loop of fixed trip count (``count`` is a compile-time constant)."""
        for z in range((count // 4 + nthreads - 1) // nthreads):
            i = (tid + z * nthreads) * 4
            if i < count:
                st_shared4(s32, shared_addr(s32, first + i), uint32(0), uint32(0), uint32(0), uint32(0))

    @inlined
    def store(c, row, col, m, n, x):
        """``C[row, col]`` (``linear``: ``Y[col, row]``) ``= x`` rounded once to the dtype, inside the matrix."""
        if row < m and col < n:
            at = col * m + row if linear else row * n + col
            if bf16:
                c[at] = uint16(pack_bf16x2(x, float32(0.0)) & 0xFFFF)
            else:
                c[at] = x

    @cuda.jit
    def kernel(words, offsets, b, c, ws, counters, m, k, n, maxw):
        s16 = cuda.shared.array(0, uint16, alignment=SMEM_ALIGN)    # [dense tiles | B slices | word stages]
        s32 = cuda.shared.array(0, uint32, alignment=SMEM_ALIGN)
        last = cuda.shared.array(1, int32)
        tid = cuda.threadIdx.x
        warp, lane = tid // 32, tid % 32
        strip, split, nsplit = cuda.blockIdx.x, cuda.blockIdx.y, cuda.gridDim.y
        kt = (k + tk - 1) // tk
        t0 = split * kt // nsplit
        nt = (split + 1) * kt // nsplit - t0
        first = strip * kt + t0
        zero(s32, 0, w_base, tid)                         # dense tiles and B pad columns start at zero
        o_base = w_base + stages * maxw                    # the block's tile offsets, read once (a global
        i = tid                                            # load in the loop would stall every step)
        while i <= nt:
            s32[o_base + i] = uint32(offsets[first + i])
            i += nthreads
        cuda.syncthreads()
        acc = cuda.local.array(nacc, float32)
        for i in range(nacc):
            acc[i] = float32(0.0)
        for t in range(ahead):                             # prologue: tiles 0 .. S - 2 in flight
            if t < nt:
                issue(words, b, s16, s32, o_base, t, (t0 + t) * tk, k, n, maxw, tid)
            else:
                cp_async_commit()
        cp_async_wait(pending0)                            # tile 0 has landed
        cuda.syncthreads()
        if nt > 0:
            scatter(s16, s32, o_base, 0, maxw, tid)
        for t in range(nt):
            cp_async_wait(pending)                         # tile t + 1 has landed (this thread's part)
            cuda.syncthreads()                             # ... every thread's; tile t is scattered
            if t + ahead < nt:                             # (stage (t - 1) % S: free since the barrier)
                issue(words, b, s16, s32, o_base, t + ahead, (t0 + t + ahead) * tk, k, n, maxw, tid)
            else:
                cp_async_commit()                          # an empty group keeps the wait counts
            if t + 1 < nt:
                scatter(s16, s32, o_base, t + 1, maxw, tid)
            multiply(s16, s32, acc, t, warp, lane)
            zero(s32, (t + 2) % BUFFERS * (wd // 2), wd // 2, tid)   # step 4: the buffer of t - 1
        # Epilogue: C fragment element i of n-block p sits at row g (+8 for i >= 2), column 8p + 2q + i % 2.
        g, q = lane // 4, lane % 4
        row0 = strip * (16 * warps) + warp * 16 + g
        if nsplit == 1:
            for p in range(nblocks):
                for i in range(4):
                    store(c, row0 + (i // 2) * 8, p * 8 + 2 * q + i % 2, m, n, acc[4 * p + i])
            return
        nstrips = cuda.gridDim.x
        for j in range(nacc):                       # partials, coalesced: [split][strip][j][thread]
            ws[((split * nstrips + strip) * nacc + j) * nthreads + tid] = acc[j]
        if not split_ticket(counters, nsplit, strip, last):  # the last block of the row of tiles goes on
            return
        for p in range(nblocks):
            for i in range(4):
                j = 4 * p + i
                total = float32(0.0)
                for s in range(nsplit):                    # split order: the same sum on every run
                    total += ws[((s * nstrips + strip) * nacc + j) * nthreads + tid]
                store(c, row0 + (i // 2) * 8, p * 8 + 2 * q + i % 2, m, n, total)

    return kernel


# ---------------------------------------------------------------------------
# Rows (``tile = (1, TK)``, ``TK >= K``): CUDA cores, one warp a row
# ---------------------------------------------------------------------------

#: Warps (rows) a block of the row kernel, and 16-byte loads a lane has in flight.
ROW_WARPS, ROW_UNROLL = 4, 4

if cuda_config.ENABLE_CUDASIM:
    from gpu.mma import warp_collective

    def warp_sum(x):
        """The sum of ``x`` over the calling thread's warp, for every lane (simulator: one thread adds)."""
        return warp_collective(np.float32(x), lambda values: np.float32(np.sum(np.array(values, np.float64))))
else:
    @inlined
    def warp_sum(x):
        """The sum of ``x`` over the calling thread's warp, for every lane (butterfly of shuffles)."""
        for off in (16, 8, 4, 2, 1):
            x += cuda.shfl_xor_sync(0xFFFFFFFF, x, off)
        return x


@functools.cache
def row_accumulator(n: int, bf16: bool, stride: int):
    """The inner step of the row kernels: ``add(acc, v, col, b, b32)`` adds the 16-bit value bits ``v`` times
    row ``col`` of ``B`` (row-major, ``stride >= N`` halves a row; ``b32`` its uint32 view) to the float32
    accumulators ``acc``. With ``stride`` a multiple of 8 a row of ``B`` is whole 16-byte loads (``acc`` then
    holds ``stride`` columns, the padded ones zero); else ``N`` loads of a half."""
    widen = widen_bf16 if bf16 else widen_f16
    if stride % 8 == 0:
        @inlined
        def add(acc, v, col, b, b32):
            x = widen(v)
            for q in range(stride // 8):
                h0, h1, h2, h3 = load4(b32, col * (stride // 2) + q * 4)
                acc[8 * q] += x * widen(h0)
                acc[8 * q + 1] += x * widen(h0 >> 16)
                acc[8 * q + 2] += x * widen(h1)
                acc[8 * q + 3] += x * widen(h1 >> 16)
                acc[8 * q + 4] += x * widen(h2)
                acc[8 * q + 5] += x * widen(h2 >> 16)
                acc[8 * q + 6] += x * widen(h3)
                acc[8 * q + 7] += x * widen(h3 >> 16)
    else:
        @inlined
        def add(acc, v, col, b, b32):
            x = widen(v)
            for j in range(n):
                acc[j] += x * widen(b[col * stride + j])
    return add


@functools.cache
def row_store(n: int, bf16: bool, linear: bool):
    """The last step of the row kernels: ``store(c, acc, row, m, lane)`` sums each of the ``N`` accumulators
    over the warp and writes row ``row`` of ``C`` (``M x N``; ``linear``: column ``row`` of ``Y = C^T``,
    ``N x M``), rounded once to the 16-bit dtype."""
    @inlined
    def store(c, acc, row, m, lane):
        for j in range(n):
            total = warp_sum(acc[j])
            if lane == j % 32:                         # every lane has the sum: lane j % 32 writes it
                if linear:
                    at = j * m + row
                else:
                    at = row * n + j
                if bf16:
                    c[at] = uint16(pack_bf16x2(total, float32(0.0)) & 0xFFFF)
                else:
                    c[at] = total
    return store


def accumulators(n: int, stride: int) -> int:
    """float32 accumulators a lane of a row kernel holds (:func:`row_accumulator`)."""
    return stride if stride % 8 == 0 else n


@functools.cache
def _row_kernel(n: int, bf16: bool, stride: int, linear: bool, unroll: int = 4):
    """One warp a row of a ``tile = (1, TK)`` TiledCSL: each lane reads 4 words at a time (16 bytes, ``unroll``
    loads in flight), multiplies each value by its row of ``B`` (:func:`row_accumulator`) into float32
    accumulators; a warp sum gives the row of ``C`` (:func:`row_store`). The time a word is a few
    instructions, so at ``N <= 16`` the kernel streams the words at the memory's pace; padding words (local
    index ``TK >= K``) are skipped."""
    add, store, width = row_accumulator(n, bf16, stride), row_store(n, bf16, linear), accumulators(n, stride)
    nbuf = 4 * unroll

    @cuda.jit
    def kernel(words, offsets, b, b32, c, m, k):
        lane = cuda.threadIdx.x % 32
        row = cuda.blockIdx.x * ROW_WARPS + cuda.threadIdx.x // 32
        if row >= m:
            return
        acc = cuda.local.array(width, float32)
        for j in range(width):
            acc[j] = float32(0.0)
        ch = offsets[row] // 4 + lane
        stop = offsets[row + 1] // 4
        buf = cuda.local.array(nbuf, uint32)
        while ch < stop:                              # `unroll` 16-byte loads in flight a lane, then their words
            for u in range(unroll):
                if ch + 32 * u < stop:
                    w = load4(words, (ch + 32 * u) * 4)
                    for i in range(4):
                        buf[4 * u + i] = w[i]
                else:
                    for i in range(4):
                        buf[4 * u + i] = uint32(0xFFFF0000)   # local index 0xFFFF >= K: skipped
            for i in range(nbuf):
                col = buf[i] >> 16
                if col < k:
                    add(acc, buf[i] & 0xFFFF, col, b, b32)
            ch += 32 * unroll
        store(c, acc, row, m, lane)

    return kernel


@cuda.jit
def stage_transposed(x, xt, n, k, stride):
    """``xt`` (``K x stride``, row-major) = ``x^T`` for ``x`` (``N x K``), the columns past ``N`` zero: the
    linear form's ``X`` laid out as the row kernel's 16-byte-loadable ``B``. A thread an element of ``xt``."""
    t = cuda.grid(1)
    if t < k * stride:
        row, j = t // stride, t % stride
        xt[t] = x[j * k + row] if j < n else uint16(0)


@dataclass(eq=False)
class DeviceTiled:
    """A :class:`~sparsekit.formats.TiledCSL` on the device, ready for :func:`spmm_tiled`.

    ``words``/``offsets`` are device copies; ``max_words`` is the largest tile (the word stage size);
    ``counters`` (zero between launches: the last block of a row of tiles resets its counter) and a float32
    workspace (:meth:`scratch`) serve the split-K reduction; ``buffers`` holds that workspace and the staged
    linear-form ``X`` (:meth:`staging`), one buffer a size.
    Launches sharing one DeviceTiled must be ordered (one stream)."""

    host: TiledCSL
    words: object
    offsets: object
    max_words: int
    counters: object
    buffers: Buffers = field(default_factory=Buffers)

    @property
    def shape(self):
        return self.host.shape

    @property
    def dtype(self):
        return self.host.dtype

    def scratch(self, floats: int):
        """The float32 workspace, at least ``floats`` long."""
        return self.buffers.get(np.float32, floats)

    def staging(self, halves: int):
        """The 16-bit buffer a linear-form ``X`` is staged in (:func:`stage_transposed`), ``halves`` long."""
        return self.buffers.get(np.uint16, halves)


def prepare(a: TiledCSL) -> DeviceTiled:
    """Copy ``a`` to the device once; the result is reused by every :func:`spmm_tiled` call."""
    if not isinstance(a, TiledCSL):
        raise TypeError(f"a: expected a TiledCSL, got {type(a).__name__}")
    check_int32(a.words.size, "a.words", "words", "the kernels' tile offsets are 32-bit word offsets")
    a.validate(full=True)                      # the kernels trust offsets and local indices: check them once
    tm, tk = a.tile
    if tm == 1:
        if tk < a.shape[1]:
            raise ValueError(f"a.tile: a row tile (1, TK) must span the columns, TK >= {a.shape[1]}, got {a.tile}")
    elif tm % 16 or tm > 16 * 8 or tk % 16 or tk & (tk - 1):
        raise ValueError(f"a.tile: TM must be 1 (rows) or 16, 32, ..., 128 and TK a power of two from 16, "
                         f"got {a.tile}")
    steps = np.diff(a.offsets)
    return DeviceTiled(a, cuda.to_device(a.words), cuda.to_device(a.offsets.astype(np.int32)),
                       int(steps.max()) if steps.size else 0,
                       cuda.to_device(np.zeros(a.grid[0], dtype=np.int32)))


def default_splits(a: DeviceTiled, target_blocks: int = 528) -> int:
    """Blocks a row of tiles: about ``target_blocks`` blocks in all (132 SMs, 4 a SM), at least 2 tiles each."""
    rows, kt = a.host.grid
    return max(1, min(cdiv(target_blocks, rows), kt // 2 or 1))


def _bits(dev):
    """A 16-bit device array as uint16 bits (the kernels never see the value dtype)."""
    return dev if dev.dtype == np.uint16 else dev.view(np.uint16)


def spmm_tiled(a, b, *, splits=None, stages=None, unroll=None):
    """``C = A @ b`` for a TiledCSL (or :func:`prepare`'d) ``A`` (M x K) and a dense row-major ``b`` (K x N,
    the same 16-bit dtype, ``N <= 64``); returns ``C`` (M x N, row-major) as the kind of array ``b`` is.

    ``splits``: blocks a row of tiles (split K), default :func:`default_splits`; ``stages``: copy stages,
    default :func:`copy_stages`."""
    return _run(a, b, "b", False, splits, stages, unroll)


def spmm_tiled_linear(a, x, *, splits=None, stages=None, unroll=None):
    """``Y = x @ A^T`` for a TiledCSL (or :func:`prepare`'d) weight ``A`` (M x K, out x in) and a row-major
    ``x`` (N x K, ``N <= 64``): a linear layer without bias; returns ``Y`` (N x M, row-major)."""
    return _run(a, x, "x", True, splits, stages, unroll)


def _run(a, b, name: str, linear: bool, splits, stages, unroll=None):
    dev = a if isinstance(a, DeviceTiled) else prepare(a)
    m, k = dev.shape
    bop = operand(b, name, dtypes=(dev.dtype,), ndim=2, order="C")
    rows, n = bop.dev.shape[::-1] if linear else bop.dev.shape
    if rows != k:
        want = f"(N, {k})" if linear else f"({k}, N)"
        raise ValueError(f"{name}: expected shape {want} to multiply a {m}x{k} matrix, got {bop.dev.shape}")
    if not 1 <= n <= MAX_N:
        raise ValueError(f"{name}: N = {n}; this kernel takes 1 to {MAX_N} (wider products are not bound "
                         f"by reading the weight: use gpu.uspmm)")
    c = output((n, m) if linear else (m, n), dev.dtype, like=bop)
    if m == 0:
        return result(c, like=bop)
    bits = _bits(flat_view(bop.dev))
    cflat = flat_view(c) if dev.dtype == np.float16 else _bits(flat_view(c))
    if dev.host.tile[0] == 1:
        stride = 8 * cdiv(n, 8) if linear and n > 1 else n
        if linear and n > 1:                    # X (N x K) staged as B = X^T, its rows 16-byte aligned
            xt = dev.staging(k * stride)
            launch(stage_transposed, cdiv(k * stride, 256), 256, (bits, xt, n, k, stride), "stage x^T")
            bits = xt
        kernel = _row_kernel(n, dev.dtype.name == "bfloat16", stride, linear, ROW_UNROLL if unroll is None else unroll)
        args = (dev.words, dev.offsets, bits, bits.view(np.uint32) if bits.size % 2 == 0 else bits, cflat, m, k)
        launch(kernel, cdiv(m, ROW_WARPS), 32 * ROW_WARPS, args, f"tile={dev.host.tile}")
        return result(c, like=bop)
    splits = default_splits(dev) if splits is None else check_int(splits, "splits", minimum=1)
    splits = min(splits, dev.host.grid[1])
    tm, tk = dev.host.tile
    npad = padded_n(n)
    stages = copy_stages(tm, tk, npad, dev.max_words, linear) if stages is None else check_int(stages, "stages",
                                                                                                 minimum=3)
    nbytes = shared_bytes(tm, tk, npad, dev.max_words, linear, stages, cdiv(dev.host.grid[1], splits))
    kernel = _kernel(tm // 16, tk, npad, dev.dtype.name == "bfloat16", linear, (k if linear else n) % 8 == 0, stages)
    nthreads = 32 * (tm // 16)
    ws = dev.scratch(splits * dev.host.grid[0] * (npad // 2) * nthreads)     # 4 * npad / 8 partials a thread
    args = (dev.words, dev.offsets, bits, cflat, ws, dev.counters, m, k, n, dev.max_words)
    if nbytes > SHARED_OPTIN:
        raise ValueError(f"a.tile: {dev.host.tile} with {stages} copy stages needs {nbytes} bytes of shared memory "
                         f"a block, more than the {SHARED_OPTIN} a block may have; choose a smaller tile")
    if nbytes > SHARED_LIMIT:
        opt_in(kernel, args, SHARED_OPTIN - 1024)   # once per kernel (the static `last` flag is in the rest)
    launch(DynamicShared(kernel, nbytes), (dev.host.grid[0], splits), nthreads, args,
            f"tile={dev.host.tile}, splits={splits}")
    return result(c, like=bop)
