"""sparsekit/gpu/uspmm_wgmma.py equals sparsekit/reference/uspmm.py under the CUDA simulator (sparsekit/gpu/wgmma.py's fallbacks stand
in for the warpgroup MMA): one warpgroup (128 simulated threads) per block, wgmma n of 16 to 128, A segments
of 4 to 8 columns, pipelines of 2 to 4 stages, several K chunks and row and column blocks, K' = 0 and
K' = K, any N (B by 16-byte copies or, N not a multiple of 4, by plain loads), with bf16 corrections
(``precision="tf32+bf16"``, its own bound; the default ``"auto"`` takes them from K' = 124 on) and with a
TF32-exact A (two products, the bits of three); the wgmma probe against NumPy; the routing rule; bad input refused.

Tolerance: as for sparsekit/gpu/uspmm_tc.py's float32 path (the same 3xTF32 split): the float32-accumulation bound
with :func:`sparsekit.gpu.uspmm_tc.error_reduction`'s reduction length, 3 K' + 13 (2 K' + 137 with bf16 corrections).
A block is 128 Python threads here (5-10 s a call on 2 cores): few examples, small shapes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsekit.gpu import uspmm_wgmma as wg
from sparsekit.gpu.uspmm_tc import error_reduction
from sparsekit.reference import uspmm as ru
from sparsekit import tune
from sparsekit.formats import ELL
from strategies import dense_arrays, ell_matrices, uniform_mask
from test_spmm import assert_fp32_accumulated

# (bm, bn, kc, stages), one warpgroup: a thread's segment (one column class of a band of 4 seg columns) of 4
# columns (bm 16: 8 threads a row, two bands; bm 32: 4 threads a row), 8 (bm 32 kc 32; bm 16 kc 64, two
# stages) and 16 (bm 32 kc 64: two offset pieces a slot row, every thread copies one).
TUNABLES = [dict(bm=16, bn=64, kc=32, stages=3), dict(bm=32, bn=64, kc=16, stages=4),
            dict(bm=32, bn=64, kc=32, stages=3), dict(bm=16, bn=64, kc=64, stages=2),
            dict(bm=32, bn=64, kc=64, stages=3)]


def check_against_reference(ell, b, tunables):
    got = wg.uspmm(ell, b, **tunables)
    want = ru.uspmm(ell, b)
    assert isinstance(got, np.ndarray) and got.flags.c_contiguous
    reduction = error_reduction(ell.kprime, np.float32, tunables.get("precision", "3xtf32"))
    assert_fp32_accumulated(got, want, ell.to_dense(), b, reduction=reduction)


@settings(max_examples=4)
@given(data=st.data())
def test_matches_reference(data):
    ell = data.draw(ell_matrices(dtype=np.float32, max_size=40))
    n = data.draw(st.integers(1, 20))                 # (N % 4 != 0: B by plain loads, a kernel of its own)
    b = data.draw(dense_arrays((ell.shape[1], n), dtype=np.float32))
    check_against_reference(ell, b, data.draw(st.sampled_from(TUNABLES)))


# (M, K, N, K', setting): K' = 0; K' = K over three chunks with a partial last one and two row blocks;
# two column blocks and a partial row block; one row past a 16-row boundary; N = 7 (B by plain loads);
# segments of 16 columns over two chunks, the second partial.
EDGE_CASES = [(5, 7, 4, 0, 1), (40, 40, 8, 40, 1), (20, 33, 68, 11, 2), (17, 24, 12, 5, 3), (9, 20, 7, 6, 0),
              (30, 100, 8, 13, 4)]


# split K (a cluster of ``split`` blocks a tile on the GPU; here one block computes the parts in turn):
# (M, K, N, K', setting): two parts of one chunk each; 8 parts of 5 chunks (three parts get none) with N = 9 (B
# by plain loads) and a partial row block; 4 parts of a K shorter than one chunk; the routed split settings'
# tile shape (64 x 128, a partial column block, a chunk a part; tests/gpu runs each routed setting at real sizes).
SPLIT_CASES = [(16, 40, 8, 13, dict(bm=16, bn=64, kc=32, stages=3, split=2)),
               (40, 70, 9, 30, dict(bm=64, bn=128, kc=16, stages=3, split=8)),
               (17, 12, 12, 5, dict(bm=32, bn=64, kc=16, stages=4, split=4)),
               (20, 32, 68, 20, dict(bm=64, bn=128, kc=16, stages=4, min_blocks=2, split=2))]


def random_case(m, k, n, kprime, a_dtype=np.float32):
    """An ``m x k`` ELL with ``kprime`` random columns a row, values in [-2, 2] rounded to ``a_dtype`` (float16:
    TF32 numbers), and a ``k x n`` B; the same draws for a shape whatever ``a_dtype``."""
    rng = np.random.default_rng(kprime * 100 + m + n)
    mask = uniform_mask(rng, m, k, kprime)
    values = rng.uniform(-2.0, 2.0, (m, k)).astype(a_dtype).astype(np.float32)
    return ELL.from_dense(values, mask, index_dtype=np.int16), rng.uniform(-2.0, 2.0, (k, n)).astype(np.float32)


@pytest.mark.parametrize("m,k,n,kprime,tunables", SPLIT_CASES)
def test_split_k_matches_reference(m, k, n, kprime, tunables):
    check_against_reference(*random_case(m, k, n, kprime), tunables)


# warp specialised (producer warpgroups build the A tiles, consumers multiply; named barriers): (M, K, N, K',
# setting): one and two producer warpgroups, copies 1 to 3 chunks ahead, chunks of 16 and 32, partial tiles,
# N = 9 (B by plain loads), K' = 0 and fewer chunks than A buffers (the routed one-wave setting, 64 x 128 with two
# producer warpgroups, runs at real sizes in tests/gpu and compiles in tests/compile).
WS_CASES = [(20, 100, 20, 13, dict(bm=32, bn=64, kc=16, stages=5, producers=128)),
            (17, 24, 12, 5, dict(bm=32, bn=64, kc=16, stages=6, producers=128)),
            (40, 40, 9, 30, dict(bm=64, bn=64, kc=32, stages=4, producers=256)),
            (20, 40, 8, 0, dict(bm=32, bn=64, kc=16, stages=4, producers=128))]


@pytest.mark.parametrize("m,k,n,kprime,tunables", WS_CASES)
def test_warp_specialised_matches_reference(m, k, n, kprime, tunables):
    test_split_k_matches_reference(m, k, n, kprime, tunables)


# precision="tf32+bf16" (TF32 big x big, one bf16 wgmma for both corrections; the bound's split term is
# SPLIT_ERROR_BF16_U): a block of one warpgroup, warp specialised with N = 9 (B by plain loads), K' = 0.
BF16_CASES = [(20, 40, 8, 13, dict(bm=32, bn=64, kc=16, stages=3)),
              (17, 24, 9, 5, dict(bm=32, bn=64, kc=16, stages=6, producers=128)),
              (20, 40, 8, 0, dict(bm=32, bn=64, kc=16, stages=4, producers=128))]


@pytest.mark.parametrize("m,k,n,kprime,tunables", BF16_CASES)
def test_bf16_corrections_match_reference(m, k, n, kprime, tunables):
    test_split_k_matches_reference(m, k, n, kprime, dict(tunables, precision="tf32+bf16"))


# A's values TF32 numbers (float16 weights: gpu.uspmm_tc.tf32_exact): b_big a_small, all zeros, is left out; the
# bits are those of the three products. A block of one warpgroup, and warp specialised with N = 9.
EXACT_CASES = [(20, 40, 8, 13, dict(bm=32, bn=64, kc=16, stages=3)),
               (17, 24, 9, 5, dict(bm=32, bn=64, kc=16, stages=6, producers=128))]


@pytest.mark.parametrize("m,k,n,kprime,tunables", EXACT_CASES)
def test_tf32_exact_a_gives_the_bits_of_three_products(m, k, n, kprime, tunables, monkeypatch):
    from sparsekit.gpu.uspmm import prepare
    ell, b = random_case(m, k, n, kprime, np.float16)
    assert wg.tf32_exact(prepare(ell))
    tunables = dict(tunables, precision="3xtf32")
    check_against_reference(ell, b, tunables)
    got = wg.uspmm(ell, b, **tunables)
    monkeypatch.setattr(wg, "tf32_exact", lambda dell: False)          # the kernel of three products
    np.testing.assert_array_equal(wg.uspmm(ell, b, **tunables).view(np.uint32), got.view(np.uint32))


def test_bf16_entries_pair_the_split_values():
    """``segment_entries(split="bf16")``: the same big values and offsets as the 3xTF32 entries, each small value
    replaced by the bits of ``(bf16(big), bf16(small))``."""
    from sparsekit.reference.mma import bf16_pairs
    from sparsekit.gpu.uspmm import prepare
    from sparsekit.gpu.uspmm_tc import segment_entries
    rng = np.random.default_rng(7)
    mask = np.zeros((40, 64), dtype=bool)
    for r in range(40):
        mask[r, rng.choice(64, size=25, replace=False)] = True
    dell = prepare(ELL.from_dense((rng.standard_normal((40, 64)) * 1e3).astype(np.float32), mask))
    (v3, o3), (vb, ob) = (segment_entries(dell, 4, pad=True, split=split, classes=16) for split in (True, "bf16"))
    v3, o3, vb, ob = (np.asarray(x.copy_to_host() if hasattr(x, "copy_to_host") else x) for x in (v3, o3, vb, ob))
    np.testing.assert_array_equal(o3, ob)
    np.testing.assert_array_equal(v3[..., 0], vb[..., 0])
    np.testing.assert_array_equal(bf16_pairs(v3[..., 0], v3[..., 1]).view(np.uint32), vb[..., 1].view(np.uint32))


@pytest.mark.parametrize("m,k,n,kprime,setting", EDGE_CASES)
def test_edge_shapes(m, k, n, kprime, setting):
    rng = np.random.default_rng(kprime * 100 + m)
    mask = uniform_mask(rng, m, k, kprime)
    ell = ELL.from_dense(rng.uniform(0.5, 2.0, (m, k)).astype(np.float32), mask, index_dtype=np.int16)
    b = rng.uniform(-2.0, 2.0, (k, n)).astype(np.float32)
    check_against_reference(ell, b, TUNABLES[setting])


@pytest.mark.simulator("the bound is the simulator's model (one rounding); tests/gpu/test_uspmm_wgmma_gpu.py runs "
                       "the probe on the tensor core, which truncates its sums")
def test_probe_matches_numpy():
    """One wgmma of the documented register and shared-memory layouts (the simulator's model; the GPU
    test runs the same probe on the tensor core)."""
    from mma_probes import probe_case
    d, exact, scale = probe_case()
    assert (np.abs(d - exact) <= 8 * 2.0 ** -24 * scale).all()


def test_shared_bytes_of_the_default_fit_the_h100():
    d = wg.DEFAULTS
    seg = d["kc"] * d["bm"] // (2 * d["bn"])
    assert wg.shared_bytes(d["bm"], d["bn"], d["kc"], d["stages"], seg) <= 232448   # the opt-in maximum


@pytest.mark.parametrize("setting", ["WGMMA_HALF", "WGMMA_QUARTER", "WGMMA_EIGHTH"])
def test_split_settings_fit_their_blocks_an_sm(setting):
    """The routed split settings' pipeline and partial tile fit ``min_blocks`` blocks an SM (228 KB an SM, 1 KB
    of it per block reserved), at the slots of 60% sparsity (the most the launcher stages: a segment's columns)."""
    d = dict(wg.DEFAULTS, **getattr(tune, setting))
    seg = d["kc"] * d["bm"] // (2 * d["bn"])
    pipeline = wg.shared_bytes(d["bm"], d["bn"], d["kc"], d["stages"], seg)
    on_gpu = max(pipeline, 4 * d["bm"] * d["bn"])
    assert d["split"] > 1 and (on_gpu + 1024) * d["min_blocks"] <= 233472


@pytest.mark.parametrize("m,k,n,sparsity,setting", [
    (1024, 1024, 16384, 0.6, "large"), (1024, 1024, 4096, 0.6, "large"), (1536, 1536, 2048, 0.6, "large"),
    (4096, 4096, 1024, 0.9, "large"), (1024, 1024, 2048, 0.6, "mid"), (1024, 1024, 1024, 0.6, "wave"),
    (1024, 1024, 1024, 0.85, "wave"), (768, 768, 1024, 0.6, "wave"), (1024, 4096, 1024, 0.65, "wave"),
    (2048, 512, 512, 0.6, "wave"), (1024, 1024, 512, 0.6, "half"), (512, 512, 1024, 0.3, "half"),
    (384, 384, 1024, 0.6, "half"), (256, 256, 1024, 0.6, "quarter"), (1024, 1024, 256, 0.6, "quarter"),
    (768, 768, 256, 0.6, "quarter"), (128, 128, 1024, 0.6, None), (1024, 1024, 128, 0.6, "eighth"),
    (768, 768, 128, 0.6, "eighth"), (2048, 2048, 128, 0.6, "eighth"), (1536, 768, 128, 0.7, "eighth"),
    (1024, 1024, 128, 0.75, None), (512, 512, 128, 0.6, None), (512, 4608, 128, 0.81, None),
    (1024, 1024, 1024, 0.9, "wave"), (1024, 1024, 512, 0.9, "half"), (1024, 1024, 1024, 0.95, None),
    (4096, 4096, 1024, 0.95, None)])
def test_heuristic_routes_the_measured_winners(m, k, n, sparsity, setting):
    """The wgmma H100 runs (sparsekit.tune.WGMMA_LARGE, WGMMA_MID, WGMMA_WAVE, WGMMA_HALF,
    WGMMA_QUARTER, WGMMA_EIGHTH): routed where the wgmma kernel won, not where it lost; never without ``wgmma`` (no
    compute capability 9.0 device) nor for float16."""
    kprime = int(round((1 - sparsity) * k))
    got = tune.heuristic(m, k, n, kprime, np.float32, "C", wgmma=True)
    want = {"large": tune.WGMMA_LARGE, "mid": tune.WGMMA_MID, "wave": tune.WGMMA_WAVE, "half": tune.WGMMA_HALF,
            "quarter": tune.WGMMA_QUARTER, "eighth": tune.WGMMA_EIGHTH}.get(setting)
    assert (got == dict(variant="wgmma", **want)) if want else got["variant"] != "wgmma"
    assert tune.heuristic(m, k, n, kprime, np.float32, "C")["variant"] != "wgmma"
    assert tune.heuristic(m, k, n, kprime, np.float16, "C", wgmma=True)["variant"] != "wgmma"


@pytest.fixture
def small():
    rng = np.random.default_rng(0)
    return ELL.from_dense(rng.uniform(0.5, 2, (8, 8)).astype(np.float32), np.ones((8, 8), bool)), rng


def test_rejects_column_major_b(small):
    ell, rng = small
    with pytest.raises(ValueError, match="C-ordered"):
        wg.uspmm(ell, np.asfortranarray(rng.uniform(size=(8, 8)).astype(np.float32)))


def test_rejects_float16(small):
    ell, rng = small
    half = ELL.from_dense(ell.to_dense().astype(np.float16), np.ones((8, 8), bool))
    with pytest.raises(ValueError, match="float32"):
        wg.uspmm(half, rng.uniform(size=(8, 8)).astype(np.float16))


def test_rejects_dtype_mismatch(small):
    ell, rng = small
    with pytest.raises(TypeError, match="dtype"):
        wg.uspmm(ell, rng.uniform(size=(8, 8)).astype(np.float64))


@pytest.mark.parametrize("tunables,match", [
    (dict(bn=96), "bn"), (dict(bm=48), "bm"), (dict(bm=256, bn=64), "bm"), (dict(bm=64, bn=64), "bm"),
    (dict(kc=12), "kc"), (dict(bm=32, bn=64, kc=4), "kc"), (dict(stages=1), "stages"), (dict(warps=4), "unknown"),
    (dict(split=3), "split"), (dict(bm=32, bn=64, split=8), "split"), (dict(producers=64), "producers"),
    (dict(bm=32, bn=128, producers=128, split=2), "producers"),
    (dict(bm=32, bn=128, producers=128, stages=3), "stages"),
    (dict(bm=256, bn=64, kc=16, producers=128), "bm"), (dict(bm=32, bn=256, producers=128), "producers"),
    (dict(precision="bf16"), "precision")])
def test_rejects_bad_tunables(small, tunables, match):
    ell, rng = small
    with pytest.raises(ValueError, match=match):
        wg.uspmm(ell, rng.uniform(size=(8, 8)).astype(np.float32), **tunables)


def test_error_reduction_refuses_an_unknown_precision():
    assert (error_reduction(5, np.float32), error_reduction(5, np.float32, "tf32+bf16")) == (3 * 5 + 13, 2 * 5 + 137)
    with pytest.raises(ValueError, match="precision"):
        error_reduction(5, np.float32, "bf16")


@pytest.mark.parametrize("kprime", [0, 1, 123, 124, 125, 300])
def test_auto_precision_never_loosens_the_float32_bound(kprime):
    """``precision="auto"`` (the default): bf16 corrections exactly where their bound (``2 K' + 137``) is no looser
    than 3xTF32's (``3 K' + 13``), i.e. from K' = 124 on, unless A's values are TF32 numbers (float16 weights:
    3xTF32 then runs two products with the smaller split error)."""
    from sparsekit.gpu.uspmm import prepare
    general, tf32_numbers = (prepare(random_case(2, 300, 1, kprime, a_dtype)[0])
                             for a_dtype in (np.float32, np.float16))
    chosen = wg.auto_precision(general)
    assert chosen == ("tf32+bf16" if kprime >= 124 else "3xtf32")
    assert error_reduction(kprime, np.float32, chosen) <= error_reduction(kprime, np.float32, "3xtf32")
    assert wg.auto_precision(tf32_numbers) == "3xtf32"


def test_benchmark_records_name_the_precision_auto_runs():
    """``sparsekit.bench.uspmm``'s config names of a routed wgmma setting end in the precision its default resolves
    to for the matrix (bf16 corrections or not); other variants' names are unchanged."""
    from sparsekit.bench.uspmm import config_name, with_precision
    from sparsekit.gpu.uspmm import prepare
    for kprime, precision in ((124, "tf32+bf16"), (123, "3xtf32")):
        dell = prepare(random_case(2, 300, 1, kprime)[0])
        assert config_name(with_precision(dict(variant="wgmma", **tune.WGMMA_WAVE), dell)).endswith(" " + precision)
    assert with_precision(dict(variant="warp_split", nwarp=4), dell) == dict(variant="warp_split", nwarp=4)


def test_auto_precision_runs_the_bf16_corrections_from_k124():
    """K' = 124: the default computes the bits of ``precision="tf32+bf16"``, within the 3xTF32 contract's bound."""
    ell, b = random_case(16, 128, 8, 124)
    tunables = dict(bm=16, bn=64, kc=32, stages=3)
    check_against_reference(ell, b, tunables)
    np.testing.assert_array_equal(wg.uspmm(ell, b, **tunables).view(np.uint32),
                                  wg.uspmm(ell, b, precision="tf32+bf16", **tunables).view(np.uint32))


@pytest.mark.simulator("on an H100 it times both precisions (experiments/results/uspmm_wgmma.md)")
def test_precision_benchmark_refuses_without_wgmma():
    from experiments import bench_uspmm_precision
    with pytest.raises(SystemExit, match="needs a compute capability 9.0 GPU"):
        bench_uspmm_precision.main([])
