"""sparsekit.torch on a real GPU: SparseLinear equals the dense layer with the pruned weight (float16,
bfloat16, float32; decode and larger N), the recorded launches replay bit-identically on torch's current
stream, inside a CUDA graph and under torch.compile(fullgraph=True); gradients equal dense autograd."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="sparsekit.torch needs the optional torch extra")

from sparsekit.torch import SparseLinear, sparsify_  # noqa: E402
from sparsekit.torch.ops import _WEIGHTS  # noqa: E402

pytestmark = pytest.mark.gpu
EPS = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8, torch.float32: 2.0 ** -24}


def _layer(dtype, sparsity=0.8, out_features=512, in_features=1024, seed=0):
    torch.manual_seed(seed)
    dense = torch.nn.Linear(in_features, out_features, device="cuda").to(dtype)
    return SparseLinear.from_dense(dense, sparsity=sparsity)


def _check(got, layer, x):
    """Within float32 accumulation of the exact product, rounded once to the layer's dtype."""
    w = layer.to_dense().weight.double()
    exact = x.double() @ w.T + layer.bias.double()
    bound = (2 * w.shape[1] * 2.0 ** -24 * (x.double().abs() @ w.abs().T)
             + 2 * EPS[x.dtype] * exact.abs() + EPS[x.dtype] * layer.bias.double().abs())
    err = (got.double() - exact).abs()
    assert got.dtype == x.dtype and bool((err <= bound).all()), float((err - bound).max())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n", [1, 8, 64])
def test_layer_equals_pruned_dense(dtype, n):
    layer = _layer(dtype)
    for seed in (1, 2):                                   # the first call records, the second replays
        torch.manual_seed(seed)
        x = torch.randn(n, 1024, device="cuda", dtype=dtype)
        _check(layer(x), layer, x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_replay_is_recorded_and_bit_identical_on_a_side_stream(dtype):
    from gpu.uspmm import uspmm

    layer = _layer(dtype, seed=3)
    x = torch.randn(8, 1024, device="cuda", dtype=dtype)
    layer(x)
    prepared = _WEIGHTS[layer.weight_id]
    assert prepared._plans[(8, dtype, x.device)] is not None
    x2 = torch.randn(8, 1024, device="cuda", dtype=dtype)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = torch.ops.sparsekit.uspmm_linear(x2, layer.values, layer.indices, layer.weight_id)
    torch.cuda.current_stream().wait_stream(side)
    want = uspmm(prepared.device_ell(layer.values, layer.indices), x2.T, config="auto").T
    assert torch.equal(y, want)


def test_cuda_graph_capture_and_replay():
    layer = _layer(torch.float16, seed=4)
    static_x = torch.randn(1, 1024, device="cuda", dtype=torch.float16)
    layer(static_x)                                        # record outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = layer(static_x)
    fresh = torch.randn(1, 1024, device="cuda", dtype=torch.float16)
    static_x.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_y, layer(fresh))


def test_compile_fullgraph_matches_eager():
    model = torch.nn.Sequential(torch.nn.Linear(1024, 512), torch.nn.SiLU(), torch.nn.Linear(512, 256))
    model = sparsify_(model.to("cuda", torch.bfloat16), sparsity=0.7)
    x = torch.randn(4, 1024, device="cuda", dtype=torch.bfloat16)
    compiled = torch.compile(model, fullgraph=True)
    torch.testing.assert_close(compiled(x), model(x), rtol=0, atol=0)


def test_gradients_equal_dense_autograd():
    layer = _layer(torch.float32, sparsity=0.7, seed=5)
    dense = layer.to_dense()
    x = torch.randn(16, 1024, device="cuda", requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    layer(x).square().sum().backward()
    dense(x2).square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(layer.values.grad, dense.weight.grad.gather(1, layer.indices.long()),
                               rtol=1e-4, atol=1e-3)


def test_host_overhead_within_15us():
    from sparsekit.torch.bench import dispatch

    rows = dispatch([(4096, 4096, 16, torch.float16, 0.8), (4096, 4096, 1, torch.bfloat16, 0.8)], calls=100)
    ours = [r for r in rows if r["product"] == "SparseLinear"]
    assert all(r["overhead_us"] <= 15.0 for r in ours), ours


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_decoder_agrees_with_pruned_dense_and_graph_replay_equals_eager(dtype):
    import copy

    from sparsekit.torch.bench import TOLERANCE, agreement
    from sparsekit.torch.decoder import Decoder, DecoderConfig

    cfg = DecoderConfig(hidden=1024, ffn=2816, heads=8, layers=2)
    dense = Decoder(cfg, device="cuda", dtype=dtype).eval()
    sparse = sparsify_(copy.deepcopy(dense), sparsity=0.8)
    assert agreement(dense, sparse) <= TOLERANCE[dtype]
    sparse.allocate_cache(8, 32)
    x = torch.randn(8, 1, cfg.hidden, device="cuda", dtype=dtype)
    pos = torch.tensor([5], device="cuda")
    with torch.no_grad():
        eager = sparse(x, pos).clone()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static = sparse(x, pos)
        graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static, eager)
