"""sparsekit.arrays on a real GPU: CuPy and PyTorch inputs without copies, and their kind back."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
from numba import cuda

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


def _inputs(rng, shape=(37, 53)):
    return rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)


def test_numpy_and_numba_on_the_gpu():
    x, y = _inputs(np.random.default_rng(0))
    want = np.float32(3.0) * x + y
    np.testing.assert_array_equal(_launch_axpy(3.0, x, y), want)
    out = _launch_axpy(3.0, cuda.to_device(x), cuda.to_device(y))
    np.testing.assert_array_equal(out.copy_to_host(), want)


def test_torch_zero_copy_and_torch_out():
    torch = _lib("torch")
    x, y = _inputs(np.random.default_rng(1))
    tx, ty = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
    op = operand(tx, "x", dtypes=FLOAT_DTYPES, ndim=2)
    assert op.kind == "cai" and op.source is tx and _ptr(op.dev) == tx.data_ptr()
    out = _launch_axpy(3.0, tx, ty)
    assert isinstance(out, torch.Tensor) and out.device == tx.device and out.dtype == torch.float32
    np.testing.assert_array_equal(out.cpu().numpy(), np.float32(3.0) * x + y)
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


def test_torch_side_stream_work_is_finished_before_use():
    torch = _lib("torch")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        big = torch.full((4096, 4096), 2.0, device="cuda")
        for _ in range(20):
            big = big * 1.0 + 0.0  # keep the side stream busy
        ty = torch.full((37, 53), 1.0, device="cuda")
        tx = big[:37, :53].contiguous()
        op_x = operand(tx, "x", dtypes=FLOAT_DTYPES)  # exports stream s: operand synchronises it
        op_y = operand(ty, "y", dtypes=FLOAT_DTYPES)
    out = output((37, 53), np.float32, like=op_x)
    _axpy[(5, 7), (8, 8)](3.0, op_x.dev, op_y.dev, out)
    np.testing.assert_array_equal(out.copy_to_host(), np.full((37, 53), 7.0, np.float32))


def test_cupy_zero_copy_and_cupy_out():
    cupy = _lib("cupy")
    x, y = _inputs(np.random.default_rng(2))
    cx, cy = cupy.asarray(x), cupy.asarray(y)
    op = operand(cx, "x", dtypes=FLOAT_DTYPES, shape=(37, None))
    assert op.kind == "cai" and _ptr(op.dev) == cx.data.ptr
    out = _launch_axpy(3.0, cx, cy)
    assert isinstance(out, cupy.ndarray)
    np.testing.assert_array_equal(cupy.asnumpy(out), np.float32(3.0) * x + y)
    with pytest.raises(ValueError, match="^x: expected a C-contiguous"):
        operand(cx[:, ::2], "x", dtypes=FLOAT_DTYPES)
