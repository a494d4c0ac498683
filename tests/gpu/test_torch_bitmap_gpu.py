"""SparseLinear's TiledBitmap and compact-row routes on a real GPU: without autograd, float16 and bfloat16, every
width of ``x`` across the routes' boundaries (compact rows, row kernel, bitmap kernel, densify + GEMM) equals the
dense product of the pruned weight; the bitmap and compact kernels' launches are recorded and replayed
bit-identically on torch's current stream (also for an ``x`` off a 16-byte boundary), with no launcher, bitmap
build or row conversion on the host after the first call; both copies are made again after an in-place change of
the values (the bitmap after an optimizer step too); a capture before the first call is refused by name (capture
and replay: test_torch_gpu.py)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="sparsekit.torch needs the optional torch extra")

from sparsekit.torch import SparseLinear, copies, ops  # noqa: E402
from test_torch_gpu import _check, _layer  # noqa: E402

pytestmark = pytest.mark.gpu
DTYPES = [torch.float16, torch.bfloat16]


def _plan_kinds(layer) -> set:
    """The routes a layer has recorded plans for."""
    return {key[0] for key in ops._WEIGHTS[layer.weight_id].plans}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n, sparsity, route", [(1, 0.6, "compact"), (1, 0.9, "rows"), (7, 0.6, "rows"),
                                                (8, 0.8, "rows"), (8, 0.6, "bitmap"),
                                                (9, 0.8, "bitmap"), (16, 0.95, "rows"), (16, 0.9, "bitmap"),
                                                (17, 0.9, "bitmap"), (32, 0.7, "bitmap"), (33, 0.7, "dense"),
                                                (65, 0.8, "dense")])
@pytest.mark.parametrize("shape", [(512, 1024), (500, 1000)], ids=["512x1024", "500x1000"])
def test_layer_equals_pruned_dense_across_the_routes(dtype, n, sparsity, route, shape, monkeypatch):
    """500x1000 cuts a 16-row block and a 32-column group (x staged with zero columns)."""
    layer = _layer(dtype, sparsity=sparsity, out_features=shape[0], in_features=shape[1], seed=n)
    assert ops.route(n, layer.values.shape[1], shape[1], True, out_features=shape[0]) == route
    if route == "dense":      # cuBLAS under PyTorch's settings, whose default rounds bfloat16 split-K partial sums
        monkeypatch.setattr(torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction", False)  # to bf16
    with torch.no_grad():
        for seed in (1, 2):                              # the first call records, the second replays
            torch.manual_seed(seed)
            x = torch.randn(n, shape[1], device="cuda", dtype=dtype)
            _check(layer(x), layer, x)
    assert _plan_kinds(layer) == {route}


@pytest.mark.parametrize("n", [48, 64])
def test_a_large_weight_takes_the_bitmap_past_n_32(n):
    """From ``BITMAP_WIDE_MIN_WEIGHTS`` entries (here 4096 x 8192) N = 33-64 runs the bitmap kernel, correct."""
    layer = _layer(torch.bfloat16, sparsity=0.8, out_features=4096, in_features=8192, seed=n)
    assert ops.route(n, layer.values.shape[1], 8192, True, out_features=4096) == "bitmap"
    with torch.no_grad():
        x = torch.randn(n, 8192, device="cuda", dtype=torch.bfloat16)
        _check(layer(x), layer, x)
    assert _plan_kinds(layer) == {"bitmap"}


def _bitmap_route(layer, x):
    """The bitmap route's own launch on the layer's TiledBitmap, and what a replay must not call."""
    from sparsekit.gpu import spmm_bitmap

    dev = ops._WEIGHTS[layer.weight_id].bitmap(layer.values, layer.indices, 1024)
    return spmm_bitmap.spmm_bitmap_linear(dev, x), [(spmm_bitmap, "spmm_bitmap_linear"), (copies, "tiled_bitmap")]


def _compact_route(layer, x):
    """The compact route's own launch on the layer's compact rows, and what a replay must not call."""
    from sparsekit.gpu import spmm_ell_compact

    rows = ops._WEIGHTS[layer.weight_id].compact(layer.values, layer.indices, 1024)
    return (spmm_ell_compact.spmm_ell_compact_linear(*rows, 1024, x),
            [(spmm_ell_compact, "spmm_ell_compact_linear"), (copies, "compact_rows")])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("route, n, sparsity, direct", [("bitmap", 8, 0.5, _bitmap_route),
                                                        ("bitmap", 32, 0.5, _bitmap_route),
                                                        ("compact", 1, 0.7, _compact_route)])
def test_replay_is_recorded_and_bit_identical_on_a_side_stream(dtype, route, n, sparsity, direct, monkeypatch):
    """After an aligned and a misaligned first call (their own plans), replays on a side stream equal the route's
    own launch on Numba's stream, with no launch through Numba and no copy of the weight made again."""
    layer = _layer(dtype, sparsity=sparsity, seed=3)
    prep = ops._WEIGHTS[layer.weight_id]
    with torch.no_grad():
        layer(torch.randn(n, 1024, device="cuda", dtype=dtype))
        buffer = torch.randn(n * 1024 + 1, device="cuda", dtype=dtype)
        layer(buffer[1:].view(n, 1024))                  # 2 bytes off a 16-byte boundary: its own plan
    plans = {key: plan for key, plan in prep.plans.items() if key[0] == route}
    assert len(plans) == 2 and all(plan is not None for plan in plans.values())
    x = torch.randn(n, 1024, device="cuda", dtype=dtype)
    want, refused = direct(layer, x)                     # an ordinary launch on Numba's stream
    shifted = torch.empty(n * 1024 + 1, device="cuda", dtype=dtype)[1:].view(n, 1024)
    shifted.copy_(x)

    def refuse(*args, **kwargs):
        raise AssertionError("a replay launched through Numba or made the weight's copy again")

    for module, name in refused:
        monkeypatch.setattr(module, name, refuse)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        got = [torch.ops.sparsekit.sparse_linear(t, layer.values, layer.indices, 1024, layer.weight_id, True)
               for t in (x, shifted)]
    torch.cuda.current_stream().wait_stream(side)
    assert all(torch.equal(y, want) for y in got)


