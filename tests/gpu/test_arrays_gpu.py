"""sparsekit.arrays on a real GPU: CuPy and PyTorch inputs without copies, and their kind back."""
from __future__ import annotations

import gc
import importlib

import numpy as np
import pytest
from numba import cuda

from sparsekit import arrays
from sparsekit.arrays import operand, output, result
from sparsekit.checks import FLOAT_DTYPES
from tests.test_arrays import _axpy, _launch_axpy

pytestmark = pytest.mark.gpu


def _lib(name):
    try:
        mod = importlib.import_module(name)
    except ImportError:
        pytest.skip(f"{name} is not installed")
    if name == "torch" and not mod.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    return mod


def _ptr(dev):
    return dev.__cuda_array_interface__["data"][0]


# a = 2.0 throughout: a power of two makes a*x exact, so the GPU's fused multiply-add
# gives exactly NumPy's a*x + y and results compare bit for bit.
A = 2.0


def _inputs(rng, shape=(37, 53)):
    return rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("shape, order", [((5,), "C"), ((4, 6), "C"), ((4, 6), "F"), ((1, 6), "F"),
                                          ((2, 3, 4), "C")])
def test_cached_numba_types_match_a_fresh_array(shape, order):
    op = operand(np.ones(3, np.float32), "x", dtypes=None)
    for _ in range(2):
        out = output(shape, np.float16, like=op, order=order)
        assert out._numba_type_ == cuda.device_array(shape, np.float16, order=order)._numba_type_
    host = np.asarray(np.ones(shape, np.float64), order=order)
    for _ in range(2):
        assert operand(host, "h", dtypes=None, order=None).dev._numba_type_ == \
            cuda.to_device(host)._numba_type_


def test_numpy_and_numba_on_the_gpu():
    x, y = _inputs(np.random.default_rng(0))
    want = np.float32(A) * x + y
    np.testing.assert_array_equal(_launch_axpy(A, x, y), want)
    out = _launch_axpy(A, cuda.to_device(x), cuda.to_device(y))
    np.testing.assert_array_equal(out.copy_to_host(), want)


def test_torch_zero_copy_and_torch_out():
    torch = _lib("torch")
    x, y = _inputs(np.random.default_rng(1))
    tx, ty = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
    op = operand(tx, "x", dtypes=FLOAT_DTYPES, ndim=2)
    assert op.kind == "cai" and op.source is tx and _ptr(op.dev) == tx.data_ptr()
    out = _launch_axpy(A, tx, ty)
    assert isinstance(out, torch.Tensor) and out.device == tx.device and out.dtype == torch.float32
    np.testing.assert_array_equal(out.cpu().numpy(), np.float32(A) * x + y)
    dev = output((4,), np.float32, like=op)
    assert result(dev, like=op).data_ptr() == _ptr(dev), "result is a view, not a copy"


def test_torch_errors_name_the_argument():
    torch = _lib("torch")
    t = torch.ones((8, 6), device="cuda")
    with pytest.raises(ValueError, match="^x: expected a C-contiguous array"):
        operand(t.T, "x", dtypes=FLOAT_DTYPES)
    assert operand(t.T, "x", dtypes=FLOAT_DTYPES, order="F").dev.shape == (6, 8)
    with pytest.raises(TypeError, match="^x: dtype must be one of .* got float64"):
        operand(t.double(), "x", dtypes=(np.float32,))


def test_torch_tensors_the_interface_refuses_are_refused_by_name():
    """The direct read of a tensor refuses what PyTorch's own interface refuses, naming the argument."""
    torch = _lib("torch")
    with pytest.raises(TypeError, match="^x: a PyTorch tensor on cpu has no GPU memory"):
        operand(torch.ones(4), "x", dtypes=None)
    with pytest.raises(TypeError, match=r"^w: the tensor requires grad; pass t.detach\(\)"):
        operand(torch.ones(4, device="cuda", requires_grad=True), "w", dtypes=None)
    p = torch.nn.Parameter(torch.ones(4, device="cuda"), requires_grad=False)   # a Tensor subclass
    assert _ptr(operand(p, "p", dtypes=(np.float32,)).dev) == p.data_ptr()
    bf16 = torch.ones(4, device="cuda", dtype=torch.bfloat16)      # bfloat16: its bits, as uint16
    got = operand(bf16, "b", dtypes=None).dev
    assert got.dtype == np.uint16 and _ptr(got) == bf16.data_ptr()
    with pytest.raises(TypeError, match="^c: torch.float8_e4m3fn has no NumPy dtype"):
        operand(torch.zeros(4, device="cuda", dtype=torch.float8_e4m3fn), "c", dtypes=None)


