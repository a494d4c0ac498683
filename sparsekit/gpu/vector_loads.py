"""Vector loads and stores for Numba CUDA kernels: ``load2``, ``load4``, ``load8``, ``store2``, ``store4``, ``store8``.

``loadW(arr, i)`` returns the tuple ``(arr[i], arr[i+1], ..., arr[i+W-1])`` of a
1-D array read with ONE ``W``-wide load instruction (``ld.global.v2.f32``,
``ld.global.v4.f32``, ``ld.shared.v4.u32``, ...). Numba emits one scalar load
per element for every indexing pattern (docs/numba_notes.md, "Vector loads"); these
intrinsics bitcast the element pointer to ``<W x T>*`` and load it with
``W * itemsize`` alignment, which is what CUDA's ``float2``/``float4``/``half2``
types do in C++. ``storeW(arr, i, values)`` is the mirror: it writes the
``W``-tuple ``values`` (of ``arr``'s dtype) to ``arr[i : i + W]`` with ONE
``W``-wide store (``st.shared.v4.f32``, ...), e.g. to fill a shared tile
without the bank conflicts of ``W`` strided scalar stores.

Contract (the caller's, unchecked in the kernel; launchers check it once):

* ``arr`` is 1-D and C-contiguous (flatten 2-D operands in the launcher);
* ``i`` is a multiple of ``W`` and ``arr``'s first element is aligned to
  ``W * itemsize`` bytes (Numba/CuPy/PyTorch allocations are 256-byte aligned;
  :func:`aligned` checks a device array), so ``arr[i : i + W]`` is one aligned
  vector;
* ``W * itemsize`` is 4, 8 or 16 bytes (the sizes of PTX vector loads).

Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) the same names are plain
Python functions returning the same tuple, so kernels that use them run there
unchanged.

>>> import numpy as np
>>> from sparsekit.gpu.vector_loads import aligned
>>> aligned(np.zeros(8, np.float32), 4)
True
"""
from __future__ import annotations

from numba.cuda import config

__all__ = ["load2", "load4", "load8", "store2", "store4", "store8", "aligned"]


def aligned(arr, width: int) -> bool:
    """True when ``arr``'s first element sits on a ``width * itemsize`` byte boundary.

    Works for NumPy arrays and anything with ``__cuda_array_interface__`` (Numba
    device arrays, CuPy, PyTorch).
    """
    if hasattr(arr, "__cuda_array_interface__"):
        ptr = arr.__cuda_array_interface__["data"][0]
    else:
        ptr = arr.__array_interface__["data"][0]
    return ptr % (width * arr.dtype.itemsize) == 0


if config.ENABLE_CUDASIM:
    def load2(arr, i):
        """``(arr[i], arr[i+1])`` (simulator fallback of the vector load)."""
        return (arr[i], arr[i + 1])

    def load4(arr, i):
        """``(arr[i], ..., arr[i+3])`` (simulator fallback of the vector load)."""
        return (arr[i], arr[i + 1], arr[i + 2], arr[i + 3])

    def load8(arr, i):
        """``(arr[i], ..., arr[i+7])`` (simulator fallback of the vector load)."""
        return tuple(arr[i + j] for j in range(8))

    def _store(arr, i, values):
        """``arr[i : i + len(values)] = values`` (simulator fallback of the vector stores)."""
        for j, v in enumerate(values):
            arr[i + j] = v

    store2 = store4 = store8 = _store

