"""sparsekit.torch.tiled on the CPU path: TiledSparseLinear equals the reference product of its TiledCSL,
to_dense, state_dict restores the sparse weight exactly, sparsify_tiled_, the custom op under
torch.compile(fullgraph=True), gradcheck in float64, and a fine-tuning step that keeps the pattern."""
from __future__ import annotations

import io

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="sparsekit.torch.tiled needs the optional torch extra")

from reference.spmm_tiled import spmm_tiled_linear as reference_linear  # noqa: E402
from sparsekit import prune  # noqa: E402
from sparsekit.formats import TiledCSL  # noqa: E402
from sparsekit.torch.tiled import TiledSparseLinear, sparsify_tiled_, spmm_tiled_linear  # noqa: E402
from sparsekit.torch.tiled import _to_numpy  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16)


#: Machine epsilon of each dtype: the two products may round their float32 sums to neighbouring values.
EPS = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}


def _assert_close_to_reference(got, want, x, a):
    """Both sum in float32 (in their own orders) and round once: within a float32 sum's error and one ulp."""
    xs, w = x.double().numpy(), a.to_dense().astype(np.float64)
    want = want.astype(np.float64)
    bound = (w.shape[1] + 1) * 2.0 ** -24 * (np.abs(xs) @ np.abs(w).T) + EPS[x.dtype] * np.abs(want)
    err = np.abs(got.double().numpy() - want)
    assert got.dtype == x.dtype and bool((err <= bound).all()), float((err - bound).max())


def _linear(dtype, in_features=40, out_features=24, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Linear(in_features, out_features).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sparsity", [0.5, 0.8])
def test_layer_equals_reference_of_its_tiled_weight(dtype, sparsity):
    dense = _linear(dtype)
    layer = TiledSparseLinear.from_linear(dense, sparsity)
    a = layer.to_tiled()
    host = _to_numpy(dense.weight)
    mask = np.asarray(prune.uniform(host.astype(np.float32), sparsity), dtype=bool)
    assert np.array_equal(a.mask(), mask) and np.array_equal(a.to_dense(), np.where(mask, host, 0).astype(host.dtype))
    assert torch.equal(layer.to_dense().weight, torch.where(torch.from_numpy(mask), dense.weight, 0).to(dtype))
    layer.bias = None
    x = torch.randn(5, 40).to(dtype)
    with torch.no_grad():
        got = layer(x)
    _assert_close_to_reference(got, reference_linear(a, _to_numpy(x)), x, a)


def test_any_pattern_from_coords_and_leading_dims():
    rng = np.random.default_rng(1)
    rows, cols = np.nonzero(rng.random((16, 33)) < 0.3)
    values = rng.standard_normal(rows.size).astype(np.float16)
    a = TiledCSL.from_coords(rows, cols, values, (16, 33), tile=(16, 16))
    layer = TiledSparseLinear.from_tiled(a)
    x = torch.randn(2, 3, 33, dtype=torch.float16)
    with torch.no_grad():
        got = layer(x)
    assert got.shape == (2, 3, 16)
    x2 = x.reshape(6, 33)
    _assert_close_to_reference(got.reshape(6, 16), reference_linear(a, x2.numpy()), x2, a)
    assert np.array_equal(layer.to_tiled().words, a.words)


@pytest.mark.parametrize("dtype", DTYPES)
def test_state_dict_restores_sparse_weight_exactly(dtype):
    layer = TiledSparseLinear.from_linear(_linear(dtype), 0.7)
    with torch.no_grad():
        layer.values.mul_(2)                       # saved words must carry the trained values
    buf = io.BytesIO()
    torch.save(layer.state_dict(), buf)
    other = TiledSparseLinear.from_linear(_linear(dtype, seed=3), 0.5)     # another pattern and nnz
    other.load_state_dict(torch.load(io.BytesIO(buf.getvalue())))
    for name in ("words", "offsets", "layout", "values", "bias"):
        assert torch.equal(getattr(other, name), getattr(layer, name)), name
    assert np.array_equal(other.to_tiled().words, layer.to_tiled().words)
    x = torch.randn(3, 40).to(dtype)
    with torch.no_grad():
        assert torch.equal(other(x), layer(x))


def test_sparsify_replaces_filtered_linears():
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 16)).half()
    sparsify_tiled_(model, sparsity=0.75, filter_fn=lambda mod, name: name == "0")
    assert isinstance(model[0], TiledSparseLinear) and type(model[2]) is torch.nn.Linear
    assert model[0].values.numel() == 48 * 8
    with pytest.raises(ValueError, match="bare nn.Linear"):
        sparsify_tiled_(torch.nn.Linear(4, 4).half(), sparsity=0.5)
    with pytest.raises(ValueError, match="dtype"):
        TiledSparseLinear.from_linear(torch.nn.Linear(4, 4), 0.5)
    with pytest.raises(ValueError, match="pattern"):
        TiledSparseLinear.from_linear(torch.nn.Linear(4, 4).half(), 0.5, pattern="2:4")
    with pytest.raises(TypeError, match="TiledCSL"):
        TiledSparseLinear.from_tiled(np.ones((4, 4), dtype=np.float16))
    with pytest.raises(ValueError, match="dtype must be the weight's"):
        model[0](torch.randn(2, 32, dtype=torch.bfloat16))


