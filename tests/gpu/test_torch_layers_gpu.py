"""sparsekit.torch.tiled on a real GPU: TiledSparseLinear equals F.linear with the masked weight (float16,
bfloat16; decode N through the row kernel, wider N through the densified weight), its recorded launches
replay bit-identically, inside a CUDA graph and under torch.compile(fullgraph=True); gradients equal dense
autograd with the masked weight."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="sparsekit.torch.tiled needs the optional torch extra")

import torch.nn.functional as F  # noqa: E402

from sparsekit.torch.tiled import _PREPARED, TiledSparseLinear, sparsify_tiled_  # noqa: E402
from tests.gpu.test_torch_gpu import _check  # noqa: E402  (within float32 accumulation, one rounding)

pytestmark = pytest.mark.gpu
DTYPES = (torch.float16, torch.bfloat16)


def _layer(dtype, sparsity=0.8, out_features=512, in_features=1024, seed=0):
    torch.manual_seed(seed)
    dense = torch.nn.Linear(in_features, out_features, device="cuda").to(dtype)
    return TiledSparseLinear.from_linear(dense, sparsity)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 8, 16, 64, 100])
def test_equals_dense_linear_with_masked_weight(dtype, n):
    layer = _layer(dtype)
    x = torch.randn(n, 1024, device="cuda", dtype=dtype)
    with torch.no_grad():
        got = layer(x)
        again = layer(x)                                  # the recorded plan's replay
        dense = F.linear(x.float(), layer.to_dense().weight.float(), layer.bias.float()).to(dtype)
    _check(got, layer, x)
    _check(dense, layer, x)
    assert torch.equal(got, again)
    if n <= 64:
        assert _PREPARED[layer.weight_id]._plans[(n, dtype, x.device)] is not None


@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_graph_capture_and_replay(dtype):
    layer = _layer(dtype)
    static_x = torch.randn(4, 1024, device="cuda", dtype=dtype)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(2):
            layer(static_x)                                  # records the plan outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        static_y = layer(static_x)
    for seed in range(3):
        torch.manual_seed(seed)
        static_x.copy_(torch.randn(4, 1024, device="cuda", dtype=dtype))
        graph.replay()
        torch.cuda.synchronize()
        with torch.no_grad():
            assert torch.equal(static_y, layer(static_x))
        _check(static_y, layer, static_x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_compile_fullgraph_equals_eager(dtype):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.SiLU(), torch.nn.Linear(512, 256))
    model = sparsify_tiled_(model.to("cuda", dtype), sparsity=0.8)
    x = torch.randn(8, 256, device="cuda", dtype=dtype)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        assert torch.equal(compiled(x), model(x))


@pytest.mark.parametrize("dtype", DTYPES)
def test_gradients_equal_dense_autograd_and_step_keeps_pattern(dtype):
    layer = _layer(dtype, out_features=256, in_features=512)
    w = layer.to_dense().weight.detach().float().requires_grad_()
    x = torch.randn(16, 512, device="cuda", dtype=dtype)
    xs, xd = x.clone().requires_grad_(), x.float().requires_grad_()
    layer(xs).float().square().sum().backward()
    F.linear(xd, w, layer.bias.float()).square().sum().backward()
    kept = w.grad[layer.rows, layer.cols]
    torch.testing.assert_close(layer.values.grad.float(), kept, rtol=0.05, atol=0.02 * float(kept.abs().max()))
    torch.testing.assert_close(xs.grad.float(), xd.grad, rtol=0.05, atol=0.02 * float(xd.grad.abs().max()))
    before = layer.to_dense().weight.clone()
    torch.optim.SGD(layer.parameters(), lr=0.1).step()
    after = layer.to_dense().weight
    assert bool((after[before == 0] == 0).all()) and not torch.equal(after, before)
    with torch.no_grad():                                  # the prepared weight follows the stepped values
        _check(layer(x), layer, x)


def test_bench_dispatch_tiled_runs():
    from sparsekit.commands.dispatch import run

    records = run(calls=20, repeat=5)
    assert len(records) == 8 and {r["product"] for r in records} == {"TiledSparseLinear", "F.linear (dense)"}
    assert all(r["device_us"] > 0 and r["wall_us"] > 0 for r in records)
