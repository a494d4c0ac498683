"""SparseLinear's cuSPARSELt route off the GPU: the rule that sends a 2:4 weight's wide products without autograd to
cuSPARSELt (sparsekit/torch/ops.py) and the 2:4 check on padded ELL rows it rests on. The route on a GPU:
tests/gpu/test_torch_cusparselt_gpu.py."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="sparsekit.torch needs the optional torch extra")

from sparsekit.torch import SparseLinear  # noqa: E402
from sparsekit.torch import ops  # noqa: E402


def test_route_sends_wide_two_four_inference_to_cusparselt():
    k, m, width = 4096, 14336, 2048
    for n in (33, 64, 512, 2048):
        assert ops.route(n, width, k, True, out_features=m, two_four=True) == "cusparselt"
        assert ops.route(n, width, k, False, out_features=m, two_four=True) == "dense"     # autograd: as before
        assert ops.route(n, width, k, True, out_features=m) == ops.route(n, width, k, True, out_features=m,
                                                                         two_four=False)
    for n in (1, 8, 16, 32):                                  # narrower: the row and TiledBitmap kernels
        assert ops.route(n, width, k, True, out_features=m, two_four=True) == ops.route(n, width, k, True,
                                                                                        out_features=m)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_two_four_layers_pass_the_check_and_others_do_not(dtype):
    torch.manual_seed(0)
    dense = torch.nn.Linear(64, 16, bias=False).to(dtype)
    two_four = SparseLinear.from_dense(dense, pattern="2:4")
    assert ops.is_two_four(two_four.indices, 64)
    sparser = SparseLinear.from_dense(dense, sparsity=0.9)           # 2:4 holds for at most 2 of every 4
    assert ops.is_two_four(sparser.indices, 64) == bool(
        ((sparser.to_dense().weight != 0).reshape(16, 16, 4).sum(-1) <= 2).all())
    w = torch.zeros(16, 64, dtype=dtype)
    w[:, :4] = 1.0                                                    # 4 of the first group in every row
    dense.weight.data.copy_(w + 1e-3 * torch.arange(64, dtype=dtype))
    assert not ops.is_two_four(SparseLinear.from_dense(dense, sparsity=0.5).indices, 64)


def test_two_four_check_reads_columns_past_32767_and_ignores_padding():
    k = 40000
    columns = torch.tensor([[0, 1, 32768, 32770, k, k, k, k], [4, 6, 39996, 39999, k, k, k, k]])
    layer = SparseLinear.from_rows(torch.ones(2, 8), columns, k)
    assert ops.is_two_four(layer.indices, k)
    layer = SparseLinear.from_rows(torch.ones(2, 8), torch.tensor([[32768, 32769, 32770, k, k, k, k, k]] * 2), k)
    assert not ops.is_two_four(layer.indices, k)
    assert not ops.is_two_four(layer.indices, k + 2)                 # K not a multiple of 4: no 2:4 groups
