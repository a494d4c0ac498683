"""Half-precision SpMM on tensor cores for a :class:`~sparsekit.formats.TiledBitmap` weight, decoded in registers:
``C = A @ B``, or a linear layer's ``Y = X A^T``, for small and medium ``N``.

Equals ``sparsekit/reference/spmm_bitmap.py``. The design of SpInfer (EuroSys 2025): a bitmap per 8 x 8 cell and
the cell's kept values, read straight into the registers of ``mma.sync.m16n8k16``. Nothing goes through
shared memory on the way in, so a block needs no barrier and the SM holds as many warps as its registers
allow: the loads of many warps are in flight at once, which is what reading the weight at the memory's
pace takes.

Each warp owns a 16-row block of ``A`` (``rows`` warps of a block own consecutive ones and read the same
columns of ``X``, which L1 then serves once) and a range of its 32-column groups (``slices`` warps of a block,
and ``splits`` blocks, share a row's columns: split K). For each group, two fragments (k-steps):

1. **Inputs**: lane ``(g, t)`` (``g = lane // 4``, ``t = lane % 4``) loads ``X[8 p + g, 32 G + 8 t .. + 8]``,
   one 16-byte load an n-block ``p``: the B fragments (``b0, b1``) of both k-steps, because the format
   permutes each group's columns to match (:class:`~sparsekit.formats.TiledBitmap`).
2. **Bitmaps**: this lane's half of the fragment's four bitmaps (16 bytes) and the record's two header words:
   loaded one record ahead (the header's first byte is the record's length), so they are in registers when
   the record is decoded.
3. **Decode** (:func:`decode`): lane ``l`` holds the pair of bits ``2 l, 2 l + 1`` of each cell's 64
   (half ``l // 16`` of it), exactly the two elements of that cell in its A-fragment register; the
   header byte of its half and cell plus the popcount of the kept bits below the pair is the index of its
   first value. Two 16-bit loads (made whatever the bits) and a ``prmt`` give the register, zeros where the
   bitmap has none.
4. **Multiply**: ``mma.sync.m16n8k16`` (float32 accumulators) per n-block; the record pointer moves past
   the values (padded to 16 bytes).

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
from sparsekit.gpu.launch import Buffers, Prepared, check_int32, launch
from sparsekit.gpu.mma import global_addr, mma_m16n8k16_bf16_f32, mma_m16n8k16_f16_f32
from sparsekit.gpu.spmm_tiled import element_store, half_operands, uint16_bits
from sparsekit.gpu.split_k import split_ticket
from sparsekit.gpu.vector_loads import aligned, load2, load4

__all__ = ["spmm_bitmap", "spmm_bitmap_linear", "prepare", "upload", "DeviceBitmap", "default_config", "MAX_N"]

#: The widest ``B`` this kernel takes.
MAX_N = 64
#: Warps the default split aims for: about 31 an SM of the H200 (measured best at 4096^2 and 14336x4096, 80 %,
#: N = 8 and 32: more warps an SM wait longer at the slices' and splits' sums than they gain in overlap).
TARGET_WARPS = 4096
#: Zero words after the stream: a warp loads the bitmaps and header one record past its last (40 bytes), and a
#: lane the 16-bit word after its first value.
TAIL_WORDS = 12
#: Bytes of its stream a warp prefetches into L2 ahead of the record it reads (1-4 KB within 1-8 % at 14336x4096
#: and 4096^2, 80 %, N = 8 and 32; into L1 instead the same).
AHEAD = 2048
#: n-blocks (8 columns of ``X`` each) up to which a warp loads the next group's ``X`` while it decodes this one
#: (wider, the registers that takes cost more warps an SM than the overlap gains).
PIPELINED_X_BLOCKS = 2
#: Fewest 32-column groups a warp's share of ``K`` should have (its fixed costs, the start and the sum of
#: its partials, spread over at least this many).
MIN_GROUPS = 4

U = np.uint32
SIM = bool(cuda_config.ENABLE_CUDASIM)


def padded_n(n: int) -> int:
    """``N`` rounded up to the MMA's width, a multiple of 8."""
    return 8 * cdiv(int(n), 8)


