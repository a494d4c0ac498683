"""SparseLinear's TiledBitmap route off the GPU: which kernel each width of ``x`` runs (the rule of
sparsekit/torch/ops.py), the TiledBitmap built from the layer's padded ELL rows with torch ops
(sparsekit/torch/copies.py) equal to its weight and to the format's own construction bit for bit (float16 and
bfloat16, any pattern, explicit zeros, columns past 32767), kept between calls and built again when the values
or indices change as torch counts it, and, on the simulator (or a GPU), the bitmap kernel on it equal to the
reference. The layer's CUDA path through it: tests/gpu/test_torch_bitmap_gpu.py."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda
from numba.cuda import config as cuda_config

torch = pytest.importorskip("torch", reason="sparsekit.torch needs the optional torch extra")

from sparsekit.checks import BFLOAT16  # noqa: E402
from sparsekit.reference.spmm_ell_rows import ell_rows_from_dense  # noqa: E402
from sparsekit.torch import SparseLinear  # noqa: E402
from sparsekit.torch import copies, ops  # noqa: E402
from spmm_close import assert_half_close  # noqa: E402
from strategies import sparse_halves  # noqa: E402
from test_spmm_ell_compact import _shuffled_rows  # noqa: E402

needs_device = pytest.mark.skipif(not cuda_config.ENABLE_CUDASIM and not cuda.is_available(),
                                  reason="copies the TiledBitmap to a device: the simulator "
                                         "(NUMBA_ENABLE_CUDASIM=1) or a GPU")
TORCH_DTYPE = {np.dtype(np.float16): torch.float16, BFLOAT16: torch.bfloat16}


def _rows(w: np.ndarray):
    """Padded ELL rows of ``w`` as the layer stores them: ``(values, indices)`` torch tensors (int16 columns)."""
    values, indices = ell_rows_from_dense(w)
    return (torch.from_numpy(values.view(np.int16)).view(TORCH_DTYPE[w.dtype]),
            torch.from_numpy(indices.view(np.int16)))


def _dense(layer: SparseLinear) -> np.ndarray:
    """The layer's weight as float32 NumPy."""
    return layer.to_dense().weight.detach().float().numpy()


def test_route_follows_the_measured_crossovers():
    k, big = 4096, dict(out_features=14336)
    at_80, at_70 = 824, 1232                            # uniform 80 % and 70 % of 4096 columns, rows padded to 8
    assert ops.route(1, at_70, k, True, **big) == "compact" and ops.route(7, at_70, k, True, **big) == "rows"
    assert ops.route(8, at_80, k, True, **big) == "rows" and ops.route(8, 1024, k, True, **big) == "rows"  # 75 %
    assert ops.route(8, at_70, k, True, **big) == "bitmap" and ops.route(8, 1032, k, True, **big) == "bitmap"
    for n in (9, 16, 17, 32, 33, 64):
        assert ops.route(n, at_80, k, True, **big) == "bitmap"
    assert ops.route(65, at_80, k, True, **big) == "dense"
    at_90, at_95 = 416, 208                             # uniform 90 % and 95 % of 4096 columns, padded to 8
    for n, want in ((8, "rows"), (9, "bitmap"), (16, "bitmap"), (17, "bitmap"), (64, "bitmap"), (65, "dense")):
        assert ops.route(n, at_90, k, True, **big) == want
    assert ops.route(16, 256, k, True, **big) == "rows"          # 93.75 %: the edge
    for n, want in ((8, "rows"), (9, "rows"), (16, "rows"), (17, "bitmap"), (65, "dense")):
        assert ops.route(n, at_95, k, True, **big) == want     # N = 9-16 from 93.75 %: the row kernel
    for n, want in ((16, "bitmap"), (32, "bitmap"), (33, "dense"), (64, "dense")):
        assert ops.route(n, at_80, k, True, out_features=4096) == want     # 4096^2: densify + GEMM past N = 32
    for n, want in ((1, "rows"), (8, "rows"), (16, "rows"), (17, "dense"), (64, "dense")):
        assert ops.route(n, at_70, k, False, **big) == want    # autograd recording: the values may change every call


