"""sparsekit.torch on the CPU path: SparseLinear equals the dense layer with the pruned weight (uniform,
2:4, unstructured, rows of its own), the custom op's fake kernel and autograd (padding gets no gradient),
gradcheck, sparsify_, state_dict (also of another width), torch.compile(fullgraph=True), the reference of
the padded ELL rows the GPU kernel reads."""
from __future__ import annotations

import io

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="sparsekit.torch needs the optional torch extra")

from sparsekit import prune  # noqa: E402
from sparsekit.torch import SparseLinear, sparsify_  # noqa: E402
from sparsekit.torch.ops import dense_weight, is_two_four  # noqa: E402

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
    kept = int(prune.uniform(np.ones((1, 40)), sparsity).sum())
    assert layer.values.shape == (24, -(-kept // 8) * 8)                   # padded to a multiple of 8
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
    mask = torch.from_numpy(np.asarray(prune.n_m(dense.weight.detach().numpy(), 2, 4), dtype=bool))
    assert torch.equal(w, dense.weight.detach() * mask)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_two_four_pruning_with_torch_is_the_references(dtype):
    """The 2 largest |w| of every 4 columns, ties to the lower column, as sparsekit.prune.n_m chooses them (weights
    rounded to a few values, so that ties are common; zeros kept where a group has fewer than 2 nonzeros)."""
    torch.manual_seed(7)
    dense = torch.nn.Linear(64, 48, bias=False)
    with torch.no_grad():
        dense.weight.copy_(torch.randint(-2, 3, (48, 64)).float() / 2)
    dense = dense.to(dtype)
    layer = SparseLinear.from_dense(dense, pattern="2:4")
    mask = prune.n_m(dense.weight.detach().double().numpy(), 2, 4)
    assert torch.equal(layer.to_dense().weight, dense.weight.detach() * torch.from_numpy(mask).to(dtype))
    assert is_two_four(layer.indices, 64) and layer.values.shape == (48, 32)
    with pytest.raises(ValueError, match="must be divisible by 4, got 30"):
        SparseLinear.from_dense(torch.nn.Linear(30, 8), pattern="2:4")


def test_unstructured_pattern_keeps_the_layers_largest():
    torch.manual_seed(6)
    dense = torch.nn.Linear(30, 12)
    layer = SparseLinear.from_dense(dense, pattern="unstructured", sparsity=0.8)
    w, full = layer.to_dense().weight, dense.weight.detach()
    kept = w != 0
    assert int(kept.sum()) == round(360 * 0.2)
    assert full.abs()[kept].min() >= full.abs()[~kept].max()           # every kept |w| above every dropped
    assert torch.equal(w[kept], full[kept])
    x = torch.randn(3, 30)
    torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, w, dense.bias))