#: ``prmt`` byte selectors by the pair's two bits (entry ``p`` at bits ``16 p``): result bytes from ``v0``'s
#: (0, 1), ``v1``'s (4, 5) or a zero byte of ``v0`` (2): 0 -> 0, 1 -> v0, 2 -> v0 << 16, 3 -> v0 | v1 << 16.
PAIR_SELECTORS = (0x2210_2222, 0x5410_1022)


def pair_register_model(own, sh, v0, v1):
    """The NumPy model of :func:`pair_register`: the register a lane builds from its pair of bits and the two
    16-bit values after its kept bits below (the simulator runs it; tutorial 08 decodes a lane by hand with it)."""
    pair = (int(own) >> int(sh)) & 3
    return np.uint32((int(v0) if pair & 1 else 0) | (((int(v1) if pair == 3 else int(v0)) << 16) if pair & 2 else 0))


if SIM:
    pair_register = pair_register_model
else:
    from llvmlite import ir
    from numba.cuda import types as nbtypes
    from numba.cuda.extending import intrinsic

    @intrinsic
    def pair_register(typingctx, own, sh, v0, v1):
        """The A-fragment register of a lane from the bits ``sh, sh + 1`` of ``own`` and the two 16-bit values
        ``v0, v1`` (zero-extended) that follow its kept bits below: ``0``, ``v0``, ``v0 << 16`` or
        ``v0 | v1 << 16``. Five instructions of inline PTX: shift and mask the pair, a ``prmt`` that looks up
        its byte selector in :data:`PAIR_SELECTORS`, a ``prmt`` that builds the register (the selects Numba
        writes for the same take ten)."""
        if not all(isinstance(x, nbtypes.Integer) for x in (own, sh, v0, v1)):
            return None
        lo, hi = PAIR_SELECTORS
        asm = ("{ .reg .b32 p, q, s, t0, t1; shr.b32 p, $1, $2; and.b32 p, p, 3; mad.lo.u32 q, p, 34, 16; "
               f"mov.b32 t0, {lo}; mov.b32 t1, {hi}; prmt.b32 s, t0, t1, q; prmt.b32 $0, $3, $4, s; }}")

        def codegen(context, builder, sig, args):
            i32 = ir.IntType(32)
            values = [builder.trunc(v, i32) if v.type.width > 32 else builder.zext(v, i32) if v.type.width < 32
                      else v for v in args]
            return builder.call(ir.InlineAsm(ir.FunctionType(i32, [i32] * 4), asm, "=r,r,r,r,r"), values)

        return nbtypes.uint32(own, sh, v0, v1), codegen


if SIM:
    def prefetch_l2(addr):
        """Simulator: nothing (a prefetch changes no result)."""
else:
    @intrinsic
    def prefetch_l2(typingctx, addr):
        """``prefetch.global.L2 [addr]``: start bringing the 128-byte line at the 64-bit global address ``addr``
        into L2, without a register or a wait."""
        if not isinstance(addr, nbtypes.Integer):
            return None

        def codegen(context, builder, sig, args):
            i64 = ir.IntType(64)
            a = builder.zext(args[0], i64) if args[0].type.width < 64 else args[0]
            builder.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), [i64]), "prefetch.global.L2 [$0];", "l",
                                      side_effect=True), [a])
            return context.get_dummy_value()

        return nbtypes.void(addr), codegen


