"""sparsekit/gpu/mma.py and sparsekit/gpu/uspmm_tc.py on a real GPU: the inline-PTX instructions against NumPy, and
the tensor-core USpMM at real sizes against a float64 product (float16, bfloat16, float32), repeats bit-identical."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

pytestmark = pytest.mark.gpu

U23 = 2.0 ** -23
BF16 = np.dtype(ml_dtypes.bfloat16)


def test_to_tf32_is_bit_exact():
    """cvt.rna.tf32.f32 against the NumPy model: random bit patterns (every exponent, subnormals
    included), exact ties, and the top of the range."""
    import mma_probes
    from sparsekit.reference import mma as ref_mma
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    ties = (rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32) & ~np.uint32(0x1FFF)) | np.uint32(0x1000)
    top = np.arange(0x7F7FD000, 0x7F7FFFFF, 97, dtype=np.uint32)
    x = np.concatenate([bits, ties, top, top | np.uint32(0x80000000)]).view(np.float32)
    x = x[np.isfinite(x)]
    out = np.zeros_like(x)
    mma_probes.tf32_probe[(x.size + 255) // 256, 256](x, out)
    np.testing.assert_array_equal(out.view(np.uint32), ref_mma.tf32_round(x).view(np.uint32))


def _tensor_core_bound(a64, b64, c, got, kdim):
    """A tensor core sums kdim exact products and C with truncation (round toward zero), not
    round-to-nearest: error at most (kdim + 1) additions of 2**-23 (the RZ unit roundoff) times
    |A| @ |B| + |C| (Higham eq. 3.5 with u = 2**-23)."""
    exact = a64 @ b64 + c
    bound = (kdim + 1) * U23 * (np.abs(a64) @ np.abs(b64) + np.abs(c))
    assert (np.abs(got - exact) <= bound).all(), np.max(np.abs(got - exact) - bound)


def _bit_identical_within_bounds(problem, **tunables):
    """Two runs of the kernel on ``problem`` (``sparsekit.bench.uspmm.Problem``): bit-identical, within
    the kernel's own bound (``error_reduction``, float32 accumulation, C rounded once) and within the
    benchmark's ``Problem.correct`` (the CUDA-core kernels' bound)."""
    from sparsekit.gpu.uspmm_tc import error_reduction, uspmm
    first = uspmm(problem.dell, problem.b, **tunables).copy_to_host()
    again = uspmm(problem.dell, problem.b, **tunables).copy_to_host()
    assert (first.view(np.uint8) == again.view(np.uint8)).all()
    assert problem.correct(first, error_reduction(problem.ell.kprime, problem.dtype))
    assert problem.correct(first)


def test_mma_f16_matches_numpy():
    import mma_probes
    rng = np.random.default_rng(1)
    nb = 64
    a = rng.standard_normal((nb, 16, 16)).astype(np.float16)
    b = rng.standard_normal((nb, 16, 8)).astype(np.float16)
    c = rng.standard_normal((nb, 16, 8)).astype(np.float32)
    d = np.zeros_like(c)
    mma_probes.mma_probe_f16[nb // 4, 128](a.ravel(), np.ascontiguousarray(b.transpose(0, 2, 1)).ravel(), c.ravel(),
                                     d.reshape(-1), nb)
    _tensor_core_bound(a.astype(np.float64), b.astype(np.float64), c, d, 16)


def test_mma_tf32_matches_numpy():
    import mma_probes
    from sparsekit.reference import mma as ref_mma
    rng = np.random.default_rng(2)
    nb = 64
    a = rng.standard_normal((nb, 16, 8)).astype(np.float32)
    b = rng.standard_normal((nb, 8, 8)).astype(np.float32)
    c = rng.standard_normal((nb, 16, 8)).astype(np.float32)
    d = np.zeros_like(c)
    mma_probes.mma_probe_tf32[nb // 4, 128](a.ravel(), b.ravel(), c.ravel(), d.reshape(-1), nb)
    _tensor_core_bound(ref_mma.tf32_round(a).astype(np.float64), ref_mma.tf32_round(b).astype(np.float64), c, d, 8)


def configs(dtype: str) -> list[dict]:
    """The default tunables, the benchmark's second setting and a deep one for ``dtype``: float16 kc 32
    with 4 stages (70 KB of dynamic shared memory), float32 a 5-stage pipeline."""
    from experiments.bench_uspmm_tc import ALT, DYNAMIC, TC_CONFIGS
    deep = DYNAMIC if dtype == "float16" else TC_CONFIGS[dtype]["tc 64x128 k8 w2x4 s5"]
    return [dict(), ALT[dtype], deep]
PROBLEMS = [(1024, 1024, 1024, 0.6), (1024, 1024, 1024, 0.95), (4096, 4096, 1024, 0.9), (1000, 999, 777, 0.6)]


@pytest.fixture(scope="module", params=[(p, d) for p in PROBLEMS for d in ("float16", "float32")], ids=str)
def problem(request):
    from sparsekit.bench.uspmm import Problem
    (m, k, n, s), dt = request.param
    return Problem(m, k, n, s, dt)


@pytest.mark.parametrize("which", [0, 1, 2])
def test_real_shapes_correct_and_bit_identical(problem, which):
    """Within the float32-accumulation bound of the existing tests with reduction K' (the
    benchmark's ``Problem.correct``, which the CUDA-core kernels meet) and within the kernel's own
    bound (``error_reduction``: 3 K' + 13 for 3xTF32); two runs bit-identical."""
    _bit_identical_within_bounds(problem, **configs(problem.dtype.name)[which])


@pytest.mark.parametrize("m,k,n,sparsity,dtype", [(1024, 1024, 1024, 0.6, np.float16),
                                                  (1024, 1024, 1024, 0.95, np.float16),
                                                  (1024, 1024, 128, 0.6, np.float16),     # small grid: K split
                                                  (1024, 1024, 1024, 0.6, np.float32)])
def test_auto_routes_to_tensor_cores(m, k, n, sparsity, dtype):
    """``sparsekit.gpu.uspmm.uspmm(config="heuristic")`` (what ``auto`` runs without a tuning cache) is the
    tensor-core kernel's result at the heuristic's setting, bit for bit, and correct (on a cc 9.0 GPU the float32
    one-wave grid goes to the wgmma kernel, ``sparsekit.tune.WGMMA_WAVE``)."""
    from sparsekit.bench.uspmm import Problem
    from sparsekit.gpu import uspmm_tc, uspmm_wgmma
    from sparsekit.gpu.uspmm import uspmm as uspmm_auto
    from sparsekit.tune import heuristic
    p = Problem(m, k, n, sparsity, dtype)
    cfg = heuristic(m, k, n, p.dell.host.kprime, dtype, "C", wgmma=uspmm_wgmma.supported())
    assert cfg["variant"] in ("tensor_core", "wgmma")
    got = uspmm_auto(p.dell, p.b, config="heuristic").copy_to_host()
    kernel = uspmm_tc if cfg["variant"] == "tensor_core" else uspmm_wgmma
    want = kernel.uspmm(p.dell, p.b, **{key: v for key, v in cfg.items() if key != "variant"}).copy_to_host()
    assert (got.view(np.uint8) == want.view(np.uint8)).all()
    assert p.correct(got)


def test_torch_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    from sparsekit.bench.uspmm import Problem
    from sparsekit.gpu.uspmm_tc import uspmm
    p = Problem(256, 300, 64, 0.7, np.float16)
    c = uspmm(p.dell, torch.from_numpy(p.b_host).cuda())
    assert isinstance(c, torch.Tensor) and c.is_cuda and c.dtype == torch.float16
    assert p.correct(c.cpu().numpy())


def test_ldmatrix_trans_matches_model():
    import mma_probes
    from sparsekit.reference import mma as ref_mma
    tile = np.random.default_rng(3).standard_normal((16, 16)).astype(np.float16)
    out = np.zeros(128, dtype=np.uint32)
    mma_probes.ldmatrix_probe[1, 32](tile.ravel(), out)
    np.testing.assert_array_equal(out.reshape(32, 4), ref_mma.ldmatrix_expected(tile))


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("which", [0, 1, 2])
def test_k_groups_correct_and_bit_identical(problem, which, splits):
    """K groups (``experiments.bench_uspmm_tc.KGROUPS``: two groups of 4 warps, three of 2, four of 2), alone and
    with a K split: within the kernel's bound (``error_reduction``, the same as without groups) and
    ``Problem.correct``; repeats bit-identical (the groups' sums are added in group order)."""
    from experiments.bench_uspmm_tc import KGROUPS
    _bit_identical_within_bounds(problem, splits=splits, **KGROUPS[problem.dtype.name][which])


#: K-split problems: 1024 x 1024 x 128 60% (16 tiles of 64 x 128) and a ResNet-50 layer of the paper's
#: Table 1 (512 x 4608, N = 128, 81%: 4 tiles, 72 float16 chunks) where the split matters.
SPLIT_PROBLEMS = [(1024, 1024, 128, 0.6), (512, 4608, 128, 0.81), (1000, 2048, 128, 0.81)]


@pytest.mark.parametrize("splits", [2, 5, 16])
@pytest.mark.parametrize("shape", SPLIT_PROBLEMS, ids=str)
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_k_split_correct_and_bit_identical(dtype, shape, splits):
    """With a K split: within the kernel's bound (``error_reduction``, the same as unsplit) and the
    benchmark's ``Problem.correct``; repeats bit-identical (fixed-order sum, tickets reset); close to
    the unsplit result (both within the bound of the exact product)."""
    from sparsekit.bench.uspmm import Problem
    _bit_identical_within_bounds(Problem(*shape, dtype), splits=splits)


def test_ldmatrix_x4_matches_fragment_layout():
    """``ldmatrix_x4`` (not transposed, 32-bit words): lane ``(g, t)`` receives the m16n8k8 A fragment
    ``T[g, t], T[g+8, t], T[g, t+4], T[g+8, t+4]`` of a 16 x 8 float32 tile, bit for bit."""
    import mma_probes
    tile = np.random.default_rng(4).standard_normal((16, 8)).astype(np.float32)
    out = np.zeros(128, dtype=np.float32)
    mma_probes.ldmatrix_x4_probe[1, 32](tile.ravel(), out)
    lanes = np.arange(32)
    g, t = lanes // 4, lanes % 4
    want = np.stack([tile[g, t], tile[g + 8, t], tile[g, t + 4], tile[g + 8, t + 4]], axis=1)
    np.testing.assert_array_equal(out.reshape(32, 4).view(np.uint32), want.view(np.uint32))


def routed_configs(dtype: str) -> list[dict]:
    """Settings checked on the real problems: the default, the routed ones (float32: ``sparsekit.tune``'s
    one-wave and many-wave settings, as ``experiments.bench_uspmm_tc`` times them; float16: four K groups
    and the static-shared second setting)."""
    from experiments.bench_uspmm_tc import ALT, KGROUPS, ROUTED_LARGE, ROUTED_ONE_WAVE
    routed = [ROUTED_ONE_WAVE, ROUTED_LARGE] if dtype == "float32" else [KGROUPS[dtype][2], ALT[dtype]]
    return [dict(), *routed]


@pytest.mark.parametrize("which", [0, 1, 2])
def test_routed_settings_correct_and_bit_identical(problem, which):
    """The default and the routed settings on the real problems, odd N included (the element-wise B path keeps
    its plain copies, the entries' copies take one address a thread): within the bounds, repeats
    bit-identical."""
    _bit_identical_within_bounds(problem, **routed_configs(problem.dtype.name)[which])


@pytest.mark.parametrize("shape", [(1024, 1024, 1024, 0.6), (1000, 999, 777, 0.6)], ids=str)
@pytest.mark.parametrize("which", [0, 1, 2])
def test_float32_tf32_exact_a_gives_the_bits_of_three_products(shape, which, monkeypatch):
    """A's values TF32 numbers: the kernel leaves ``a_small b_big`` (all zeros) out, and the sums are those of the
    three-MMA kernel bit for bit (so within its bounds; repeats bit-identical), on the default and the routed
    one-wave and many-wave settings, and odd N."""
    from sparsekit.bench.uspmm import Problem
    from sparsekit.gpu import uspmm_tc as tc
    p = Problem(*shape, "float32", seed=8, tf32_a=True)
    assert tc.tf32_exact(p.dell)
    cfg = routed_configs("float32")[which]
    _bit_identical_within_bounds(p, **cfg)
    two = tc.uspmm(p.dell, p.b, **cfg).copy_to_host()
    monkeypatch.setattr(tc, "tf32_exact", lambda dell: False)
    three = tc.uspmm(p.dell, p.b, **cfg).copy_to_host()
    assert (two.view(np.uint8) == three.view(np.uint8)).all()


@pytest.fixture(scope="module")
def bf16_weight():
    """A 4096 x 4096 bfloat16 weight pruned to 80% uniform sparsity: the ELL, prepared once, and its float64 dense."""
    from sparsekit.gpu.uspmm import prepare
    from sparsekit.tune import make_ell
    ell = make_ell(4096, 4096, 0.8, BF16, seed=3)
    return ell, prepare(ell), ell.to_dense().astype(np.float64)


@pytest.mark.parametrize("n", [128, 512])
def test_bfloat16_correct_and_bit_identical(bf16_weight, n, tmp_path, monkeypatch):
    """bfloat16 past the decode kernel's N on a 4096 x 4096 80% weight, at the defaults and at the routed setting:
    against the float64 product within float32 accumulation (:func:`sparsekit.gpu.uspmm_tc.error_reduction`'s K' roundings,
    unit 2**-23: the tensor core truncates its sums) plus one rounding to bfloat16 (2**-8 of the float32 sum, nearest
    even); two runs bit-identical; ``config="auto"`` (no tuned winner) is the routed launch, bit for bit."""
    from sparsekit.gpu import uspmm_tc as tc
    from sparsekit.gpu.uspmm import uspmm
    from sparsekit.tune import heuristic
    monkeypatch.setenv("SPARSEKIT_TUNE_CACHE", str(tmp_path / "uspmm.json"))
    ell, dell, dense = bf16_weight
    b = np.random.default_rng(n).standard_normal((4096, n)).astype(BF16)
    b64 = b.astype(np.float64)
    exact = dense @ b64
    acc = tc.error_reduction(ell.kprime, BF16) * U23 * (np.abs(dense) @ np.abs(b64))
    bound = acc + 2.0 ** -8 * (np.abs(exact) + acc) + float(ml_dtypes.finfo(BF16).smallest_subnormal)
    cfg = heuristic(4096, 4096, n, ell.kprime, BF16, "C")
    assert cfg["variant"] == "tensor_core"
    routed = {key: v for key, v in cfg.items() if key != "variant"}
    for tunables in (dict(), routed):
        first = tc.uspmm(dell, b, **tunables)
        again = tc.uspmm(dell, b, **tunables)
        assert first.dtype == BF16 and first.shape == (4096, n)
        assert (first.view(np.uint16) == again.view(np.uint16)).all()
        err = np.abs(first.astype(np.float64) - exact)
        assert (err <= bound).all(), (tunables, float(np.max(err - bound)))
        print(f"bfloat16 N = {n} {tunables or 'defaults'}: max error {err.max():.3g}, "
              f"max error / bound {float(np.max(err / bound)):.3f}")
    auto = uspmm(dell, b, config="auto")
    assert (auto.view(np.uint16) == tc.uspmm(dell, b, **routed).view(np.uint16)).all()


def test_bfloat16_torch_tensors_in_and_out():
    """A ``torch.bfloat16`` B (viewed as its bits, no copy) gives a ``torch.bfloat16`` C on the device: the NumPy
    call's bits."""
    torch = pytest.importorskip("torch", reason="PyTorch is an optional extra")
    from sparsekit.gpu.uspmm import prepare
    from sparsekit.gpu.uspmm_tc import uspmm
    from sparsekit.tune import make_ell
    dell = prepare(make_ell(256, 320, 0.7, BF16, seed=4))
    b = np.random.default_rng(4).standard_normal((320, 192)).astype(BF16)
    c = uspmm(dell, torch.from_numpy(b.view(np.uint16)).view(torch.bfloat16).cuda())
    assert isinstance(c, torch.Tensor) and c.is_cuda and c.dtype == torch.bfloat16 and c.shape == (256, 192)
    want = uspmm(dell, b)
    assert (c.cpu().view(torch.int16).numpy().view(np.uint16) == want.view(np.uint16)).all()
