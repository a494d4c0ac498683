"""Warp-level tensor-core MMA for Numba CUDA kernels (inline PTX), with simulator fallbacks.

Numba has no tensor-core API. These ``@intrinsic`` functions emit one PTX
instruction each through ``llvmlite.ir.InlineAsm`` (the pattern of
:mod:`sparsekit.gpu.vector_loads`); an instruction with several results is an LLVM
literal struct, returned to Numba as a ``UniTuple``.

``mma_m16n8k16_f16_f32(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3) -> (d0, d1, d2, d3)``
    ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32``: ``D = A @ B + C`` with
    ``A`` 16x16 float16, ``B`` 16x8 float16, ``C``/``D`` 16x8 float32. ``a*``/``b*``
    are uint32 registers holding two halves each (``half2``: the lower 16 bits hold
    the element with the smaller column index of ``A`` / row index of ``B``).
``mma_m16n8k16_bf16_f32(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3) -> (d0, d1, d2, d3)``
    ``mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32``: the same fragments with
    bfloat16 halves (two bf16 bit patterns a uint32 word, the lower element in the low 16 bits).
``mma_m16n8k8_tf32_f32(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3) -> (d0, d1, d2, d3)``
    ``mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32``: ``A`` 16x8, ``B`` 8x8
    TF32 (float32 arguments whose low 13 mantissa bits are zero, as :func:`to_tf32`
    returns them; the instruction reads only the TF32 bits), ``C``/``D`` float32.
``widen_f16(bits)`` / ``widen_bf16(bits)``
    the float32 value of a float16 / bfloat16 bit pattern (the low 16 bits of an integer):
    ``cvt.f32.f16``, and for bfloat16 the bits shifted into a float32's high half (exact).
``to_tf32(x)``
    ``cvt.rna.tf32.f32``: ``x`` rounded to TF32 (10 mantissa bits, nearest, ties away
    from zero), returned as the float32 with those bits. ``x - to_tf32(x)`` is exact in
    float32: the 3xTF32 split of :mod:`sparsekit.gpu.uspmm_tc` uses it.
``load_b32(arr, i)``
    the 32-bit word holding ``arr[i]`` (low half) and ``arr[i+1]`` (high half) of a
    1-D 16-bit array, read with one ``ld.*.u32`` (``i`` even, ``arr`` 4-byte aligned):
    a ``half2`` fragment register straight from a float16 shared tile.

``ldmatrix_x4_trans(arr, i) -> (r0, r1, r2, r3)``
    ``ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16``: four 8x8 tiles of a 16-bit
    shared array, transposed: lane ``8j + r`` gives (as ``arr[i]``) the start of row
    ``r`` of tile ``j`` (8 consecutive elements, 16-byte aligned); lane ``l`` receives
    in ``r_j`` the pair ``(T_j[2t, g], T_j[2t+1, g])`` (``g = l // 4``, ``t = l % 4``).
    For a row-major ``k x n`` tile of B, rows ``k0..k0+15`` at columns ``n0..n0+7``
    (lanes 0-15) and ``n0+8..n0+15`` (lanes 16-31) give ``b0, b1`` of two m16n8k16
    n-tiles.
``ldmatrix_x4(arr, addr) -> (r0, r1, r2, r3)``
    ``ldmatrix.sync.aligned.m8n8.x4.shared.b16`` (not transposed) from a 1-D 32-bit shared
    array (float32: the registers come back as float32) at the byte address ``addr``
    (:func:`shared_addr` plus offsets, as for :func:`cp_async16_raw`): lane ``8j + r`` gives the
    start of row ``r`` of tile ``j`` (4 consecutive 32-bit words, 16-byte aligned), lane ``l`` receives
    in ``r_j`` word ``t`` of row ``g`` of tile ``j``. Rows ``g`` / ``g + 8`` at words
    ``k0 .. k0+3`` / ``k0+4 .. k0+7`` of a row-major float32 tile are the ``a0 .. a3`` of an
    m16n8k8 TF32 fragment: one instruction for four 32-bit loads.
``to_tf32_finite(x)``
    ``to_tf32(x)`` for finite ``x`` in two integer operations (``(bits + 0x1000) &
    0xFFFFE000``, :func:`sparsekit.reference.mma.tf32_round`'s arithmetic; ``cvt.rna.tf32.f32`` costs four on sm_90:
    compare, add, mask, select). Infinities map to themselves; a NaN may become an infinity or
    a zero, so it is only for a ``big`` part whose ``small = to_tf32(x - big)`` is NaN for every
    non-finite ``x`` (the 3xTF32 split): any MMA that sees that ``small`` returns NaN, as with
    ``to_tf32`` for both parts.
``shared_addr(arr, i)``, ``global_addr(arr, i)``, ``cp_async16_raw(dst, daddr, src, saddr, nbytes)``
(``cp_async8_raw``, ``cp_async4_raw``)
    byte addresses of ``arr[i]``, 32-bit in the shared window / 64-bit generic, and ``cp.async``
    of 16 (8, 4: ``.ca``) bytes between two such addresses (``dst``/``src`` name the arrays they point into; the
    GPU code uses only the addresses). A kernel computes an address once and adds offsets per
    K chunk, where :func:`cp_async16` recomputes 64-bit element pointers for every copy; both
    addresses come out of inline assembly, so the optimiser cannot fold the per-chunk offsets
    back into per-copy multiplications (it did: ``(k0 + r) * n`` for every copy). Under
    the simulator an address is ``i * itemsize`` (relative to the array it was taken from).
``ld_shared(arr, addr)``, ``ld_shared2`` / ``ld_shared4(arr, addr)``, ``st_shared(arr, addr, v)``,
``st_shared4(arr, addr, v0..v3)``
    ``ld.shared`` / ``st.shared`` (32-bit elements, one or a vector of 2 or 4; ``ld_shared`` of a uint8 array
    loads a byte into a uint32) at a shared byte address from :func:`shared_addr` plus offsets: a hot loop
    adds constants to an address taken once, where ``arr[i]`` recomputes a 64-bit generic address per
    access (:mod:`sparsekit.gpu.uspmm_wgmma`). Volatile, so they stay between the barriers and fences around them.
``cp_async16(dst, di, src, si, nbytes)``, ``cp_async_commit()``, ``cp_async_wait(n)``
    ``cp.async.cg.shared.global``: copy 16 bytes from global ``src[si:]`` to shared
    ``dst[di:]`` without registers (the first ``nbytes`` read, the rest zero-filled;
    ``nbytes = 0`` reads nothing), ``cp.async.commit_group`` closes this thread's group
    of copies, ``cp.async.wait_group n`` (``n`` a compile-time integer) waits until at
    most ``n`` of its groups are pending. Other threads see the data after a barrier.
    Both addresses 16-byte aligned.

Fragment layout (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point
type" and "... mma.m16n8k8" for ``.tf32``). Lane ``l`` of the warp has
``g = l // 4`` (groupID) and ``t = l % 4`` (threadID_in_group):

============  ========================================  ==============================
register      m16n8k16 (f16: 2 elements per register)   m16n8k8 (tf32: 1 element)
============  ========================================  ==============================
``a0``        A[g,     2t : 2t+2]                       A[g,     t]
``a1``        A[g + 8, 2t : 2t+2]                       A[g + 8, t]
``a2``        A[g,     2t+8 : 2t+10]                    A[g,     t + 4]
``a3``        A[g + 8, 2t+8 : 2t+10]                    A[g + 8, t + 4]
``b0``        B[2t : 2t+2, g]                           B[t,     g]
``b1``        B[2t+8 : 2t+10, g]                        B[t + 4, g]
``c0, c1``    C[g,     2t], C[g,     2t+1]              (same)
``c2, c3``    C[g + 8, 2t], C[g + 8, 2t+1]              (same)
============  ========================================  ==============================

``mma.sync.aligned``: all 32 lanes of the warp execute the same instruction together
(no divergence around a call).

Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) the names are Python functions
that compute the same thing: each lane publishes its fragment registers, the warp's
32 threads meet (the simulator has no ``shfl_sync``; :func:`warp_collective` is a
32-party barrier per warp with one computation for the group, :func:`_warp_allgather`
the all-gather that 32 shuffles would do), one of them rebuilds A and B from the
gathered fragments and multiplies them, and every lane returns exactly its own four
elements of ``D``. The simulator sums ``A @ B + C`` exactly (float64: the products of float16
or TF32 values are exact) and rounds once to float32; the tensor core's own float32
accumulation truncates and may differ in the last bits. ``ldmatrix_x4_trans`` gathers
the warp's row addresses the same way; ``cp_async16`` copies at once (commit and wait
do nothing). :func:`to_tf32` and :func:`pack_bf16x2` are emulated bit-exactly by their NumPy models in
:mod:`sparsekit.reference.mma` (:func:`~sparsekit.reference.mma.tf32_round`,
:func:`~sparsekit.reference.mma.bf16x2_bits`), which also gives the fragment table above as
:func:`~sparsekit.reference.mma.fragment_coords`.

The probe kernels in ``tests/mma_probes.py`` (one MMA, one ldmatrix, or one rounding per
thread/warp) are the tests' check of the table above, on the simulator and on the GPU.
"""
from __future__ import annotations