def test_module_docstring_runs():
    import doctest

    import sparsekit.torch.tiled

    assert doctest.testmod(sparsekit.torch.tiled).failed == 0


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_fullgraph_equals_eager(backend):
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.SiLU(), torch.nn.Linear(64, 32)).bfloat16()
    sparsify_tiled_(model, sparsity=0.8)
    x = torch.randn(4, 32, dtype=torch.bfloat16)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    with torch.no_grad():
        assert torch.equal(compiled(x), model(x))
    compiled(x).float().sum().backward()              # autograd through the traced op
    assert model[0].values.grad is not None


def test_fake_kernel_and_opcheck():
    layer = TiledSparseLinear.from_linear(_linear(torch.float16), 0.5)
    x = torch.randn(3, 40, dtype=torch.float16, requires_grad=True)
    args = (x, layer.values, layer.words, layer.offsets, layer.rows, layer.cols, layer._layout(), layer.weight_id)
    torch.library.opcheck(spmm_tiled_linear, args)


def test_gradcheck_float64():
    layer = TiledSparseLinear.from_linear(_linear(torch.float16, 12, 7), 0.6)
    values = layer.values.detach().double().requires_grad_()
    x = torch.randn(4, 12, dtype=torch.float64, requires_grad=True)

    def product(x, values):
        return spmm_tiled_linear(x, values, layer.words, layer.offsets, layer.rows, layer.cols, layer._layout(),
                                 layer.weight_id)

    assert torch.autograd.gradcheck(product, (x, values))


@pytest.mark.parametrize("dtype", DTYPES)
def test_gradients_match_dense_autograd_at_kept_positions(dtype):
    layer = TiledSparseLinear.from_linear(_linear(dtype), 0.7)
    w = layer.to_dense().weight.detach().double().requires_grad_()
    x = torch.randn(6, 40, dtype=torch.float64)
    x_sparse = x.to(dtype).requires_grad_()
    layer(x_sparse).float().square().sum().backward()
    x_dense = x.to(dtype).double().requires_grad_()
    (x_dense @ w.T + layer.bias.double()).square().sum().backward()
    kept = w.grad[layer.rows, layer.cols]
    torch.testing.assert_close(layer.values.grad.double(), kept, rtol=0.05, atol=0.05 * float(kept.abs().max()))
    torch.testing.assert_close(x_sparse.grad.double(), x_dense.grad, rtol=0.05,
                               atol=0.05 * float(x_dense.grad.abs().max()))


def test_optimizer_step_keeps_pruned_positions_zero():
    model = torch.nn.Sequential(torch.nn.Linear(40, 24), torch.nn.Tanh(), torch.nn.Linear(24, 8)).bfloat16()
    sparsify_tiled_(model, sparsity=0.8)
    before = [m.to_dense().weight.clone() for m in (model[0], model[2])]
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    model(torch.randn(16, 40, dtype=torch.bfloat16)).float().square().mean().backward()
    opt.step()
    for layer, old in zip((model[0], model[2]), before):
        new = layer.to_dense().weight
        assert bool((new[old == 0] == 0).all()) and not torch.equal(new, old)
        assert np.array_equal(layer.to_tiled().mask(), (old != 0).numpy())     # the pattern is unchanged


@pytest.mark.simulator("the refusal without a GPU; on a GPU, tests/gpu/test_torch_layers_gpu.py runs the benchmark")
def test_bench_dispatch_tiled_refuses_without_gpu(capsys):
    from sparsekit.cli import main

    assert main(["bench", "dispatch-tiled", "--calls", "5"]) == 1
    assert "needs a CUDA GPU" in capsys.readouterr().out


def test_bench_dispatch_table_lists_each_record():
    from sparsekit.commands.dispatch import table

    records = [dict(dtype="float16", n=1, product="TiledSparseLinear", device_us=10.0, wall_us=20.5, overhead_us=10.5)]
    lines = table(records).splitlines()
    assert lines[0].startswith("4096x4096") and "10.50" in lines[-1] and "TiledSparseLinear" in lines[-1]
