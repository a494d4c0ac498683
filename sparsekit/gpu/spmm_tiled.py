"""Memory-bound half-precision SpMM: ``C = A @ B`` (or a linear layer's ``Y = X A^T``) for a TiledCSL ``A``
and small ``N``.

Equals ``sparsekit/reference/spmm_tiled.py``. At the batch sizes of LLM decoding (``N`` from 1 to 64) the product is
bound by reading the weight, :class:`~sparsekit.formats.TiledCSL`'s 4-byte words. Two kernels, chosen by
the matrix's tile shape:

**Rows** (``tile = (1, TK)``, :func:`_row_kernel`): one warp a row, each lane reading 16 bytes (4 words)
at a time with several loads in flight, multiplying each value by its row of ``B`` (gathered from L1/L2)
on CUDA cores into float32 accumulators, then a warp sum. The linear form's ``X`` (``N x K``) is first
staged as ``B = X^T`` with rows padded to 8 halves (:func:`stage_transposed`, a second launch), so a kept
weight reads its ``N`` inputs in 16-byte loads instead of ``N`` scattered 2-byte ones. From N = 8 its
arithmetic, not the bytes, sets the time (``experiments/results/uspmm_decode.md``).

**Tiles** (``TM >= 16``, :func:`_kernel`): "load as sparse, compute as dense" (Flash-LLM, VLDB 2024), the
arithmetic on tensor cores. A block owns a row of tiles (or a contiguous range of it: split K); each warp
owns 16 or 32 rows of a tile (:func:`warp_rows`: 32 rows let a thread's fixed work a tile serve twice the
words, and a B fragment two A fragments). For each tile ``t``, with one block barrier a tile:

1. **Copy** (``cp.async``, 16 bytes a thread a step): tile ``t + S - 1``'s words and its slice of ``B`` into
   copy stage ``(t - 1) % S`` while tile ``t`` is multiplied: ``S - 2`` tiles in flight a block, ``S`` from
   :func:`copy_stages`. A word stage holds :func:`word_rounds` 16-byte chunks a thread, so the copy and
   the scatter are unrolled loops of a fixed trip count, each chunk behind a predicate. Only the tile that
   ``K`` cuts tests each chunk of B against ``K`` (and zero-fills those past it).
2. **Scatter**: each word of tile ``t + 1`` writes its value at its local index of a zeroed dense tile
   whose rows are padded by 8 halves (the 8 rows an ``ldmatrix`` reads fall in 8 bank groups); padding words
   write to a sink row past the tile. A 16-byte load of four words, then two shifts, two multiply-adds and a
   16-bit store a word (:func:`value_store`).
3. **Multiply**: ``ldmatrix`` of each of the warp's 16-row blocks (A fragments, once a k-step) and of the B
   slice (transposed for a row-major ``B``), ``mma.sync.m16n8k16`` with float32 accumulators; ``N`` padded to a
   multiple of 8 (the padding rows or columns of B reach only columns of ``C`` that are not stored); at
   ``N <= 8`` one ``ldmatrix`` of B spans two k-steps.
4. **Zero** the warp's rows of that dense tile (16-byte stores, after its own reads), ready for tile
   ``t + 2``. Two dense buffers suffice: the scatter of ``t + 1`` and the multiply of ``t`` use different
   ones, and the block barrier of step ``t + 1`` orders every warp's zeroing before the next scatter.

Every address in the loop is a 32-bit shared-window address (:func:`sparsekit.gpu.mma.shared_addr`) or a 64-bit
global one, taken once per thread and moved by compile-time offsets; counts and stage offsets are 32-bit
unsigned integers. A 64 x 64 tile (``K`` a multiple of 64, 1,024 word slots, enough for 80 % sparsity) costs
two warps of 32 rows about 205 SASS instructions a thread at ``N = 8`` (half of them scattering the words),
245 at 16, 260 at 32 and 290 at 64 (the MMAs): 410 to 580 warp instructions the tile. On the H200 that
makes it faster than the row kernel from N = 16-32 but not than dense cuBLAS: it reads its words at 6-29 %
of the copy bandwidth, with about 10 warps an SM (each block's copy stages and dense tiles take 44-64 KB)
and about 300 shared-memory wavefronts a tile (``experiments/results/uspmm_decode.md``, "The tensor-core
tile kernel").

Split K: ``splits`` blocks a row of tiles (so a 4096-row weight still fills 132 SMs). Each writes its
float32 partial sums to a workspace; the last of a row's blocks to finish (a counter per row of tiles, reset
by that block) adds the partials in split order (:func:`sparsekit.gpu.split_k.split_ticket`), so the result is the
same on every run, and writes ``C`` rounded once to the dtype.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from numba import cuda, float32, int32, uint16, uint32
from numba.cuda.misc.special import literal_unroll
from numba.cuda import config as cuda_config

from sparsekit.gpu.inline import inlined
from sparsekit.gpu.mma import (cp_async16_raw, cp_async_commit, cp_async_wait, global_addr, ld_shared, ld_shared4, ldmatrix_x4,
                     ldmatrix_x4_trans, mma_m16n8k16_bf16_f32, mma_m16n8k16_f16_f32, round_bf16, shared_addr,
                     st_shared, st_shared4, widen_bf16, widen_f16)
from sparsekit.gpu.launch import (SHARED_LIMIT, SHARED_OPTIN, SMEM_ALIGN, Buffers, DynamicShared, Prepared, check_int32,
                                  launch, opt_in)
from sparsekit.gpu.split_k import split_ticket
from sparsekit.gpu.vector_loads import load4
from sparsekit.arrays import cdiv, flat_view, operand, output, result
from sparsekit.checks import check_int
from sparsekit.formats import TiledCSL

__all__ = ["spmm_tiled", "spmm_tiled_linear", "prepare", "DeviceTiled", "shared_bytes", "padded_n", "MAX_N"]

#: The widest ``B`` this kernel takes (beyond it the product stops being bound by reading the weight).
MAX_N = 64
#: Dense-tile buffers (see step 4).
BUFFERS = 2
#: Word bytes a block keeps in flight (in the copy stages beyond the two of the tiles being scattered and
#: multiplied): a few blocks an SM then hold the tens of kilobytes that reading at full bandwidth needs.
IN_FLIGHT = 8 * 1024
#: Shared memory the copy stages of a block may take.
STAGE_BUDGET = 48 * 1024
SIM = bool(cuda_config.ENABLE_CUDASIM)

U = np.uint32                     # shared-window byte addresses, thread offsets and counts (kept in 32 bits)


@functools.cache
def value_store(lshift: int):
    """``store(arr, base, w)``: the value of TiledCSL word ``w`` (low 16 bits) stored at shared byte address
    ``base + 2 l + 16 (l >> lshift)``, ``l = w >> 16`` its local index: a dense tile of ``2^lshift`` columns whose
    rows are padded by 8 halves (``arr``: the 16-bit shared array, for typing). Inline PTX: two shifts, two
    multiply-adds and the 16-bit store (written as Python, the optimiser folds the shifts into masks and
    takes a fifth instruction)."""
    if SIM:
        def store(arr, base, w):
            local = int(w) >> 16
            arr[(int(base) + 2 * local + 16 * (local >> lshift)) // 2] = np.uint16(int(w) & 0xFFFF)
        return store
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    asm = ("{ .reg .b16 h; .reg .u32 l, r, a; shr.u32 l, $1, 16; "
           f"shr.u32 r, $1, {16 + lshift}; mad.lo.u32 a, l, 2, $0; mad.lo.u32 a, r, 16, a; "
           "cvt.u16.u32 h, $1; st.shared.u16 [a], h; }")

    def typer(typingctx, arr, base, w):
        if not (isinstance(arr, types.Array) and isinstance(base, types.Integer) and isinstance(w, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            i32 = ir.IntType(32)
            values = [builder.trunc(v, i32) if v.type.width > 32 else builder.zext(v, i32) if v.type.width < 32
                      else v for v in args[1:]]
            builder.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), [i32, i32]), asm, "r,r,~{memory}",
                                      side_effect=True), values)
            return context.get_dummy_value()

        return types.void(arr, base, w), codegen

    typer.__name__ = f"value_store_{lshift}"
    return intrinsic(typer)


@functools.cache
def element_store(bf16: bool, linear: bool):
    """``store(c, row, col, m, n, x)``: ``C[row, col]`` (``linear``: ``Y[col, row]``, ``Y = C^T``) ``= x`` rounded once
    to the 16-bit dtype, where ``(row, col)`` lies inside the ``m x n`` matrix: the epilogue of the tensor-core
    kernels (``c`` a float16 array, or uint16 bits for bfloat16)."""
    @inlined
    def store(c, row, col, m, n, x):
        if row < m and col < n:
            at = col * m + row if linear else row * n + col
            if bf16:
                c[at] = round_bf16(x)
            else:
                c[at] = x
    return store


def padded_n(n: int) -> int:
    """``N`` rounded up to the MMA's width: 8, 16, 32 or 64."""
    return max(8, 1 << (int(n) - 1).bit_length())