def test_bitmap_route_stays_within_the_kernel():
    from sparsekit.gpu.spmm_bitmap import MAX_N

    assert ops.BITMAP_MAX_N <= MAX_N and ops.BITMAP_MIN_N <= ops.KERNEL_MAX_N


@given(w=sparse_halves(max_rows=40, max_cols=100))
def test_tiled_bitmap_of_the_rows_is_the_weight(w):
    values, indices = _rows(w)
    bitmap = copies.tiled_bitmap(values, indices, w.shape[1])
    bitmap.validate(full=True)
    assert bitmap.shape == w.shape and bitmap.dtype == w.dtype
    assert np.array_equal(bitmap.to_dense().astype(np.float32), w.astype(np.float32))


@given(w=sparse_halves(max_rows=40, max_cols=100), extra=st.sampled_from([0, 8]), seed=st.integers(0, 2**32 - 1))
def test_tiled_bitmap_equals_the_formats_own_construction(w, extra, seed):
    """Built with torch ops, the same stream and offsets as ``TiledBitmap.from_coords`` of the stored entries,
    rows in any order with extra padding."""
    from sparsekit.formats import TiledBitmap

    values, indices = _shuffled_rows(w, extra, seed, signed=True)
    cols = indices.view(np.uint16)
    rows, at = np.nonzero(cols < w.shape[1])
    want = TiledBitmap.from_coords(rows, cols[rows, at], values[rows, at], w.shape)
    got = copies.tiled_bitmap(torch.from_numpy(values.view(np.int16)).view(TORCH_DTYPE[w.dtype]),
                              torch.from_numpy(indices), w.shape[1])
    assert np.array_equal(got.stream, want.stream) and np.array_equal(got.offsets, want.offsets)
    assert got.dtype == want.dtype and got.shape == want.shape


def test_tiled_bitmap_refuses_a_repeated_column():
    values = torch.ones((1, 8), dtype=torch.float16)
    indices = torch.tensor([[3, 3] + [40] * 6], dtype=torch.int16)
    with pytest.raises(ValueError, match="a row stores a column twice"):
        copies.tiled_bitmap(values, indices, 40)


def test_tiled_bitmap_leaves_out_padding_and_stored_zeros():
    w = np.zeros((3, 40000), np.float16)                 # columns past 32767: int16 read unsigned
    w[0, 39999], w[1, 5], w[2, 32768] = 1, 2, -3
    values, indices = _rows(w)
    values[1, 0] = 0                                     # a stored entry whose value is zero
    bitmap = copies.tiled_bitmap(values, indices, 40000)
    w[1, 5] = 0
    assert bitmap.nnz == 2 and np.array_equal(bitmap.to_dense(), w)
    with pytest.raises(ValueError, match="values: a TiledBitmap holds float16 or bfloat16"):
        copies.tiled_bitmap(values.float(), indices, 40000)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("pattern", ["uniform", "unstructured"])
def test_layer_bitmap_equals_its_weight(dtype, pattern):
    torch.manual_seed(0)
    layer = SparseLinear.from_dense(torch.nn.Linear(100, 37).to(dtype), pattern=pattern, sparsity=0.7)
    bitmap = copies.tiled_bitmap(layer.values, layer.indices, 100)
    assert np.array_equal(bitmap.to_dense().astype(np.float32), _dense(layer))


@needs_device
def test_bitmap_is_kept_and_built_again_when_the_weight_changes():
    torch.manual_seed(1)
    layer = SparseLinear.from_dense(torch.nn.Linear(64, 32).half(), sparsity=0.6)
    prep = ops._WEIGHTS[layer.weight_id]
    assert layer.weight_bytes() == layer.values.numel() * 2 + layer.indices.numel() * 2    # nothing built yet

    def bitmap():
        return prep.bitmap(layer.values, layer.indices, 64)

    first = bitmap()
    assert bitmap() is first and np.array_equal(first.host.to_dense().astype(np.float32), _dense(layer))
    assert layer.weight_bytes() == (layer.values.numel() * 2 + layer.indices.numel() * 2
                                    + first.stream.size * 4 + first.offsets.size * 4)
    prep.plans[("bitmap", 8)] = prep.plans[("rows", 8)] = None      # plans of the old bitmap go with it
    with torch.no_grad():
        layer.values.mul_(2)                             # in place: torch counts it (values._version)
    doubled = bitmap()
    assert doubled is not first and ("bitmap", 8) not in prep.plans and ("rows", 8) in prep.plans
    assert np.array_equal(doubled.host.to_dense().astype(np.float32), _dense(layer))
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.5)
    layer(torch.randn(4, 64).half()).float().square().sum().backward()
    optimizer.step()
    stepped = bitmap()
    assert stepped is not doubled and np.array_equal(stepped.host.to_dense().astype(np.float32), _dense(layer))
    other = SparseLinear.from_dense(torch.nn.Linear(64, 32).half(), sparsity=0.9)
    layer.load_state_dict(other.state_dict())            # another width: other tensors
    assert np.array_equal(bitmap().host.to_dense().astype(np.float32), _dense(other))