@inlined
def decode(s16, own, base, sh, below):
    """The A-fragment register of one cell for this lane (:func:`pair_register`): the two values the bits
    ``sh, sh + 1`` of ``own`` (this lane's half of the cell's bitmap) keep, zero halves where a bit is clear.
    ``base``: the 16-bit index of the cell's first value (plus the kept bits of the low half, for a lane of the
    high half); the kept bits of ``own`` below the pair (``below``: their mask) are the values before the
    lane's. Both loads are made whatever the bits (within the record or its 16-byte tail): no branch, so the
    warp's lanes never diverge."""
    i = U(base + U(cuda.popc(U(own & below))))
    return pair_register(own, sh, U(s16[i]), U(s16[i + 1]))


@inlined
def load_x(x32, xat, p, gq, n, xs):
    """Step 1: this lane's 16 bytes of ``X`` row ``8 p + g`` (``xat``: its word at row ``g``), zero past ``N``:
    the B fragments of n-block ``p`` for both k-steps of the group."""
    if U(U(8 * p) + gq) < U(n):
        return load4(x32, U(xat + U(8 * p) * U(xs)))
    return U(0), U(0), U(0), U(0)


@functools.cache
def _kernel(npad: int, bf16: bool, linear: bool, rows: int, slices: int, ahead: int = 2048):
    """The kernel for ``N`` padded to ``npad``, ``rows`` warps on consecutive 16-row blocks and ``slices`` warps
    splitting ``K`` in a block, each warp prefetching its stream ``ahead`` bytes ahead of the record it reads
    (0: no prefetch). ``linear``: the result is ``Y`` (``N x M``), else ``C`` (``M x N``), row-major.
    ``x32``: the staged ``X`` (``N x 32 groups`` halves, as 32-bit words, ``xs`` words a row)."""
    nblocks = npad // 8
    nacc = 4 * nblocks
    pipelined_x = nblocks <= PIPELINED_X_BLOCKS
    mma = mma_m16n8k16_bf16_f32 if bf16 else mma_m16n8k16_f16_f32
    # the partials of one slice (without slices, a one-element stand-in)
    partials = (rows, nacc, 32) if slices > 1 else (1, 1, 1)

    store = element_store(bf16, linear)

    def kernel(s32, s16, offsets, x32, c, ws, counters, m, n, groups, xs, nbytes):
        shared = cuda.shared.array(partials, float32)
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
        high = lane >= U(16)                                      # this lane's bits are in the high halves
        own = U(4) if high else U(0)                              # (words 4-7 of a record), else the low
        sh = U(U(2) * U(lane & U(15)))
        below = U(U(U(1) << sh) - U(1))
        acc = cuda.local.array(nacc, float32)
        for j in range(nacc):
            acc[j] = float32(0.0)
        xw = cuda.local.array(nacc, uint32)
        xn = cuda.local.array(nacc, uint32)
        if U(U(16) * rb) < U(m) and ga < gb:
            ptr = U(U(offsets[U(U(rb * U(groups)) * U(2) + U(2) * ga)]) * U(4))   # the record, in 32-bit words
            xat = U(U(gq * U(xs)) + U(U(ga * U(16)) + U(t * U(4))))             # X[g, 32 G + 8 t], 32-bit words
            base = global_addr(s32, 0)
            o0, o1, o2, o3 = load4(s32, U(ptr + own))                # the first record's half of the bitmaps
            ha, hb = load2(s32, U(ptr + U(8)))                       # and its header
            if pipelined_x:                                       # step 1 for the first group
                for p in range(nblocks):
                    xn[4 * p], xn[4 * p + 1], xn[4 * p + 2], xn[4 * p + 3] = load_x(x32, xat, p, gq, n, xs)
            for grp in range(ga, gb):
                if ahead:                                         # the stream 8 lines at a time, `ahead` bytes on
                    at = U(U(U(ptr * U(4)) + U(ahead)) + U(U(128) * lane))
                    if lane < U(8) and at < U(nbytes):
                        prefetch_l2(base + at)
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
                    # step 2: the next record's bitmaps and header in flight while this one is decoded (the
                    # header's byte 0 is the record's length; past the warp's last record, the next row
                    # block's or the stream's zero tail)
                    nxt = U(ptr + U(U(ha & U(0xFF)) * U(4)))
                    q0, q1, q2, q3 = load4(s32, U(nxt + own))
                    na, nb = load2(s32, U(nxt + U(8)))
                    # step 3: each cell's first value (16-bit index) from this lane's header word
                    hdr = hb if high else ha
                    vals = U(U(U(2) * ptr) + U(20))
                    a0 = decode(s16, o0, U(vals + (U(hdr & U(0xFF)) if high else U(0))), sh, below)
                    a1 = decode(s16, o1, U(vals + U(U(hdr >> U(8)) & U(0xFF))), sh, below)
                    a2 = decode(s16, o2, U(vals + U(U(hdr >> U(16)) & U(0xFF))), sh, below)
                    a3 = decode(s16, o3, U(vals + U(hdr >> U(24))), sh, below)
                    for p in range(nblocks):                      # step 4
                        d = mma(a0, a1, a2, a3, xw[4 * p + 2 * s], xw[4 * p + 2 * s + 1],
                                acc[4 * p], acc[4 * p + 1], acc[4 * p + 2], acc[4 * p + 3])
                        for e in range(4):
                            acc[4 * p + e] = d[e]
                    ptr = nxt
                    o0, o1, o2, o3, ha, hb = q0, q1, q2, q3, na, nb
        if slices > 1:                                            # the slices' sum, in slice order, one
            for q in range(1, slices):                            # slice's partials at a time
                if sl == U(q):
                    for j in range(nacc):
                        shared[r, j, lane] = acc[j]
                cuda.syncthreads()
                if sl == U(0):
                    for j in range(nacc):
                        acc[j] += shared[r, j, lane]
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

    return cuda.jit(kernel)


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
    """A :class:`~sparsekit.formats.TiledBitmap` on the device, ready for :func:`spmm_bitmap`: the stream (and its
    16-bit view), the fragments' offsets (int32, 16-byte units), the split-K tickets (zero between launches)
    and scratch buffers (the float32 workspace, the staged ``X``). Launches sharing one must be ordered."""

    host: TiledBitmap
    stream: object
    offsets: object
    counters: object
    buffers: Buffers = field(default_factory=Buffers)


