"""Device primitives for persistent kernels: loads the compiler cannot hoist, and wide shared loads.

NUMBA_NOTES.md ("Spinning on another block's write"): a plain load, ``cuda.ldcv``
and ``cuda.ldcg`` in a spin loop are hoisted out of it and the loop never
ends. :func:`ld_volatile_u32` is inline PTX ``ld.volatile.global.u32`` marked
side-effecting with a memory clobber, so every iteration loads again from the
memory system (L2), which is what a reader of another block's plain stores needs.

NUMBA_NOTES.md ("Vector loads"): no indexing pattern yields ``ld.shared.v4``;
:func:`ld_x4_f32` bitcasts the element pointer to a 4-vector and loads it with
the vector's alignment, giving ``ld.shared.v4.f32`` (float32) or one 8-byte
load of four halves (float16, widened to float32 in registers).

Under the CUDA simulator these intrinsics cannot run; plain-Python versions
with the same results stand in (the simulator has no caches to bypass).
"""
from __future__ import annotations

from numba import config

__all__ = ["ld_volatile_u32", "ld_x4_f32"]

if config.ENABLE_CUDASIM:
    import numpy as np

    def ld_volatile_u32(array, i):
        """``array[i]`` of a 1-D uint32 array, loaded again on every call (simulator stand-in)."""
        return array[i]

    def ld_x4_f32(array, i):
        """``array[i:i + 4]`` of a float32/float16 array as four float32 (simulator stand-in)."""
        return (np.float32(array[i]), np.float32(array[i + 1]),
                np.float32(array[i + 2]), np.float32(array[i + 3]))

else:
    from llvmlite import ir
    from numba import types
    from numba.core.errors import TypingError
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    def _element_pointer(context, builder, array_type, array, index):
        ary = context.make_array(array_type)(context, builder, value=array)
        return cgutils.get_item_pointer(context, builder, array_type, ary, [index], wraparound=False)

    @intrinsic
    def ld_volatile_u32(typingctx, array, index):
        """``ld.volatile.global.u32`` of ``array[index]`` (1-D uint32 global array); never hoisted."""
        if not (isinstance(array, types.Array) and array.ndim == 1 and array.dtype == types.uint32):
            raise TypingError(f"ld_volatile_u32: expected a 1-D uint32 array, got {array}")
        if not isinstance(index, types.Integer):
            raise TypingError(f"ld_volatile_u32: expected an integer index, got {index}")

        def codegen(context, builder, sig, args):
            ptr = _element_pointer(context, builder, sig.args[0], args[0],
                                   context.cast(builder, args[1], sig.args[1], types.intp))
            fnty = ir.FunctionType(ir.IntType(32), [ptr.type])
            asm = ir.InlineAsm(fnty, "ld.volatile.global.u32 $0, [$1];", "=r,l,~{memory}",
                               side_effect=True)
            return builder.call(asm, [ptr])

        return types.uint32(array, index), codegen

    @intrinsic
    def ld_x4_f32(typingctx, array, index):
        """Elements ``index .. index + 3`` of a 1-D float32/float16 array in one vector load.

        ``index`` must be a multiple of 4 (16-byte alignment for float32, 8 for
        float16); the caller guarantees it. Returns a 4-tuple of float32.
        """
        if not (isinstance(array, types.Array) and array.ndim == 1
                and array.dtype in (types.float32, types.float16)):
            raise TypingError(f"ld_x4_f32: expected a 1-D float32 or float16 array, got {array}")
        if not isinstance(index, types.Integer):
            raise TypingError(f"ld_x4_f32: expected an integer index, got {index}")
        ret = types.UniTuple(types.float32, 4)

        def codegen(context, builder, sig, args):
            ary_t = sig.args[0]
            ptr = _element_pointer(context, builder, ary_t, args[0],
                                   context.cast(builder, args[1], sig.args[1], types.intp))
            f32 = ir.FloatType()
            i32 = ir.IntType(32)
            if ary_t.dtype == types.float32:
                vec_t = ir.VectorType(f32, 4)
                vptr = builder.bitcast(ptr, vec_t.as_pointer(ptr.type.addrspace))
                vec = builder.load(vptr, align=16)
                items = [builder.extract_element(vec, ir.Constant(i32, k)) for k in range(4)]
            else:
                # NVVM IR rejects half vectors and fpext from half: load 8 bytes as one i64,
                # split it into four 16-bit halves and widen each with cvt.f32.f16.
                i16 = ir.IntType(16)
                i64 = ir.IntType(64)
                wptr = builder.bitcast(ptr, i64.as_pointer(ptr.type.addrspace))
                word = builder.load(wptr, align=8)
                cvt = ir.InlineAsm(ir.FunctionType(f32, [i16]), "cvt.f32.f16 $0, $1;", "=f,h")
                items = [builder.call(cvt, [builder.trunc(builder.lshr(word, ir.Constant(i64, 16 * k)), i16)])
                         for k in range(4)]
            return context.make_tuple(builder, ret, items)

        return ret(array, index), codegen