@needs_device
def test_bitmap_of_a_layer_made_under_inference_mode():
    """Inference tensors keep no version counter: their bitmap is built once and kept."""
    with torch.inference_mode():
        layer = SparseLinear.from_dense(torch.nn.Linear(64, 32).to(torch.bfloat16), sparsity=0.7)
        prep = ops._WEIGHTS[layer.weight_id]
        first = prep.bitmap(layer.values, layer.indices, 64)
    assert layer.values.is_inference() and prep.bitmap(layer.values, layer.indices, 64) is first
    assert np.array_equal(first.host.to_dense().astype(np.float32), _dense(layer))


@needs_device
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [8, 13])
def test_bitmap_kernel_on_the_layers_bitmap_equals_the_pruned_product(dtype, n):
    """K = 72 cuts a 32-column group (x staged with zero columns); 40 rows cut a 16-row block."""
    from sparsekit.gpu.spmm_bitmap import spmm_bitmap_linear

    torch.manual_seed(n)
    layer = SparseLinear.from_dense(torch.nn.Linear(72, 40, bias=False).to(dtype), pattern="unstructured",
                                    sparsity=0.6)
    dev = ops._WEIGHTS[layer.weight_id].bitmap(layer.values, layer.indices, 72)
    w = _dense(layer)                                    # the pruned weight, exact in float32
    x = np.random.default_rng(n).standard_normal((n, 72)).astype(dev.dtype)
    got = spmm_bitmap_linear(dev, x)
    want = (x.astype(np.float32) @ w.T).astype(dev.dtype)    # float32 sums, rounded once
    assert_half_close(got.T, want.T, w, x.T)


def test_op_takes_the_inference_flag():
    layer = SparseLinear.from_dense(torch.nn.Linear(8, 3), sparsity=0.5)
    x = torch.randn(4, 8)
    torch.library.opcheck(torch.ops.sparsekit.sparse_linear.default,
                          (x, layer.values.detach(), layer.indices, 8, layer.weight_id, True))
    op = torch.ops.sparsekit.sparse_linear
    assert torch.equal(op(x, layer.values, layer.indices, 8, layer.weight_id, True),
                       op(x, layer.values, layer.indices, 8, layer.weight_id))


@pytest.mark.parametrize("op, given, told", [
    ("sparse_linear", (), False), ("sparse_linear", (False,), False), ("sparse_linear", (True,), True),
    ("sparse_linear_inference", (), True), ("sparse_linear_inference", (True,), True),
    ("sparse_linear_inference", (False,), False)])
def test_each_op_tells_forward_its_flag(op, given, told, monkeypatch):
    """The flag reaches :func:`ops.forward` whether given or left at the schema's default (the dispatcher drops an
    argument equal to its default before it calls the Python kernel, whose own default then applies)."""
    layer = SparseLinear.from_dense(torch.nn.Linear(8, 3), sparsity=0.5)
    seen = []
    real = ops.forward
    monkeypatch.setattr(ops, "forward", lambda *args: seen.append(args[5]) or real(*args))
    with torch.no_grad():
        getattr(torch.ops.sparsekit, op)(torch.randn(4, 8), layer.values, layer.indices, 8, layer.weight_id, *given)
    assert seen == [told]