@pytest.mark.parametrize("copies, n, route", [(("bitmap",), 1, "rows"), (("compact",), 16, "rows"),
                                              (("compact",), 32, "dense"), ((), 1, "rows")])
def test_a_copy_left_out_is_never_made(copies, n, route):
    layer = _layer(torch.bfloat16, sparsity=0.7, seed=n)
    layer.inference_copies = copies
    with torch.no_grad():
        x = torch.randn(n, 1024, device="cuda", dtype=torch.bfloat16)
        _check(layer(x), layer, x)
    prep = ops._WEIGHTS[layer.weight_id]
    assert _plan_kinds(layer) == {route} and prep._compact is None and prep._bitmap is None


def test_compact_rows_are_made_again_when_the_values_change():
    layer = _layer(torch.bfloat16, sparsity=0.6, seed=6)
    x = torch.randn(1, 1024, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        layer.bias.zero_()
        before = layer(x)
        layer.values.mul_(2)                             # counted by torch (values._version)
        assert torch.equal(layer(x), 2 * before)         # a power of two: every sum and rounding scales exactly
    assert {key[0] for key in ops._WEIGHTS[layer.weight_id].plans} == {"compact"}


def test_bitmap_is_built_again_when_the_values_change():
    torch.manual_seed(7)
    dense = torch.nn.Linear(1024, 512, bias=False, device="cuda", dtype=torch.bfloat16)
    layer = SparseLinear.from_dense(dense, sparsity=0.7)
    x = torch.randn(16, 1024, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        before = layer(x)
        layer.values.mul_(2)                             # counted by torch (values._version)
        assert torch.equal(layer(x), 2 * before)         # a power of two: every sum and rounding scales exactly
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    layer(x).float().square().mean().backward()          # autograd: the row kernel, no bitmap
    optimizer.step()
    with torch.no_grad():
        y = layer(x)
    w = layer.to_dense().weight.float()
    exact = x.double() @ w.double().T
    bound = 2 * 1024 * 2.0 ** -24 * (x.double().abs() @ w.double().abs().T) + 2 * 2.0 ** -8 * exact.abs()
    assert bool(((y.double() - exact).abs() <= bound).all())


def test_capture_before_the_first_call_is_refused():
    layer = _layer(torch.float16, sparsity=0.7, seed=9)
    x = torch.randn(32, 1024, device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    with torch.no_grad(), pytest.raises(RuntimeError, match="inside a CUDA graph capture; call the layer once"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            layer(x)
    with torch.no_grad():                                # the layer works after
        _check(layer(x), layer, x)


@pytest.mark.parametrize("sparsity", [0.5, 0.9])
def test_copies_made_on_the_device_equal_the_references(sparsity):
    """``sparsekit.torch.copies`` on CUDA tensors: the same compact rows as ``from_ell_rows`` and the same
    TiledBitmap as ``from_coords`` of the layer's rows on the host (several gather groups a row)."""
    import numpy as np

    from sparsekit.checks import BFLOAT16
    from sparsekit.formats import TiledBitmap
    from sparsekit.reference.spmm_ell_compact import from_ell_rows

    layer = _layer(torch.bfloat16, sparsity=sparsity, out_features=1000, in_features=4096, seed=11)
    values = layer.values.detach()
    bits, cols = values.view(torch.int16).cpu().numpy().view(BFLOAT16), layer.indices.cpu().numpy()
    want = from_ell_rows(bits, cols, 4096)
    got = copies.compact_rows(values, layer.indices, 4096)
    assert all(t.is_cuda for t in got)
    assert np.array_equal(got[0].view(torch.int16).cpu().numpy().view(np.uint16), want[0].view(np.uint16))
    assert np.array_equal(got[1].cpu().numpy(), want[1])
    assert np.array_equal(got[2].cpu().numpy().view(np.uint16), want[2])
    columns = cols.view(np.uint16)
    rows, at = np.nonzero(columns < 4096)
    bitmap = copies.tiled_bitmap(values, layer.indices, 4096)
    reference = TiledBitmap.from_coords(rows, columns[rows, at], bits[rows, at], (1000, 4096))
    assert np.array_equal(bitmap.stream, reference.stream) and np.array_equal(bitmap.offsets, reference.offsets)
