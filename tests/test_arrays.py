"""sparsekit.arrays: conversion, validation and the kind that comes back.

Runs on the simulator (NumPy inputs and simulator device arrays); CuPy and
PyTorch inputs are tested on the GPU in tests/gpu/test_arrays_gpu.py.
"""
from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from numba import cuda

from sparsekit import arrays
from sparsekit.arrays import DeviceMatrix, Operand, cdiv, flat_view, kernel_dtype, operand, output, result
from sparsekit.checks import BFLOAT16, FLOAT_DTYPES
from sparsekit.formats import COO, CSR
from tests.strategies import dense_arrays, dtypes

ALL_DTYPES = FLOAT_DTYPES + (np.dtype(np.int16), np.dtype(np.int32), np.dtype(np.int64),
                             np.dtype(np.uint8))


@cuda.jit
def _axpy(a, x, y, out):
    """out = a * x + y elementwise (2-D)."""
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = a * x[i, j] + y[i, j]


def _launch_axpy(a, x, y):
    """A launcher written the way every gpu/ module writes one."""
    xo = operand(x, "x", dtypes=FLOAT_DTYPES, ndim=2)
    yo = operand(y, "y", dtypes=(xo.dev.dtype,), shape=xo.dev.shape)
    out = output(xo.dev.shape, xo.dev.dtype, like=xo)
    m, n = xo.dev.shape
    _axpy[(cdiv(m, 8), cdiv(n, 8)), (8, 8)](a, xo.dev, yo.dev, out)
    return result(out, like=xo)


shapes = st.tuples(st.integers(1, 12), st.integers(1, 12))


@given(shape=shapes, dtype=dtypes(allowed=(np.float32, np.float64)), data=st.data())
def test_launcher_numpy_in_numpy_out(shape, dtype, data):
    x = data.draw(dense_arrays(shape, dtype=dtype))
    y = data.draw(dense_arrays(shape, dtype=dtype))
    out = _launch_axpy(2.0, x, y)
    assert type(out) is np.ndarray and out.dtype == dtype and out.shape == shape
    np.testing.assert_array_equal(out, (dtype.type(2.0) * x + y).astype(dtype))


@given(shape=shapes, data=st.data())
def test_launcher_device_in_device_out(shape, data):
    x = data.draw(dense_arrays(shape, dtype=np.float32))
    y = data.draw(dense_arrays(shape, dtype=np.float32))
    out = _launch_axpy(2.0, cuda.to_device(x), cuda.to_device(y))
    assert getattr(out, "__cuda_ndarray__", False), "a device array comes back for device input"
    np.testing.assert_array_equal(out.copy_to_host(), np.float32(2.0) * x + y)


def test_numpy_operand_is_a_device_copy():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    op = operand(x, "x", dtypes=FLOAT_DTYPES)
    assert op.kind == "numpy" and op.source is x
    np.testing.assert_array_equal(op.dev.copy_to_host(), x)
    op.dev[0, 0] = 99.0
    assert x[0, 0] == 0.0, "the caller's array is untouched"


def test_device_operand_is_the_array_itself():
    d = cuda.to_device(np.ones((2, 3), dtype=np.float16))
    op = operand(d, "d", dtypes=FLOAT_DTYPES, ndim=2)
    assert op.kind == "numba" and op.dev is d and op.source is d
    assert result(d, like=op) is d


def test_operand_is_frozen_and_has_a_short_repr():
    op = operand(np.zeros(3, np.float32) + 1, "x", dtypes=FLOAT_DTYPES)
    with pytest.raises(dataclasses.FrozenInstanceError):
        op.kind = "numba"
    assert repr(op) == "<Operand kind=numpy shape=(3,) dtype=float32 source=ndarray>"


@given(dtype=st.sampled_from(ALL_DTYPES), allowed=st.sets(st.sampled_from(ALL_DTYPES), min_size=1),
       device=st.booleans())
def test_dtype_is_checked_never_cast(dtype, allowed, device):
    assume(not (device and dtype == BFLOAT16))       # Numba has no bfloat16 arrays: NumPy or PyTorch only
    x = np.ones((2, 2), dtype=dtype)
    arg = cuda.to_device(x) if device else x
    allowed = tuple(sorted(allowed, key=str))
    if dtype in allowed:                               # (bfloat16 reaches the kernel as its uint16 bits)
        assert operand(arg, "w", dtypes=allowed).dev.dtype == kernel_dtype(dtype)
    else:
        with pytest.raises(TypeError, match=rf"^w: dtype must be one of \(.*\), got {dtype.name}"):
            operand(arg, "w", dtypes=allowed)


