"""sparsekit/gpu/wgmma.py and sparsekit/gpu/uspmm_wgmma.py on a compute capability 9.0 GPU: the wgmma probe against NumPy (the
documented register and shared-memory layouts), the kernel at real sizes (split K in clusters, warp specialised
too) against a float64 product with repeats bit-identical, a TF32-exact A's two products against three, the
default ``precision="auto"``'s choice, and ``config="auto"`` routing the measured winners to it."""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _needs_sm90():
    from sparsekit.gpu.uspmm_wgmma import supported
    if not supported():
        pytest.skip("wgmma needs a compute capability 9.0 GPU (sm_90a)")


def test_probe_matches_numpy():
    """One wgmma: the tensor core truncates its float32 sum (8 exact products here), so within 9
    roundings of 2**-23 of the exact product."""
    from mma_probes import probe_case
    d, exact, scale = probe_case()
    assert (np.abs(d - exact) <= 9 * 2.0 ** -23 * scale).all()


def test_bf16_pack_matches_model():
    """``cvt.rn.bf16x2.f32`` on the GPU against :func:`sparsekit.reference.mma.bf16_bits` (the host's packing of A's pairs)."""
    import mma_probes
    from sparsekit.reference import mma as ref_mma
    rng = np.random.default_rng(3)
    lo = (rng.standard_normal(4096) * 2.0 ** rng.integers(-140, 120, 4096)).astype(np.float32)
    hi = (rng.standard_normal(4096) * 2.0 ** rng.integers(-20, 20, 4096)).astype(np.float32)
    out = np.zeros(4096, np.uint32)
    mma_probes.bf16x2_probe[16, 256](lo, hi, out)
    np.testing.assert_array_equal(out, ref_mma.bf16x2_bits(lo, hi))


@pytest.mark.parametrize("shape,tunables", [
    ((1024, 1024, 4096, 0.6), {}),                                     # the default, one wave of tiles
    ((1000, 1000, 1000, 0.6), {}),                                     # partial row and column tiles
    ((1000, 999, 777, 0.6), {}),                                       # N % 4 != 0: B by plain loads
    ((4096, 4096, 1024, 0.9), {}),
    ((300, 520, 196, 0.7), dict(bm=64, bn=128, kc=16, stages=3)),
    ((256, 256, 128, 0.95), dict(bm=32, bn=64, kc=16, stages=2)),
    # split K, clusters of 2, 4 and 8 blocks: the routed settings at their grids, partial tiles, N % 4 != 0,
    # 8 parts of 4 chunks at K = 520, and 128 x 256 tiles in 4 parts (30 clusters of 4 fit the H100 at once)
    ((1024, 1024, 1024, 0.6), dict(bm=64, bn=128, kc=16, stages=4, min_blocks=2, split=2)),
    ((1000, 999, 777, 0.6), dict(bm=64, bn=128, kc=16, stages=4, min_blocks=2, split=2)),
    ((512, 512, 1024, 0.85), dict(bm=64, bn=128, kc=32, stages=4, split=2)),
    ((256, 256, 1024, 0.6), dict(bm=64, bn=128, kc=16, stages=4, min_blocks=2, split=4)),
    ((300, 520, 196, 0.7), dict(bm=64, bn=128, kc=16, stages=4, min_blocks=2, split=8)),
    ((1024, 1024, 2048, 0.6), dict(bm=128, bn=256, kc=16, stages=4, split=4)),
    # warp specialised: the routed one-wave setting, partial tiles and N % 4 != 0, one producer warpgroup
    ((1024, 1024, 1024, 0.6), dict(bm=64, bn=128, kc=32, stages=5, producers=256)),
    ((1000, 999, 777, 0.6), dict(bm=64, bn=128, kc=32, stages=5, producers=256)),
    ((300, 520, 196, 0.7), dict(bm=32, bn=128, kc=16, stages=4, producers=128)),
    # precision="tf32+bf16" (bf16 corrections; its own bound): the one-wave setting, partial tiles with N % 4
    # != 0, a split-K and the default setting
    ((1024, 1024, 1024, 0.6), dict(bm=64, bn=128, kc=32, stages=6, producers=256, precision="tf32+bf16")),
    ((1000, 999, 777, 0.6), dict(bm=64, bn=128, kc=32, stages=6, producers=256, precision="tf32+bf16")),
    ((512, 512, 1024, 0.85), dict(bm=64, bn=128, kc=32, stages=4, split=2, precision="tf32+bf16")),
    ((1024, 1024, 4096, 0.6), dict(precision="tf32+bf16"))])
def test_real_sizes_bit_identical_within_bounds(shape, tunables):
    from sparsekit.bench.uspmm import Problem
    from sparsekit.gpu.uspmm_wgmma import uspmm
    p = Problem(*shape, "float32", seed=4)
    first = uspmm(p.dell, p.b, **tunables).copy_to_host()
    again = uspmm(p.dell, p.b, **tunables).copy_to_host()
    assert (first.view(np.uint8) == again.view(np.uint8)).all()
    assert within_bound(p, first, tunables.get("precision", "3xtf32"))


