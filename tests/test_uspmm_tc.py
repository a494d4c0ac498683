"""sparsekit/gpu/uspmm_tc.py equals sparsekit/reference/uspmm.py under the CUDA simulator (the MMA fallbacks of
sparsekit/gpu/mma.py stand in for the tensor cores): every dtype (float16, bfloat16, float32), index dtype and tunable shape, sizes that
are not multiples of the block tile, several K chunks, K' = 0 and K' = K, K splits of 1 to 4 blocks
(more than the K chunks included); bad input is refused.

Tolerance: the float32-accumulation bound of the existing tests (``assert_fp32_accumulated`` of
tests/test_spmm.py), with the reduction length this kernel's arithmetic needs
(:func:`sparsekit.gpu.uspmm_tc.error_reduction`: K' for float16 as for the CUDA-core kernels; 3 K' + 13
for float32, where the 3xTF32 split costs up to ~12 float32 roundoffs per product). bfloat16: the
16-bit tolerance of tests/spmm_close.py (``assert_half_close``, the same MMA's path): float32
accumulation of exact products, each result rounded once to bfloat16."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparsekit.gpu import uspmm_tc as tc
from sparsekit.reference.mma import tf32_round, tf32_split
from sparsekit.reference import uspmm as ru
from sparsekit.formats import ELL
from strategies import ell_matrices, uniform_mask
from test_spmm import assert_fp32_accumulated, rhs_for
from spmm_close import assert_half_close as assert_close

BF16 = np.dtype(ml_dtypes.bfloat16)
#: Every dtype the kernel takes: float16, bfloat16 (float16's path with the bf16 MMA) and float32.
DTYPES = [np.float16, BF16, np.float32]


def dtype_id(dtype) -> str:
    return np.dtype(dtype).name

# Small tiles (32-96 threads) for the simulator: a thread's A segment of 4, 8 or 32 columns (4 and
# 8 take the 16-byte zeroing path for float32, 4 the scalar one for float16); 1 or 2 MMA tiles a warp;
# pipelines of 2 to 5 stages; K groups (the fourth setting of each dtype: float16 two groups of one warp,
# one K step each per chunk of 32; float32 three groups, one K step each per chunk of 24). float32 takes A's
# values split on the host (``presplit``) where the launcher's rule allows (the kernel's own split: the
# non-finite B test).
TUNABLES = {
    np.float16: [dict(bm=32, bn=16, kc=16, warps_m=2, warps_n=1),
                 dict(bm=16, bn=32, kc=16, warps_m=1, warps_n=2, stages=4),
                 dict(bm=32, bn=16, kc=32, warps_m=1, warps_n=1, stages=2),
                 dict(bm=16, bn=16, kc=32, warps_m=1, warps_n=1, kgroups=2)],
    np.float32: [dict(bm=32, bn=16, kc=8, warps_m=2, warps_n=1),
                 dict(bm=16, bn=16, kc=16, warps_m=1, warps_n=2, stages=5),
                 dict(bm=32, bn=8, kc=8, warps_m=1, warps_n=1, stages=2),
                 dict(bm=16, bn=8, kc=24, warps_m=1, warps_n=1, kgroups=3)],
}
TUNABLES[BF16] = TUNABLES[np.float16]                           # (the same kernel, tiles and checks)


def assert_within_bound(got, want, ell, b):
    """``got`` against the reference's ``want``: the float32-accumulation bound with the kernel's reduction length
    (:func:`sparsekit.gpu.uspmm_tc.error_reduction`), for bfloat16 the 16-bit one of ``assert_close``."""
    if ell.dtype == BF16:
        assert_close(got, want, ell.to_dense(), b)
    else:
        assert_fp32_accumulated(got, want, ell.to_dense(), b, reduction=tc.error_reduction(ell.kprime, ell.dtype))


def check_against_reference(ell, b, tunables):
    got = tc.uspmm(ell, b, **tunables)
    want = ru.uspmm(ell, b)
    assert isinstance(got, np.ndarray) and got.flags.c_contiguous and got.dtype == ell.dtype
    assert_within_bound(got, want, ell, b)


@given(data=st.data(), dtype=st.sampled_from(DTYPES))
def test_matches_reference(data, dtype):
    ell = data.draw(ell_matrices(dtype=dtype, max_size=20))
    b = data.draw(rhs_for(ell, max_n=9))
    check_against_reference(ell, b, data.draw(st.sampled_from(TUNABLES[dtype])))


# (M, K, N, K'): K' = 0 and K' = K; two row blocks and two column blocks of the first tiling;
# K over several chunks with a partial last one; N odd (the element-wise B path) and a multiple of
# 8 (16-byte B reads, then a partial column tile).
EDGE_CASES = [(5, 7, 3, 0), (33, 7, 5, 7), (37, 24, 17, 13), (20, 33, 24, 33), (3, 1, 1, 1), (40, 24, 8, 0)]


@pytest.mark.parametrize("m,k,n,kprime", EDGE_CASES)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_edge_shapes(m, k, n, kprime, dtype):
    rng = np.random.default_rng(kprime * 100 + m)
    mask = uniform_mask(rng, m, k, kprime)
    ell = ELL.from_dense(rng.uniform(0.5, 2.0, (m, k)).astype(dtype), mask, index_dtype=np.int16)
    b = rng.uniform(-2.0, 2.0, (k, n)).astype(dtype)
    check_against_reference(ell, b, TUNABLES[dtype][0])


@pytest.mark.parametrize("tunables", [TUNABLES[np.float32][0], TUNABLES[np.float32][3]])
def test_float32_tf32_exact_a_gives_the_bits_of_three_products(tunables, monkeypatch):
    """A's values TF32 numbers (from float16): the kernel leaves ``a_small b_big``, all zeros, out; the bits are
    those of the three products (the first tiling, and three K groups)."""
    from sparsekit.gpu.uspmm import prepare
    rng = np.random.default_rng(9)
    mask = uniform_mask(rng, 37, 24, 13)
    ell = ELL.from_dense(rng.uniform(-2.0, 2.0, (37, 24)).astype(np.float16).astype(np.float32), mask)
    b = rng.uniform(-2.0, 2.0, (24, 17)).astype(np.float32)
    assert tc.tf32_exact(prepare(ell))
    check_against_reference(ell, b, tunables)
    got = tc.uspmm(ell, b, **tunables)
    monkeypatch.setattr(tc, "tf32_exact", lambda dell: False)          # the kernel of three products
    np.testing.assert_array_equal(tc.uspmm(ell, b, **tunables).view(np.uint32), got.view(np.uint32))


@pytest.mark.parametrize("stages", [2, 4, 5])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_pipeline_depths_over_several_chunks(dtype, stages):
    """More K chunks (5 for float32, 3 for float16 and bfloat16) than or as many as stages: every stage reused
    (one block: M and N within the first tiling's tile)."""
    m, k, n, kprime = 29, 40, 15, 13
    rng = np.random.default_rng(stages)
    mask = uniform_mask(rng, m, k, kprime)
    ell = ELL.from_dense(rng.uniform(0.5, 2.0, (m, k)).astype(dtype), mask, index_dtype=np.int32)
    b = rng.uniform(-2.0, 2.0, (k, n)).astype(dtype)
    check_against_reference(ell, b, dict(TUNABLES[dtype][0], stages=stages))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_dynamic_shared_path(dtype, monkeypatch):
    """Settings above the static limit carve one dynamic buffer (on the GPU: above 48 KB, after the
    opt-in); here the limit is lowered so small tiles take that path: same result, every stage reused."""
    monkeypatch.setattr(tc, "STATIC_LIMIT", 0)
    m, k, n, kprime = 29, 40, 15, 13
    rng = np.random.default_rng(7)
    mask = uniform_mask(rng, m, k, kprime)
    ell = ELL.from_dense(rng.uniform(0.5, 2.0, (m, k)).astype(dtype), mask, index_dtype=np.int32)
    b = rng.uniform(-2.0, 2.0, (k, n)).astype(dtype)
    check_against_reference(ell, b, dict(TUNABLES[dtype][1], stages=3))


def test_scatter_slots_cover_w():
    """The compile-time slot count covers every ``w`` of a segment width, in steps of 4 (few kernels)."""
    for seg in (4, 8, 16, 32):
        for w in range(0, seg + 1):
            s = tc.scatter_slots(seg, w)
            assert max(w, 1) <= s <= seg and (s % 4 == 0 or s == seg)


def test_large_settings_pass_the_checks():
    """Settings past 48 KB (the dynamic path) that the GPU benchmark times are accepted."""
    from experiments.bench_uspmm_tc import TC_CONFIGS
    for cfg in TC_CONFIGS["float16"].values():
        full = dict(tc.DEFAULTS[np.dtype(np.float16)], **cfg)
        assert tc._check_tunables(True, **full)
        nthreads = 32 * full["warps_m"] * full["warps_n"]
        assert tc.shared_bytes(full["bm"], full["bn"], full["kc"], True, full["stages"], nthreads) <= tc.SHARED_OPTIN


def test_half_wave_bench_times_the_routed_settings():
    """``--half-wave`` compares what ``config="auto"`` routes to on half-wave float32 grids (the one-wave setting,
    ``TC_ONE_WAVE``, with two splits) with that setting at 1 and 4 splits and the defaults with two splits
    (the routed setting for a while), on grids of that kind."""
    from experiments.bench_uspmm_tc import HALF_WAVE_CONFIGS, HALF_WAVE_PROBLEMS
    from sparsekit.tune import TC_HALF_WAVE, TC_ONE_WAVE, heuristic
    f32 = np.dtype(np.float32)
    timed = {(tuple(sorted(cfg.items())), s) for _name, cfg, splits in HALF_WAVE_CONFIGS for s in splits}
    routed = dict(TC_HALF_WAVE[f32])
    splits = routed.pop("splits")
    assert routed == TC_ONE_WAVE[f32]
    assert {(tuple(sorted(TC_ONE_WAVE[f32].items())), s) for s in (1, splits, 4)} <= timed
    assert ((), 2) in timed
    for m, k, n, sparsity in HALF_WAVE_PROBLEMS:
        kprime = round((1 - sparsity) * k)
        assert heuristic(m, k, n, kprime, f32, "C") == dict(variant="tensor_core", **TC_HALF_WAVE[f32])


def test_k_group_settings_pass_the_checks():
    """The benchmark's K-group settings (``--wave``, ``--large``, the sanitizers' and GPU tests') are
    accepted, with the shared memory the launcher will ask for."""
    from experiments.bench_uspmm_tc import KGROUPS, LARGE_CONFIGS, WAVE_CONFIGS
    for dt in ("float16", "float32"):
        cfgs = [cfg for name, cfg, _ in WAVE_CONFIGS[dt] + LARGE_CONFIGS[dt] if "kg" in name] + KGROUPS[dt]
        assert len(cfgs) >= 4
        for cfg in cfgs:
            full = dict(tc.DEFAULTS[np.dtype(dt)], **cfg)
            assert full["kgroups"] > 1 and tc._check_tunables(dt == "float16", **full)


def three_tf32_model(a: np.ndarray, b: np.ndarray, kgroups: int = 1) -> np.ndarray:
    """The float32 kernel's arithmetic in NumPy, as the simulator's MMA does it: for each 16 x 8 tile
    of ``C`` and each 8 columns of K in order, ``c = f32(a_small @ b_big + c)``, ``c = f32(a_big @
    b_small + c)``, ``c = f32(a_big @ b_big + c)`` (16x8 @ 8x8 float64 products of the same
    C-ordered shape as :func:`sparsekit.gpu.mma.mma_m16n8k8_tf32_f32`'s fallback, rounded once per MMA), with
    ``big = tf32(x)``, ``small = tf32(x - big)`` (:func:`sparsekit.reference.mma.tf32_round`). Operands padded with
    zeros to whole tiles, as the kernel's A tiles and B stages are. With ``kgroups = G``: K step ``s``
    (columns ``8s .. 8s+7``; each chunk holds a multiple of G steps) goes into accumulator ``s % G``,
    and ``c = ((c_0 + c_1) + c_2) + ...`` in float32 (the kernel pads K to whole chunks; the extra
    steps add zero products to an accumulator that is never -0, which changes nothing)."""
    m, k = a.shape
    n = b.shape[1]
    mp, kp, np_ = -(-m // 16) * 16, -(-k // 8) * 8, -(-n // 8) * 8
    ap = np.zeros((mp, kp), np.float32)
    bp = np.zeros((kp, np_), np.float32)
    ap[:m, :k], bp[:k, :n] = a, b
    ab, bb = tf32_round(ap), tf32_round(bp)
    a_s, b_s = tf32_round(ap - ab), tf32_round(bp - bb)
    c = np.zeros((mp, np_), np.float32)
    for r in range(0, mp, 16):
        for col in range(0, np_, 8):
            acc = np.zeros((kgroups, 16, 8), np.float32)
            for k0 in range(0, kp, 8):
                def tile(x, rows, cols):
                    return np.ascontiguousarray(x[rows, cols], dtype=np.float64)
                ra, kb, cb = slice(r, r + 16), slice(k0, k0 + 8), slice(col, col + 8)
                grp = k0 // 8 % kgroups
                for x, y in ((a_s, bb), (ab, b_s), (ab, bb)):
                    acc[grp] = (tile(x, ra, kb) @ tile(y, kb, cb) + acc[grp].astype(np.float64)).astype(np.float32)
            total = acc[0]
            for grp in range(1, kgroups):
                total = total + acc[grp]                                   # float32 additions, group order
            c[r:r + 16, col:col + 8] = total
    return c[:m, :n]


@pytest.mark.simulator("the model is the simulator's MMA (one round to nearest); tensor cores round toward "
                       "zero: tests/gpu/test_uspmm_tc_gpu.py checks the bound and bit-identical repeats")
@given(data=st.data())
def test_float32_is_bit_identical_to_the_3xtf32_model(data):
    """The float32 kernel (A split once by the scatter, B per fragment) gives bit for bit the model's
    result: the same ``big``/``small`` values enter the same MMAs in the same order as when every
    warp split its A fragments itself (the kernel before the float32 split moved to the scatter).
    With K groups, the model's group accumulators and their sum in group order."""
    ell = data.draw(ell_matrices(dtype=np.float32, max_size=20))
    b = data.draw(rhs_for(ell, max_n=9))
    tunables = data.draw(st.sampled_from(TUNABLES[np.float32]))
    got = tc.uspmm(ell, b, **tunables)
    want = three_tf32_model(ell.to_dense(), b, tunables.get("kgroups", 1))
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")   # (NaN arithmetic, simulated)
@pytest.mark.parametrize("presplit", [True, False])
def test_float32_keeps_non_finite_b(presplit, monkeypatch):
    """The big parts are rounded with integer arithmetic (:func:`sparsekit.gpu.mma.to_tf32_finite`, which may
    turn a NaN into an infinity or a zero): the small part carries the NaN, so for B holding infinities and NaNs
    of every payload each column of C that reads one is NaN in every row (the densified tiles multiply the zeros
    of A too: ``0 * inf``), and the other columns equal the reference (with a 2-way K split: the copies on the
    split's views). With A's values split on the host (``presplit``, the launcher's choice for this small
    setting) and, forced off, in the kernel (the path of ``TC_LARGE``)."""
    monkeypatch.setattr(tc, "_presplit_fits", lambda *args: presplit)
    rng = np.random.default_rng(5)
    m, k, n = 16, 48, 8
    mask = np.zeros((m, k), dtype=bool)
    for r in range(m):
        mask[r, rng.choice(k, size=20, replace=False)] = True
    ell = ELL.from_dense(rng.uniform(-2, 2, (m, k)).astype(np.float32), mask)
    b = rng.uniform(-2, 2, (k, n)).astype(np.float32)
    b[3, 2], b[7, 5] = np.inf, -np.inf
    b[9, 1], b[11, 6], b[30, 3] = np.array([0x7FFFFFFF, 0x7F800001, 0xFFFFF000], np.uint32).view(np.float32)
    got = tc.uspmm(ell, b, splits=2, **TUNABLES[np.float32][-1])
    bad = ~np.isfinite(b).all(axis=0)
    assert np.isnan(got[:, bad]).all()
    finite = np.where(bad, 0, b).astype(np.float32)
    assert_within_bound(got[:, ~bad], ru.uspmm(ell, finite)[:, ~bad], ell, finite[:, ~bad])


def test_tf32_split_is_the_lean_kernels_split():
    """:func:`sparsekit.reference.mma.tf32_split` (A's values split on the host, ``presplit``) gives the lean kernel's
    split bit for bit: ``big`` by :func:`sparsekit.gpu.mma.to_tf32_finite`'s integer rounding, ``small =
    tf32(x - big)`` (exact difference; an infinity where ``big`` rounded up past the largest float32);
    for a non-finite ``x`` (never in an ELL: its values are finite) ``small`` is the NaN the GPU makes,
    so the MMAs that read it return NaN as in the kernel."""
    rng = np.random.default_rng(11)
    edges = np.array([0, 0x80000000, 0x00000FFF, 0x00001000, 0x3F800FFF, 0x3F801000, 0xBF801000, 0x7F7FFFFF,
                      0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FFFFFFF, 0x7F800001, 0xFFFFF000], np.uint32)
    bits = np.concatenate([rng.integers(0, 2 ** 32, 4096, dtype=np.uint64).astype(np.uint32), edges])
    x = bits.view(np.float32)
    big, small = tf32_split(x)
    assert big.dtype == small.dtype == np.float32
    assert np.array_equal(big.view(np.uint32), ((bits.astype(np.uint64) + 0x1000) & 0xFFFFE000).astype(np.uint32))
    with np.errstate(invalid="ignore"):
        diff = x - big
    nan = np.isnan(diff)
    assert np.array_equal(nan, ~np.isfinite(x))
    assert np.array_equal(small[~nan].view(np.uint32), tf32_round(diff[~nan]).view(np.uint32))
    assert (small[nan].view(np.uint32) == 0x7FFFE000).all()
    fin = np.isfinite(big) & (np.abs(x) >= 2.0 ** -100)                 # big + small: x to 22 bits (small normal)
    assert (np.abs(big[fin].astype(np.float64) + small[fin] - x[fin]) <= 2.0 ** -22 * np.abs(x[fin])).all()


def test_tf32_exact_finds_matrices_of_tf32_numbers():
    """:func:`sparsekit.gpu.uspmm_tc.tf32_exact`: True for values from float16, from bfloat16 (the low 16 bits cleared) and
    rounded to TF32, False once one value has a bit below TF32's 10-bit mantissa; kept with the prepared matrix."""
    from sparsekit.gpu.uspmm import prepare
    rng = np.random.default_rng(3)
    dense = (rng.standard_normal((30, 48)) * 100).astype(np.float32)
    mask = np.zeros(dense.shape, dtype=bool)
    mask[:, ::3] = True
    bf16 = (dense.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    for values in (dense.astype(np.float16).astype(np.float32), bf16, tf32_round(dense)):
        assert tc.tf32_exact(prepare(ELL.from_dense(values, mask)))
    one_off = tf32_round(dense)
    one_off[7, 9] = np.nextafter(one_off[7, 9], np.float32(np.inf))   # (column 9: kept)
    dell = prepare(ELL.from_dense(one_off, mask))
    assert not tc.tf32_exact(dell) and dell._cache[("tf32_exact",)] is False


def test_tf32_numbers_are_those_with_13_low_bits_clear():
    """What :func:`sparsekit.gpu.uspmm_tc.tf32_exact` tests: a finite float32 whose 13 low bits are clear has a zero 3xTF32
    small part, and from 2**-100 up the converse holds too (below, a small part can round to zero: such values count
    as not exact, which only costs the skip), over random bit patterns (half with those bits cleared) and edges."""
    rng = np.random.default_rng(13)
    bits = rng.integers(0, 2 ** 32, 8192, dtype=np.uint64).astype(np.uint32)
    bits[::2] &= np.uint32(0xFFFFE000)
    edges = np.array([0, 0x80000000, 0x00001000, 0x00002000, 0x7F7FE000, 0x7F7FF000, 0xFF7FE000, 0x3F800001], np.uint32)
    x = np.concatenate([bits, edges]).view(np.float32)
    x = x[np.isfinite(x)]
    zero_small, clear = tf32_split(x)[1] == 0, (x.view(np.uint32) & np.uint32(0x1FFF)) == 0
    assert zero_small[clear].all() and clear.sum() > 4000
    normal = np.abs(x) >= 2.0 ** -100
    np.testing.assert_array_equal(zero_small[normal], clear[normal])


@pytest.mark.simulator("the model is the simulator's MMA: tests/gpu/test_uspmm_tc_gpu.py "
                       "test_k_groups_correct_and_bit_identical")
@pytest.mark.parametrize("splits", [1, 2])
def test_float32_k_groups_sum_in_group_order(splits):
    """The K groups' sum is the model's: bit-identical to :func:`three_tf32_model` with the kernel's
    ``kgroups`` (three groups of K steps 0, 3, 6, ... / 1, 4, ... / 2, 5, ..., summed 0 + 1 + 2), and
    on this problem the order is visible: the one-group model differs in the last bits. With a K split
    (2 blocks of 2 chunks of 24) the block's partial is its groups' sum, then the split's fixed-order sum."""
    rng = np.random.default_rng(3)
    m, k, n = 16, 96, 8                                                 # one tile, 4 chunks of 24 (12 K steps)
    a = (rng.uniform(-1, 1, (m, k)) * 2.0 ** rng.integers(-8, 9, (m, k))).astype(np.float32)
    b = (rng.uniform(-1, 1, (k, n)) * 2.0 ** rng.integers(-8, 9, (k, n))).astype(np.float32)
    ell = ELL.from_dense(a)
    tunables = TUNABLES[np.float32][3]
    assert tunables["kgroups"] == 3
    got = tc.uspmm(ell, b, splits=splits, **tunables)
    grouped = three_tf32_model(a, b, 3)
    assert not np.array_equal(grouped.view(np.uint32), three_tf32_model(a, b).view(np.uint32))
    if splits == 1:
        assert np.array_equal(got.view(np.uint32), grouped.view(np.uint32))
    else:                                                               # each half of K is its own model
        halves = three_tf32_model(a[:, :48], b[:48], 3), three_tf32_model(a[:, 48:], b[48:], 3)
        assert np.array_equal(got.view(np.uint32), ((np.float32(0) + halves[0]) + halves[1]).view(np.uint32))


def test_default_tunables_fit_the_launcher():
    assert set(tc.DEFAULTS) == {np.dtype(np.float16), BF16, np.dtype(np.float32)}
    assert tc.DEFAULTS[BF16] == tc.DEFAULTS[np.dtype(np.float16)]                     # (the same kernel)
    for dtype, cfg in tc.DEFAULTS.items():
        assert tc._check_tunables(dtype in tc.HALVES, **cfg)
        shared = tc.shared_bytes(cfg["bm"], cfg["bn"], cfg["kc"], dtype in tc.HALVES, cfg["stages"],
                                 32 * cfg["warps_m"] * cfg["warps_n"])
        assert tc.STATIC_LIMIT < shared <= tc.SHARED_OPTIN                              # all dynamic


def test_float32_default_fits_two_blocks_an_sm():
    """The float32 default asks for two blocks an SM (``min_blocks=2``): its shared memory (two A
    buffers of a big and a small tile each, since the scatter splits A) must fit twice in the H100's
    228 KB per SM, with the 1 KB the hardware reserves per block."""
    cfg = tc.DEFAULTS[np.dtype(np.float32)]
    assert cfg["min_blocks"] == 2
    nthreads = 32 * cfg["warps_m"] * cfg["warps_n"]
    shared = tc.shared_bytes(cfg["bm"], cfg["bn"], cfg["kc"], False, cfg["stages"], nthreads)
    assert 2 * (shared + 1024) <= 228 * 1024


def test_presplit_keeps_the_resident_blocks():
    """float32 lean stages A's values split on the host (twice the value bytes) only where ``min_blocks``
    blocks still fit an SM's 228 KB: the one-wave setting and the defaults do, ``TC_LARGE`` (two blocks
    of 64 x 256 an SM: 107 KB each, 123 KB presplit) keeps the split in the kernel."""
    from sparsekit.tune import TC_LARGE, TC_ONE_WAVE
    f32 = np.dtype(np.float32)
    for cfg, want in ((TC_ONE_WAVE[f32], True), (TC_LARGE[f32], False), ({}, True)):
        c = dict(tc.DEFAULTS[f32], **cfg)
        nthreads = 32 * c["warps_m"] * c["warps_n"] * c["kgroups"]
        args = c["bm"], c["bn"], c["kc"], c["stages"], nthreads, c["kgroups"]
        assert tc._presplit_fits(*args, c["min_blocks"]) is want
        need = tc.shared_bytes(*args[:3], False, *args[3:], presplit=True)
        assert (c["min_blocks"] * (need + 1024) <= tc.SM_SHARED) is want


# --- bad input: a clear error naming the argument ---------------------------------------------

@pytest.fixture
def small():
    rng = np.random.default_rng(0)
    ell = ELL.from_dense(rng.uniform(0.5, 2.0, (8, 6)).astype(np.float32))
    return ell, rng.uniform(-1, 1, (6, 4)).astype(np.float32)


def test_rejects_column_major_b(small):
    ell, b = small
    with pytest.raises(ValueError, match="b: the tensor-core kernel needs a C-ordered"):
        tc.uspmm(ell, np.asfortranarray(b))


def test_rejects_dtype_mismatch(small):
    ell, b = small
    with pytest.raises((TypeError, ValueError), match="b"):
        tc.uspmm(ell, b.astype(np.float16))
    half = ELL.from_dense(ell.to_dense().astype(BF16))
    with pytest.raises(TypeError, match="b: dtype"):                   # bfloat16 A, float16 B: never reinterpreted
        tc.uspmm(half, b.astype(np.float16))


@pytest.mark.parametrize("tunables,match", [
    (dict(kc=12), "kc: must be a multiple of the MMA's K"),
    (dict(bm=48, warps_m=2), "bm, bn: each warp's sub-tile"),
    (dict(bm=128, bn=16, warps_m=2, warps_n=1), "bm, kc: the 64 threads"),
    (dict(bn=512, kc=64, stages=3), "bm, bn, kc, stages, kgroups: two A tiles and 3 stages"),
    (dict(bn=512, stages=8), "bm, bn, kc, stages, kgroups: two A tiles and 8 stages"),
    (dict(stages=1), "stages"),
    (dict(bm=32, kc=64, warps_m=1, warps_n=1), "bm, kc: a thread's segment of"),
    (dict(warps_m=8, warps_n=8), "warps_m, warps_n, kgroups: a block of"),
    (dict(warps_m=4, warps_n=4, kgroups=8), r"warps_m, warps_n, kgroups: a block of 32 \* 4 \* 4 \* 8 = 4096"),
    (dict(kc=8, kgroups=2), "kc, kgroups: the 2 K groups share each chunk's MMA K steps"),
    (dict(kc=16, kgroups=3), "kc, kgroups: .* a multiple of 8 \\* 3 = 24; got kc=16"),
    (dict(kgroups=0), "kgroups"),
    (dict(splits=0), "splits"),
    (dict(tile=3), "tunables: unknown"),
])
def test_rejects_bad_tunables(small, tunables, match):
    ell, b = small
    with pytest.raises(ValueError, match=match):
        tc.uspmm(ell, b, **tunables)


# --- K split (``splits``): blocks along z each multiply a run of K chunks; the last sums the float32
# partials in a fixed order (gpu.uspmm.split_sum). Same bound as without a split (error_reduction).

@st.composite
def split_problems(draw):
    """A uniform ELL over several K chunks of the small tilings (K up to 48: 3 float16 or bfloat16 chunks
    of 16, 6 float32 chunks of 8), one or two row blocks, a B and a split count from 1 to 4 (may exceed the
    chunk count: the launcher then uses one block per chunk)."""
    dtype = draw(st.sampled_from(DTYPES))
    m, k = draw(st.integers(1, 40)), draw(st.integers(1, 48))
    kprime = draw(st.integers(0, k))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    mask = uniform_mask(rng, m, k, kprime)
    ell = ELL.from_dense(rng.uniform(-2.0, 2.0, (m, k)).astype(dtype), mask,
                         index_dtype=draw(st.sampled_from([np.int16, np.int32])))
    b = rng.uniform(-2.0, 2.0, (k, draw(st.integers(1, 17)))).astype(dtype)
    return ell, b, draw(st.sampled_from(TUNABLES[dtype])), draw(st.integers(1, 4))


@given(problem=split_problems())
def test_k_split_matches_reference(problem):
    ell, b, tunables, splits = problem
    check_against_reference(ell, b, dict(tunables, splits=splits))


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_k_split_repeats_are_bit_identical(dtype, dynamic, monkeypatch):
    """Two launches on one prepared matrix (cached partials and tickets) give the same bytes, the
    tickets are back to 0 after each, and more splits than K chunks fall back to one chunk a block.
    ``dynamic``: the split's flag lives in the dynamic buffer's entry-offset stage."""
    from sparsekit.gpu.split_k import split_buffers
    from sparsekit.gpu.uspmm import prepare
    if dynamic:
        monkeypatch.setattr(tc, "STATIC_LIMIT", 0)
    m, k, n, kprime = 20, 40, 16, 11                                   # one output tile, K chunks of 16 or 8
    rng = np.random.default_rng(11)
    mask = uniform_mask(rng, m, k, kprime)
    ell = ELL.from_dense(rng.uniform(-2.0, 2.0, (m, k)).astype(dtype), mask, index_dtype=np.int32)
    b = rng.uniform(-2.0, 2.0, (k, n)).astype(dtype)
    dell = prepare(ell)
    tunables = dict(TUNABLES[dtype][0], stages=3, splits=9)
    chunks = -(-k // tunables["kc"])                                    # 3 (16-bit) or 5 (float32)
    first = tc.uspmm(dell, b, **tunables)
    grid, _, ticket, nsplit = split_buffers(dell, (1, 1), n, 9, chunks)        # the launch's (cached) tickets
    assert nsplit == chunks and grid == (1, 1, chunks)
    assert (ticket.copy_to_host() == 0).all()
    again = tc.uspmm(dell, b, **tunables)
    assert (first.view(np.uint8) == again.view(np.uint8)).all()
    assert (ticket.copy_to_host() == 0).all()
    assert_within_bound(first, ru.uspmm(ell, b), ell, b)


def test_k_split_bound_is_tight_enough_to_catch_a_lost_partial():
    """The split test's bound is not vacuous: dropping one partial (a wrong chunk range) fails it."""
    rng = np.random.default_rng(5)
    m, k, n = 8, 48, 4
    ell = ELL.from_dense(rng.uniform(0.5, 2.0, (m, k)).astype(np.float32))
    b = rng.uniform(0.5, 2.0, (k, n)).astype(np.float32)
    lost = ru.uspmm(ELL.from_dense(ell.to_dense()[:, :40]), b[:40])
    with pytest.raises(AssertionError):
        assert_fp32_accumulated(lost, ru.uspmm(ell, b), ell.to_dense(), b, reduction=tc.error_reduction(k, np.float32))


# --- bfloat16 through gpu.uspmm.uspmm: config="auto" past the decode kernel's N, the variants that take it ---------

def bf16_problem(m: int, k: int, n: int, kprime: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    ell = ELL.from_dense(rng.uniform(-2.0, 2.0, (m, k)).astype(BF16), uniform_mask(rng, m, k, kprime),
                         index_dtype=np.int16)
    return ell, rng.uniform(-2.0, 2.0, (k, n)).astype(BF16)


def test_bfloat16_auto_past_the_decode_kernel_runs_on_tensor_cores(tmp_path, monkeypatch):
    """``config="auto"`` with a bfloat16 ``N = 128`` (past the decode kernel's 64) runs the tensor-core kernel at
    the router's setting (float16's for the problem): the result is that launch's, bit for bit, within the bound
    of the reference, and bfloat16."""
    from sparsekit.gpu import uspmm as gu
    from sparsekit.tune import heuristic
    monkeypatch.setenv("SPARSEKIT_TUNE_CACHE", str(tmp_path / "uspmm.json"))     # (no tuned winner)
    ell, b = bf16_problem(20, 48, 128, 13)
    cfg = heuristic(20, 48, 128, 13, BF16, "C")
    assert cfg["variant"] == "tensor_core"
    got = gu.uspmm(ell, b, config="auto")
    assert got.dtype == BF16 and got.shape == (20, 128)
    assert_within_bound(got, ru.uspmm(ell, b), ell, b)
    by_hand = tc.uspmm(ell, b, **{key: v for key, v in cfg.items() if key != "variant"})
    np.testing.assert_array_equal(got.view(np.uint16), by_hand.view(np.uint16))


def test_bfloat16_variants():
    """bfloat16 takes ``variant="tensor_core"`` at any N (here 9, where "auto" would pick the decode kernel: the
    same product within the bound) and "decode" (the router's choice there); the CUDA-core variants refuse it naming both."""
    from sparsekit.gpu import uspmm as gu
    ell, b = bf16_problem(20, 40, 9, 11, seed=1)
    want = ru.uspmm(ell, b)
    assert_within_bound(gu.uspmm(ell, b, variant="tensor_core", **TUNABLES[BF16][0]), want, ell, b)
    assert_within_bound(gu.uspmm(ell, b, config="heuristic"), want, ell, b)
    for variant in ("listing1", "direct", "dense_tile", "warp_split"):
        with pytest.raises(ValueError, match=r"variant: bfloat16 runs on the decode and bitmap kernels only for N <= 64 "
                                             r"\(variant='decode' or 'bitmap'\) and on the tensor-core kernel at any N"):
            gu.uspmm(ell, b, variant=variant)


def test_bfloat16_past_the_decode_width_with_a_column_major_b_is_refused_by_name():
    """No kernel takes bfloat16 with a column-major B of more than 64 columns: the error says which B does."""
    from sparsekit.gpu.uspmm import uspmm
    from sparsekit.checks import BFLOAT16
    from sparsekit.formats import ELL

    w = np.eye(16, dtype=np.float32)
    ell = ELL.from_dense(w.astype(BFLOAT16))
    b = np.asfortranarray(np.ones((16, 65), dtype=BFLOAT16))
    with pytest.raises(ValueError, match="row-major"):
        uspmm(ell, b, config="auto")