def test_dtypes_forms():
    x = np.ones(4, np.float32)
    for form in (np.float32, "float32", np.dtype("float32"), [np.float32], (np.float32, np.float64), None):
        assert operand(x, "x", dtypes=form).dev.dtype == np.float32
    with pytest.raises(TypeError, match="got float32"):
        operand(x, "x", dtypes=[np.float64])


@given(nd=st.integers(0, 4), want=st.one_of(st.integers(0, 4), st.sets(st.integers(0, 4), min_size=1)))
def test_ndim(nd, want):
    x = np.ones((2,) * nd, np.float32)
    ok = nd == want if isinstance(want, int) else nd in want
    want = want if isinstance(want, int) else tuple(sorted(want))
    if ok:
        operand(x, "a", dtypes=None, ndim=want)
    else:
        with pytest.raises(ValueError, match=r"^a: expected a .*-D array, got shape"):
            operand(x, "a", dtypes=None, ndim=want)


@given(shape=st.lists(st.integers(0, 4), min_size=1, max_size=3),
       spec=st.lists(st.one_of(st.none(), st.integers(0, 4)), min_size=1, max_size=3))
def test_shape_with_free_dimensions(shape, spec):
    x = np.ones(shape, np.float32)
    ok = len(spec) == len(shape) and all(s is None or s == d for s, d in zip(spec, shape))
    if ok:
        operand(x, "b", dtypes=None, shape=tuple(spec))
    else:
        with pytest.raises(ValueError, match=r"^b: expected shape \("):
            operand(x, "b", dtypes=None, shape=tuple(spec))


@st.composite
def views(draw):
    """(base, transpose, index): a strided view of a small array, with size-1 and empty dims.

    Only what Numba device arrays can also do: transpose 2-D arrays, slice non-empty ones.
    """
    shape = draw(st.lists(st.integers(0, 5), min_size=1, max_size=3))
    base = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    index = None  # Numba cannot index an empty device array, even with [:]
    if base.size:
        index = tuple(slice(draw(st.integers(0, 1)), None, draw(st.integers(1, 2))) for _ in shape)
    return base, base.ndim == 2 and draw(st.booleans()), index


def device_transpose(d):
    """A transposed view of the 2-D device array ``d``, as NumPy's ``.T`` (a GPU device array's ``.T`` is a
    transposed copy, C-contiguous, made by a kernel; the simulator's is NumPy's view)."""
    from numba import config
    if config.ENABLE_CUDASIM:
        return d.T
    from numba.cuda.cudadrv.devicearray import DeviceNDArray
    return DeviceNDArray(d.shape[::-1], d.strides[::-1], d.dtype, gpu_data=d.gpu_data)


@given(view=views(), order=st.sampled_from(["C", "F", None]), device=st.booleans())
def test_contiguity_agrees_with_numpy(view, order, device):
    base, transpose, index = view
    x = base.T if transpose else base
    x = x if index is None else x[index]
    ok = order is None or (x.flags.c_contiguous if order == "C" else x.flags.f_contiguous)
    if device:  # the same view taken of a device array
        d = cuda.to_device(base)
        arg = device_transpose(d) if transpose else d
        arg = arg if index is None else arg[index]
    else:
        arg = x
    if ok:
        np.testing.assert_array_equal(operand(arg, "v", dtypes=None, order=order).dev.copy_to_host(), x)
    else:
        with pytest.raises(ValueError, match=rf"^v: expected a {order}-contiguous array"):
            operand(arg, "v", dtypes=None, order=order)