def test_from_rows_takes_any_pattern_and_checks_columns():
    values = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]])
    columns = torch.tensor([[0, 3, 5], [2, 5, 5]])                        # 5 = in_features: unused
    layer = SparseLinear.from_rows(values, columns, 5, bias=None)
    assert torch.equal(layer.to_dense().weight, torch.tensor([[1.0, 0, 0, 2, 0], [0, 0, 3, 0, 0]]))
    with pytest.raises(ValueError, match="columns: must be in 0..4"):
        SparseLinear.from_rows(values, columns + 1, 5)
    with pytest.raises(ValueError, match="shape"):
        SparseLinear.from_rows(values, columns[:, :2], 5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_rows_are_stored_bank_balanced(dtype):
    """float16 / bfloat16 rows are stored in the N = 1 kernel's gather order, built with torch on the layer's
    device: exactly sparsekit.reference.spmm_ell_rows.bank_balanced of the rows in column order."""
    from sparsekit.reference.spmm_ell_rows import bank_balanced

    torch.manual_seed(3)
    k, kept = 700, 500
    cols = torch.sort(torch.rand(6, k).argsort(dim=1)[:, :kept]).values                 # ascending, 500 of 700
    values = torch.randn(6, kept, dtype=dtype)
    layer = SparseLinear.from_rows(values, cols, k)
    width = layer.values.shape[1]                                                       # 504: 4 of padding
    ordered_values = torch.cat([values, torch.zeros(6, width - kept, dtype=dtype)], dim=1)
    ordered_cols = torch.cat([cols, torch.full((6, width - kept), k)], dim=1).to(torch.int16)
    want_values, want_cols = bank_balanced(ordered_values.view(torch.int16).numpy(), ordered_cols.numpy(), k)
    assert np.array_equal(layer.indices.numpy(), want_cols)
    assert np.array_equal(layer.values.detach().view(torch.int16).numpy(), want_values)
    assert not np.array_equal(want_cols, ordered_cols.numpy())                            # reordered
    assert torch.equal(layer.to_dense().weight, SparseLinear.from_rows(values.float(), cols, k).to_dense().weight
                       .to(dtype))                                                      # the same weight


def test_gradcheck_float64():
    torch.manual_seed(1)
    layer = SparseLinear.from_dense(torch.nn.Linear(12, 7).double(), sparsity=0.6)
    x = torch.randn(5, 12, dtype=torch.float64, requires_grad=True)
    op = torch.ops.sparsekit.sparse_linear
    assert torch.autograd.gradcheck(lambda a, v: op(a, v, layer.indices, 12, layer.weight_id),
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
    stored = layer.indices.long() < 20                                      # the rest is padding
    want = torch.nn.functional.pad(dense.weight.grad, (0, 1)).gather(1, layer.indices.long())
    torch.testing.assert_close(layer.values.grad, want)
    assert stored.sum() == 10 * 6 and (layer.values.grad[~stored] == 0).all()
    torch.testing.assert_close(layer.bias.grad, dense.bias.grad)


def test_fake_kernel_gives_shape_and_dtype():
    layer = SparseLinear.from_dense(torch.nn.Linear(8, 3), sparsity=0.5)
    torch.library.opcheck(torch.ops.sparsekit.sparse_linear.default,
                          (torch.randn(4, 8), layer.values.detach(), layer.indices, 8, layer.weight_id))
    with torch._subclasses.fake_tensor.FakeTensorMode():
        y = torch.ops.sparsekit.sparse_linear(torch.empty(4, 8), torch.empty(3, 8), torch.empty(3, 8, dtype=torch.int16),
                                              8, 0)
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
    assert model.up.values.shape == (32, 8)                                # 4 kept, padded to 8
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
    other = sparsify_(_Block(), sparsity=0.9)                               # another width loads too
    other.load_state_dict(model.state_dict())
    assert torch.equal(other(x), model(x))


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


def test_dense_weight_equals_the_padded_rows_reference():
    from sparsekit.reference.spmm_ell_rows import densify_ell_rows, ell_rows_from_dense

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((9, 40)) * (rng.random((9, 40)) < 0.3)).astype(np.float16)
    values, indices = ell_rows_from_dense(w)
    got = dense_weight(torch.from_numpy(values), torch.from_numpy(indices.view(np.int16)), 40)
    assert np.array_equal(got.numpy(), densify_ell_rows(values, indices, 40))
    assert np.array_equal(got.numpy(), w)
    wide = np.zeros((2, 40000), np.float16)                                # columns past 32767: int16 read unsigned
    wide[0, 39999], wide[1, 5] = 1, 2
    values, indices = ell_rows_from_dense(wide)
    assert np.array_equal(dense_weight(torch.from_numpy(values), torch.from_numpy(indices.view(np.int16)),
                                       40000).numpy(), wide)


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="dtype"):
        SparseLinear(8, 4, 2, dtype=torch.int32)
    with pytest.raises(ValueError, match="width"):
        SparseLinear(8, 4, 9)
    with pytest.raises(ValueError, match="in_features"):
        SparseLinear(70000, 4, 8)
    with pytest.raises(ValueError, match="sparsity"):
        SparseLinear.from_dense(torch.nn.Linear(8, 4), sparsity=1.0)
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