def word_rounds(max_words: int, nthreads: int) -> int:
    """16-byte word chunks a thread copies and scatters a tile: the largest tile's chunks over the block's threads."""
    return max(1, cdiv(max_words // 4, nthreads))


def warp_rows(tm: int) -> int:
    """Rows of a tile a warp multiplies by default: 32 where ``TM`` allows (a thread's fixed work a tile, its
    copies' and barrier's, then serves twice the words; a B fragment serves two A fragments), else 16."""
    return 32 if tm % 32 == 0 else 16


class Layout(NamedTuple):
    """Shared-memory geometry of a block of the tile kernel (strides in 16-bit elements, sizes in bytes)."""
    ldw: int       #: dense-tile row stride: ``TK`` plus 8 (the 8 rows an ``ldmatrix`` reads fall in 8 bank groups)
    dense: int     #: a dense buffer: ``TM`` rows, then a 16-byte sink row for padding words
    ldb: int       #: B-slice row stride
    brows: int     #: B-slice rows: ``TK`` (``B`` row-major), else ``max(N, 16)`` rows of ``X``
    bslice: int    #: a B slice
    stage: int     #: a copy stage: a B slice, then the word stage


def layout(tm: int, tk: int, npad: int, linear: bool, rounds: int, nthreads: int) -> Layout:
    """The :class:`Layout` of a ``TM x TK`` tile at ``N`` padded to ``npad`` with ``rounds`` word chunks a thread
    of ``nthreads``.
    A B slice is ``TK x N`` (``B`` row-major) or ``N x TK`` (``linear``: rows of ``X``); an x4 ``ldmatrix`` of
    ``X`` reads 16 rows where it spans two n-blocks, so ``X``'s slice has at least 16 (those past ``N`` are
    never written: they reach only columns of ``C`` that are not stored)."""
    ldw = tk + 8
    ldb = tk + 8 if linear else npad + 8
    brows = max(npad, 16) if linear else tk
    bslice = 2 * brows * ldb
    return Layout(ldw, 2 * tm * ldw + 16, ldb, brows, bslice, bslice + 16 * rounds * nthreads)


def shared_bytes(tm: int, tk: int, npad: int, rounds: int, nthreads: int, linear: bool, stages: int,
                 max_tiles: int) -> int:
    """Dynamic shared memory of a block: the dense buffers, ``stages`` copy stages, then the word offsets of
    the block's (at most ``max_tiles``) tiles."""
    g = layout(tm, tk, npad, linear, rounds, nthreads)
    return BUFFERS * g.dense + stages * g.stage + 4 * (max_tiles + 1)


def copy_stages(tm: int, tk: int, npad: int, rounds: int, nthreads: int, linear: bool) -> int:
    """Copy stages for a block: two, plus enough word stages for :data:`IN_FLIGHT` bytes, within
    :data:`STAGE_BUDGET`; from 3 to 16."""
    g = layout(tm, tk, npad, linear, rounds, nthreads)
    return max(3, min(16, 2 + cdiv(IN_FLIGHT, g.stage - g.bslice), STAGE_BUDGET // g.stage))


@functools.cache
def _kernel(wm: int, warps: int, tk: int, npad: int, bf16: bool, linear: bool, vector_b: bool, stages: int,
            rounds: int):
    """The kernel for ``warps`` warps of ``wm`` 16-row blocks each (``TM = 16 wm warps`` rows), ``TK`` columns a
    tile, ``N`` padded to ``npad``, ``rounds`` word chunks a thread (:func:`word_rounds`). ``linear``: ``b`` is
    ``X`` (``N x K``) and the result ``Y = C^T`` (``N x M``), both row-major (a linear layer's ``Y = X W^T``);
    else ``b`` is ``K x N`` and ``C`` ``M x N``, row-major. ``vector_b``: the rows of ``b`` are whole 16-byte
    chunks (``K`` or ``N`` a multiple of 8), copied 16 bytes at a time."""
    wrows, nthreads = 16 * wm, 32 * warps     # rows a warp, threads a block
    tm = wrows * warps
    g = layout(tm, tk, npad, linear, rounds, nthreads)
    ring = BUFFERS * g.dense                   # copy stages follow the dense buffers (bytes)
    o_base = ring + stages * g.stage           # then the block's tile offsets
    zero_chunks = ring // 16                   # the dense buffers start at zero (B's padding rows or columns
                                               # only reach columns of C that are not stored)
    zero_rounds = cdiv(zero_chunks, nthreads)
    ahead = stages - 1                         # tile t + ahead is issued at step t
    pending = stages - 3                       # copy groups still in flight once tile t + 1 has landed
    pending0 = stages - 2                      # ... once tile 0 has (before the loop)
    ksteps, nblocks = tk // 16, npad // 8
    nacc = 4 * nblocks                         # float32 accumulators a thread and 16-row block: 4 per 16 x 8
    nacc_all = wm * nacc
    lshift = tk.bit_length() - 1               # local index -> row: TK is a power of two
    row_bytes, cpr = 2 * g.ldw, tk // 8        # dense-tile row stride in bytes, 16-byte chunks a row
    pair_k = npad == 8 and ksteps % 2 == 0     # one ldmatrix of B serves two k-steps (N <= 8)
    kstep_list = tuple(range(ksteps))         # (unrolled in Numba's IR: LLVM keeps wide N's loop rolled)
    mma = mma_m16n8k16_bf16_f32 if bf16 else mma_m16n8k16_f16_f32
    put = value_store(lshift)
    chunk_step = U(16 * nthreads)              # bytes between a thread's word chunks
    zero_steps = wrows * cpr // 32             # a warp zeroes its rows' chunks, lane + 32 j
    # B-slice copy by 16-byte chunks, consecutive threads on consecutive chunks of a row; a thread's chunks sit
    # at compile-time offsets from its first one in shared memory, at multiples of ``step`` bytes in ``b``.
    if linear:     # rows of X (row < N valid), cpr chunks a row (k0 + 8 col < K valid)
        row_threads = min(cpr, 32)             # threads a row (a power of two)
        row_passes, col_steps = cdiv(npad, nthreads // row_threads), cpr // row_threads
    else:          # rows of B (k0 + row < K valid), npad / 8 chunks a row (8 col < N valid)
        row_threads = npad // 8
        row_passes, col_steps = cdiv(tk, nthreads // row_threads), 1
    pass_rows = nthreads // row_threads        # rows a pass

    @inlined
    def b_thread(b, tid, sa, k, n):
        """This thread's first B chunk: ``(row, col, src, dst, step)``: its row and 16-byte chunk in the slice, the
        64-bit global address of that chunk at ``k0 = 0``, its shared address in the first stage, the bytes of
        ``b`` between two of its passes over the rows."""
        row, col = tid // U(row_threads), tid & U(row_threads - 1)
        return (row, col, global_addr(b, 0) + (row * (k if linear else n) + col * U(8)) * U(2),
                sa + U(ring) + row * U(2 * g.ldb) + col * U(16),
                np.uint64(pass_rows) * (k if linear else n) * U(2))

    if linear and vector_b:
        @inlined
        def copy_b(b, s16, tid, row, col, src, dst, step, stage, k0, k, n):
            """Step 1 for B: the slice of ``b`` for columns ``k0 ..`` of A into the stage at byte offset ``stage``
            (``row .. step``: :func:`b_thread`). In the tile that ``K`` cuts, chunks past ``K`` are zero-filled
            (read from ``b[0]``: nothing)."""
            whole = U(k0 + U(tk)) <= k
            at = src + k0 * U(2)
            for jr in range(row_passes):
                if row + U(jr * pass_rows) < n:
                    for jc in range(col_steps):
                        to = dst + stage + U(jr * pass_rows * 2 * g.ldb + jc * row_threads * 16)
                        if whole:
                            cp_async16_raw(s16, to, b, at + U(jc * row_threads * 16), U(16))
                        else:
                            ok = U(k0 + (col + U(jc * row_threads)) * U(8)) < k
                            cp_async16_raw(s16, to, b, at + U(jc * row_threads * 16) if ok else global_addr(b, 0),
                                           U(16) if ok else U(0))
                at += step
    elif vector_b:
        @inlined
        def copy_b(b, s16, tid, row, col, src, dst, step, stage, k0, k, n):
            """Step 1 for B (row-major): rows ``k0 ..`` of ``b``. In the tile that ``K`` cuts, rows past ``K`` are
            zero-filled (read from ``b[0]``: nothing)."""
            whole = U(k0 + U(tk)) <= k
            at = src + k0 * (step // U(pass_rows))
            if col * U(8) < n:
                for jr in range(row_passes):
                    r = row + U(jr * pass_rows)
                    if tk % pass_rows == 0 or r < U(tk):
                        to = dst + stage + U(jr * pass_rows * 2 * g.ldb)
                        if whole:
                            cp_async16_raw(s16, to, b, at, U(16))
                        else:
                            ok = U(k0 + r) < k
                            cp_async16_raw(s16, to, b, at if ok else global_addr(b, 0), U(16) if ok else U(0))
                    at += step
    elif linear:
        @inlined
        def copy_b(b, s16, tid, row, col, src, dst, step, stage, k0, k, n):
            """Step 1 for B, element by element: ``N`` rows of ``X``, ``TK`` elements each."""
            base = (U(ring) + stage) // U(2)
            e = tid
            while e < n * U(tk):
                r = e // U(tk)
                cc = e - r * U(tk)
                s16[base + r * U(g.ldb) + cc] = b[r * k + k0 + cc] if k0 + cc < k else uint16(0)
                e += U(nthreads)
    else:
        @inlined
        def copy_b(b, s16, tid, row, col, src, dst, step, stage, k0, k, n):
            """Step 1 for B, element by element: ``TK`` rows of ``b``, ``N`` elements each."""
            base = (U(ring) + stage) // U(2)
            e = tid
            while e < U(tk) * n:
                r = e // n
                cc = e - r * n
                s16[base + r * U(g.ldb) + cc] = b[(k0 + r) * n + cc] if k0 + r < k else uint16(0)
                e += U(nthreads)

    @inlined
    def scatter(s16, s32, tid, nchunks, words_at, buffer):
        """Step 2: a tile's ``nchunks`` word chunks from the word stage at ``words_at`` (this thread's first chunk)
        into the zeroed dense buffer at byte offset ``buffer``."""
        base = U(buffer + shared_addr(s32, 0))
        left = int32(int32(nchunks) - int32(tid))       # this thread has chunks in rounds r < left / nthreads
        for r in range(rounds):
            if left > int32(r * nthreads):
                w0, w1, w2, w3 = ld_shared4(s32, words_at + U(r) * chunk_step)
                put(s16, base, w0)
                put(s16, base, w1)
                put(s16, base, w2)
                put(s16, base, w3)

    if wm == 1:
        @inlined
        def a_fragments(s32, at):
            """The A fragments of a k-step, a tuple of one per 16-row block of the warp (``at``: the first's)."""
            return (ldmatrix_x4(s32, at),)
    else:
        @inlined
        def a_fragments(s32, at):
            return ldmatrix_x4(s32, at), ldmatrix_x4(s32, at + U(16 * row_bytes))

    @inlined
    def multiply(s16, s32, acc, a_at, b_at):
        """Step 3: this warp's rows of the dense tile (``a_at``: its first block's ldmatrix address) times the B
        slice (``b_at``: this lane's ldmatrix address; an element index for the transposed load), into ``acc``
        (block ``i``'s accumulators from ``i * nacc``)."""
        if pair_k:
            for s in range(ksteps // 2):
                if linear:
                    b0, b1, b2, b3 = ldmatrix_x4(s32, b_at + U(64 * s))
                else:
                    b0, b1, b2, b3 = ldmatrix_x4_trans(s16, b_at + U(32 * s * g.ldb))
                for i in range(wm):
                    a0, a1, a2, a3 = ldmatrix_x4(s32, a_at + U(16 * i * row_bytes + 64 * s))
                    d = mma(a0, a1, a2, a3, b0, b1, acc[i * nacc], acc[i * nacc + 1], acc[i * nacc + 2],
                            acc[i * nacc + 3])
                    a0, a1, a2, a3 = ldmatrix_x4(s32, a_at + U(16 * i * row_bytes + 64 * s + 32))
                    d = mma(a0, a1, a2, a3, b2, b3, d[0], d[1], d[2], d[3])
                    for e in range(4):
                        acc[i * nacc + e] = d[e]
            return
        for ks in literal_unroll(kstep_list):
            frag = a_fragments(s32, a_at + U(32 * ks))
            for p in range(0, nblocks, 2):
                if linear:
                    b0, b1, b2, b3 = ldmatrix_x4(s32, b_at + U(16 * p * g.ldb + 32 * ks))
                else:
                    b0, b1, b2, b3 = ldmatrix_x4_trans(s16, b_at + U(16 * ks * g.ldb + 8 * p))
                for i in range(wm):
                    a0, a1, a2, a3 = frag[i]
                    x = i * nacc + 4 * p
                    d = mma(a0, a1, a2, a3, b0, b1, acc[x], acc[x + 1], acc[x + 2], acc[x + 3])
                    for e in range(4):
                        acc[x + e] = d[e]
                    if p + 1 < nblocks:
                        d = mma(a0, a1, a2, a3, b2, b3, acc[x + 4], acc[x + 5], acc[x + 6], acc[x + 7])
                        for e in range(4):
                            acc[x + 4 + e] = d[e]

    store = element_store(bf16, linear)

    @inlined
    def issue(words, b, s16, s32, tid, offs, u, stage, word_src, word_dst, brow, bcol, b_src, b_dst, bstep, k0, k, n):
        """Step 1: start copying tile ``u`` (columns ``k0 ..`` of A) into the copy stage at byte offset ``stage``."""
        w0 = ld_shared(s32, offs + u * U(4))
        nchunks = U(U(ld_shared(s32, offs + u * U(4) + U(4)) - w0) >> U(2))
        src = word_src + w0 * U(4)
        dst = U(word_dst + stage)
        left = int32(int32(nchunks) - int32(tid))
        for r in range(rounds):
            if left > int32(r * nthreads):
                cp_async16_raw(s32, dst + U(r) * chunk_step, words, src + U(r) * chunk_step, U(16))
        copy_b(b, s16, tid, brow, bcol, b_src, b_dst, bstep, stage, k0, k, n)

    @cuda.jit
    def kernel(words, offsets, b, c, ws, counters, m, k, n):
        s16 = cuda.shared.array(0, uint16, alignment=SMEM_ALIGN)    # [dense tiles | stages: B slice, words |
        s32 = cuda.shared.array(0, uint32, alignment=SMEM_ALIGN)    #  tile offsets]
        last = cuda.shared.array(1, int32)
        tid = U(cuda.threadIdx.x)
        warp, lane = tid >> U(5), tid & U(31)
        strip, split, nsplit = cuda.blockIdx.x, cuda.blockIdx.y, cuda.gridDim.y
        kt = (k + tk - 1) // tk
        t0 = split * kt // nsplit
        nt = U((split + 1) * kt // nsplit - t0)
        first = U(strip * kt + t0)
        k32, n32 = U(k), U(n)
        sa = shared_addr(s32, 0)
        for z in range(zero_rounds):                          # the dense tiles start at zero
            i = tid + U(z * nthreads)
            if zero_chunks % nthreads == 0 or i < U(zero_chunks):
                st_shared4(s32, sa + i * U(16), U(0), U(0), U(0), U(0))
        offs = sa + U(o_base)                                 # the block's tile offsets, read once (a global
        i = tid                                               # load in the loop would stall every step)
        while i <= nt:
            st_shared(s32, offs + i * U(4), U(offsets[first + i]))
            i += U(nthreads)
        # this thread's addresses: its word chunks, B chunks, A and B fragment rows, zeroing chunks
        word_src = global_addr(words, 0) + U(16) * tid
        word_dst = sa + U(ring + g.bslice) + U(16) * tid
        brow, bcol, b_src, b_dst, bstep = b_thread(b, tid, sa, k32, n32)
        a_lane = sa + (warp * U(wrows) + (lane & U(15))) * U(row_bytes) + (lane >> U(4)) * U(16)
        if linear and pair_k:                                 # n 0-7, k 8 j .. 8 j + 7 of a 32-wide window
            b_lane = sa + U(ring) + (lane & U(7)) * U(2 * g.ldb) + (lane >> U(3)) * U(16)
        elif linear:                                          # n-block p + j // 2, k-half j % 2
            b_lane = (sa + U(ring) + ((lane & U(7)) + (lane >> U(4)) * U(8)) * U(2 * g.ldb)
                      + ((lane >> U(3)) & U(1)) * U(16))
        elif pair_k:                                          # (ldmatrix.trans: element indices) k rows 8 j ..
            b_lane = U(ring // 2) + lane * U(g.ldb)           # 8 j + 7 of a 32-row window
        else:                                                 # k-half j % 2, n-block p + j // 2
            b_lane = (U(ring // 2) + ((lane & U(7)) + ((lane >> U(3)) & U(1)) * U(8)) * U(g.ldb)
                      + (lane >> U(4)) * U(8))
        z_lane = sa + (warp * U(wrows) + lane // U(cpr)) * U(row_bytes) + (lane % U(cpr)) * U(16)
        cuda.syncthreads()
        acc = cuda.local.array(nacc_all, float32)
        for j in range(nacc_all):
            acc[j] = float32(0.0)
        k0 = U(t0 * tk)
        for u in range(ahead):                                # prologue: tiles 0 .. S - 2 in flight
            if U(u) < nt:
                issue(words, b, s16, s32, tid, offs, U(u), U(u * g.stage), word_src, word_dst, brow, bcol, b_src, b_dst,
                      bstep, k0, k32, n32)
                k0 = U(k0 + U(tk))
            cp_async_commit()
        cp_async_wait(pending0)                               # tile 0 has landed
        cuda.syncthreads()
        if nt > U(0):
            scatter(s16, s32, tid, U(U(ld_shared(s32, offs + U(4)) - ld_shared(s32, offs)) >> U(2)), word_dst, U(0))
        buffer = U(0)                                         # byte offsets: the dense buffer of tile t, the
        s_prev, s_cur, s_next = U((stages - 1) * g.stage), U(0), U(g.stage)   # stages of tiles t - 1, t, t + 1
        t = U(0)
        while t < nt:
            cp_async_wait(pending)                            # tile t + 1 has landed (this thread's part)
            cuda.syncthreads()                                # ... every thread's; tile t is scattered
            if U(t + U(ahead)) < nt:                          # into stage (t - 1) % S: free since the barrier
                issue(words, b, s16, s32, tid, offs, U(t + U(ahead)), s_prev, word_src, word_dst, brow, bcol, b_src,
                      b_dst, bstep, k0, k32, n32)
                k0 = U(k0 + U(tk))
            cp_async_commit()                                 # (an empty group keeps the wait counts)
            if U(t + U(1)) < nt:
                at = U(offs + U(t + U(1)) * U(4))
                scatter(s16, s32, tid, U(U(ld_shared(s32, at + U(4)) - ld_shared(s32, at)) >> U(2)),
                        U(word_dst + s_next), U(U(g.dense) - buffer))
            multiply(s16, s32, acc, a_lane + buffer, b_lane + (s_cur if linear else s_cur // U(2)))
            if not SIM:                                       # step 4 after this warp's ldmatrix reads
                cuda.syncwarp()                               # (the simulator's MMA already waits for them)
            for j in range(zero_steps):
                st_shared4(s32, z_lane + buffer + U((32 * j // cpr) * row_bytes + (32 * j % cpr) * 16),
                           U(0), U(0), U(0), U(0))
            buffer = U(U(g.dense) - buffer)
            s_prev, s_cur = s_cur, s_next
            s_next = U(s_next + U(g.stage)) if U(s_next + U(g.stage)) < U(stages * g.stage) else U(0)
            t = U(t + U(1))
        # Epilogue: C fragment element e of block i, n-block p sits at row 16 i + g (+8 for e >= 2), column
        # 8p + 2q + e % 2.
        thread = cuda.threadIdx.x
        gq, q = thread % 32 // 4, thread % 4
        row0 = strip * tm + thread // 32 * wrows + gq
        if nsplit == 1:
            for i in range(wm):
                for p in range(nblocks):
                    for e in range(4):
                        store(c, row0 + 16 * i + (e // 2) * 8, p * 8 + 2 * q + e % 2, m, n, acc[i * nacc + 4 * p + e])
            return
        nstrips = cuda.gridDim.x
        for j in range(nacc_all):                  # partials, coalesced: [split][strip][j][thread]
            ws[((split * nstrips + strip) * nacc_all + j) * nthreads + thread] = acc[j]
        if not split_ticket(counters, nsplit, strip, last):  # the last block of the row of tiles goes on
            return
        for i in range(wm):
            for p in range(nblocks):
                for e in range(4):
                    j = i * nacc + 4 * p + e
                    total = float32(0.0)
                    for s in range(nsplit):                # split order: the same sum on every run
                        total += ws[((s * nstrips + strip) * nacc_all + j) * nthreads + thread]
                    store(c, row0 + 16 * i + (e // 2) * 8, p * 8 + 2 * q + e % 2, m, n, total)

    return kernel


# ---------------------------------------------------------------------------
# Rows (``tile = (1, TK)``, ``TK >= K``): CUDA cores, one warp a row
# ---------------------------------------------------------------------------

#: Warps (rows) a block of the row kernel, and 16-byte loads a lane has in flight.
ROW_WARPS, ROW_UNROLL = 4, 4

if cuda_config.ENABLE_CUDASIM:
    from sparsekit.gpu.mma import warp_collective

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
                    c[at] = round_bf16(total)
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
class DeviceTiled(Prepared):
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


def uint16_bits(dev):
    """A 16-bit device array as uint16 bits (the kernels never see the value dtype)."""
    return dev if dev.dtype == np.uint16 else dev.view(np.uint16)


def half_operands(dev, b, name: str, linear: bool, max_n: int, wider: str = ""):
    """``(operand, N, C)`` for a product of the prepared half-precision weight ``dev`` (``M x K``) and ``b``
    (``K x N``, or ``linear``: ``X``, ``N x K``), row-major in the weight's dtype, ``1 <= N <= max_n`` (``wider``:
    what the refusal of a wider ``N`` adds); ``C`` allocated (``N x M`` for ``linear``, else ``M x N``)."""
    m, k = dev.shape
    bop = operand(b, name, dtypes=(dev.dtype,), ndim=2, order="C")
    rows, n = bop.dev.shape[::-1] if linear else bop.dev.shape
    if rows != k:
        want = f"(N, {k})" if linear else f"({k}, N)"
        raise ValueError(f"{name}: expected shape {want} to multiply a {m}x{k} matrix, got {bop.dev.shape}")
    if not 1 <= n <= max_n:
        raise ValueError(f"{name}: N = {n}; this kernel takes 1 to {max_n}{wider}")
    return bop, n, output((n, m) if linear else (m, n), dev.dtype, like=bop)


def spmm_tiled(a, b, *, splits=None, stages=None, unroll=None, rows_per_warp=None):
    """``C = A @ b`` for a TiledCSL (or :func:`prepare`'d) ``A`` (M x K) and a dense row-major ``b`` (K x N,
    the same 16-bit dtype, ``N <= 64``); returns ``C`` (M x N, row-major) as the kind of array ``b`` is.

    Tunables of the tile kernel: ``splits``, blocks a row of tiles (split K), default :func:`default_splits`;
    ``stages``, copy stages, default :func:`copy_stages`; ``rows_per_warp``, 16 or 32 (dividing ``TM``),
    default :func:`warp_rows`. Of the row kernel: ``unroll``, 16-byte loads in flight a lane."""
    return _run(a, b, "b", False, splits, stages, unroll, rows_per_warp)


def spmm_tiled_linear(a, x, *, splits=None, stages=None, unroll=None, rows_per_warp=None):
    """``Y = x @ A^T`` for a TiledCSL (or :func:`prepare`'d) weight ``A`` (M x K, out x in) and a row-major
    ``x`` (N x K, ``N <= 64``): a linear layer without bias; returns ``Y`` (N x M, row-major). Tunables as
    for :func:`spmm_tiled`."""
    return _run(a, x, "x", True, splits, stages, unroll, rows_per_warp)


def _run(a, b, name: str, linear: bool, splits, stages, unroll=None, rows_per_warp=None):
    dev = a if isinstance(a, DeviceTiled) else prepare(a)
    m, k = dev.shape
    bop, n, c = half_operands(dev, b, name, linear, MAX_N, " (wider products are not bound by reading the weight: "
                                                           "use sparsekit.gpu.uspmm)")
    if m == 0:
        return result(c, like=bop)
    bits = uint16_bits(flat_view(bop.dev))
    cflat = flat_view(c) if dev.dtype == np.float16 else uint16_bits(flat_view(c))
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
    wrows = warp_rows(tm) if rows_per_warp is None else check_int(rows_per_warp, "rows_per_warp", minimum=16)
    if wrows not in (16, 32) or tm % wrows:
        raise ValueError(f"rows_per_warp: must be 16 or 32 and divide the tile's {tm} rows, got {wrows}")
    wm = wrows // 16
    nthreads = 32 * (tm // wrows)
    rounds = word_rounds(dev.max_words, nthreads)
    stages = (copy_stages(tm, tk, npad, rounds, nthreads, linear) if stages is None
              else check_int(stages, "stages", minimum=3))
    nbytes = shared_bytes(tm, tk, npad, rounds, nthreads, linear, stages, cdiv(dev.host.grid[1], splits))
    kernel = _kernel(wm, tm // (16 * wm), tk, npad, dev.dtype.name == "bfloat16", linear, (k if linear else n) % 8 == 0,
                     stages, rounds)
    ws = dev.scratch(splits * dev.host.grid[0] * wm * (npad // 2) * nthreads)     # 4 wm npad / 8 partials a thread
    args = (dev.words, dev.offsets, bits, cflat, ws, dev.counters, m, k, n)
    if nbytes > SHARED_OPTIN:
        raise ValueError(f"a.tile: {dev.host.tile} with {stages} copy stages needs {nbytes} bytes of shared memory "
                         f"a block, more than the {SHARED_OPTIN} a block may have; choose a smaller tile")
    if nbytes > SHARED_LIMIT:
        opt_in(kernel, args, SHARED_OPTIN - 1024)   # once per kernel (the static `last` flag is in the rest)
    launch(DynamicShared(kernel, nbytes), (dev.host.grid[0], splits), nthreads, args,
            f"tile={dev.host.tile}, splits={splits}")
    return result(c, like=bop)
