"""The Sparsity Roofline cost model: hand counts, format bytes, the paper's relations, errors."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparsekit import formats, roofline
from sparsekit.device import PEAKS
from sparsekit.roofline import counts, counts_of, model_sol, parse_kind, roof, speed_of_light

H100 = PEAKS["H100"]


# ----------------------------------------------------------------------------- hand counts

def test_dense_hand_count():
    c = counts("dense", 3, 5, 7, dtype="float32")
    assert (c.nnz, c.value_bytes, c.index_bytes, c.b_bytes, c.c_bytes) == (15, 60, 0, 140, 84)
    assert c.flops() == 2 * 15 * 7 and c.flops("paper") == 15 * 7


@pytest.mark.parametrize("kind, kwargs, nnz, index_bytes", [
    ("csr", dict(nnz=6), 6, 4 * (6 + 4 + 1)),                                   # nnz + m + 1
    ("csr", dict(nnz=6, index_dtype=np.int16), 6, 2 * 6 + 4 * (4 + 1)),       # int32 row pointer
    ("coo", dict(nnz=6), 6, 4 * 2 * 6),                                         # row + col
    ("ell", dict(density=0.25), 8, 4 * 8),                                      # K' = 2 of 8
    ("uniform", dict(density=0.25, index_dtype=np.int16), 8, 2 * 8),
    ("bsr:2", dict(density=0.5), 16, 4 * (4 + 2 + 1)),                          # 4 of 8 blocks
    ("block2", dict(density=0.5), 16, 4 * (4 + 2 + 1)),
    ("blocked-ell:2", dict(density=0.5), 16, 4 * 4),                            # 2 per block row
    ("2:4", dict(), 16, 16 * 2 // 8),                                           # hw: 2 bits each
    ("1:4", dict(), 8, 8 * 2 // 8),                                             # log2(4) bits
    ("2:8", dict(), 8, 8 * 3 // 8),                                             # log2(8) bits
    ("2:4", dict(nm_index="uint8"), 16, 16),
])
def test_sparse_hand_counts(kind, kwargs, nnz, index_bytes):
    c = counts(kind, 4, 8, 3, dtype="float16", **kwargs)
    assert c.nnz == nnz
    assert c.value_bytes == 2 * nnz
    assert c.index_bytes == index_bytes
    assert (c.b_bytes, c.c_bytes) == (2 * 8 * 3, 2 * 4 * 3)
    assert c.flops() == 2 * nnz * 3


def test_hw_metadata_is_wider_for_float32():
    # PyTorch's layout: 4 bits per kept value for float32 (1:2), 2 for 16-bit dtypes
    assert counts("2:4", 4, 8, 1, dtype="float32").index_bytes == 16 * 4 // 8
    assert counts("2:4", 4, 8, 1, dtype="float16").index_bytes == 16 * 2 // 8


def test_padding_to_blocks_and_groups():
    # 5 x 6 with 4x4 blocks: a 2 x 2 block grid; full density stores 4 blocks of 16
    assert counts("bsr:4", 5, 6, 1, density=1.0).nnz == 64
    assert counts("2:4", 1, 6, 1).nnz == 4   # 6 columns pad to 2 groups of 4


def test_depthwise_conv_reads_its_feature_map_once():
    c = counts("dense", 32, 9, 100, dtype="float32", b_elements=32 * 100)   # 3x3 depthwise, 10x10, 32 channels
    assert c.b_bytes == 4 * 32 * 100 and c.value_bytes == 4 * 32 * 9 and c.flops() == 2 * 32 * 9 * 100


def test_speed_of_light_is_max_of_two_times():
    r = speed_of_light("dense", 1024, 1024, 1, dtype="float16", device="H100")
    assert r.unit == "tensor" and r.peak_flops == H100.fp16_tensor
    assert r.compute_s == pytest.approx(2 * 1024 * 1024 / H100.fp16_tensor)
    assert r.memory_s == pytest.approx(2 * (1024 * 1024 + 2048) / H100.bandwidth)
    assert r.seconds == max(r.compute_s, r.memory_s) and r.bound == "memory"
    assert r.intensity == pytest.approx(r.flops / r.bytes)
    big = speed_of_light("dense", 8192, 8192, 8192, dtype="float16", device="H100")
    assert big.bound == "compute" and big.attainable == big.peak_flops


@pytest.mark.parametrize("kind, dtype, unit", [
    ("dense", "float16", "tensor"), ("dense", "float32", "cuda"), ("dense", "tf32", "tensor"),
    ("csr", "float16", "cuda"), ("ell", "float32", "cuda"), ("coo", "bfloat16", "cuda"),
    ("bsr:16", "float16", "tensor"), ("blocked-ell:4", "float16", "tensor"), ("bsr:16", "float32", "cuda"),
    ("2:4", "float16", "sparse-tensor"), ("2:4", "float32", "cuda"),
])
def test_which_peak_applies(kind, dtype, unit):
    density = None if kind == "dense" or kind[0].isdigit() else 0.5
    assert speed_of_light(kind, 64, 64, 64, density=density, dtype=dtype).unit == unit


def test_sparse_tensor_core_useful_rate_is_half_the_datasheet_rate():
    r = speed_of_light("2:4", 8192, 8192, 8192, dtype="float16", device="H100")
    assert r.peak_flops == pytest.approx(H100.fp16_tensor_sparse / 2)
    # compute bound: the 2:4 speedup over dense at SoL is the hardware's 2x
    d = speed_of_light("dense", 8192, 8192, 8192, dtype="float16", device="H100")
    assert r.bound == d.bound == "compute" and d.seconds / r.seconds == pytest.approx(2.0, rel=1e-3)


def test_roof_knee_and_devices():
    h = roof("h100")
    assert h.knee("tensor", "float16") == pytest.approx(989.4e12 / 3350e9)
    assert h.knee("tensor", "float16") > 9 * h.knee("cuda", "float32")   # the paper's "almost 10x"
    for name in PEAKS:
        assert roof(name).bandwidth == PEAKS[name].bandwidth
    with pytest.raises(ValueError, match="no sparse tensor cores"):
        speed_of_light("2:4", 8, 8, 8, dtype="float16", device="V100")


def test_parse_kind():
    assert parse_kind("unstructured") == ("csr", {})
    assert parse_kind("blocked-uniform:4") == ("blocked-ell", {"block": 4})
    assert parse_kind("bsr32") == ("bsr", {"block": 32})
    assert parse_kind("1:4") == ("nm", {"nm": (1, 4)})


# ----------------------------------------------------------------------------- exact format bytes

@st.composite
def _matrix(draw, *, row_multiple=1, col_multiple=1):
    rm = draw(st.integers(1, 6)) * row_multiple
    cm = draw(st.integers(1, 6)) * col_multiple
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return rng.uniform(0.5, 2.0, size=(rm, cm)).astype(draw(st.sampled_from([np.float16, np.float32])))


@given(_matrix(), st.sampled_from([np.int16, np.int32]), st.sampled_from([0.0, 0.3, 1.0]), st.integers(1, 9))
def test_bytes_equal_nbytes_of_csr_and_coo(dense, idx, density, n):
    rng = np.random.default_rng(0)
    mask = rng.random(dense.shape) < density
    for cls, kind in ((formats.CSR, "csr"), (formats.COO, "coo")):
        a = cls.from_dense(dense, mask, index_dtype=idx)
        nb = a.nbytes()
        c = counts(kind, *dense.shape, n, nnz=a.nnz, dtype=dense.dtype, index_dtype=idx)
        assert (c.value_bytes, c.index_bytes) == (nb.values, nb.indices)
        assert counts_of(a, n) == c


@given(_matrix(), st.sampled_from([np.int16, np.int32]), st.integers(0, 6), st.integers(1, 9))
def test_bytes_equal_nbytes_of_ell(dense, idx, kprime, n):
    m, k = dense.shape
    kprime = min(kprime, k)
    mask = np.zeros(dense.shape, bool)
    mask[:, :kprime] = True
    a = formats.ELL.from_dense(dense, mask, index_dtype=idx)
    c = counts("ell", m, k, n, density=kprime / k, dtype=dense.dtype, index_dtype=idx)
    assert (c.value_bytes, c.index_bytes) == tuple(a.nbytes()[:2])
    assert counts_of(a, n) == c


@given(_matrix(row_multiple=4, col_multiple=4), st.sampled_from([1, 2, 4]), st.integers(0, 100), st.integers(1, 9))
def test_bytes_equal_nbytes_of_block_formats(dense, b, seed, n):
    m, k = dense.shape
    rng = np.random.default_rng(seed)
    grid = rng.random((m // b, k // b)) < 0.5
    mask = np.kron(grid, np.ones((b, b), bool))
    a = formats.BSR.from_dense(dense, mask, blocksize=(b, b))
    c = counts(f"bsr:{b}", m, k, n, nnz=a.nnz, dtype=dense.dtype)
    assert (c.value_bytes, c.index_bytes) == tuple(a.nbytes()[:2]) and counts_of(a, n) == c
    per_row = int(rng.integers(0, k // b + 1))
    grid = np.zeros((m // b, k // b), bool)
    grid[:, :per_row] = True
    e = formats.BlockedELL.from_dense(dense, np.kron(grid, np.ones((b, b), bool)), block=b)
    c = counts(f"blocked-ell:{b}", m, k, n, density=per_row / (k // b), dtype=dense.dtype)
    assert (c.value_bytes, c.index_bytes) == tuple(e.nbytes()[:2]) and counts_of(e, n) == c


@given(_matrix(col_multiple=16), st.sampled_from([(1, 4), (2, 4), (2, 8), (2, 16), (4, 8)]), st.integers(1, 9))
def test_bytes_equal_nbytes_of_nm(dense, nm, n):
    keep, width = nm
    m, k = dense.shape
    a = formats.NM.from_dense(dense, _nm_mask(m, k, keep, width), n=keep, m=width)
    packed = counts(f"{keep}:{width}", m, k, n, dtype=dense.dtype, nm_index="bits")
    assert (packed.value_bytes, packed.index_bytes) == tuple(a.nbytes()[:2])
    assert counts_of(a, n) == packed
    raw = counts(f"{keep}:{width}", m, k, n, dtype=dense.dtype, nm_index="uint8")
    assert raw.index_bytes == a.nbytes(packed=False).indices


def _nm_mask(m, k, keep, width):
    mask = np.zeros((m, k), bool)
    for g in range(k // width):
        mask[:, g * width:g * width + keep] = True
    return mask


# ----------------------------------------------------------------------------- the paper's relations

@given(st.sampled_from(["csr", "coo", "ell", "bsr:4", "blocked-ell:4"]),
       st.integers(1, 64).map(lambda v: 4 * v), st.integers(1, 64).map(lambda v: 4 * v),
       st.integers(1, 512), st.floats(0, 1), st.floats(0, 1),
       st.sampled_from(["float16", "float32"]))
def test_speed_of_light_never_improves_with_more_nonzeros(kind, m, k, n, d1, d2, dtype):
    lo, hi = sorted((d1, d2))
    a = speed_of_light(kind, m, k, n, density=lo, dtype=dtype)
    b = speed_of_light(kind, m, k, n, density=hi, dtype=dtype)
    assert a.seconds <= b.seconds and a.flops <= b.flops and a.bytes <= b.bytes


@pytest.mark.parametrize("kind", ["csr", "ell", "bsr:4", "2:4", "1:4", "2:16"])
@pytest.mark.parametrize("m, k", [(768, 768), (3072, 768), (512, 4608)])
def test_small_batch_sparse_layers_are_memory_bound(kind, m, k):
    density = None if kind[0].isdigit() else 0.1
    for n in (1, 49, 196):   # batch 1 of a linear layer; 7x7 and 14x14 feature maps
        assert speed_of_light(kind, m, k, n, density=density, dtype="float16").bound == "memory"


def test_flops_are_not_runtime_table1():
    """Paper Table 1: 32x32 blocks with ~1.57x the FLOPs of unstructured still run faster."""
    m = k = 2048
    n = 256
    unstructured = speed_of_light("csr", m, k, n, density=0.10, dtype="float16")
    blocked = speed_of_light("bsr:32", m, k, n, density=0.157, dtype="float16")
    assert blocked.flops > 1.5 * unstructured.flops
    assert blocked.seconds < unstructured.seconds
    assert blocked.unit == "tensor" and unstructured.unit == "cuda"


def test_equal_fraction_of_sol_means_predicted_equals_measured_speedup():
    """Section 3.4: SoL speedup == measured speedup when dense and sparse reach the same % of SoL."""
    d = speed_of_light("dense", 1024, 1024, 64, dtype="float16")
    s = speed_of_light("2:4", 1024, 1024, 64, dtype="float16")
    frac = 0.7
    measured_dense, measured_sparse = d.seconds / frac, s.seconds / frac
    assert d.fraction(measured_dense) == pytest.approx(s.fraction(measured_sparse)) == pytest.approx(frac)
    assert measured_dense / measured_sparse == pytest.approx(d.seconds / s.seconds)


def test_compare_reports_both_speedups_and_fractions():
    d = speed_of_light("dense", 512, 512, 8, dtype="float16")
    s = speed_of_light("2:4", 512, 512, 8, dtype="float16")
    r = roofline.compare(d, s, d.seconds / 0.8, s.seconds / 0.4)   # sparse kernel half as close to its roof
    assert r["dense_fraction_of_sol"] == pytest.approx(0.8) and r["sparse_fraction_of_sol"] == pytest.approx(0.4)
    assert r["predicted_speedup"] / r["measured_speedup"] == pytest.approx(0.8 / 0.4)
    with pytest.raises(ValueError, match="measured_s: must be a positive time"):
        roofline.compare(d, s, 0.0, 1.0)


def test_nm_case_study_ranks_patterns():
    """Section 4.2: at batch 1 the sparser N:M patterns are faster; 2:16 well ahead of 2:4."""
    times = {p: speed_of_light(p, 3072, 768, 1, dtype="float16").seconds for p in ("2:4", "1:4", "2:8", "2:16")}
    dense = speed_of_light("dense", 3072, 768, 1, dtype="float16").seconds
    assert dense > times["2:4"] > times["1:4"] > times["2:16"]
    assert times["2:4"] / times["2:16"] > 1.3


# ----------------------------------------------------------------------------- models

class _L:
    def __init__(self, name, m, k, n, count=1, inputs=None, weights=True):
        self.name, self.m, self.k, self.n, self.count, self.inputs, self.weights = name, m, k, n, count, inputs, weights


def test_model_sum_and_speedup():
    layers = [_L("a", 256, 256, 4, count=3), _L("b", 512, 256, 4), _L("qk", 8, 8, 8, weights=False)]
    res = model_sol(layers, "csr", 0.9, dtype="float16")
    assert [l.name for l in res.layers] == ["a", "b"]
    a, b = res.layers
    assert res.dense_s == pytest.approx(3 * a.dense.seconds + b.dense.seconds)
    assert res.sparse_s == pytest.approx(3 * a.sparse.seconds + b.sparse.seconds)
    assert res.speedup == pytest.approx(res.dense_s / res.sparse_s)
    assert model_sol(layers, "dense", dtype="float16").speedup == 1.0
    with_attn = model_sol(layers, "csr", 0.9, dtype="float16", include_activation_matmuls=True)
    assert with_attn.layers[-1].sparse is with_attn.layers[-1].dense and with_attn.speedup < res.speedup
    per_layer = model_sol(layers, "csr", densities=[0.5, 0.1], dtype="float16")
    assert per_layer.layers[0].sparse.counts.nnz == round(0.5 * 256 * 256)
    kept = model_sol(layers, "2:4", densities=[None, 0.5], dtype="float16")
    assert kept.layers[0].sparse is kept.layers[0].dense and not kept.layers[0].pruned and kept.layers[1].pruned
    assert 0 < res.feature_share() < 1


# ----------------------------------------------------------------------------- errors

@pytest.mark.parametrize("call, match", [
    (lambda: counts("csr", 4, 4, 4, density=1.5), r"density: must lie in \[0, 1\], got 1.5"),
    (lambda: counts("csr", 4, 4, 4, density=-0.1), r"density: must lie in \[0, 1\]"),
    (lambda: counts("csr", 4, 4, 4), "exactly one of density or nnz"),
    (lambda: counts("csr", 4, 4, 4, nnz=17), "nnz: must be <= 16"),
    (lambda: counts("nope", 4, 4, 4), "unknown format 'nope'; known: dense, csr, coo"),
    (lambda: counts("2:4", 4, 4, 4, density=0.3), "keeps exactly 0.5"),
    (lambda: counts("1:4", 4, 4, 4, nm_index="hw"), "'hw' metadata exists for 2:4"),
    (lambda: counts("bsr", 4, 4, 4, density=0.5), "block: bsr needs a block size"),
    (lambda: counts("dense", 4, 4, 4, dtype="int4"), "dtype: expected one of float64"),
    (lambda: counts("ell", 4, 4, 4, nnz=6), "multiple of m=4"),
    (lambda: counts("dense", 4, 4, 4, density=0.5), "a dense matrix stores all 16 entries"),
    (lambda: speed_of_light("dense", 4, 4, 4, device="B300"), "unknown device 'B300'; known: V100, A100, H100"),
    (lambda: speed_of_light("dense", 4, 4, 4, unit="tpu"), "unit: expected one of auto"),
    (lambda: speed_of_light("dense", 4, 4), "a format kind needs all three sizes"),
    (lambda: model_sol([], "csr"), "needs a sparsity"),
])
def test_bad_input_is_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_wrong_types():
    with pytest.raises(TypeError, match="density: expected a real number"):
        counts("csr", 4, 4, 4, density="0.5")
    with pytest.raises(TypeError, match="fmt: expected a sparsekit.formats matrix"):
        counts_of(np.zeros((2, 2)), 3)
    with pytest.raises(TypeError, match="m: expected an integer"):
        counts("dense", 4.0, 4, 4)


def test_paper_convention_halves_flops_only():
    a = speed_of_light("csr", 64, 64, 8, density=0.5, dtype="float32")
    b = speed_of_light("csr", 64, 64, 8, density=0.5, dtype="float32", convention="paper")
    assert b.flops * 2 == a.flops and b.bytes == a.bytes
    assert math.isclose(b.compute_s * 2, a.compute_s)


# ----------------------------------------------------------------------------- CLI

def test_cli_prints_layers_and_model_speedup(capsys):
    from sparsekit.cli import main
    from sparsekit.models import model

    assert main(["roofline", "--model", "mobilenet-v1", "--pattern", "2:4", "--device", "h100"]) == 0
    out = capsys.readouterr().out
    expected = model_sol(model("mobilenet-v1"), "2:4", dtype="float16", device="H100")
    assert f"speedup {expected.speedup:.2f}x" in out
    assert "block13.pw" in out and "sparse-tensor" in out
    assert len(out.splitlines()) == 28 + 4   # 28 layers, header, 2 rules, summary


@pytest.mark.parametrize("argv, match", [
    (["--model", "vgg16"], "unknown model 'vgg16'; known: resnet50"),
    (["--model", "resnet50", "--device", "tpu"], "unknown device 'tpu'; known: V100"),
    (["--model", "resnet50", "--pattern", "csr", "--sparsity", "1.5"], r"sparsity: must lie in \[0, 1\]"),
])
def test_cli_errors_name_the_choices(argv, match, capsys):
    from sparsekit.cli import main

    assert main(["roofline", *argv]) == 2
    assert re.search(match, capsys.readouterr().err)


def test_roofline_experiment_runs(tmp_path):
    from experiments.roofline import EXPERIMENT
    from sparsekit.experiment import Context

    sec = EXPERIMENT.run(Context(quick=True, backend="simulator", out_dir=tmp_path))
    assert all((tmp_path / f).exists() for f in sec.figures) and len(sec.figures) == 3
    nm = {(r["model"], r["device"], r["pattern"]): r["speedup_at_SoL"] for r in sec.tables[2].records}
    # the paper's Section 4.2 on A100, batch 1: 2:16 nearly 1.8x and > 30 % faster than 2:4
    for name in ("convnext-tiny", "swin-tiny"):
        assert 1.7 < nm[(name, "A100", "2:16")] < 1.9
        assert nm[(name, "A100", "2:16")] > 1.3 * nm[(name, "A100", "2:4")]
    t1 = sec.tables[3].records
    assert all(r["flops_ratio_block/unstr"] > 1.5 and r["block32_faster_by"] > 1 for r in t1)


@pytest.mark.simulator("on a GPU, tests/gpu/test_timing_gpu.py checks measured_peaks, the measured roof's source")
def test_measured_roof_needs_a_gpu():
    with pytest.raises(RuntimeError):
        roof("measured")