def test_cupy_side_stream_work_is_finished_before_use():
    """CuPy exports its current stream; operand() synchronises a non-default one."""
    cupy = _lib("cupy")
    with cupy.cuda.Stream(non_blocking=True):
        big = cupy.full((4096, 4096), 2.0, dtype=cupy.float32)
        for _ in range(20):
            big = big * 1.0 + 0.0  # keep the side stream busy
        cx = cupy.ascontiguousarray(big[:37, :53])
        cy = cupy.full((37, 53), 1.0, dtype=cupy.float32)
        op_x = operand(cx, "x", dtypes=FLOAT_DTYPES)
        op_y = operand(cy, "y", dtypes=FLOAT_DTYPES)
    out = output((37, 53), np.float32, like=op_x)
    _axpy[(5, 7), (8, 8)](A, op_x.dev, op_y.dev, out)
    np.testing.assert_array_equal(cupy.asnumpy(result(out, like=op_x)), np.full((37, 53), 5.0, np.float32))


@pytest.mark.parametrize("lib", ["torch", "cupy"])
def test_fast_views_equal_numbas_own(lib):
    """operand()'s cached-layout view equals cuda.as_cuda_array on C, F and strided layouts."""
    mod = _lib(lib)
    rng = np.random.default_rng(3)
    host = rng.standard_normal((6, 10)).astype(np.float32)
    base = mod.asarray(host, device="cuda") if lib == "torch" else mod.asarray(host)
    for view in (base, base.T, base[:, ::2], base[1:, 1:], base[::3]):
        for _ in range(2):  # the second call uses the cached layout
            op = operand(view, "v", dtypes=None, order=None)
            ref = cuda.as_cuda_array(view)
            assert (op.dev.shape, op.dev.strides, op.dev.dtype) == (ref.shape, ref.strides, ref.dtype)
            assert _ptr(op.dev) == _ptr(ref)
            assert op.dev._numba_type_ == ref._numba_type_, "the cached Numba type is the layout's own"
            np.testing.assert_array_equal(op.dev.copy_to_host(), ref.copy_to_host())


@pytest.mark.parametrize("lib", ["torch", "cupy"])
@pytest.mark.parametrize("order", ["C", "F"])
def test_output_memory_comes_back_as_the_librarys_own_array(lib, order):
    mod = _lib(lib)
    src = mod.ones((3, 5), device="cuda") if lib == "torch" else mod.ones((3, 5), dtype=mod.float32)
    op = operand(src, "x", dtypes=None)
    out = output((4, 6), np.float32, like=op, order=order)
    assert out.is_c_contiguous() if order == "C" else out.is_f_contiguous()
    out.copy_to_device(np.asarray(np.arange(24, dtype=np.float32).reshape(4, 6), order=order))
    back = result(out, like=op)
    assert type(back) is type(src) and _ptr(out) == (back.data_ptr() if lib == "torch" else back.data.ptr)
    host = back.cpu().numpy() if lib == "torch" else mod.asnumpy(back)
    np.testing.assert_array_equal(host, np.arange(24, dtype=np.float32).reshape(4, 6))
    square = output((4, 4), np.float32, like=op)
    square.copy_to_device(np.arange(16, dtype=np.float32).reshape(4, 4))
    t = result(square.T, like=op)  # same memory and shape as its owner, other strides: a new view
    host = t.cpu().numpy() if lib == "torch" else mod.asnumpy(t)
    np.testing.assert_array_equal(host, np.arange(16, dtype=np.float32).reshape(4, 4).T)


def test_cupy_zero_copy_and_cupy_out():
    cupy = _lib("cupy")
    x, y = _inputs(np.random.default_rng(2))
    cx, cy = cupy.asarray(x), cupy.asarray(y)
    op = operand(cx, "x", dtypes=FLOAT_DTYPES, shape=(37, None))
    assert op.kind == "cai" and _ptr(op.dev) == cx.data.ptr
    out = _launch_axpy(A, cx, cy)
    assert isinstance(out, cupy.ndarray)
    np.testing.assert_array_equal(cupy.asnumpy(out), np.float32(A) * x + y)
    with pytest.raises(ValueError, match="^x: expected a C-contiguous"):
        operand(cx[:, ::2], "x", dtypes=FLOAT_DTYPES)


@pytest.mark.parametrize("order", ["C", "F"])
def test_outputs_reuse_a_collected_outputs_memory(order):
    """A NumPy or Numba ``like``: ``output`` takes its memory from the context's pool; a block comes back only when
    the output and every view of it are gone, and is then handed to the next output of the same size."""
    like = operand(cuda.to_device(np.ones((64, 32), np.float32)), "x", dtypes=None)
    first = output((64, 32), np.float32, like=like, order=order)
    assert first.is_c_contiguous() if order == "C" else first.is_f_contiguous()
    ptr, view = _ptr(first), first[8:, 4:]
    del first
    gc.collect()
    second = output((64, 32), np.float32, like=like, order=order)
    assert _ptr(second) != ptr                           # the view still holds the first block
    del view
    gc.collect()
    third = output((64, 32), np.float32, like=like, order=order)
    assert _ptr(third) == ptr
    host = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    third.copy_to_device(np.asarray(host, order=order))
    np.testing.assert_array_equal(third.copy_to_host(), host)
    assert arrays.pool().kept_bytes <= arrays.POOL_KEEP_BYTES