import functools
import threading

import numpy as np
from numba import float32, uint16
from numba.cuda import config

from sparsekit.gpu.inline import inlined
from sparsekit.reference.mma import bf16x2_bits, fragment_coords, tf32_round

__all__ = ["mma_m16n8k16_f16_f32", "mma_m16n8k16_bf16_f32", "mma_m16n8k8_tf32_f32", "to_tf32",
           "pack_bf16x2", "round_bf16", "load_b32", "widen_f16", "widen_bf16",
           "ldmatrix_x4_trans", "cp_async16", "cp_async_commit", "cp_async_wait", "ldmatrix_x4", "to_tf32_finite",
           "shared_addr", "global_addr", "cp_async16_raw", "cp_async8_raw", "cp_async4_raw", "ld_shared",
           "ld_shared2", "ld_shared4", "st_shared", "st_shared4"]


if config.ENABLE_CUDASIM:
    _LOCK = threading.Lock()
    #: Seconds a lane waits for the rest of its warp before the simulator reports a divergent mma.
    _WARP_TIMEOUT = 300.0

    def warp_collective(value, compute, size=32):
        """Every thread of the calling thread's group of ``size`` (its warp; 128: its warpgroup) passes ``value``;
        ``compute`` runs once for the group on the ``size`` values in thread order and every thread gets its result
        (or its exception). Two waits on the group's barrier: after all have written (one thread computes), after
        the result is in place (the next round's writes wait for every thread to have read it)."""
        th = threading.current_thread()
        mgr = th._manager
        key = (tuple(th.blockIdx), size, th.thread_id // size)
        with _LOCK:
            exchanges = mgr.__dict__.setdefault("_sparsekit_warp_exchange", {})
            if key not in exchanges:
                exchanges[key] = (threading.Barrier(size, timeout=_WARP_TIMEOUT), [None] * size, [None])
            barrier, slots, result = exchanges[key]
        slots[th.thread_id % size] = value
        if barrier.wait() == 0:
            try:
                result[0] = (True, compute(tuple(slots)))
            except Exception as error:   # (every thread raises it, none waits for the computing one)
                result[0] = (False, error)
        barrier.wait()
        ok, out = result[0]
        if not ok:
            raise out
        return out

    def _warp_allgather(value, size=32):
        """:func:`warp_collective` that gives every thread the ``size`` values in thread order."""
        return warp_collective(value, tuple, size)

    def _halves(word, bf16=False):
        """The two float16 (or, with ``bf16``, bfloat16) values (low, high) of a 32-bit word."""
        if bf16:
            bits = np.array([word], dtype=np.uint32).view(np.uint16).astype(np.uint32) << np.uint32(16)
            return bits.view(np.float32).astype(np.float64)
        return np.array([word], dtype=np.uint32).view(np.float16).astype(np.float64)

    def _mma_product(shape, gathered):
        """The warp's ``A @ B`` (float64, exact products) from every lane's A/B fragments; ``shape``
        "m16n8k16" (float16 halves), "m16n8k16.bf16" (bfloat16 halves) or "m16n8k8" (TF32)."""
        bf16 = shape.endswith(".bf16")
        shape = shape.removesuffix(".bf16")
        kdim = 16 if shape == "m16n8k16" else 8
        big_a = np.zeros((16, kdim))
        big_b = np.zeros((kdim, 8))
        for lane, (fa, fb) in enumerate(gathered):
            where = fragment_coords(shape, lane)
            for name, reg in zip(("a0", "a1", "a2", "a3", "b0", "b1"), fa + fb):
                vals = _halves(reg, bf16) if shape == "m16n8k16" else [float(reg)]
                target = big_a if name[0] == "a" else big_b
                for (r, col), v in zip(where[name], vals):
                    target[r, col] = v
        return big_a @ big_b

    def _mma(shape, a, b, c):
        """This lane's D fragment of ``A @ B + C``, the product computed once for the warp."""
        d = warp_collective((a, b), functools.partial(_mma_product, shape))
        lane = threading.current_thread().thread_id % 32
        return tuple(np.float32(d[r, col] + np.float64(cv))
                     for (r, col), cv in zip(fragment_coords(shape.removesuffix(".bf16"), lane)["c"], c))

    def mma_m16n8k16_f16_f32(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        """Simulator fallback of ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32``."""
        return _mma("m16n8k16", (int(a0), int(a1), int(a2), int(a3)), (int(b0), int(b1)), (c0, c1, c2, c3))

    def mma_m16n8k16_bf16_f32(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        """Simulator fallback of ``mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32``."""
        return _mma("m16n8k16.bf16", (int(a0), int(a1), int(a2), int(a3)), (int(b0), int(b1)), (c0, c1, c2, c3))

    def mma_m16n8k8_tf32_f32(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        """Simulator fallback of ``mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32``."""
        return _mma("m16n8k8", (a0, a1, a2, a3), (b0, b1), (c0, c1, c2, c3))

    def widen_f16(bits):
        """Simulator fallback: the float32 value of the float16 bits ``bits & 0xFFFF``."""
        return np.float32(np.array([int(bits) & 0xFFFF], dtype=np.uint16).view(np.float16)[0])

    def widen_bf16(bits):
        """Simulator fallback: the float32 value of the bfloat16 bits ``bits & 0xFFFF``."""
        return np.array([(int(bits) & 0xFFFF) << 16], dtype=np.uint32).view(np.float32)[0]

    def to_tf32(x):
        """Simulator fallback of ``cvt.rna.tf32.f32`` (bit-exact: :func:`tf32_round`)."""
        return tf32_round(np.float32(x))

    def pack_bf16x2(lo, hi):
        """Simulator fallback of ``cvt.rn.bf16x2.f32`` (bit-exact: :func:`bf16x2_bits`)."""
        return np.uint32(bf16x2_bits(np.float32(lo), np.float32(hi)))

    def load_b32(arr, i):
        """Simulator fallback: the bits of ``arr[i]`` (low) and ``arr[i+1]`` (high) as one uint32."""
        pair = np.array([arr[i], arr[i + 1]], dtype=arr.dtype)
        return np.uint32(pair.view(np.uint32)[0])


    def ldmatrix_x4_trans(arr, i):
        """Simulator fallback of ``ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16``."""
        starts = _warp_allgather(int(i))
        lane = threading.current_thread().thread_id % 32
        g, t = lane // 4, lane % 4
        out = []
        for j in range(4):
            pair = np.array([arr[starts[8 * j + 2 * t] + g], arr[starts[8 * j + 2 * t + 1] + g]], dtype=arr.dtype)
            out.append(np.uint32(pair.view(np.uint32)[0]))
        return tuple(out)

    def cp_async16(dst, di, src, si, nbytes, size=16):
        """Simulator fallback of ``cp.async`` (``size`` bytes, zero-filled past ``nbytes``): copies at once."""
        width = size // dst.dtype.itemsize
        have = int(nbytes) // dst.dtype.itemsize
        for e in range(width):
            dst[di + e] = src[si + e] if e < have else 0

    def ldmatrix_x4(arr, addr):
        """Simulator fallback of ``ldmatrix.sync.aligned.m8n8.x4.shared.b16`` on a 32-bit array."""
        starts = _warp_allgather(int(addr) // arr.dtype.itemsize)
        lane = threading.current_thread().thread_id % 32
        g, t = lane // 4, lane % 4
        return tuple(arr[starts[8 * j + g] + t] for j in range(4))

    def to_tf32_finite(x):
        """Simulator fallback: :func:`tf32_round`'s integer arithmetic without its test for Inf/NaN."""
        bits = np.array([x], dtype=np.float32).view(np.uint32).astype(np.uint64)
        return np.array([(bits[0] + 0x1000) & 0xFFFFE000], dtype=np.uint32).view(np.float32)[0]

    def shared_addr(arr, i):
        """Simulator fallback: the byte offset of ``arr[i]`` from ``arr[0]``."""
        return int(i) * arr.dtype.itemsize

    def global_addr(arr, i):
        """Simulator fallback: the byte offset of ``arr[i]`` from ``arr[0]``."""
        return int(i) * arr.dtype.itemsize

    def cp_async16_raw(dst, daddr, src, saddr, nbytes, size=16):
        """Simulator fallback: :func:`cp_async16` at the elements the byte offsets name."""
        cp_async16(dst, int(daddr) // dst.dtype.itemsize, src, int(saddr) // src.dtype.itemsize, nbytes, size)

    def cp_async8_raw(dst, daddr, src, saddr, nbytes):
        """Simulator fallback: 8 bytes."""
        cp_async16_raw(dst, daddr, src, saddr, nbytes, 8)

    def cp_async4_raw(dst, daddr, src, saddr, nbytes):
        """Simulator fallback: 4 bytes."""
        cp_async16_raw(dst, daddr, src, saddr, nbytes, 4)

    def ld_shared(arr, addr):
        """Simulator fallback: ``arr``'s element at byte offset ``addr``."""
        return arr[int(addr) // arr.dtype.itemsize]

    def ld_shared2(arr, addr):
        """Simulator fallback: the two elements from byte offset ``addr``."""
        i = int(addr) // arr.dtype.itemsize
        return arr[i], arr[i + 1]

    def ld_shared4(arr, addr):
        """Simulator fallback: the four elements from byte offset ``addr``."""
        i = int(addr) // arr.dtype.itemsize
        return arr[i], arr[i + 1], arr[i + 2], arr[i + 3]

    def st_shared(arr, addr, v):
        """Simulator fallback: ``v`` to ``arr``'s element at byte offset ``addr``."""
        arr[int(addr) // arr.dtype.itemsize] = v

    def st_shared4(arr, addr, v0, v1, v2, v3):
        """Simulator fallback: four elements from byte offset ``addr``."""
        i = int(addr) // arr.dtype.itemsize
        arr[i], arr[i + 1], arr[i + 2], arr[i + 3] = v0, v1, v2, v3

    def cp_async_commit():
        """Simulator fallback: the copies are already done."""

    def cp_async_wait(n):
        """Simulator fallback: the copies are already done."""

else:
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    _I32, _F32 = ir.IntType(32), ir.FloatType()

    def _mma_intrinsic(name: str, ptx: str, ab_type):
        """Build the intrinsic ``name(a0..a3, b0, b1, c0..c3) -> UniTuple(float32, 4)`` emitting
        ``ptx`` with operands ``{d0..d3}, {a0..a3}, {b0, b1}, {c0..c3}``; ``a``/``b`` are passed
        as ``ab_type`` (uint32 half2 words, or float32 TF32 values reinterpreted as .b32)."""

        def typer(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
            ab, c = (a0, a1, a2, a3, b0, b1), (c0, c1, c2, c3)
            want = types.Integer if ab_type == types.uint32 else types.Float
            if not all(isinstance(x, want) for x in ab) or not all(isinstance(x, types.Float) for x in c):
                return None
            # Numba casts each argument to these types before the call (uint32 / float32)
            sig = types.UniTuple(types.float32, 4)(*([ab_type] * 6), *([types.float32] * 4))

            def codegen(context, builder, sig, args):
                ab_vals = list(args[:6])
                if ab_type == types.float32:                          # TF32 operands are .b32 registers
                    ab_vals = [builder.bitcast(v, _I32) for v in ab_vals]
                fnty = ir.FunctionType(ir.LiteralStructType([_F32] * 4), [_I32] * 6 + [_F32] * 4)
                asm = ir.InlineAsm(fnty, ptx + " {$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};",
                                   "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f")
                res = builder.call(asm, ab_vals + list(args[6:]))
                return context.make_tuple(builder, sig.return_type,
                                          [builder.extract_value(res, j) for j in range(4)])

            return sig, codegen

        typer.__name__ = name
        return intrinsic(typer)

    mma_m16n8k16_f16_f32 = _mma_intrinsic("mma_m16n8k16_f16_f32",
                                          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", types.uint32)
    mma_m16n8k16_bf16_f32 = _mma_intrinsic("mma_m16n8k16_bf16_f32",
                                           "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", types.uint32)
    mma_m16n8k8_tf32_f32 = _mma_intrinsic("mma_m16n8k8_tf32_f32",
                                          "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", types.float32)

    def _widen(bf16: bool):
        """Build ``widen_f16`` / ``widen_bf16``: the float32 value of the low 16 bits of an integer."""

        def typer(typingctx, bits):
            if not isinstance(bits, types.Integer):
                return None
            sig = types.float32(bits)

            def codegen(context, builder, sig, args):
                word = args[0]
                if word.type.width < 32:
                    word = builder.zext(word, _I32)
                elif word.type.width > 32:
                    word = builder.trunc(word, _I32)
                if bf16:                                      # bf16 is the high half of a float32
                    return builder.bitcast(builder.shl(word, ir.Constant(_I32, 16)), _F32)
                asm = ir.InlineAsm(ir.FunctionType(_F32, [_I32]),
                                   "{ .reg .b16 h; cvt.u16.u32 h, $1; cvt.f32.f16 $0, h; }", "=f,r")
                return builder.call(asm, [word])

            return sig, codegen

        typer.__name__ = "widen_bf16" if bf16 else "widen_f16"
        return intrinsic(typer)

    widen_f16, widen_bf16 = _widen(False), _widen(True)

    @intrinsic
    def to_tf32(typingctx, x):
        """``cvt.rna.tf32.f32``: ``x`` rounded to TF32, as a float32."""
        if not isinstance(x, types.Float):
            return None
        sig = types.float32(types.float32)

        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(_I32, [_F32]), "cvt.rna.tf32.f32 $0, $1;", "=r,f")
            return builder.bitcast(builder.call(asm, [args[0]]), _F32)

        return sig, codegen

    @intrinsic
    def pack_bf16x2(typingctx, lo, hi):
        """``cvt.rn.bf16x2.f32``: ``lo`` and ``hi`` rounded to bf16 (nearest even), packed in a uint32 with ``lo``
        in the low half (a bf16 MMA fragment register)."""
        if not (isinstance(lo, types.Float) and isinstance(hi, types.Float)):
            return None
        sig = types.uint32(types.float32, types.float32)

        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(_I32, [_F32, _F32]), "cvt.rn.bf16x2.f32 $0, $1, $2;", "=r,f,f")
            return builder.call(asm, [args[1], args[0]])               # (the first source is the high half)

        return sig, codegen

    @intrinsic
    def load_b32(typingctx, arr, i):
        """One 32-bit load of ``arr[i : i + 2]`` from a 1-D 16-bit array, as uint32."""
        if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype.bitwidth == 16
                and isinstance(i, types.Integer)):
            return None
        sig = types.uint32(arr, i)

        def codegen(context, builder, sig, args):
            arrty, ity = sig.args
            ary = context.make_array(arrty)(context, builder, args[0])
            index = context.cast(builder, args[1], ity, types.intp)
            ptr = builder.bitcast(builder.gep(ary.data, [index]), _I32.as_pointer())   # (u32*) &arr[i]
            return builder.load(ptr, align=4)

        return sig, codegen

    def _element_addr(builder, context, arrty, arr, i, ity):
        """The 64-bit generic address of ``arr[i]`` (1-D ``arr``)."""
        ary = context.make_array(arrty)(context, builder, arr)
        ptr = builder.gep(ary.data, [context.cast(builder, i, ity, types.intp)])
        return builder.ptrtoint(ptr, ir.IntType(64))

    def _shared_u32(builder, context, arrty, arr, i, ity):
        """The 32-bit shared-window address of ``arr[i]`` (Numba hands shared arrays over as generic pointers)."""
        cvta = ir.InlineAsm(ir.FunctionType(_I32, [ir.IntType(64)]),
                            "{ .reg .u64 a; cvta.to.shared.u64 a, $1; cvt.u32.u64 $0, a; }", "=r,l")
        return builder.call(cvta, [_element_addr(builder, context, arrty, arr, i, ity)])

    def _ldmatrix_x4(trans: bool):
        """``ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16`` at a 32-bit shared address: 4 words."""
        return ir.InlineAsm(ir.FunctionType(ir.LiteralStructType([_I32] * 4), [_I32]),
                            f"ldmatrix.sync.aligned.m8n8.x4{'.trans' if trans else ''}.shared.b16 "
                            "{$0,$1,$2,$3}, [$4];", "=r,=r,=r,=r,r,~{memory}", side_effect=True)

    def _cp_async16(size: int = 16):
        """``cp.async.{cg,ca}.shared.global [shared u32], [generic u64 -> global], size, nbytes`` (16 bytes
        bypass L1, ``.cg``; 4 and 8 bytes exist only as ``.ca``)."""
        return ir.InlineAsm(ir.FunctionType(ir.VoidType(), [_I32, ir.IntType(64), _I32]),
                            "{ .reg .u64 g; cvta.to.global.u64 g, $1; "
                            f"cp.async.{'cg' if size == 16 else 'ca'}.shared.global [$0], [g], {size}, $2; }}",
                            "r,l,r,~{memory}", side_effect=True)

    @intrinsic
    def ldmatrix_x4_trans(typingctx, arr, i):
        """``ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16`` from a 1-D 16-bit shared array."""
        if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype.bitwidth == 16
                and isinstance(i, types.Integer)):
            return None
        sig = types.UniTuple(types.uint32, 4)(arr, i)

        def codegen(context, builder, sig, args):
            addr = _shared_u32(builder, context, sig.args[0], args[0], args[1], sig.args[1])
            res = builder.call(_ldmatrix_x4(True), [addr])
            return context.make_tuple(builder, sig.return_type, [builder.extract_value(res, j) for j in range(4)])

        return sig, codegen

    @intrinsic
    def cp_async16(typingctx, dst, di, src, si, nbytes):
        """``cp.async.cg.shared.global [dst + di], [src + si], 16, nbytes``."""
        if not (isinstance(dst, types.Array) and isinstance(src, types.Array) and dst.ndim == 1 and src.ndim == 1
                and all(isinstance(x, types.Integer) for x in (di, si, nbytes))):
            return None
        sig = types.void(dst, di, src, si, types.uint32)

        def codegen(context, builder, sig, args):
            daddr = _shared_u32(builder, context, sig.args[0], args[0], args[1], sig.args[1])
            saddr = _element_addr(builder, context, sig.args[2], args[2], args[3], sig.args[3])
            builder.call(_cp_async16(), [daddr, saddr, args[4]])
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def ldmatrix_x4(typingctx, arr, addr):
        """``ldmatrix.sync.aligned.m8n8.x4.shared.b16`` at a shared byte address into ``arr`` (1-D, 32-bit;
        registers as its dtype)."""
        if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype.bitwidth == 32
                and isinstance(addr, types.Integer)):
            return None
        sig = types.UniTuple(arr.dtype, 4)(arr, types.uint32)

        def codegen(context, builder, sig, args):
            res = builder.call(_ldmatrix_x4(False), [args[1]])
            elem = context.get_value_type(sig.return_type.dtype)
            return context.make_tuple(builder, sig.return_type,
                                      [builder.bitcast(builder.extract_value(res, j), elem) for j in range(4)])

        return sig, codegen

    @intrinsic
    def to_tf32_finite(typingctx, x):
        """``(bits(x) + 0x1000) & 0xFFFFE000`` as a float32 (two integer operations)."""
        if not isinstance(x, types.Float):
            return None
        sig = types.float32(types.float32)

        def codegen(context, builder, sig, args):
            bits = builder.bitcast(args[0], _I32)
            rounded = builder.and_(builder.add(bits, ir.Constant(_I32, 0x1000)), ir.Constant(_I32, 0xFFFFE000))
            return builder.bitcast(rounded, _F32)

        return sig, codegen

    @intrinsic
    def shared_addr(typingctx, arr, i):
        """The 32-bit shared-window byte address of ``arr[i]``."""
        if not (isinstance(arr, types.Array) and arr.ndim == 1 and isinstance(i, types.Integer)):
            return None
        sig = types.uint32(arr, i)

        def codegen(context, builder, sig, args):
            return _shared_u32(builder, context, sig.args[0], args[0], args[1], sig.args[1])

        return sig, codegen

    @intrinsic
    def global_addr(typingctx, arr, i):
        """The 64-bit generic byte address of ``arr[i]`` (through a ``mov``: opaque to the optimiser)."""
        if not (isinstance(arr, types.Array) and arr.ndim == 1 and isinstance(i, types.Integer)):
            return None
        sig = types.uint64(arr, i)

        def codegen(context, builder, sig, args):
            mov = ir.InlineAsm(ir.FunctionType(ir.IntType(64), [ir.IntType(64)]), "mov.b64 $0, $1;", "=l,l")
            return builder.call(mov, [_element_addr(builder, context, sig.args[0], args[0], args[1], sig.args[1])])

        return sig, codegen

    def _cp_async_raw(size: int):
        """The ``cp.async ... [daddr], [saddr], size, nbytes`` intrinsic on byte addresses (``dst``, ``src``: for
        typing only)."""
        def typer(typingctx, dst, daddr, src, saddr, nbytes):
            if not (isinstance(dst, types.Array) and isinstance(src, types.Array)
                    and all(isinstance(x, types.Integer) for x in (daddr, saddr, nbytes))):
                return None
            sig = types.void(dst, types.uint32, src, types.uint64, types.uint32)

            def codegen(context, builder, sig, args):
                builder.call(_cp_async16(size), [args[1], args[3], args[4]])
                return context.get_dummy_value()

            return sig, codegen

        typer.__name__ = f"cp_async{size}_raw"
        return intrinsic(typer)

    cp_async16_raw = _cp_async_raw(16)
    cp_async8_raw = _cp_async_raw(8)
    cp_async4_raw = _cp_async_raw(4)

    def _u32(builder, value):
        """An integer argument as the 32-bit shared-window address it names."""
        width = value.type.width
        return builder.trunc(value, _I32) if width > 32 else (builder.zext(value, _I32) if width < 32 else value)

    def _shared_ok(arr, addr, widths=(32,)):
        return (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype.bitwidth in widths
                and isinstance(addr, types.Integer))

    @intrinsic
    def ld_shared(typingctx, arr, addr):
        """``ld.shared`` of ``arr``'s dtype (32-bit, or uint8 as uint32) at shared byte address ``addr``;
        volatile, so it stays between the barriers and fences around it."""
        if not _shared_ok(arr, addr, (8, 32)):
            return None
        byte = arr.dtype.bitwidth == 8
        sig = (types.uint32 if byte else arr.dtype)(arr, addr)

        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(_I32, [_I32]), f"ld.shared.{'u8' if byte else 'b32'} $0, [$1];", "=r,r",
                               side_effect=True)
            word = builder.call(asm, [_u32(builder, args[1])])
            return word if byte else builder.bitcast(word, context.get_value_type(sig.return_type))

        return sig, codegen

    def _ld_shared_vector(n: int):
        """The ``ld.shared.v{n}.b32`` intrinsic: ``n`` elements of a 32-bit ``arr`` at a ``4 n``-byte aligned
        shared byte address, as a tuple."""
        regs = ", ".join(f"${j}" for j in range(n))

        def typer(typingctx, arr, addr):
            if not _shared_ok(arr, addr):
                return None
            sig = types.UniTuple(arr.dtype, n)(arr, addr)

            def codegen(context, builder, sig, args):
                asm = ir.InlineAsm(ir.FunctionType(ir.LiteralStructType([_I32] * n), [_I32]),
                                   f"ld.shared.v{n}.b32 {{{regs}}}, [${n}];", ",".join(["=r"] * n) + ",r",
                                   side_effect=True)
                res = builder.call(asm, [_u32(builder, args[1])])
                elem = context.get_value_type(sig.return_type.dtype)
                return context.make_tuple(builder, sig.return_type,
                                          [builder.bitcast(builder.extract_value(res, j), elem) for j in range(n)])

            return sig, codegen

        typer.__name__ = f"ld_shared{n}"
        return intrinsic(typer)

    ld_shared2 = _ld_shared_vector(2)
    ld_shared4 = _ld_shared_vector(4)

    @intrinsic
    def st_shared(typingctx, arr, addr, v):
        """``st.shared.b32`` of ``v`` (``arr``'s 32-bit dtype) at shared byte address ``addr``."""
        if not _shared_ok(arr, addr):
            return None
        sig = types.void(arr, addr, arr.dtype)

        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [_I32, _I32]), "st.shared.b32 [$0], $1;",
                               "r,r,~{memory}", side_effect=True)
            builder.call(asm, [_u32(builder, args[1]), builder.bitcast(args[2], _I32)])
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def st_shared4(typingctx, arr, addr, v0, v1, v2, v3):
        """``st.shared.v4.b32`` of four elements at a 16-byte aligned shared byte address."""
        if not _shared_ok(arr, addr):
            return None
        sig = types.void(arr, addr, arr.dtype, arr.dtype, arr.dtype, arr.dtype)

        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [_I32] * 5), "st.shared.v4.b32 [$0], {$1, $2, $3, $4};",
                               "r,r,r,r,r,~{memory}", side_effect=True)
            builder.call(asm, [_u32(builder, args[1])] + [builder.bitcast(v, _I32) for v in args[2:]])
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def cp_async_commit(typingctx):
        """``cp.async.commit_group``."""
        sig = types.void()

        def codegen(context, builder, sig, args):
            builder.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), "cp.async.commit_group;", "~{memory}",
                                      side_effect=True), [])
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def cp_async_wait(typingctx, n):
        """``cp.async.wait_group n`` for a compile-time integer ``n``."""
        if not isinstance(n, types.IntegerLiteral):
            return None
        pending = int(n.literal_value)
        sig = types.void(n)

        def codegen(context, builder, sig, args):
            builder.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), f"cp.async.wait_group {pending};",
                                      "~{memory}", side_effect=True), [])
            return context.get_dummy_value()

        return sig, codegen


@inlined
def round_bf16(x):
    """The bfloat16 bits (uint16) of the float32 ``x``, rounded to nearest even: a kernel's store of a
    bfloat16 output (:func:`pack_bf16x2`'s low half)."""
    return uint16(pack_bf16x2(x, float32(0.0)) & 0xFFFF)
