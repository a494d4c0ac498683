"""Device primitives for persistent kernels: loads the compiler cannot hoist, and wide shared loads.

docs/numba_notes.md ("Spinning on another block's write"): a plain load, ``cuda.ldcv``
and ``cuda.ldcg`` in a spin loop are hoisted out of it and the loop never
ends. :func:`ld_volatile_u32` is inline PTX ``ld.volatile.global.u32`` marked
side-effecting with a memory clobber, so every iteration loads again from the
memory system (L2), which is what a reader of another block's plain stores needs.

docs/numba_notes.md ("Vector loads"): no indexing pattern yields ``ld.shared.v4``;
:func:`ld_x4_f32` bitcasts the element pointer to a 4-vector and loads it with
the vector's alignment, giving ``ld.shared.v4.f32`` (float32) or one 8-byte
load of four halves (float16, widened to float32 in registers).

Also: :func:`clock64` (the SM's cycle counter, to trace where a step's time goes), :func:`bar_sync` /
:func:`bar_arrive` (named barriers ``bar.sync id, count`` / ``bar.arrive id, count``: a producer/consumer
hand-over between some of a block's warps, without the whole block's barrier), :func:`unpack16` (one 16-bit
half of a packed 32-bit index word, as side-effecting inline PTX so LLVM cannot hoist the unpacking out of the
time loop and keep every index unpacked in its own register, which would undo the packing).

Under the CUDA simulator these intrinsics cannot run; plain-Python versions
with the same results stand in (the simulator has no caches to bypass).
"""
from __future__ import annotations

from numba import config

__all__ = ["ld_volatile_u32", "ld_relaxed_u32", "ld_x4_f32", "clock64", "unpack16", "bar_sync", "bar_arrive",
           "warp_barrier"]

if config.ENABLE_CUDASIM:
    import time

    import numpy as np

    def spin_yield():
        """Simulator only: let the block's other threads run (``time.sleep(0)`` yields the interpreter), as warps of
        a GPU progress side by side. Spin loops poll through the loads below, which call it first: without it, a
        poller could use up its ``spin_limit`` within one 5 ms switch interval of Python's threads, before the
        thread that writes the polled word ran (a faster host made ``tests/test_persistent_rnn.py``'s relaunch
        case fail one run in two)."""
        time.sleep(0)

    def ld_volatile_u32(array, i):
        """``array[i]`` of a 1-D uint32 array, loaded again on every call (simulator stand-in; yields first,
        :func:`spin_yield`)."""
        spin_yield()
        return array[i]

    ld_relaxed_u32 = ld_volatile_u32

    def ld_x4_f32(array, i):
        """``array[i:i + 4]`` of a float32/float16 array as four float32 (simulator stand-in)."""
        return (np.float32(array[i]), np.float32(array[i + 1]),
                np.float32(array[i + 2]), np.float32(array[i + 3]))

    def clock64():
        """A cycle counter stand-in: nanoseconds of the host clock."""
        import time
        return np.int64(time.perf_counter_ns())

    def unpack16(word, half):
        """Bits ``16 * half .. 16 * half + 15`` of a uint32 as int32."""
        return np.int32((int(word) >> (16 * int(half))) & 0xFFFF)

    import threading

    _NAMED_LOCK = threading.Lock()

    def _named(barrier):
        """This block's state of named barrier ``barrier``: [arrivals, generation, condition] (kept on the
        simulator's block manager, which the block's threads share)."""
        manager = threading.current_thread()._manager
        with _NAMED_LOCK:
            table = manager.__dict__.setdefault("_named_barriers", {})
            return table.setdefault(int(barrier), [0, 0, threading.Condition()])

    def _arrive(state, count):
        """One thread's arrival (the caller holds the condition); the ``count``-th completes the barrier."""
        state[0] += 1
        if state[0] == int(count):
            state[0] = 0
            state[1] += 1
            state[2].notify_all()

    def bar_arrive(barrier, count):
        """``bar.arrive barrier, count`` (simulator): count this thread, do not wait."""
        state = _named(barrier)
        with state[2]:
            _arrive(state, count)

    def bar_sync(barrier, count):
        """``bar.sync barrier, count`` (simulator): count this thread, wait until ``count`` threads arrived."""
        state = _named(barrier)
        with state[2]:
            generation = state[1]
            _arrive(state, count)
            while state[1] == generation:
                state[2].wait()

    from numba import cuda

    @cuda.jit(device=True)
    def warp_barrier():
        """``__syncwarp()`` (simulator, which has none: the block barrier; so every thread of the block must
        reach it where it is used)."""
        cuda.syncthreads()