def within_bound(p, got, precision: str) -> bool:
    """``got`` within :func:`sparsekit.gpu.uspmm_tc.error_reduction`'s bound for ``precision`` of problem ``p``'s product."""
    from sparsekit.gpu.uspmm_tc import error_reduction
    return p.correct(got, error_reduction(p.ell.kprime, np.float32, precision))


@pytest.mark.parametrize("shape,tunables", [
    ((1024, 1024, 1024, 0.6), dict(bm=64, bn=128, kc=32, stages=5, producers=256)),   # the one-wave setting
    ((1000, 999, 777, 0.6), {}),                                       # the default, partial tiles, N % 4 != 0
    ((512, 512, 1024, 0.85), dict(bm=64, bn=128, kc=32, stages=4, split=2))])
def test_tf32_exact_a_gives_the_bits_of_three_products(shape, tunables, monkeypatch):
    """A's values TF32 numbers: the kernel leaves ``b_big a_small`` (all zeros) out, and the tensor core's sums are
    those of the three-product kernel, bit for bit, within the 3xTF32 bound."""
    from sparsekit.bench.uspmm import Problem
    from sparsekit.gpu import uspmm_wgmma as wg
    p = Problem(*shape, "float32", seed=7, tf32_a=True)
    assert wg.tf32_exact(p.dell) and wg.auto_precision(p.dell) == "3xtf32"
    tunables = dict(tunables, precision="3xtf32")
    two = wg.uspmm(p.dell, p.b, **tunables).copy_to_host()
    monkeypatch.setattr(wg, "tf32_exact", lambda dell: False)
    three = wg.uspmm(p.dell, p.b, **tunables).copy_to_host()
    assert (two.view(np.uint8) == three.view(np.uint8)).all()
    assert within_bound(p, two, "3xtf32")


@pytest.mark.parametrize("shape,chosen", [((1024, 1024, 1024, 0.6), "tf32+bf16"), ((1024, 1024, 1024, 0.9), "3xtf32"),
                                          ((1000, 999, 777, 0.8), "tf32+bf16")])
def test_auto_precision_at_real_sizes(shape, chosen):
    """The default ``precision="auto"`` at the routed one-wave setting: bf16 corrections where K' >= 124 (410 and
    200 here; 102 at 90%: 3xTF32), the bits of the precision it names, within the 3xTF32 contract's bound."""
    from sparsekit.bench.uspmm import Problem
    from sparsekit.gpu import uspmm_wgmma as wg
    from sparsekit import tune
    p = Problem(*shape, "float32", seed=6)
    assert wg.auto_precision(p.dell) == chosen
    got = wg.uspmm(p.dell, p.b, **tune.WGMMA_WAVE).copy_to_host()
    named = wg.uspmm(p.dell, p.b, precision=chosen, **tune.WGMMA_WAVE).copy_to_host()
    assert (got.view(np.uint8) == named.view(np.uint8)).all()
    assert within_bound(p, got, "3xtf32")


def test_sanitizer_case_runs():
    """``experiments/bench_uspmm.py --sanitize wgmma`` (what compute-sanitizer runs): every routed setting, both
    precisions of ``"auto"``, partial tiles, within the contract's bound and repeat-identical."""
    from experiments.bench_uspmm import sanitize_wgmma
    sanitize_wgmma()


def test_auto_routes_large_float32_problems_to_wgmma():
    from sparsekit.bench.uspmm import Problem
    from sparsekit.gpu.uspmm import uspmm
    from sparsekit.gpu.uspmm_wgmma import uspmm as uspmm_wgmma
    from sparsekit import tune
    p = Problem(1024, 1024, 4096, 0.6, "float32", seed=5)
    assert tune.resolve("heuristic", p.dell, 4096, "C", wgmma=True)["variant"] == "wgmma"
    got = uspmm(p.dell, p.b, config="heuristic").copy_to_host()
    want = uspmm_wgmma(p.dell, p.b, **tune.WGMMA_LARGE).copy_to_host()
    assert (got.view(np.uint8) == want.view(np.uint8)).all()


@pytest.mark.parametrize("m,k,n,kind", [(1024, 1024, 1024, "producers"), (512, 512, 1024, "split"),
                                        (256, 256, 1024, "split"), (1000, 1024, 128, "split")])
def test_auto_routes_small_grids(m, k, n, kind):
    """One wave of tiles or less: ``auto`` runs the warp-specialised setting (half a wave to one) or a split-K
    one (clusters; fewer tiles), bit for bit its result."""
    from sparsekit.bench.uspmm import Problem
    from sparsekit.gpu.uspmm import uspmm
    from sparsekit.gpu.uspmm_wgmma import uspmm as uspmm_wgmma
    from sparsekit import tune
    p = Problem(m, k, n, 0.6, "float32", seed=6)
    cfg = tune.resolve("heuristic", p.dell, n, "C", wgmma=True)
    assert cfg["variant"] == "wgmma" and cfg.get(kind, 0) > 1
    got = uspmm(p.dell, p.b, config="heuristic").copy_to_host()
    want = uspmm_wgmma(p.dell, p.b, **{key: v for key, v in cfg.items() if key != "variant"}).copy_to_host()
    assert (got.view(np.uint8) == want.view(np.uint8)).all()
    assert p.correct(got)
