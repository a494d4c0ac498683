"""Half-precision SpMM on tensor cores for a :class:`~sparsekit.formats.TiledBitmap` weight, decoded in registers:
``C = A @ B``, or a linear layer's ``Y = X A^T``, for small and medium ``N``.

Equals ``sparsekit/reference/spmm_bitmap.py``. After SpInfer (EuroSys 2025): a bitmap per 8 x 8 cell and the
cell's kept weights, read into the registers of ``mma.sync.m16n8k16``; here a bit stands for one lane's
register (a pair of weights), so a lane's decode is a popcount, one load and a select.

Each warp owns a 16-row block of ``A`` (``rows`` warps of a block own consecutive ones and read the same
columns of ``X``, which L1 then serves once) and a range of its 32-column groups (``slices`` warps of a block,
and ``splits`` blocks, share a row's columns: split K). The warp's records are one contiguous run of the
stream:

1. **Ring**: the warp copies its run through a ring of ``stages`` chunks of :data:`CHUNK` bytes in shared
   memory with ``cp.async`` (16 bytes a lane), ``stages - 3`` chunks ahead of the one it decodes, so kilobytes
   of the stream are in flight a warp without a register; the ring's first :data:`MAX_RECORD` bytes are
   mirrored past its end, so a record is contiguous in shared memory wherever it starts.
2. **Inputs**: lane ``(g, t)`` (``g = lane // 4``, ``t = lane % 4``) loads ``X[8 p + g, 32 G + 8 t .. + 8]``,
   one 16-byte load an n-block ``p``: the B fragments (``b0, b1``) of both k-steps, because the format
   permutes each group's columns to match; the next group's while this one is decoded.
3. **Decode** (:func:`pair_word`): the record's four cell bitmaps in one 16-byte shared load; lane ``l``'s
   register of cell ``c`` is the word after the cell's marked pairs of lower lanes (a popcount of the bitmap
   below bit ``l``), zero where bit ``l`` is clear. The popcounts of whole bitmaps place the cells' words and
   give the record's length.
4. **Multiply**: ``mma.sync.m16n8k16`` (float32 accumulators) per n-block.

The slices of a block add their accumulators in shared memory (slice order); the splits of a row of
blocks add theirs through a float32 workspace, the last block to finish in split order
(:func:`sparsekit.gpu.split_k.split_ticket`), so the result is the same on every run; ``C`` is rounded once
to the dtype.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
from numba import cuda, float32, int32, uint16, uint32
from numba.cuda import config as cuda_config

from sparsekit.arrays import cdiv, flat_view, result
from sparsekit.checks import check_int
from sparsekit.formats import TiledBitmap
from sparsekit.gpu.inline import inlined
from sparsekit.gpu.launch import SHARED_LIMIT, Buffers, Prepared, check_int32, launch, resident_blocks
from sparsekit.gpu.mma import (cp_async16_raw, cp_async_commit, cp_async_wait, global_addr, ld_shared, ld_shared4,
                               mma_m16n8k16_bf16_f32, mma_m16n8k16_f16_f32, shared_addr)
from sparsekit.gpu.spmm_tiled import element_store, half_operands, uint16_bits
from sparsekit.gpu.split_k import split_ticket
from sparsekit.gpu.vector_loads import aligned, load4

__all__ = ["spmm_bitmap", "spmm_bitmap_linear", "prepare", "upload", "DeviceBitmap", "default_config", "check_block",
           "MAX_N", "TUNABLES"]

#: The widest ``B`` this kernel takes.
MAX_N = 64
#: The launch's tunables (:func:`spmm_bitmap`).
TUNABLES = frozenset({"rows", "slices", "splits", "stages"})
#: Bytes a warp copies into its ring in one step (16 a lane).
CHUNK = 512
#: The longest record: four bitmaps and 128 pairs.
MAX_RECORD = 528
#: Chunks in a warp's ring, one in flight ahead of the decoded one (8, five ahead, in blocks of 8 warps, as many as
#: 48 KB of static shared memory held: 3-10 % slower at 4096^2, 14336x4096 and 4096x14336, 50-90 %, N = 8-32;
#: 16-warp blocks with 8 or 16 chunks in dynamic shared memory: 1.00-1.14x and 1.02-1.47x the time; both measured
#: on the H200, experiments/results/spmm_bitmap.md).
STAGES = 4
#: n-blocks (8 columns of ``X`` each) up to which a warp loads the next group's ``X`` while it decodes this one
#: (wider, the registers that takes cost more warps an SM than the overlap gains).
PIPELINED_X_BLOCKS = 2
#: Fewest 32-column groups a warp's share of ``K`` should have (its fixed costs, the start and the sum of
#: its partials, spread over at least this many).
MIN_GROUPS = 4
#: Registers a thread gets at ``N <= 8``, where they fit without spilling: three 16-warp blocks an SM instead of the
#: two that ptxas's own choice (48) leaves room for (the refill check by landed bytes, 1-8 % faster at N = 16-32,
#: took N = 8 from 40 to 48 registers, where it ran 6-18 % slower on 4096^2 and 4096x14336; spmm_bitmap.md).
NARROW_REGISTERS = 40

U = np.uint32
SIM = bool(cuda_config.ENABLE_CUDASIM)


def padded_n(n: int) -> int:
    """``N`` rounded up to the MMA's width, a multiple of 8."""
    return 8 * cdiv(int(n), 8)