def prepare(a: TiledBitmap) -> DeviceBitmap:
    """Copy ``a`` to the device once; the result is reused by every :func:`spmm_bitmap` call."""
    if not isinstance(a, TiledBitmap):
        raise TypeError(f"a: expected a TiledBitmap, got {type(a).__name__}")
    a.validate(full=True)                      # the kernel trusts offsets, bitmaps and headers: check them once
    return upload(a)


def upload(a: TiledBitmap) -> DeviceBitmap:
    """:func:`prepare` without the full scan: for a TiledBitmap made by its constructors in this process
    (``from_dense``, ``from_coords``, ``from_csr``), whose records are right by construction. The cheap checks
    still run (the type, the arrays, offsets spanning the stream, value indices within 32 bits)."""
    if not isinstance(a, TiledBitmap):
        raise TypeError(f"a: expected a TiledBitmap, got {type(a).__name__}")
    check_int32(a.stream.size * 2, "a.stream", "halves", "the kernel's value indices are 32-bit")
    a.validate()
    stream = cuda.to_device(np.concatenate([a.stream, np.zeros(TAIL_WORDS, np.uint32)]))
    return DeviceBitmap(a, stream, cuda.to_device(a.offsets.astype(np.int32)),
                        cuda.to_device(np.zeros(max(a.grid[0], 1), dtype=np.int32)))