def test_inference_op_equals_the_differentiable_one_and_has_no_autograd_kernel():
    """The op without autograd gives the same product (its fake kernel and schema checked by opcheck, which
    skips the autograd checks an op without autograd kernel cannot pass) and leaves no graph behind."""
    layer = SparseLinear.from_dense(torch.nn.Linear(8, 3), sparsity=0.5)
    x = torch.randn(4, 8)
    inference = torch.ops.sparsekit.sparse_linear_inference
    torch.library.opcheck(inference.default, (x, layer.values.detach(), layer.indices, 8, layer.weight_id, True),
                          test_utils=("test_schema", "test_faketensor"))
    with torch.no_grad():
        y = inference(x, layer.values, layer.indices, 8, layer.weight_id)
    assert y.grad_fn is None and torch.equal(y, torch.ops.sparsekit.sparse_linear(
        x, layer.values, layer.indices, 8, layer.weight_id).detach())
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("sparsekit::sparse_linear_inference", "Autograd")


@pytest.mark.parametrize("grad", [True, False])
def test_compiled_layer_calls_the_op_of_its_grad_mode(grad):
    """torch.compile traces the grad mode into the op called: with autograd the differentiable op, told it is
    not inference (inside it autograd's forward always runs under no_grad, so the op cannot tell); without,
    the inference op, told it may read the TiledBitmap."""
    layer = SparseLinear.from_dense(torch.nn.Linear(16, 8), sparsity=0.5)
    with torch.set_grad_enabled(grad):
        explained = torch._dynamo.explain(layer)(torch.randn(3, 16))
    ops_called = [node for graph in explained.graphs for node in graph.graph.nodes
                  if node.target in (torch.ops.sparsekit.sparse_linear.default,
                                     torch.ops.sparsekit.sparse_linear_inference.default)]
    want = torch.ops.sparsekit.sparse_linear.default if grad else torch.ops.sparsekit.sparse_linear_inference.default
    assert explained.graph_break_count == 0 and len(ops_called) == 1
    assert ops_called[0].target is want and ops_called[0].args[5] is (not grad)


@pytest.mark.parametrize("inference_copies", [True, False])
def test_inference_copies_false_keeps_the_rows_only(inference_copies, monkeypatch):
    """``inference_copies=False`` (set by ``sparsify_`` on every layer it makes): the op is never told it may read a
    copy of the weight, under ``no_grad`` too; True tells it so without autograd only. (That no copy is made on
    a GPU: tests/gpu/test_torch_bitmap_gpu.py.)"""
    import sparsekit.torch.nn as snn
    from sparsekit.torch import sparsify_

    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    sparsify_(model, sparsity=0.5, inference_copies=inference_copies)
    layers = [mod for mod in model if isinstance(mod, SparseLinear)]
    assert len(layers) == 2 and all(bool(layer.inference_copies) is inference_copies for layer in layers)
    flags = []
    for name in ("sparse_linear", "sparse_linear_inference"):
        real = getattr(snn, name)
        monkeypatch.setattr(snn, name, lambda *args, real=real: flags.append(args[5]) or real(*args))
    x = torch.randn(3, 16)
    with torch.no_grad():
        model(x)
    model(x)
    assert flags == [inference_copies, inference_copies, False, False]
    assert all(ops._WEIGHTS[layer.weight_id]._bitmap is None for layer in layers)


def test_the_layer_benchmark_counts_the_bytes_its_route_reads():
    """``experiments/bench_sparse_linear.py``'s bandwidth column: the ELL rows' bytes where the row kernel or densify
    + GEMM runs, the TiledBitmap's or compact rows' where their kernels do (once built)."""
    from experiments.bench_sparse_linear import _route_bytes
    layer = SparseLinear.from_dense(torch.nn.Linear(64, 32).half(), sparsity=0.5)
    rows = sum(t.numel() * t.element_size() for t in (layer.values, layer.indices))
    assert _route_bytes(layer, 2) == rows and _route_bytes(layer, 65) == rows
    assert _route_bytes(layer, 1) == ops.compact_bytes(layer.weight_id) == 0      # the compact route, not made yet
    ops._WEIGHTS[layer.weight_id].compact(layer.values, layer.indices, 64)
    assert _route_bytes(layer, 1) == rows * 13 // 16
    assert _route_bytes(layer, 16) == ops.bitmap_bytes(layer.weight_id) == 0       # the bitmap route, not built yet