else:
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def _vector_load(width: int):
        """Build the intrinsic ``load<width>(arr, i)`` for 1-D arrays of any dtype."""

        def typer(typingctx, arr, i):
            if not (isinstance(arr, types.Array) and arr.ndim == 1 and isinstance(i, types.Integer)):
                return None
            nbytes = width * arr.dtype.bitwidth // 8
            if nbytes not in (4, 8, 16):
                return None
            sig = types.UniTuple(arr.dtype, width)(arr, i)

            def codegen(context, builder, sig, args):
                arrty, ity = sig.args
                ary = context.make_array(arrty)(context, builder, args[0])
                index = context.cast(builder, args[1], ity, types.intp)
                elem_ptr = builder.gep(ary.data, [index])                 # &arr[i]
                elem_ty = context.get_data_type(arrty.dtype)
                if arrty.dtype.bitwidth >= 32:
                    vec_ty = ir.VectorType(elem_ty, width)
                    vec_ptr = builder.bitcast(elem_ptr, vec_ty.as_pointer())  # (T_W*) &arr[i]
                    vec = builder.load(vec_ptr, align=nbytes)                 # one W-wide load
                    lanes = [builder.extract_element(vec, ir.Constant(ir.IntType(32), j))
                             for j in range(width)]
                else:
                    # 16-bit elements: load 32-bit words (an <8 x half> load is split into
                    # two v4.b16 loads by the backend), then cut each word in two.
                    words_ty = ir.VectorType(ir.IntType(32), nbytes // 4)
                    words = builder.load(builder.bitcast(elem_ptr, words_ty.as_pointer()), align=nbytes)
                    lanes = []
                    for w in range(nbytes // 4):
                        word = builder.extract_element(words, ir.Constant(ir.IntType(32), w))
                        for half in (word, builder.lshr(word, ir.Constant(ir.IntType(32), 16))):
                            lanes.append(builder.bitcast(builder.trunc(half, ir.IntType(16)), elem_ty))
                return context.make_tuple(builder, sig.return_type, lanes)

            return sig, codegen

        typer.__name__ = f"load{width}"
        return intrinsic(typer)

    def _vector_store(width: int):
        """Build the intrinsic ``store<width>(arr, i, values)`` for 1-D arrays of any dtype."""

        def typer(typingctx, arr, i, values):
            if not (isinstance(arr, types.Array) and arr.ndim == 1 and isinstance(i, types.Integer)
                    and isinstance(values, types.UniTuple) and values.count == width
                    and values.dtype == arr.dtype):
                return None
            nbytes = width * arr.dtype.bitwidth // 8
            if nbytes not in (4, 8, 16):
                return None
            sig = types.void(arr, i, values)

            def codegen(context, builder, sig, args):
                arrty, ity, _ = sig.args
                ary = context.make_array(arrty)(context, builder, args[0])
                index = context.cast(builder, args[1], ity, types.intp)
                elem_ptr = builder.gep(ary.data, [index])                 # &arr[i]
                elems = [builder.extract_value(args[2], j) for j in range(width)]
                if arrty.dtype.bitwidth >= 32:
                    vec_ty = ir.VectorType(context.get_data_type(arrty.dtype), width)
                else:
                    # 16-bit elements: pack pairs into 32-bit words (low half first), as load<W> reads them
                    vec_ty = ir.VectorType(ir.IntType(32), nbytes // 4)
                    i16, i32 = ir.IntType(16), ir.IntType(32)
                    words = []
                    for w in range(nbytes // 4):
                        lo, hi = (builder.zext(builder.bitcast(elems[2 * w + h], i16), i32) for h in (0, 1))
                        words.append(builder.or_(lo, builder.shl(hi, ir.Constant(i32, 16))))
                    elems = words
                vec = ir.Constant(vec_ty, ir.Undefined)
                for j, e in enumerate(elems):
                    vec = builder.insert_element(vec, e, ir.Constant(ir.IntType(32), j))
                builder.store(vec, builder.bitcast(elem_ptr, vec_ty.as_pointer()), align=nbytes)
                return context.get_dummy_value()

            return sig, codegen

        typer.__name__ = f"store{width}"
        return intrinsic(typer)

    load2 = _vector_load(2)
    load4 = _vector_load(4)
    load8 = _vector_load(8)
    store2 = _vector_store(2)
    store4 = _vector_store(4)
    store8 = _vector_store(8)
