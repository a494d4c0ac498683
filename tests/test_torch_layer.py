"""sparsekit.torch on the CPU path: SparseLinear equals the dense layer with the pruned weight, the
custom op's fake kernel and autograd, gradcheck, sparsify_, state_dict, torch.compile(fullgraph=True)."""
from __future__ import annotations

import io

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="sparsekit.torch needs the optional torch extra")

from sparsekit import prune  # noqa: E402
from sparsekit.torch import SparseLinear, sparsify_  # noqa: E402
from sparsekit.torch.ops import dense_weight  # noqa: E402

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _pruned(linear: torch.nn.Linear, sparsity: float) -> torch.Tensor:
    mask = prune.uniform(linear.weight.detach().float().numpy(), sparsity)
    return linear.weight.detach() * torch.from_numpy(np.asarray(mask, dtype=bool))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sparsity", [0.5, 0.7, 0.9])
def test_layer_equals_dense_with_pruned_weight(dtype, sparsity):
    torch.manual_seed(0)
    dense = torch.nn.Linear(40, 24).to(dtype)
    layer = SparseLinear.from_dense(dense, sparsity=sparsity)
    assert layer.values.dtype == dtype and layer.indices.dtype == torch.int16
    want_w = _pruned(dense, sparsity)
    assert torch.equal(layer.to_dense().weight, want_w)
    x = torch.randn(2, 5, 40).to(dtype)
    got = layer(x)
    want = torch.nn.functional.linear(x.float(), want_w.float(), dense.bias.float())
    tol = {torch.float32: 1e-5, torch.float16: 2e-2, torch.bfloat16: 8e-2}[dtype]
    assert got.shape == (2, 5, 24) and got.dtype == dtype
    torch.testing.assert_close(got.float(), want, rtol=tol, atol=tol)


def test_two_four_pattern_keeps_two_of_every_four():
    dense = torch.nn.Linear(16, 8)
    layer = SparseLinear.from_dense(dense, pattern="2:4")
    w = layer.to_dense().weight
    assert ((w != 0).view(8, 4, 4).sum(-1) <= 2).all()
    assert layer.values.shape == (8, 8)


def test_gradcheck_float64():
    torch.manual_seed(1)
    layer = SparseLinear.from_dense(torch.nn.Linear(12, 7).double(), sparsity=0.6)
    x = torch.randn(5, 12, dtype=torch.float64, requires_grad=True)
    op = torch.ops.sparsekit.uspmm_linear
    assert torch.autograd.gradcheck(lambda a, v: op(a, v, layer.indices, layer.weight_id),
                                    (x, layer.values.detach().clone().requires_grad_()))


def test_gradients_equal_dense_autograd_at_kept_positions():
    torch.manual_seed(2)
    layer = SparseLinear.from_dense(torch.nn.Linear(20, 10).double(), sparsity=0.7)
    dense = layer.to_dense()
    x = torch.randn(6, 20, dtype=torch.float64, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    layer(x).square().sum().backward()
    dense(x2).square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(layer.values.grad, dense.weight.grad.gather(1, layer.indices.long()))
    torch.testing.assert_close(layer.bias.grad, dense.bias.grad)


def test_fake_kernel_gives_shape_and_dtype():
    layer = SparseLinear.from_dense(torch.nn.Linear(8, 3), sparsity=0.5)
    torch.library.opcheck(torch.ops.sparsekit.uspmm_linear.default,
                          (torch.randn(4, 8), layer.values.detach(), layer.indices, layer.weight_id))
    with torch._subclasses.fake_tensor.FakeTensorMode():
        y = torch.ops.sparsekit.uspmm_linear(torch.empty(4, 8), torch.empty(3, 4), torch.empty(3, 4, dtype=torch.int16), 0)
    assert y.shape == (4, 3)


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down, self.head = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16), torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.down(torch.relu(self.up(x))))


def test_sparsify_replaces_filtered_linears_in_place():
    model = _Block()
    sparsify_(model, sparsity=0.75, filter_fn=lambda mod, name: name != "head")
    assert isinstance(model.up, SparseLinear) and isinstance(model.down, SparseLinear)
    assert type(model.head) is torch.nn.Linear
    assert model.up.values.shape == (32, 4)
    with pytest.raises(ValueError, match="bare nn.Linear"):
        sparsify_(torch.nn.Linear(4, 4))
    with pytest.raises(ValueError, match="pattern"):
        sparsify_(_Block(), pattern="csr-ish")


def test_state_dict_round_trip():
    torch.manual_seed(3)
    model = sparsify_(_Block(), sparsity=0.5)
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    fresh = sparsify_(_Block(), sparsity=0.5)
    buf.seek(0)
    fresh.load_state_dict(torch.load(buf))
    x = torch.randn(3, 16)
    assert torch.equal(model(x), fresh(x))
    assert set(model.state_dict()) >= {"up.values", "up.indices", "up.bias"}


def test_compile_fullgraph_has_no_graph_break():
    torch.manual_seed(4)
    model = sparsify_(_Block(), sparsity=0.5)
    x = torch.randn(5, 16)
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), model(x))


def test_fine_tuning_step_keeps_the_pattern():
    torch.manual_seed(5)
    model = sparsify_(_Block(), sparsity=0.75)
    before = model.up.to_dense().weight != 0
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(8, 16)).square().mean().backward()
    opt.step()
    after = model.up.to_dense().weight != 0
    assert not (after & ~before).any()


def test_dense_weight_scatters_kept_values():
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    indices = torch.tensor([[0, 2], [1, 3]], dtype=torch.int16)
    assert torch.equal(dense_weight(values, indices, 4), torch.tensor([[1.0, 0, 2, 0], [0, 3, 0, 4]]))


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="dtype"):
        SparseLinear(8, 4, 2, dtype=torch.int32)
    with pytest.raises(ValueError, match="kept"):
        SparseLinear(8, 4, 9)
    with pytest.raises(ValueError, match="pattern"):
        SparseLinear.from_dense(torch.nn.Linear(8, 4), pattern="4:8")


def test_a_copy_gets_its_own_prepared_weight():
    import copy

    layer = SparseLinear.from_dense(torch.nn.Linear(8, 4), sparsity=0.5)
    twin = copy.deepcopy(layer)
    assert twin.weight_id != layer.weight_id
    x = torch.randn(3, 8)
    assert torch.equal(twin(x), layer(x))


def test_package_docstring_example_runs():
    import doctest

    import sparsekit.torch

    result = doctest.testmod(sparsekit.torch)
    assert result.attempted > 0 and result.failed == 0
