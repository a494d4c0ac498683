"""SparseLinear's compact-row route off the GPU: ``x`` of one row without autograd takes it below 87.5 % sparsity
(the rule of sparsekit/torch/ops.py); the conversion with torch ops (sparsekit/torch/copies.py) equals the
reference's bit for bit; the compact ELL rows made from the layer's padded rows hold its weight
(float16 and bfloat16, any pattern, columns past 255 of a chunk's base), are kept between calls, made again with
their plans dropped when the values change as torch counts it, and counted in ``weight_bytes``; on the simulator
(or a GPU) the compact kernel on them equals the float32 product. The layer's CUDA path through them:
tests/gpu/test_torch_bitmap_gpu.py."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import cuda
from numba.cuda import config as cuda_config

torch = pytest.importorskip("torch", reason="sparsekit.torch needs the optional torch extra")

from sparsekit.checks import BFLOAT16  # noqa: E402
from sparsekit.reference import spmm_ell_compact  # noqa: E402
from sparsekit.torch import SparseLinear, copies, ops  # noqa: E402
from spmm_close import assert_half_close  # noqa: E402
from strategies import sparse_halves  # noqa: E402
from test_spmm_ell_compact import _shuffled_rows  # noqa: E402

needs_device = pytest.mark.skipif(not cuda_config.ENABLE_CUDASIM and not cuda.is_available(),
                                  reason="runs the compact kernel: the simulator (NUMBA_ENABLE_CUDASIM=1) or a GPU")
NUMPY_DTYPE = {torch.float16: np.float16, torch.bfloat16: BFLOAT16}


def _numpy(rows):
    """Compact rows held as torch tensors (CPU) as NumPy ``(values, offsets, bases)``."""
    values, offsets, bases = rows
    return (values.view(torch.int16).numpy().view(NUMPY_DTYPE[values.dtype]), offsets.numpy(),
            bases.numpy().view(np.uint16))


def _layer(dtype, pattern="uniform", sparsity=0.7, shape=(37, 600), seed=0) -> SparseLinear:
    torch.manual_seed(seed)
    return SparseLinear.from_dense(torch.nn.Linear(shape[1], shape[0]).to(dtype), pattern=pattern, sparsity=sparsity)


def _tensors(values, indices):
    """Padded ELL rows (NumPy) as the layer holds them: torch values of their dtype, int16 columns."""
    dtype = torch.float16 if values.dtype == np.float16 else torch.bfloat16
    return torch.from_numpy(values.view(np.int16)).view(dtype), torch.from_numpy(indices.view(np.int16))


def _assert_equal(got, want):
    """torch compact rows equal NumPy ones bit for bit (values as their bits, bases as uint16)."""
    values, offsets, bases = got
    assert values.dtype in (torch.float16, torch.bfloat16) and offsets.dtype == torch.uint8
    assert bases.dtype == torch.int16
    np.testing.assert_array_equal(values.view(torch.int16).numpy().view(np.uint16), want[0].view(np.uint16))
    np.testing.assert_array_equal(offsets.numpy(), want[1])
    np.testing.assert_array_equal(bases.numpy().view(np.uint16), want[2])


@settings(max_examples=40, deadline=None)
@given(w=sparse_halves(max_rows=12, max_cols=700), extra=st.sampled_from([0, 8, 24]),
       seed=st.integers(0, 2**32 - 1))
def test_torch_conversion_equals_the_reference(w, extra, seed):
    """:func:`sparsekit.torch.copies.compact_rows` against ``from_ell_rows``: rows in any order with extra
    padding, chunks cut where columns jump past 255 (the reference's greedy packing), stored zeros, each chunk's
    slots in the same bank order."""
    values, indices = _shuffled_rows(w, extra, seed, signed=True)
    _assert_equal(copies.compact_rows(*_tensors(values, indices), w.shape[1]),
                  spmm_ell_compact.from_ell_rows(values, indices, w.shape[1]))


@pytest.mark.parametrize("sparsity", [0.5, 0.8, 0.95])
def test_torch_conversion_of_many_gather_groups_equals_the_reference(sparsity):
    """Rows of more than 32 chunks (several gather groups a row), a layer's uniform rows at 4096 columns."""
    layer = _layer(torch.bfloat16, sparsity=sparsity, shape=(24, 4096), seed=2)
    bits = layer.values.detach().view(torch.int16).numpy().view(BFLOAT16)
    _assert_equal(copies.compact_rows(layer.values.detach(), layer.indices, 4096),
                  spmm_ell_compact.from_ell_rows(bits, layer.indices.numpy(), 4096))


@pytest.mark.parametrize("shape", [(0, 16), (3, 40000), (5, 65535)], ids=["empty", "past-32767", "widest"])
def test_torch_conversion_of_edge_shapes_equals_the_reference(shape):
    """No rows; columns read as unsigned 16-bit (past 32767, up to K = 65535); a row of padding only."""
    m, k = shape
    rng = np.random.default_rng(k)
    w = np.zeros(shape, np.float16)
    for r in range(1, m):                                # row 0 keeps nothing
        w[r, rng.choice(k, 40, replace=False)] = rng.standard_normal(40)
    values, indices = _shuffled_rows(w, 8, k, signed=True)
    _assert_equal(copies.compact_rows(*_tensors(values, indices), k),
                  spmm_ell_compact.from_ell_rows(values, indices, k))


def test_torch_conversion_refuses_a_repeated_column():
    values, indices = _tensors(np.ones((2, 8), np.float16), np.array([[1, 5, 5] + [9] * 5, [0] + [9] * 7], np.int16))
    with pytest.raises(ValueError, match="row 0 stores column 5 twice"):
        copies.compact_rows(values, indices, 9)
    with pytest.raises(ValueError, match=r"columns must be below 8 \(or 8, padding\)"):
        copies.compact_rows(values, indices, 8)
    with pytest.raises(ValueError, match="compact ELL rows hold float16 or bfloat16"):
        copies.compact_rows(values.float(), indices, 9)


def test_route_takes_compact_rows_at_one_row_below_87_5_percent():
    k, big = 4096, dict(out_features=14336)
    for width in (2048, 1232, 824, 520):                # 50, 70, 80, 87.3 % of 4096 columns, padded to 8
        assert ops.route(1, width, k, True, **big) == "compact"
        assert ops.route(1, width, k, False, **big) == "rows"          # autograd: the values may change
        assert ops.route(2, width, k, True, **big) == "rows"
    assert ops.route(1, 512, k, True, **big) == "rows"                 # 87.5 %: the edge
    assert ops.route(1, 416, k, True, **big) == "rows"                 # 90 %: the copy's bytes are not worth it
    assert ops.route(1, 2048, k, True, two_four=True, **big) == "compact"
    assert ops.route(1, 32768, 65535, True, out_features=65536) == "rows"     # 2**31 slots: past 32-bit indices


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("pattern", ["uniform", "2:4", "unstructured"])
def test_layers_compact_rows_are_its_weight(dtype, pattern):
    layer = _layer(dtype, pattern)
    rows = _numpy(ops._WEIGHTS[layer.weight_id].compact(layer.values, layer.indices, 600))
    spmm_ell_compact.check_compact(*rows, 600)
    want = layer.to_dense().weight.detach().float().numpy()
    assert np.array_equal(spmm_ell_compact.to_dense(*rows, 600).astype(np.float32), want)


def test_compact_rows_are_kept_made_again_after_a_change_and_counted():
    layer = _layer(torch.bfloat16, sparsity=0.6)
    prep = ops._WEIGHTS[layer.weight_id]
    rows_bytes = layer.weight_bytes()
    first = prep.compact(layer.values, layer.indices, 600)
    assert prep.compact(layer.values, layer.indices, 600) is first
    assert ops.compact_bytes(layer.weight_id) == sum(t.numel() * t.element_size() for t in first)
    assert layer.weight_bytes() == rows_bytes + ops.compact_bytes(layer.weight_id)
    prep.plans[("compact", 1)] = prep.plans[("rows", 1)] = None       # plans of the old copy go with it
    with torch.no_grad():
        layer.values.mul_(2)                             # in place: torch counts it (values._version)
    doubled = prep.compact(layer.values, layer.indices, 600)
    assert doubled is not first and ("compact", 1) not in prep.plans and ("rows", 1) in prep.plans
    want = layer.to_dense().weight.detach().float().numpy()
    assert np.array_equal(spmm_ell_compact.to_dense(*_numpy(doubled), 600).astype(np.float32), want)


@needs_device
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_compact_kernel_on_the_layers_rows_equals_the_pruned_product(dtype):
    from sparsekit.gpu.spmm_ell_compact import spmm_ell_compact_linear

    layer = _layer(dtype, "unstructured", sparsity=0.6, shape=(40, 300), seed=3)
    rows = _numpy(ops._WEIGHTS[layer.weight_id].compact(layer.values, layer.indices, 300))
    w = layer.to_dense().weight.detach().float().numpy()            # the pruned weight, exact in float32
    x = np.random.default_rng(3).standard_normal((1, 300)).astype(rows[0].dtype)
    got = spmm_ell_compact_linear(*rows, 300, x)
    want = (x.astype(np.float32) @ w.T).astype(rows[0].dtype)         # float32 sums, rounded once
    assert_half_close(got.T, want.T, w, x.T)


def test_inference_copies_names_the_copies_inference_may_keep():
    """``inference_copies`` takes True, False or names of ``COPIES``: a route whose copy is left out runs as with
    autograd at that width (compact rows -> the row kernel, TiledBitmap -> row kernel or densify + GEMM,
    cuSPARSELt -> the rest); a copy of the layer keeps the choice; unknown names are refused."""
    import copy

    from sparsekit.torch import sparsify_

    k, big, at_80 = 4096, dict(out_features=14336), 824
    assert ops.route(1, at_80, k, True, copies=("bitmap",), **big) == "rows"
    assert ops.route(16, at_80, k, True, copies=("compact",), **big) == "rows"
    assert ops.route(32, at_80, k, True, copies=("compact",), **big) == "dense"
    assert ops.route(64, 2048, k, True, two_four=True, copies=("compact", "bitmap"), **big) == "bitmap"
    assert ops.route(128, 2048, k, True, two_four=True, copies=("compact", "bitmap"), **big) == "dense"
    assert ops.route(128, 2048, k, True, two_four=True, copies=("cusparselt",), **big) == "cusparselt"
    model = sparsify_(torch.nn.Sequential(torch.nn.Linear(16, 8)), sparsity=0.5, inference_copies=["compact"])
    layer = model[0]
    assert layer.inference_copies == {"compact"} and ops._WEIGHTS[layer.weight_id].copies == {"compact"}
    twin = copy.deepcopy(layer)
    assert twin.weight_id != layer.weight_id and ops._WEIGHTS[twin.weight_id].copies == {"compact"}
    layer.inference_copies = False
    assert layer.inference_copies == frozenset() and twin.inference_copies == {"compact"}
    layer.inference_copies = True
    assert layer.inference_copies == set(ops.COPIES)
    for bad, match in (("compact", "True, False or a collection"), (None, "True, False or a collection"),
                       ((c for c in ["compact"]), "True, False or a collection"),
                       (["compact", "dense"], r"unknown copies \['dense'\]")):
        with pytest.raises(ValueError, match=match):
            layer.inference_copies = bad
    layer.inference_copies = np.bool_(False)
    assert layer.inference_copies == frozenset()
    with pytest.warns(DeprecationWarning, match="use_bitmap is now inference_copies"):
        layer.use_bitmap = True
    assert layer.inference_copies == set(ops.COPIES)


def test_a_pickled_layer_keeps_its_copies_and_one_from_before_the_choice_loads():
    import pickle

    layer = SparseLinear.from_dense(torch.nn.Linear(16, 8), sparsity=0.5)
    layer.inference_copies = ("bitmap",)
    assert pickle.loads(pickle.dumps(layer)).inference_copies == {"bitmap"}
    state = layer.__getstate__() if hasattr(layer, "__getstate__") else dict(layer.__dict__)
    older = {key: v for key, v in dict(state).items() if key != "_inference_copies"}
    older["use_bitmap"] = False                          # a layer pickled when the flag was use_bitmap
    twin = SparseLinear.__new__(SparseLinear)
    twin.__setstate__(older)
    assert twin.inference_copies == frozenset() and torch.equal(twin.values, layer.values)