def test_strided_device_view_is_rejected():
    d = cuda.to_device(np.ones((4, 6), np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        operand(d[:, ::2], "d", dtypes=None)
    operand(d[:, ::2], "d", dtypes=None, order=None)


def test_validation_happens_before_any_copy(monkeypatch):
    calls = []
    monkeypatch.setattr(arrays.cuda, "to_device", lambda x: calls.append(x))
    for bad in (dict(dtypes=np.float64), dict(dtypes=None, ndim=1), dict(dtypes=None, shape=(3, 3)),
                dict(dtypes=None, order="F")):
        with pytest.raises((TypeError, ValueError)):
            operand(np.ones((2, 3), np.float32), "x", **bad)
    assert calls == []


def test_a_cached_success_does_not_let_a_different_argument_through():
    x = np.ones((2, 3), np.float32)
    for _ in range(2):
        operand(x, "x", dtypes=np.float32, shape=(2, 3))
    for _ in range(2):  # failures are never cached: each raises
        with pytest.raises(ValueError):
            operand(np.ones((3, 2), np.float32), "x", dtypes=np.float32, shape=(2, 3))
        with pytest.raises(TypeError):
            operand(x.astype(np.float64), "x", dtypes=np.float32, shape=(2, 3))


def test_bad_kinds_and_arguments():
    with pytest.raises(TypeError, match=r"^x: expected a numpy.ndarray, a Numba device array .* got builtins.list"):
        operand([1.0, 2.0], "x", dtypes=None)
    with pytest.raises(ValueError, match="^order: must be"):
        operand(np.ones(2), "x", dtypes=None, order="K")


class _FakeCAI:
    """Looks like a CuPy array to operand(); only the description is read before validation."""

    def __init__(self, shape, typestr, strides=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "strides": strides,
                                         "data": (0, False), "version": 3}


@pytest.mark.simulator("on a GPU, tests/gpu/test_arrays_gpu.py views CAI memory")
def test_cai_needs_a_gpu_on_the_simulator():
    with pytest.raises(TypeError, match="need a real GPU"):
        operand(_FakeCAI((2, 2), "<f4"), "c", dtypes=np.float32)


def test_cai_is_validated_from_its_description():
    with pytest.raises(TypeError, match="got float64"):
        operand(_FakeCAI((2, 2), "<f8"), "c", dtypes=np.float32)
    with pytest.raises(ValueError, match="expected shape"):
        operand(_FakeCAI((2, 2), "<f4"), "c", dtypes=np.float32, shape=(3, None))
    with pytest.raises(ValueError, match="C-contiguous"):
        operand(_FakeCAI((2, 2), "<f4", strides=[4, 8]), "c", dtypes=np.float32)
    masked = _FakeCAI((2,), "<f4")
    masked.__cuda_array_interface__["mask"] = object()
    with pytest.raises(TypeError, match="^c: masked"):
        operand(masked, "c", dtypes=np.float32)


def test_output_and_result():
    op = operand(np.ones((2, 3), np.float32), "x", dtypes=None)
    out = output((3, 2), np.float16, like=op, order="F")
    assert out.shape == (3, 2) and out.dtype == np.float16 and out.is_f_contiguous()
    out[:] = 1.5
    host = result(out, like=op)
    assert type(host) is np.ndarray
    np.testing.assert_array_equal(host, np.full((3, 2), 1.5, np.float16))
    with pytest.raises(ValueError, match="^order"):
        output((2,), np.float32, like=op, order=None)
    with pytest.raises(TypeError, match="^like: expected an Operand"):
        output((2,), np.float32, like=np.ones(2))


def test_flat_view_is_the_arrays_elements_in_row_major_order():
    host = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    dev = cuda.to_device(host)
    flat = flat_view(dev)
    assert flat.shape == (24,)
    np.testing.assert_array_equal(flat.copy_to_host(), host.ravel())
    flat[5] = -1.0                                      # a view: the array's own memory
    assert dev.copy_to_host()[0, 1, 1] == -1.0


class _Block:
    """A fake device block: counts the blocks alive, as device memory would be."""
    alive = 0

    def __init__(self, nbytes):
        self.nbytes = nbytes
        _Block.alive += 1

    def __del__(self):
        _Block.alive -= 1


def test_block_pool_reuses_a_collected_outputs_block_of_the_same_size():
    made = []
    pool = arrays.BlockPool(lambda n: made.append(_Block(n)) or made[-1], keep_bytes=1000)
    a, lease = pool.take(100)
    assert made == [a] and pool.kept_bytes == 0
    b, held = pool.take(100)                            # a is still leased: a new block
    assert b is not a and len(made) == 2
    del lease
    assert pool.kept_bytes == 100
    other, other_lease = pool.take(200)                 # another size: a new block, a stays kept
    assert other is made[2] and pool.kept_bytes == 100
    again, lease = pool.take(100)
    assert again is a and len(made) == 3 and pool.kept_bytes == 0


def test_block_pool_keeps_at_most_keep_bytes_and_lets_the_rest_go():
    _Block.alive = 0
    pool = arrays.BlockPool(_Block, keep_bytes=250)
    leases = [pool.take(100)[1] for _ in range(3)]
    assert _Block.alive == 3
    del leases
    assert pool.kept_bytes == 200 and _Block.alive == 2  # the third went past keep_bytes: freed
    pool.clear()
    assert pool.kept_bytes == 0 and _Block.alive == 0


def test_block_pool_lets_kept_blocks_go_when_an_allocation_fails():
    import weakref
    budget = {"bytes": 300}

    def allocate(nbytes):
        if nbytes > budget["bytes"]:
            raise MemoryError("out of device memory")
        budget["bytes"] -= nbytes
        block = _Block(nbytes)
        weakref.finalize(block, budget.__setitem__, "bytes", budget["bytes"] + nbytes)
        return block

    pool = arrays.BlockPool(allocate, keep_bytes=1000)
    block, lease = pool.take(200)
    del block, lease                                    # kept: 200 of the 300 bytes held by the pool
    block, lease = pool.take(250)                       # fails, lets the kept block go, succeeds
    assert block.nbytes == 250 and pool.kept_bytes == 0
    with pytest.raises(MemoryError):
        pool.take(100)                                  # really out: the error reaches the caller


def test_result_for_an_unknown_cai_type_is_the_device_array():
    d = cuda.to_device(np.ones(3, np.float32))
    assert result(d, like=Operand(d, "cai", _FakeCAI((3,), "<f4"))) is d


@given(a=st.integers(0, 10**6), b=st.integers(1, 1000))
def test_cdiv(a, b):
    assert cdiv(a, b) == math.ceil(Fraction(a, b))


def test_cdiv_rejects_nonpositive_divisor():
    with pytest.raises(ValueError, match="^b: must be a positive"):
        cdiv(4, 0)


class _Rows(DeviceMatrix):
    """A DeviceMatrix subclass as a GPU module writes one: one derived array, built by ``cached``."""

    builds = 0

    def lengths(self):
        return self.cached("lengths", self._lengths)

    def _lengths(self):
        _Rows.builds += 1
        return np.diff(self.host.indptr).astype(np.int32)


def _prepare_rows(x):
    return _Rows.from_host(x, CSR, ("indptr", "data"), name="x", dtypes=(np.dtype(np.float32),),
                           dtype_rule="the test kernels take float32, got {dtype}")


def test_device_matrix_checks_once_copies_and_passes_shape_dtype_through():
    csr = CSR.from_dense(np.array([[1, 0, 2], [0, 0, 0]], np.float32))
    dev = _prepare_rows(csr)
    assert dev.host is csr and dev.shape == (2, 3) and dev.dtype == np.float32
    assert repr(dev) == f"<_Rows {csr!r}>"
    assert sorted(dev.arrays) == ["data", "indptr"]
    np.testing.assert_array_equal(dev.arrays["indptr"].copy_to_host(), csr.indptr)
    assert _prepare_rows(dev) is dev
    with pytest.raises(dataclasses.FrozenInstanceError):
        dev.host = csr
    with pytest.raises(TypeError, match=r"^x: expected a sparsekit.formats.CSR \(or a _Rows\), got COO"):
        _prepare_rows(COO.from_dense(np.ones((2, 2), np.float32)))
    with pytest.raises(TypeError, match="^x: the test kernels take float32, got float64"):
        _prepare_rows(CSR.from_dense(np.ones((2, 2))))


def test_device_matrix_cached_builds_once_per_key():
    dev = _prepare_rows(CSR.from_dense(np.array([[1, 0, 2], [0, 3, 0]], np.float32)))
    before = _Rows.builds
    first = dev.lengths()
    assert dev.lengths() is first and _Rows.builds == before + 1
    np.testing.assert_array_equal(first.copy_to_host(), [2, 1])
    pair = dev.cached(("pair", 1), lambda: (np.zeros(2, np.int32), np.ones(3, np.float32)))
    assert isinstance(pair, tuple) and [a.shape for a in pair] == [(2,), (3,)]
    assert dev.cached(("pair", 1), lambda: pytest.fail("built twice")) is pair
    assert _prepare_rows(dev.host).lengths() is not first            # the cache belongs to the instance


@pytest.mark.parametrize("kind", ["numpy", "device"])
def test_either_order_and_which(kind):
    """``order="CF"`` takes a C- or an F-contiguous array as it is and :func:`memory_order` says which (a single column,
    both at once, counts as C); a strided view is refused by name, nothing copied."""
    from sparsekit.arrays import memory_order
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    cases = [(base, "C"), (np.asfortranarray(base), "F"), (base[:, :1].copy(), "C")]
    for x, want in cases:
        arg = cuda.to_device(x) if kind == "device" else x
        op = operand(arg, "b", dtypes=(np.float32,), ndim=2, order="CF")
        assert memory_order(op.dev) == want
        np.testing.assert_array_equal(op.dev.copy_to_host(), x)
    strided = cuda.to_device(base)[:, ::2] if kind == "device" else base[:, ::2]
    with pytest.raises(ValueError, match="b: expected a C- or F-contiguous array"):
        operand(strided, "b", dtypes=(np.float32,), ndim=2, order="CF")
