"""Warpgroup MMA (``wgmma``, sm_90a) for Numba kernels: inline PTX through ``llvmlite.ir.InlineAsm``.

Hopper's asynchronous tensor-core instruction: the four warps of a warpgroup (128 threads) multiply a
64 x 8 TF32 matrix held in registers (A, four values a thread, the layout of ``mma.m16n8k8``'s A
fragment, warp ``w`` holding rows ``16w .. 16w + 15``) by an 8 x ``n`` matrix in shared memory (B, named
by a 64-bit descriptor) into 64 x ``n`` float32 accumulators (``n / 2`` a thread). The instruction only
starts the work; the registers it reads and writes belong to the tensor core until
``wgmma.wait_group`` says its group is done, so the threads can do other work meanwhile (the point
of it: :mod:`sparsekit.gpu.uspmm_wgmma` scatters the next A tile while the tensor core multiplies this one).
numba-cuda 0.30 compiles for ``sm_90a`` on a cc 9.0 device (``codegen._ensure_cc``), which wgmma needs.

``wgmma_tf32(acc, nacc, a0, a1, a2, a3, desc, sh)``
    ``wgmma.mma_async.sync.aligned.m64n{2 nacc}k8.f32.tf32.tf32``: ``acc[0:nacc] += A @ B`` (``acc`` a
    thread-local float32 array, ``nacc`` a compile-time integer; accumulator ``4j + e`` of lane
    ``4g + t`` in warp ``w`` is row ``16w + g + 8 (e >= 2)``, column ``8j + 2t + (e % 2)``).
``wgmma_bf16(acc, nacc, a0, a1, a2, a3, desc, sh)``
    ``wgmma.mma_async.sync.aligned.m64n{2 nacc}k16.f32.bf16.bf16``: the same with a 64 x 16 bf16 A (four uint32
    registers of bf16 pairs, low half first: rows ``g`` / ``g + 8`` of the warp's 16 and columns ``2t, 2t+1``
    for registers 0 / 1, ``2t+8, 2t+9`` for 2 / 3) and a 16 x ``n`` bf16 B, K-major (core matrices of 8 rows
    x 8 bf16 columns: the same 16-byte rows as TF32's 4 columns, so a TF32 tile's descriptor names 8 bf16
    columns per 4 TF32 ones).
``wgmma_wait(acc, nacc, pending)``
    ``wgmma.wait_group.sync.aligned pending``: until at most ``pending`` committed groups are in flight.
    It takes the accumulators as in-out operands, so the compiler moves no read of them before it.
``wgmma_fence()``, ``wgmma_commit()``, ``fence_proxy_async()``
    ``wgmma.fence`` (before the first wgmma that reads registers written since), ``wgmma.commit_group``,
    ``fence.proxy.async.shared::cta`` (shared-memory stores by the threads made visible to the tensor
    core's reads, before the barrier that hands the tile over).
``smem_desc(addr, lbo, sbo)``
    The descriptor of a tile without swizzle at shared byte address ``addr``: K-major, 8-row x 16-byte
    core matrices, ``lbo`` bytes between core matrices adjacent along K, ``sbo`` along the rows.

Under the CUDA simulator the names are Python functions: ``wgmma_tf32`` gathers the warpgroup's A
fragments, reads B where the descriptor points (byte offsets from the shared array's first element) and
multiplies them once for the warpgroup (:func:`sparsekit.gpu.mma.warp_collective` over 128 threads); each thread adds
the exact sums of products (float64) to its accumulators, rounded once to float32; the others do nothing.
The wgmma probe kernel of ``tests/mma_probes.py`` is the tests' check of the layouts above:
``tests/test_uspmm_wgmma.py`` runs it on the simulator, ``tests/gpu/test_uspmm_wgmma_gpu.py`` on the GPU.
"""
from __future__ import annotations

import numpy as np
from numba.cuda import config

from sparsekit.gpu.inline import inlined