def default_config(m: int, k: int, n: int) -> dict:
    """``{"rows", "slices", "splits", "ahead"}`` for an ``M x K`` weight: blocks of 4 x 4 warps (4
    consecutive row blocks, ``K`` in 4 slices), splits of ``K`` for about :data:`TARGET_WARPS` warps, each warp with
    at least :data:`MIN_GROUPS` groups, :data:`AHEAD` bytes of prefetch, registers as the compiler chooses."""
    rowblocks, groups = cdiv(m, 16), cdiv(k, 32)
    rows, slices = 4, 4
    splits = max(1, min(round(TARGET_WARPS / (max(rowblocks, 1) * slices)), groups // (MIN_GROUPS * slices)))
    return {"rows": rows, "slices": slices, "splits": splits, "ahead": AHEAD}


def spmm_bitmap(a, b, *, rows=None, slices=None, splits=None, ahead=None):
    """``C = A @ b`` for a TiledBitmap (or :func:`prepare`'d) ``A`` (M x K) and a dense row-major ``b`` (K x N,
    the same 16-bit dtype, ``N <= 64``); returns ``C`` (M x N, row-major) as the kind of array ``b`` is.

    Tunables (default :func:`default_config`): ``rows``, warps of a block on consecutive 16-row blocks;
    ``slices``, warps of a block splitting ``K``; ``splits``, blocks splitting ``K``; ``ahead``, bytes a warp
    prefetches ahead of its record (0: none)."""
    return _run(a, b, "b", False, rows, slices, splits, ahead)


def spmm_bitmap_linear(a, x, *, rows=None, slices=None, splits=None, ahead=None):
    """``Y = x @ A^T`` for a TiledBitmap (or :func:`prepare`'d) weight ``A`` (M x K, out x in) and a row-major
    ``x`` (N x K, ``N <= 64``): a linear layer without bias; returns ``Y`` (N x M). Tunables as for
    :func:`spmm_bitmap`."""
    return _run(a, x, "x", True, rows, slices, splits, ahead)


def _run(a, b, name: str, linear: bool, rows, slices, splits, ahead):
    dev = a if isinstance(a, DeviceBitmap) else prepare(a)
    m, k = dev.shape
    bop, n, c = half_operands(dev, b, name, linear, MAX_N)
    if m == 0:
        return result(c, like=bop)
    conf = default_config(m, k, n)
    for key, value in (("rows", rows), ("slices", slices), ("splits", splits), ("ahead", ahead)):
        if value is not None:
            conf[key] = check_int(value, key, minimum=0 if key == "ahead" else 1)
    if conf["rows"] * conf["slices"] > 32:
        raise ValueError(f"rows * slices: a block has at most 32 warps, got {conf['rows']} * {conf['slices']}")
    groups = cdiv(k, 32)
    kp = 32 * groups
    bits = uint16_bits(flat_view(bop.dev))
    if kp == 0:                                         # no columns: C is zero (the kernel reads nothing)
        bits = dev.buffers.get(np.uint16, 2)
    elif not linear or k != kp or not aligned(bits, 8):  # X staged: N x kp, 16-byte rows, columns past K zero
        xs = dev.buffers.get(np.uint16, n * kp)
        launch(stage_x, cdiv(n * kp, 256), 256, (bits, xs, n, k, kp, not linear), "stage x")
        bits = xs
    splits = min(conf["splits"], max(groups, 1))
    rowblocks = cdiv(m, 16)
    strips = cdiv(rowblocks, conf["rows"])
    npad = padded_n(n)
    ws = dev.buffers.get(np.float32, max(splits * strips * conf["rows"] * 4 * npad * 4, 1) if splits > 1 else 1)
    kernel = _kernel(npad, dev.dtype.name == "bfloat16", linear, conf["rows"], conf["slices"], conf["ahead"])
    cflat = flat_view(c) if dev.dtype == np.float16 else uint16_bits(flat_view(c))
    args = (dev.stream, dev.stream.view(np.uint16), dev.offsets, bits.view(np.uint32), cflat, ws, dev.counters,
            m, n, groups, kp // 2, dev.host.stream.size * 4)
    launch(kernel, (strips, splits), 32 * conf["rows"] * conf["slices"], args,
           f"rows={conf['rows']}, slices={conf['slices']}, splits={splits}, ahead={conf['ahead']}")
    return result(c, like=bop)
