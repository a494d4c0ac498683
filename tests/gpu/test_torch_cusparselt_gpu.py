"""SparseLinear's cuSPARSELt route on a real GPU: a 2:4 weight's products without autograd past
``CUSPARSELT_MIN_N`` rows, float16 and bfloat16, equal the dense product of the pruned weight (row counts that are
and are not multiples of 8); the compressed weight is made once, counted in ``weight_bytes``, made again after
an in-place change of the values; a CUDA graph captures the route after a first call, and refuses it before; a
weight that is not 2:4 keeps its routes."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="sparsekit.torch needs the optional torch extra")

from sparsekit.sparse24_training import available  # noqa: E402
from sparsekit.torch import ops  # noqa: E402
from test_torch_gpu import _check, _layer  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not available()[0], reason=available()[1])]
DTYPES = [torch.float16, torch.bfloat16]


def _compressed(layer):
    built = ops._WEIGHTS[layer.weight_id]._cusparselt
    return None if built is None else built[1]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [33, 64, 100, 512])
def test_two_four_layer_equals_pruned_dense_on_cusparselt(dtype, n):
    layer = _layer(dtype, pattern="2:4", out_features=512, in_features=1024, seed=n)
    with torch.no_grad():
        for seed in (1, 2):                                   # the first call compresses and times, the second not
            torch.manual_seed(seed)
            x = torch.randn(n, 1024, device="cuda", dtype=dtype)
            _check(layer(x), layer, x)
    compressed = _compressed(layer)
    assert compressed is not None
    assert {key[0] for key in ops._WEIGHTS[layer.weight_id].plans} == {"dense"}     # densified once, to compress
    rows_bytes = sum(t.numel() * t.element_size() for t in (layer.values, layer.indices))
    assert layer.weight_bytes() == rows_bytes + compressed.numel() * compressed.element_size()
    assert compressed.numel() * compressed.element_size() <= 9 / 16 * 512 * 1024 * 2 * 1.01


def test_compressed_weight_follows_in_place_changes():
    layer = _layer(torch.bfloat16, pattern="2:4", seed=5)
    x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        layer(x)
        first = _compressed(layer)
        layer.values.mul_(-2)
        _check(layer(x), layer, x)
    assert _compressed(layer) is not first


def test_cuda_graph_captures_the_route_after_a_first_call_and_refuses_it_before():
    layer = _layer(torch.float16, pattern="2:4", seed=6)
    static_x = torch.randn(128, 1024, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        with pytest.raises(RuntimeError, match="inside a CUDA graph capture"):
            with torch.cuda.graph(torch.cuda.CUDAGraph()):
                layer(static_x)
        layer(static_x)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = layer(static_x)
        fresh = torch.randn(128, 1024, device="cuda", dtype=torch.float16)
        static_x.copy_(fresh)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_y, layer(fresh))


def test_a_weight_that_is_not_two_four_keeps_its_routes():
    layer = _layer(torch.bfloat16, sparsity=0.5, seed=7)                  # uniform 50 %: not 2:4
    with torch.no_grad():
        x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
        _check(layer(x), layer, x)
    assert not ops.is_two_four(layer.indices, 1024) and _compressed(layer) is None
