"""Memory-bound half-precision SpMM on tensor cores: ``C = A @ B`` for a TiledCSL ``A`` and small ``N``.

Equals ``reference/spmm_tiled.py``'s :func:`~reference.spmm_tiled.spmm_tiled`. At the batch sizes of
LLM decoding (``N`` from 1 to 64) the product is bound by reading the weight: the kernel streams
:class:`~sparsekit.formats.TiledCSL`'s 4-byte words once, at close to the memory's bandwidth, and does the
arithmetic densely on tensor cores ("load as sparse, compute as dense", Flash-LLM, VLDB 2024):

1. **Copy** (``cp.async``, 16 bytes a thread a step): tile ``t + 2``'s words and its ``TK x N`` slice of ``B``
   into shared-memory stage ``(t + 2) % 3`` while tile ``t`` is multiplied: two tiles in flight a block.
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
adds the partials in split order, so the result is the same on every run, and writes ``C`` rounded once
to the dtype.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from numba import cuda, float32, int32, uint16, uint32

from gpu.inline import inlined
from gpu.mma import (cp_async16, cp_async_commit, cp_async_wait, ldmatrix_x4, ldmatrix_x4_trans,
                     mma_m16n8k16_bf16_f32, mma_m16n8k16_f16_f32, pack_bf16x2, shared_addr)
from gpu.uspmm import SMEM_ALIGN, _launch
from gpu.uspmm_tc import _DynamicShared, _opt_in
from sparsekit.arrays import cdiv, flat_view, operand, output, result
from sparsekit.checks import check_int
from sparsekit.formats import TiledCSL

__all__ = ["spmm_tiled", "spmm_tiled_linear", "prepare", "DeviceTiled", "shared_bytes", "padded_n", "MAX_N"]

#: The widest ``B`` this kernel takes (beyond it the product stops being bound by reading the weight).
MAX_N = 64
#: Dense-tile buffers (see step 4) and copy stages.
BUFFERS = 3


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


def shared_bytes(tm: int, tk: int, npad: int, max_words: int, linear: bool) -> int:
    """Dynamic shared memory of a block: three dense tiles, three B slices, three word stages."""
    _, wd, _, bt = _strides(tm, tk, npad, linear)
    return 2 * BUFFERS * (wd + bt) + 4 * BUFFERS * max_words


@functools.cache
def _kernel(warps: int, tk: int, npad: int, bf16: bool, linear: bool, vector_b: bool):
    """The kernel for ``warps`` warps (``TM = 16 * warps`` rows), ``TK`` columns a tile, ``N`` padded to
    ``npad``. ``linear``: ``b`` is ``X`` (``N x K``) and the result ``Y = C^T`` (``N x M``), both row-major (a
    linear layer's ``Y = X W^T``); else ``b`` is ``K x N`` and ``C`` ``M x N``, row-major. ``vector_b``: the
    rows of ``b`` are whole 16-byte chunks (``K`` or ``N`` a multiple of 8), copied 16 bytes at a time."""
    tm, nthreads = 16 * warps, 32 * warps
    ldw, wd, ldb, bt = _strides(tm, tk, npad, linear)
    b_base = BUFFERS * wd                      # B stages follow the dense tiles (16-bit elements)
    w_base = (b_base + BUFFERS * bt) // 2      # word stages follow B (32-bit elements, 16-byte aligned)
    ksteps, nblocks = tk // 16, npad // 8
    nacc = 4 * nblocks                         # float32 accumulators a thread: 4 per 16 x 8 block
    lshift = tk.bit_length() - 1               # local index -> (row, col): TK is a power of two
    mma = mma_m16n8k16_bf16_f32 if bf16 else mma_m16n8k16_f16_f32

    @inlined
    def issue(words, offsets, b, s16, s32, tile, t, k, kt, n, maxw, tid):
        """Step 1: start copying tile ``t``'s words and B slice into stage ``t % 3``."""
        stage = t % BUFFERS
        w0 = offsets[tile]
        nchunks = (offsets[tile + 1] - w0) // 4
        for ch in range(tid, nchunks, nthreads):
            cp_async16(s32, w_base + stage * maxw + ch * 4, words, w0 + ch * 4, 16)
        k0 = (tile % kt) * tk
        dst = b_base + stage * bt
        if linear and vector_b:                  # N rows of X, TK elements each
            for ch in range(tid, n * (tk // 8), nthreads):
                r = ch // (tk // 8)
                col = (ch - r * (tk // 8)) * 8
                live = k0 + col < k
                cp_async16(s16, dst + r * ldb + col, b, r * k + k0 + col if live else 0, 16 if live else 0)
        elif linear:
            for e in range(tid, n * tk, nthreads):
                r = e // tk
                col = e - r * tk
                s16[dst + r * ldb + col] = b[r * k + k0 + col] if k0 + col < k else uint16(0)
        elif vector_b:                           # TK rows of B, N elements each
            per_row = n // 8
            for ch in range(tid, tk * per_row, nthreads):
                r = ch // per_row
                col = (ch - r * per_row) * 8
                live = k0 + r < k
                cp_async16(s16, dst + r * ldb + col, b, (k0 + r) * n + col if live else 0, 16 if live else 0)
        else:
            for e in range(tid, tk * n, nthreads):
                r = e // n
                col = e - r * n
                s16[dst + r * ldb + col] = b[(k0 + r) * n + col] if k0 + r < k else uint16(0)
        cp_async_commit()

    @inlined
    def scatter(offsets, s16, s32, tile, t, maxw, tid):
        """Step 2: tile ``t``'s words into its zeroed dense buffer (padding words into the sink)."""
        stage = t % BUFFERS
        nw = offsets[tile + 1] - offsets[tile]
        base = stage * wd
        for i in range(tid, nw, nthreads):
            w = s32[w_base + stage * maxw + i]
            local = w >> 16
            r = local >> lshift
            s16[base + r * ldw + (local - (r << lshift))] = uint16(w & 0xFFFF)

    @inlined
    def multiply(s16, s32, acc, t, warp, lane):
        """Step 3: this warp's 16 rows of the dense tile ``t`` times the B slice, into ``acc``."""
        a_row = (t % BUFFERS) * wd + (warp * 16 + lane % 16) * ldw + (lane // 16) * 8
        # matrix j = lane // 8 of the four: k-half j % 2 and n-block p + j // 2
        if linear:                               # [n][k] rows: plain ldmatrix gives B's "col" fragments
            b_row = b_base + (t % BUFFERS) * bt + (lane % 8 + lane // 16 * 8) * ldb + (lane // 8) % 2 * 8
        else:                                    # [k][n] rows: transposed
            b_row = b_base + (t % BUFFERS) * bt + (lane % 8 + (lane // 8) % 2 * 8) * ldb + (lane // 16) * 8
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
    def zero(s32, t, tid):
        """Step 4: zero dense buffer ``t % 3`` (16 bytes a store where the buffer allows)."""
        base = (t % BUFFERS) * wd // 2
        for i in range(tid, wd // 2, nthreads):
            s32[base + i] = uint32(0)

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
        for i in range(tid, w_base, nthreads):          # dense tiles and B pad columns start at zero
            s32[i] = uint32(0)
        cuda.syncthreads()
        acc = cuda.local.array(nacc, float32)
        for i in range(nacc):
            acc[i] = float32(0.0)
        for t in range(2):                                 # prologue: tiles 0 and 1 in flight
            if t < nt:
                issue(words, offsets, b, s16, s32, first + t, t, k, kt, n, maxw, tid)
            else:
                cp_async_commit()
        cp_async_wait(1)
        cuda.syncthreads()
        if nt > 0:
            scatter(offsets, s16, s32, first, 0, maxw, tid)
        for t in range(nt):
            cp_async_wait(0)                               # tile t + 1 has landed (this thread's part)
            cuda.syncthreads()                             # ... every thread's; tile t is scattered
            if t + 2 < nt:
                issue(words, offsets, b, s16, s32, first + t + 2, t + 2, k, kt, n, maxw, tid)
            if t + 1 < nt:
                scatter(offsets, s16, s32, first + t + 1, t + 1, maxw, tid)
            multiply(s16, s32, acc, t, warp, lane)
            zero(s32, t + 2, tid)                          # = buffer of t - 1, multiplied before the barrier
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
        cuda.threadfence()
        cuda.syncthreads()
        if tid == 0:
            last[0] = 1 if cuda.atomic.add(counters, strip, 1) == nsplit - 1 else 0
        cuda.syncthreads()
        if last[0] == 0:
            return
        cuda.threadfence()
        for p in range(nblocks):
            for i in range(4):
                j = 4 * p + i
                total = float32(0.0)
                for s in range(nsplit):                    # split order: the same sum on every run
                    total += ws[((s * nstrips + strip) * nacc + j) * nthreads + tid]
                store(c, row0 + (i // 2) * 8, p * 8 + 2 * q + i % 2, m, n, total)
        if tid == 0:
            counters[strip] = 0

    return kernel


@dataclass(eq=False)
class DeviceTiled:
    """A :class:`~sparsekit.formats.TiledCSL` on the device, ready for :func:`spmm_tiled`.

    ``words``/``offsets`` are device copies; ``max_words`` is the largest tile (the word stage size);
    ``counters`` (zero between launches: the last block of a row of tiles resets its counter) and the
    float32 workspace ``workspace`` serve the split-K reduction and grow with the widest ``N`` seen.
    Launches sharing one DeviceTiled must be ordered (one stream)."""

    host: TiledCSL
    words: object
    offsets: object
    max_words: int
    counters: object
    workspace: object = None

    @property
    def shape(self):
        return self.host.shape

    @property
    def dtype(self):
        return self.host.dtype

    def scratch(self, floats: int):
        """The float32 workspace, at least ``floats`` long."""
        if self.workspace is None or self.workspace.size < floats:
            self.workspace = cuda.device_array(max(floats, 1), dtype=np.float32)
        return self.workspace


def prepare(a: TiledCSL) -> DeviceTiled:
    """Copy ``a`` to the device once; the result is reused by every :func:`spmm_tiled` call."""
    if not isinstance(a, TiledCSL):
        raise TypeError(f"a: expected a TiledCSL, got {type(a).__name__}")
    tm, tk = a.tile
    if tm % 16 or tm > 16 * 8 or tk % 16 or tk & (tk - 1):
        raise ValueError(f"a.tile: TM must be 16, 32, ..., 128 and TK a power of two from 16, got {a.tile}")
    if a.words.size >= 1 << 31:
        raise ValueError(f"a: {a.words.size} words exceed the kernel's 32-bit word offsets")
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


def spmm_tiled(a, b, *, splits=None):
    """``C = A @ b`` for a TiledCSL (or :func:`prepare`'d) ``A`` (M x K) and a dense row-major ``b`` (K x N,
    the same 16-bit dtype, ``N <= 64``); returns ``C`` (M x N, row-major) as the kind of array ``b`` is.

    ``splits``: blocks a row of tiles (split K); default :func:`default_splits`."""
    return _run(a, b, "b", False, splits)


def spmm_tiled_linear(a, x, *, splits=None):
    """``Y = x @ A^T`` for a TiledCSL (or :func:`prepare`'d) weight ``A`` (M x K, out x in) and a row-major
    ``x`` (N x K, ``N <= 64``): a linear layer without bias; returns ``Y`` (N x M, row-major)."""
    return _run(a, x, "x", True, splits)


def _run(a, b, name: str, linear: bool, splits):
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
    splits = default_splits(dev) if splits is None else check_int(splits, "splits", minimum=1)
    splits = min(splits, dev.host.grid[1])
    tm, tk = dev.host.tile
    npad = padded_n(n)
    c = output((n, m) if linear else (m, n), dev.dtype, like=bop)
    if m == 0:
        return result(c, like=bop)
    nbytes = shared_bytes(tm, tk, npad, dev.max_words, linear)
    kernel = _kernel(tm // 16, tk, npad, dev.dtype.name == "bfloat16", linear, (k if linear else n) % 8 == 0)
    bflat = _bits(flat_view(bop.dev))
    cflat = flat_view(c) if dev.dtype == np.float16 else _bits(flat_view(c))
    nthreads = 32 * (tm // 16)
    ws = dev.scratch(splits * dev.host.grid[0] * (npad // 2) * nthreads)     # 4 * npad / 8 partials a thread
    args = (dev.words, dev.offsets, bflat, cflat, ws, dev.counters, m, k, n, dev.max_words)
    _opt_in(kernel, args, nbytes)
    _launch(_DynamicShared(kernel, nbytes), (dev.host.grid[0], splits), nthreads, args,
            f"tile={dev.host.tile}, splits={splits}")
    return result(c, like=bop)