else:
    from llvmlite import ir
    from numba import types
    from numba.core.errors import TypingError
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    from numba import cuda

    @cuda.jit(device=True, inline=True)
    def warp_barrier():
        """``__syncwarp()``: the warp's lanes meet, their memory operations ordered (shared and global)."""
        cuda.syncwarp()

    @intrinsic
    def clock64(typingctx):
        """``mov.u64 %clock64``: the SM's 64-bit cycle counter (side-effecting: never moved or merged)."""
        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.IntType(64), []), "mov.u64 $0, %clock64;", "=l,~{memory}",
                               side_effect=True)
            return builder.call(asm, [])

        return types.int64(), codegen

    def _named_barrier(name, op):
        def typer(typingctx, barrier, count):
            if not (isinstance(barrier, types.Integer) and isinstance(count, types.Integer)):
                raise TypingError(f"{name}: expected integer barrier and count, got {barrier}, {count}")

            def codegen(context, builder, sig, args):
                i32 = ir.IntType(32)
                ops = [context.cast(builder, v, t, types.uint32) for v, t in zip(args, sig.args)]
                asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [i32, i32]), f"{op} $0, $1;", "r,r,~{memory}",
                                   side_effect=True)
                builder.call(asm, ops)
                return context.get_dummy_value()
            return types.void(barrier, count), codegen
        typer.__name__ = typer.__qualname__ = name
        return intrinsic(typer)

    #: ``bar.sync barrier, count``: wait until ``count`` threads (a multiple of 32, whole warps) have arrived at
    #: named barrier ``barrier`` (1-15; 0 is ``syncthreads``'), counting this one; orders shared memory among them.
    bar_sync = _named_barrier("bar_sync", "bar.sync")
    #: ``bar.arrive barrier, count``: count this thread's warp at named barrier ``barrier`` without waiting (the
    #: producer's side of a hand-over; its earlier shared-memory writes are visible to the threads that wait).
    bar_arrive = _named_barrier("bar_arrive", "bar.arrive")

    @intrinsic
    def unpack16(typingctx, word, half):
        """``bfe.u32``: bits ``16 * half .. 16 * half + 15`` of ``word`` (uint32) as int32.

        ``half`` is 0 or 1 (a constant after loop unrolling). The asm is
        side-effecting so the unpacking stays where it is used, inside the loop.
        """
        if word != types.uint32:
            raise TypingError(f"unpack16: expected a uint32 word, got {word}")
        if not isinstance(half, types.Integer):
            raise TypingError(f"unpack16: expected an integer half, got {half}")

        def codegen(context, builder, sig, args):
            i32 = ir.IntType(32)
            shift = builder.mul(context.cast(builder, args[1], sig.args[1], types.int32), ir.Constant(i32, 16))
            asm = ir.InlineAsm(ir.FunctionType(i32, [i32, i32]), "bfe.u32 $0, $1, $2, 16;", "=r,r,r",
                               side_effect=True)
            return builder.call(asm, [args[0], shift])

        return types.int32(word, half), codegen

    def _element_pointer(context, builder, array_type, array, index):
        ary = context.make_array(array_type)(context, builder, value=array)
        return cgutils.get_item_pointer(context, builder, array_type, ary, [index], wraparound=False)

    def _spin_load_u32(name, instruction):
        """An intrinsic ``name(array, index)``: inline PTX ``instruction`` of ``array[index]`` (1-D uint32
        global array), side-effecting with a memory clobber so it is never hoisted out of a spin loop."""

        def typer(typingctx, array, index):
            if not (isinstance(array, types.Array) and array.ndim == 1 and array.dtype == types.uint32):
                raise TypingError(f"{name}: expected a 1-D uint32 array, got {array}")
            if not isinstance(index, types.Integer):
                raise TypingError(f"{name}: expected an integer index, got {index}")

            def codegen(context, builder, sig, args):
                ptr = _element_pointer(context, builder, sig.args[0], args[0],
                                       context.cast(builder, args[1], sig.args[1], types.intp))
                fnty = ir.FunctionType(ir.IntType(32), [ptr.type])
                asm = ir.InlineAsm(fnty, f"{instruction} $0, [$1];", "=r,l,~{memory}", side_effect=True)
                return builder.call(asm, [ptr])

            return types.uint32(array, index), codegen

        typer.__name__ = typer.__qualname__ = name
        return intrinsic(typer)

    #: ``ld.volatile.global.u32``: a relaxed load of *system* scope, from L2 on every call.
    ld_volatile_u32 = _spin_load_u32("ld_volatile_u32", "ld.volatile.global.u32")
    #: ``ld.relaxed.gpu.global.u32``: a coherent load of GPU scope only, the scope every block of a
    #: persistent kernel shares (cheaper than the system scope of ``ld.volatile``).
    ld_relaxed_u32 = _spin_load_u32("ld_relaxed_u32", "ld.relaxed.gpu.global.u32")

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