if SIM:
    from sparsekit.gpu.mma import warp_collective

    def lanes_meet():
        """Simulator: the warp's 32 lanes meet (a 32-party barrier)."""
        warp_collective(None, len)

    def float_bits(x):
        """Simulator: the bits of a float32 as a uint32."""
        return np.float32(x).view(np.uint32)

    def bits_float(w):
        """Simulator: the float32 with the bits of a uint32."""
        return np.uint32(w).view(np.float32)
else:
    from numba.cuda.libdevice import float_as_int, int_as_float

    @cuda.jit(device=True, inline=True)
    def lanes_meet():
        """``__syncwarp()``: the warp's lanes meet, their shared-memory accesses ordered."""
        cuda.syncwarp()

    @cuda.jit(device=True, inline=True)
    def float_bits(x):
        """The bits of a float32 as a uint32."""
        return U(float_as_int(x))

    @cuda.jit(device=True, inline=True)
    def bits_float(w):
        """The float32 with the bits of a uint32."""
        return int_as_float(int32(w))


@inlined
def pair_word(ring, at, mask, lanebit, lanes_below):
    """Step 3: this lane's register of one cell, from the cell's bitmap ``mask`` and the shared address ``at``
    of its first word: the word after the marked pairs of lower lanes, zero where the cell has no pair for
    this lane (the load is made either way, within the record or the ring's mirror: no branch)."""
    w = ld_shared(ring, U(at + U(U(4) * U(cuda.popc(U(mask & lanes_below))))))
    return w if U(mask & lanebit) != U(0) else U(0)


@inlined
def load_x(x32, xat, p, gq, n, xs):
    """Step 2: this lane's 16 bytes of ``X`` row ``8 p + g`` (``xat``: its word at row ``g``), zero past ``N``:
    the B fragments of n-block ``p`` for both k-steps of the group."""
    if U(U(8 * p) + gq) < U(n):
        return load4(x32, U(xat + U(8 * p) * U(xs)))
    return U(0), U(0), U(0), U(0)


@inlined
def copy_chunk(ring, home, s32, src, off, total, ring_bytes, wrap):
    """Step 1: this lane's 16 bytes of the warp's run at byte ``off`` (nothing past its ``total`` bytes) into
    the ring at ``home``, and into the mirror past the ring's end when they land in its first
    :data:`MAX_RECORD` bytes."""
    if off < total:
        slot = U(off & wrap)
        cp_async16_raw(ring, U(home + slot), s32, src + off, U(16))
        if slot < U(MAX_RECORD):
            cp_async16_raw(ring, U(U(home + ring_bytes) + slot), s32, src + off, U(16))