U64 = np.uint64

__all__ = ["wgmma_tf32", "wgmma_bf16", "wgmma_wait", "wgmma_fence", "wgmma_commit", "fence_proxy_async", "smem_desc"]

if config.ENABLE_CUDASIM:
    import functools
    import threading

    from sparsekit.gpu.mma import warp_collective

    def _desc_fields(desc):
        d = int(desc)
        return (d & 0x3FFF) << 4, ((d >> 16) & 0x3FFF) << 4, ((d >> 32) & 0x3FFF) << 4

    def _b_bytes(desc, nacc, k: int, size: int):
        """Byte offsets from ``sh[0]`` of B's ``k x 2 nacc`` elements of ``size`` bytes, K-major core matrices of
        8 rows x 16 bytes where ``desc`` points (``16 / size`` K columns a core matrix)."""
        start, lbo, sbo = _desc_fields(desc)
        per = 16 // size
        kk, col = np.arange(k)[:, None], np.arange(2 * int(nacc))[None, :]
        return start + (col // 8) * sbo + (kk // per) * lbo + (col % 8) * 16 + (kk % per) * size

    # Where each warpgroup thread's four A registers go in A (64 x k): thread th = 32 w + 4 g + t, register i holds
    # row 16 w + g + 8 (i % 2), columns t + 4 (i // 2) (TF32), or 2 t + 8 (i // 2) and the next (a bf16 pair).
    _TH, _REG = np.arange(128)[:, None], np.arange(4)[None, :]
    _A_ROWS = 16 * (_TH // 32) + (_TH % 32) // 4 + 8 * (_REG % 2)
    _A_COLS_TF32 = _TH % 4 + 4 * (_REG // 2)
    _A_COLS_BF16 = 2 * (_TH % 4) + 8 * (_REG // 2)

    def _warpgroup_product(k: int, a_values, a_cols, gathered, b_values):
        """The warpgroup's ``A @ B`` (64 x 2 nacc, float64: exact products, summed once) from every thread's
        ``(registers, desc, nacc)``: A from ``a_values(registers)`` placed at :data:`_A_ROWS` and ``a_cols``,
        B from ``b_values(desc, nacc)`` (the descriptor and width are the warpgroup's: one instruction)."""
        if len({(desc, nacc) for _, desc, nacc in gathered}) != 1:
            raise RuntimeError("wgmma: the warpgroup's threads disagree on the descriptor or the accumulators")
        a = np.zeros((64, k))
        values = a_values(np.array([regs for regs, _, _ in gathered]))
        a[_A_ROWS.reshape(_A_ROWS.shape + (1,) * (values.ndim - 2)), a_cols] = values
        _, desc, nacc = gathered[0]
        return a @ b_values(desc, nacc)

    def _accumulate(acc, nacc, d):
        """This thread's accumulators (the layout of the module docstring) plus its elements of the warpgroup's
        product ``d``, rounded once to float32."""
        th = threading.current_thread().thread_id % 128
        w, lane = th // 32, th % 32
        g, t = lane // 4, lane % 4
        for j in range(2 * int(nacc) // 8):
            for e in range(4):
                r = 16 * w + g + 8 * (e // 2)
                col = 8 * j + 2 * t + e % 2
                acc[4 * j + e] = np.float32(float(acc[4 * j + e]) + d[r, col])

    def wgmma_tf32(acc, nacc, a0, a1, a2, a3, desc, sh):
        """Simulator fallback: the warpgroup's A fragments and B (read from ``sh`` where ``desc`` points, byte
        offsets from ``sh[0]``) multiplied once for the warpgroup (:func:`sparsekit.gpu.mma.warp_collective` over 128
        threads), this thread's accumulators updated with the exact sums of products, rounded once to float32."""
        def b_values(desc, nacc):
            return np.asarray(sh)[_b_bytes(desc, nacc, 8, 4) // 4].astype(np.float64)
        d = warp_collective(((float(a0), float(a1), float(a2), float(a3)), int(desc), int(nacc)),
                            functools.partial(_warpgroup_product, 8, np.asarray, _A_COLS_TF32, b_values=b_values), 128)
        _accumulate(acc, nacc, d)

    def _bf16_values(bits):
        """bf16 bits (the low 16 of each uint32) as float64 values."""
        return (np.asarray(bits, dtype=np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)

    def wgmma_bf16(acc, nacc, a0, a1, a2, a3, desc, sh):
        """Simulator fallback: as :func:`wgmma_tf32`, with bf16 pairs in ``a0..a3`` (low half first) and a bf16
        B (16-bit halves of ``sh``'s words, where ``desc`` points)."""
        def pairs(words):                               # (128, 4) words -> (128, 4, 2) values, low half first
            words = words.astype(np.uint32)
            return _bf16_values(np.stack([words & 0xFFFF, words >> 16], axis=-1))

        def b_values(desc, nacc):
            byte = _b_bytes(desc, nacc, 16, 2)
            return _bf16_values((np.asarray(sh).view(np.uint32)[byte // 4] >> (8 * (byte % 4)).astype(np.uint32))
                                & 0xFFFF)
        cols = _A_COLS_BF16[..., None] + np.arange(2)
        d = warp_collective(((int(a0), int(a1), int(a2), int(a3)), int(desc), int(nacc)),
                            functools.partial(_warpgroup_product, 16, pairs, cols, b_values=b_values), 128)
        _accumulate(acc, nacc, d)

    def wgmma_wait(acc, nacc, pending):
        """Simulator fallback: the products are already in ``acc``."""

    def wgmma_fence():
        """Simulator fallback: nothing to order."""

    def wgmma_commit():
        """Simulator fallback: nothing in flight."""

    def fence_proxy_async():
        """Simulator fallback: one memory, one proxy."""
else:
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    _I32, _I64, _F32 = ir.IntType(32), ir.IntType(64), ir.FloatType()

    def _void_asm(builder, text: str) -> None:
        builder.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), text, "~{memory}", side_effect=True), [])

    def _acc_ptrs(builder, context, arrty, arr, nacc: int):
        ary = context.make_array(arrty)(context, builder, arr)
        return [builder.gep(ary.data, [ir.Constant(_I64, i)]) for i in range(nacc)]

    def _acc_ok(acc, nacc) -> bool:
        return (isinstance(acc, types.Array) and acc.ndim == 1 and acc.dtype == types.float32
                and isinstance(nacc, types.IntegerLiteral) and nacc.literal_value % 4 == 0
                and 4 <= nacc.literal_value <= 128)

    def _wgmma_signature(acc, nacc, reg_type, sh, kind: str, k: int):
        """Signature and code of ``wgmma.mma_async`` m64n(2 nacc)k``k`` of ``kind`` with A from registers."""
        n = nacc.literal_value
        sig = types.void(acc, nacc, reg_type, reg_type, reg_type, reg_type, types.uint64, sh)
        trans_b = ", 0" if kind == "bf16" else ""                         # (16-bit types name B's layout)

        def codegen(context, builder, sig, args):
            ptrs = _acc_ptrs(builder, context, sig.args[0], args[0], n)
            olds = [builder.load(p) for p in ptrs]
            regs = [builder.bitcast(v, _I32) if reg_type == types.float32 else v for v in args[2:6]]
            d = ",".join(f"${i}" for i in range(n))
            a = ",".join(f"${n + i}" for i in range(4))
            text = (f"wgmma.mma_async.sync.aligned.m64n{2 * n}k{k}.f32.{kind}.{kind} {{{d}}}, {{{a}}}, ${n + 4}, "
                    f"1, 1, 1{trans_b};")
            cons = ",".join(["=f"] * n + ["r"] * 4 + ["l"] + [str(i) for i in range(n)])
            fnty = ir.FunctionType(ir.LiteralStructType([_F32] * n), [_I32] * 4 + [_I64] + [_F32] * n)
            res = builder.call(ir.InlineAsm(fnty, text, cons, side_effect=True), regs + [args[6]] + olds)
            for i, p in enumerate(ptrs):
                builder.store(builder.extract_value(res, i), p)
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def wgmma_tf32(typingctx, acc, nacc, a0, a1, a2, a3, desc, sh):
        """``acc[:nacc] += A @ B``: A (64 x 8 TF32) in registers ``a0..a3``, B (8 x 2 nacc) at ``desc`` in the
        shared array ``sh`` (named for the simulator; the instruction reads only ``desc``)."""
        if not (_acc_ok(acc, nacc) and all(isinstance(x, types.Float) for x in (a0, a1, a2, a3))
                and isinstance(desc, types.Integer) and isinstance(sh, types.Array)):
            return None
        return _wgmma_signature(acc, nacc, types.float32, sh, "tf32", 8)

    @intrinsic
    def wgmma_bf16(typingctx, acc, nacc, a0, a1, a2, a3, desc, sh):
        """``acc[:nacc] += A @ B``: A (64 x 16 bf16) in the uint32 registers ``a0..a3`` (bf16 pairs), B (16 x
        2 nacc bf16, K-major) at ``desc`` in the shared array ``sh``."""
        if not (_acc_ok(acc, nacc) and all(isinstance(x, types.Integer) for x in (a0, a1, a2, a3))
                and isinstance(desc, types.Integer) and isinstance(sh, types.Array)):
            return None
        return _wgmma_signature(acc, nacc, types.uint32, sh, "bf16", 16)

    @intrinsic
    def wgmma_wait(typingctx, acc, nacc, pending):
        """``wgmma.wait_group.sync.aligned pending`` with ``acc[:nacc]`` as in-out operands."""
        if not (_acc_ok(acc, nacc) and isinstance(pending, types.IntegerLiteral)):
            return None
        n, p = nacc.literal_value, pending.literal_value
        sig = types.void(acc, nacc, pending)

        def codegen(context, builder, sig, args):
            ptrs = _acc_ptrs(builder, context, sig.args[0], args[0], n)
            olds = [builder.load(q) for q in ptrs]
            fnty = ir.FunctionType(ir.LiteralStructType([_F32] * n), [_F32] * n)
            cons = ",".join(["=f"] * n + [str(i) for i in range(n)] + ["~{memory}"])
            res = builder.call(ir.InlineAsm(fnty, f"wgmma.wait_group.sync.aligned {p};", cons, side_effect=True),
                               olds)
            for i, q in enumerate(ptrs):
                builder.store(builder.extract_value(res, i), q)
            return context.get_dummy_value()

        return sig, codegen

    def _statement(name: str, text: str):
        """An intrinsic ``name()`` that emits the PTX statement ``text``, volatile, ordered with memory."""
        def typer(typingctx):
            def codegen(context, builder, sig, args):
                _void_asm(builder, text)
                return context.get_dummy_value()
            return types.void(), codegen
        typer.__name__ = name
        typer.__doc__ = f"``{text}``"
        return intrinsic(typer)

    wgmma_fence = _statement("wgmma_fence", "wgmma.fence.sync.aligned;")
    wgmma_commit = _statement("wgmma_commit", "wgmma.commit_group.sync.aligned;")
    fence_proxy_async = _statement("fence_proxy_async", "fence.proxy.async.shared::cta;")


@inlined
def smem_desc(addr, lbo, sbo):
    """The wgmma descriptor (no swizzle) of the tile at shared byte address ``addr`` (see the module docstring);
    all three unsigned 64-bit."""
    return ((addr & U64(0x3FFFF)) >> U64(4)) | ((lbo >> U64(4)) << U64(16)) | ((sbo >> U64(4)) << U64(32))