@functools.cache
def _kernel(npad: int, bf16: bool, linear: bool, rows: int, slices: int, stages: int):
    """The kernel for ``N`` padded to ``npad``, ``rows`` warps on consecutive 16-row blocks and ``slices`` warps
    splitting ``K`` in a block, each warp's ring ``stages`` chunks long. ``linear``: the result is ``Y``
    (``N x M``), else ``C`` (``M x N``), row-major. ``x32``: the staged ``X`` (``N x 32 groups`` halves, as
    32-bit words, ``xs`` words a row).

    A record spans at most three chunks, so the chunk refilled (``stages - 3`` after the newest landed one) is
    one the record being decoded starts after; ``__syncwarp`` before a refill (every lane is past it) and
    after the wait (every lane's copies have landed)."""
    nblocks = npad // 8
    nacc = 4 * nblocks
    pipelined_x = nblocks <= PIPELINED_X_BLOCKS
    mma = mma_m16n8k16_bf16_f32 if bf16 else mma_m16n8k16_f16_f32
    lookahead = stages - 3
    ring_bytes = stages * CHUNK
    ring_words = (ring_bytes + MAX_RECORD) // 4
    wrap = ring_bytes - 1
    ring_size = rows * slices * ring_words
    assert stages & (stages - 1) == 0 and lookahead >= 1, stages
    assert slices == 1 or rows * nacc * 32 <= ring_size, "the slices' sum reuses the rings"
    store = element_store(bf16, linear)

    def kernel(s32, offsets, x32, c, ws, counters, m, n, groups, xs):
        ring = cuda.shared.array(ring_size, uint32)
        last = cuda.shared.array(1, int32)
        tid = U(cuda.threadIdx.x)
        lane, warp = tid & U(31), tid >> U(5)
        r, sl = warp % U(rows), warp // U(rows)
        strip, split, nsplit = cuda.blockIdx.x, cuda.blockIdx.y, cuda.gridDim.y
        rb = U(strip * rows) + r                                 # this warp's 16-row block
        g0 = U(split * groups // nsplit)                          # the block's groups, then the warp's slice
        g1 = U((split + 1) * groups // nsplit)
        ga = U(g0 + sl * (g1 - g0) // U(slices))
        gb = U(g0 + (sl + U(1)) * (g1 - g0) // U(slices))
        gq, t = lane >> U(2), lane & U(3)
        lanebit = U(U(1) << lane)
        lanes_below = U(lanebit - U(1))
        home = shared_addr(ring, warp * U(ring_words))
        acc = cuda.local.array(nacc, float32)
        for j in range(nacc):
            acc[j] = float32(0.0)
        xw = cuda.local.array(nacc, uint32)
        xn = cuda.local.array(nacc, uint32)
        if U(U(16) * rb) < U(m) and ga < gb:
            f0 = U(U(rb * U(groups)) * U(2) + U(2) * ga)
            start = U(U(offsets[f0]) * U(16))                     # the warp's run: bytes start .. start + total
            total = U(U(U(offsets[U(f0 + U(2) * (gb - ga))]) * U(16)) - start)
            src = global_addr(s32, 0) + start
            mine = U(U(16) * lane)
            for q in range(lookahead):                            # step 1: the first chunks in flight
                copy_chunk(ring, home, s32, src, U(U(q * CHUNK) + mine), total, U(ring_bytes), U(wrap))
                cp_async_commit()
            landed = U(0)                                         # bytes of the run in the ring
            rel = U(0)                                            # the record's byte offset in the run
            xat = U(U(gq * U(xs)) + U(U(ga * U(16)) + U(t * U(4))))             # X[g, 32 G + 8 t], 32-bit words
            if pipelined_x:                                       # step 2 for the first group
                for p in range(nblocks):
                    xn[4 * p], xn[4 * p + 1], xn[4 * p + 2], xn[4 * p + 3] = load_x(x32, xat, p, gq, n, xs)
            for grp in range(ga, gb):
                if pipelined_x:                                   # this group's inputs, the next group's in flight
                    for j in range(nacc):
                        xw[j] = xn[j]
                    xat = U(xat + U(16))
                    if U(grp + 1) < gb:
                        for p in range(nblocks):
                            xn[4 * p], xn[4 * p + 1], xn[4 * p + 2], xn[4 * p + 3] = load_x(x32, xat, p, gq, n, xs)
                else:
                    for p in range(nblocks):
                        xw[4 * p], xw[4 * p + 1], xw[4 * p + 2], xw[4 * p + 3] = load_x(x32, xat, p, gq, n, xs)
                    xat = U(xat + U(16))
                for s in range(2):
                    # step 1: the bytes this record may reach have landed, one more chunk in flight a chunk
                    need = min(U(rel + U(MAX_RECORD)), total)     # the record's longest end, or the run's
                    while landed < need:
                        lanes_meet()
                        copy_chunk(ring, home, s32, src, U(U(landed + U(lookahead * CHUNK)) + mine), total,
                                   U(ring_bytes), U(wrap))
                        cp_async_commit()
                        cp_async_wait(lookahead)
                        lanes_meet()
                        landed = U(landed + U(CHUNK))
                    # step 3: the cells' bitmaps, their words' addresses, this lane's registers
                    at = U(home + U(rel & U(wrap)))
                    m0, m1, m2, m3 = ld_shared4(ring, at)
                    p0, p1, p2 = U(cuda.popc(m0)), U(cuda.popc(m1)), U(cuda.popc(m2))
                    w0 = U(at + U(16))
                    w1 = U(w0 + U(U(4) * p0))
                    w2 = U(w1 + U(U(4) * p1))
                    w3 = U(w2 + U(U(4) * p2))
                    a0 = pair_word(ring, w0, m0, lanebit, lanes_below)
                    a1 = pair_word(ring, w1, m1, lanebit, lanes_below)
                    a2 = pair_word(ring, w2, m2, lanebit, lanes_below)
                    a3 = pair_word(ring, w3, m3, lanebit, lanes_below)
                    for p in range(nblocks):                      # step 4
                        d = mma(a0, a1, a2, a3, xw[4 * p + 2 * s], xw[4 * p + 2 * s + 1],
                                acc[4 * p], acc[4 * p + 1], acc[4 * p + 2], acc[4 * p + 3])
                        for e in range(4):
                            acc[4 * p + e] = d[e]
                    pairs = U(U(p0 + p1) + U(p2 + U(cuda.popc(m3))))
                    rel = U(rel + U(U(U(pairs + U(7)) & U(0xFFFFFFFC)) * U(4)))   # 4 bitmap + pair words, to 16 B
            cp_async_wait(0)
        if slices > 1:                                            # the slices' sum through the (idle) ring, in
            cuda.syncthreads()                                    # slice order, one slice's partials at a time
            for q in range(1, slices):
                if sl == U(q):
                    for j in range(nacc):
                        ring[(r * nacc + j) * 32 + lane] = float_bits(acc[j])
                cuda.syncthreads()
                if sl == U(0):
                    for j in range(nacc):
                        acc[j] += bits_float(ring[(r * nacc + j) * 32 + lane])
                cuda.syncthreads()
        # C fragment element e of n-block p: row 16 rb + g (+8 for e >= 2), column 8 p + 2 t + e % 2
        row0 = rb * U(16) + gq
        if nsplit == 1:
            if sl == U(0):
                for p in range(nblocks):
                    for e in range(4):
                        store(c, row0 + U(8 * (e // 2)), U(8 * p + e % 2) + U(2) * t, m, n, acc[4 * p + e])
            return
        nstrips = cuda.gridDim.x
        if sl == U(0):                                            # partials, coalesced: [split][strip][r][j][lane]
            for j in range(nacc):
                ws[(((split * nstrips + strip) * rows + r) * nacc + j) * 32 + lane] = acc[j]
        if not split_ticket(counters, nsplit, strip, last):      # the last block of the strip goes on
            return
        if sl == U(0):
            for p in range(nblocks):
                for e in range(4):
                    j = 4 * p + e
                    total = float32(0.0)
                    for q in range(nsplit):                       # split order: the same sum on every run
                        total += ws[(((q * nstrips + strip) * rows + r) * nacc + j) * 32 + lane]
                    store(c, row0 + U(8 * (e // 2)), U(8 * p + e % 2) + U(2) * t, m, n, total)

    if npad > 8 or SIM:                                           # (the simulator's jit takes no launch bounds)
        return cuda.jit(kernel)
    threads = 32 * rows * slices
    return cuda.jit(kernel, launch_bounds=(threads, max(1, 65536 // (threads * NARROW_REGISTERS))))


@cuda.jit
def stage_x(src, dst, n, k, kp, transposed):
    """``dst`` (``N x kp`` halves, row-major) = ``X`` with its columns past ``K`` zero: ``src`` is ``X``
    (``N x K``) or, ``transposed``, ``B`` (``K x N``, so ``X = B^T``). A thread an element of ``dst``."""
    i = cuda.grid(1)
    if i < n * kp:
        row, col = i // kp, i % kp
        if col < k:
            dst[i] = src[col * n + row] if transposed else src[row * k + col]
        else:
            dst[i] = uint16(0)


@dataclass(eq=False)
class DeviceBitmap(Prepared):
    """A :class:`~sparsekit.formats.TiledBitmap` on the device, ready for :func:`spmm_bitmap`: the stream, the
    fragments' offsets (int32, 16-byte units), the split-K tickets (zero between launches) and scratch buffers
    (the float32 workspace, the staged ``X``). Launches sharing one must be ordered."""

    host: TiledBitmap
    stream: object
    offsets: object
    counters: object
    buffers: Buffers = field(default_factory=Buffers)
    #: The default splits by (``N``, form, rows, slices, stages), resolved on the first call (the occupancy query
    #: types every argument).
    default_splits: dict = field(default_factory=dict)


def prepare(a: TiledBitmap) -> DeviceBitmap:
    """Copy ``a`` to the device once; the result is reused by every :func:`spmm_bitmap` call."""
    if not isinstance(a, TiledBitmap):
        raise TypeError(f"a: expected a TiledBitmap, got {type(a).__name__}")
    a.validate(full=True)                      # the kernel trusts offsets and bitmaps: check them once
    return upload(a)


def upload(a: TiledBitmap) -> DeviceBitmap:
    """:func:`prepare` without the full scan: for a TiledBitmap made by its constructors in this process
    (``from_dense``, ``from_coords``, ``from_csr``), whose records are right by construction. The cheap checks
    still run (the type, the arrays, offsets spanning the stream, byte offsets within 32 bits)."""
    if not isinstance(a, TiledBitmap):
        raise TypeError(f"a: expected a TiledBitmap, got {type(a).__name__}")
    check_int32(a.stream.size * 4, "a.stream", "bytes", "the kernel's offsets in a warp's run are 32-bit")
    a.validate()
    return DeviceBitmap(a, cuda.to_device(a.stream), cuda.to_device(a.offsets.astype(np.int32)),
                        cuda.to_device(np.zeros(max(a.grid[0], 1), dtype=np.int32)))


def default_config(m: int, k: int, n: int, resident: int | None = None) -> dict:
    """``{"rows", "slices", "splits", "stages"}`` for an ``M x K`` weight: blocks of 4 x 4 warps (4 consecutive
    row blocks, ``K`` in 4 slices), rings of :data:`STAGES` chunks, and as many splits of ``K`` as fill the
    ``resident`` blocks the GPU holds at once (one wave: measured best against twice as many, or twice as many
    warps in smaller blocks, at 4096^2, 14336x4096 and 4096x14336, 50-90 %, N = 8-32), each warp with at least
    :data:`MIN_GROUPS` groups; one split when ``resident`` is None (the simulator)."""
    return {"rows": 4, "slices": 4, "splits": _splits(m, k, 4, 4, resident), "stages": STAGES}


def _splits(m: int, k: int, rows: int, slices: int, resident: int | None) -> int:
    """Splits of ``K`` that fill ``resident`` blocks of ``rows x slices`` warps (one when None), each warp with at
    least :data:`MIN_GROUPS` groups."""
    strips = max(cdiv(cdiv(m, 16), rows), 1)
    return max(1, min((resident or 0) // strips, cdiv(k, 32) // (MIN_GROUPS * slices)))


def spmm_bitmap(a, b, *, rows=None, slices=None, splits=None, stages=None):
    """``C = A @ b`` for a TiledBitmap (or :func:`prepare`'d) ``A`` (M x K) and a dense row-major ``b`` (K x N,
    the same 16-bit dtype, ``N <= 64``); returns ``C`` (M x N, row-major) as the kind of array ``b`` is.

    Tunables (default :func:`default_config`): ``rows``, warps of a block on consecutive 16-row blocks;
    ``slices``, warps of a block splitting ``K``; ``splits``, blocks splitting ``K``; ``stages``, chunks in a
    warp's ring (a power of two, at least 4)."""
    return _run(a, b, "b", False, rows, slices, splits, stages)


def spmm_bitmap_linear(a, x, *, rows=None, slices=None, splits=None, stages=None):
    """``Y = x @ A^T`` for a TiledBitmap (or :func:`prepare`'d) weight ``A`` (M x K, out x in) and a row-major
    ``x`` (N x K, ``N <= 64``): a linear layer without bias; returns ``Y`` (N x M). Tunables as for
    :func:`spmm_bitmap`."""
    return _run(a, x, "x", True, rows, slices, splits, stages)


def check_block(rows: int, slices: int, stages: int) -> None:
    """``ValueError`` unless a block of ``rows`` x ``slices`` warps with rings of ``stages`` chunks launches: a power
    of two of chunks (the ring wraps by a mask), at most 32 warps, the rings (with their mirrors) and the block's
    one int32 within the static shared memory."""
    if stages & (stages - 1):
        raise ValueError(f"stages: a power of two (the ring wraps by a mask), got {stages}")
    if rows * slices > 32:
        raise ValueError(f"rows * slices: a block has at most 32 warps, got {rows} * {slices}")
    if rows * slices * (stages * CHUNK + MAX_RECORD) > SHARED_LIMIT - 4:
        raise ValueError(f"rows * slices * stages: the rings of a block's {rows * slices} warps "
                         f"({stages} chunks of {CHUNK} bytes each) exceed 48 KB of shared memory")


def _run(a, b, name: str, linear: bool, rows, slices, splits, stages):
    dev = a if isinstance(a, DeviceBitmap) else prepare(a)
    m, k = dev.shape
    bop, n, c = half_operands(dev, b, name, linear, MAX_N)
    if m == 0:
        return result(c, like=bop)
    conf = default_config(m, k, n)
    for key, value in (("rows", rows), ("slices", slices), ("splits", splits), ("stages", stages)):
        if value is not None:
            conf[key] = check_int(value, key, minimum=4 if key == "stages" else 1)
    check_block(conf["rows"], conf["slices"], conf["stages"])
    threads = 32 * conf["rows"] * conf["slices"]
    groups = cdiv(k, 32)
    kp = 32 * groups
    bits = uint16_bits(flat_view(bop.dev))
    if kp == 0:                                         # no columns: C is zero (the kernel reads nothing)
        bits = dev.buffers.get(np.uint16, 2)
    elif not linear or k != kp or not aligned(bits, 8):  # X staged: N x kp, 16-byte rows, columns past K zero
        xs = dev.buffers.get(np.uint16, n * kp)
        launch(stage_x, cdiv(n * kp, 256), 256, (bits, xs, n, k, kp, not linear), "stage x")
        bits = xs
    rowblocks = cdiv(m, 16)
    strips = cdiv(rowblocks, conf["rows"])
    npad = padded_n(n)
    kernel = _kernel(npad, dev.dtype.name == "bfloat16", linear, conf["rows"], conf["slices"], conf["stages"])
    cflat = flat_view(c) if dev.dtype == np.float16 else uint16_bits(flat_view(c))
    head = (dev.stream, dev.offsets, bits.view(np.uint32), cflat)
    tail = (dev.counters, m, n, groups, kp // 2)
    if splits is None:                                  # fill the resident blocks: once per (N, form, block shape)
        key = (n, linear, conf["rows"], conf["slices"], conf["stages"])
        if key not in dev.default_splits:
            resident = resident_blocks(kernel, head + (dev.buffers.get(np.float32, 1),) + tail, threads)
            dev.default_splits[key] = _splits(m, k, conf["rows"], conf["slices"], resident)
        conf["splits"] = dev.default_splits[key]
    splits = min(conf["splits"], max(groups, 1))
    ws = dev.buffers.get(np.float32, splits * strips * conf["rows"] * 16 * npad if splits > 1 else 1)
    launch(kernel, (strips, splits), threads, head + (ws,) + tail,
           f"rows={conf['rows']}, slices={conf['slices']}, splits={splits}, stages={conf['stages']}")
    return result(c, like=bop)
