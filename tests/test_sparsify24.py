"""2:4 tile sparsifier: the reference's properties, and the kernel equals it bit for bit (simulator)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, strategies as st

from sparsekit.reference import sparsify24 as ref
from sparsekit.sorting_networks import bose_nelson
from tests.strategies import dense_arrays, shapes_2d, tied_arrays

FIELDS = ("tile_masks", "packed", "meta", "packed_t", "meta_t")
OPTIONS = [("greedy", "index"), ("greedy", "torch"), ("optimal", "index"), ("optimal_full", "index")]
# float32 scores of up to 8 terms: each within 8 float32 ulps (relative) of the exact sum
SCORE_RTOL = 8 * np.finfo(np.float32).eps


@st.composite
def weights(draw, *, multiple: int = 4, max_size: int = 64, dtypes=(np.float16, np.float32)):
    """A weight with sides multiples of ``multiple``: distinct-ish values, heavy ties, or zeros."""
    shape = draw(shapes_2d(min_size=multiple, max_size=max_size, multiple_of=(multiple, multiple)))
    dtype = draw(st.sampled_from(dtypes))
    kind = draw(st.sampled_from(["values", "ties", "zeros"]))
    if kind == "values":
        return draw(dense_arrays(shape, dtype=dtype))
    if kind == "ties":
        return draw(tied_arrays(shape, dtype=dtype, levels=draw(st.integers(1, 3))))
    return np.zeros(shape, dtype)


def tiles(a: np.ndarray) -> np.ndarray:
    m, k = a.shape
    return a.reshape(m // 4, 4, k // 4, 4).transpose(0, 2, 1, 3)   # (I, J, r, c)


# ------------------------------------------------------------------------- reference properties

def greedy_one_tile(t: np.ndarray, ties: str) -> int:
    """One 4x4 tile, scalar loops: the post's greedy rule, written independently of the vectorised one."""
    mag = [abs(float(x)) for x in t.ravel()]
    if ties == "index":
        order = sorted(range(16), key=lambda p: (-mag[p], p))
    else:  # PyTorch's network on (|w|, position) records, exchanging unless strictly smaller
        rec = [(mag[p], p) for p in range(16)]
        for i, j in bose_nelson(16).comparators:
            if not rec[i][0] < rec[j][0]:
                rec[i], rec[j] = rec[j], rec[i]
        order = [p for _, p in reversed(rec)]
    rows, cols, mask = [0] * 4, [0] * 4, 0
    for p in order:
        if rows[p // 4] < 2 and cols[p % 4] < 2:
            rows[p // 4] += 1
            cols[p % 4] += 1
            mask |= 1 << p
    return mask


@given(weights(max_size=24), st.sampled_from(OPTIONS))
def test_every_tile_row_and_column_keeps_at_most_two(w, option):
    method, ties = option
    mask = ref.mask_from_tiles(ref.tile_masks(w, method=method, ties=ties))
    t = tiles(mask)
    assert t.sum(axis=3).max() <= 2 and t.sum(axis=2).max() <= 2
    # so every group of 4 along a row and along a column is 2:4 (W and W^T both feed sparse tensor cores)
    m, k = w.shape
    assert mask.reshape(m, k // 4, 4).sum(axis=2).max() <= 2
    assert mask.T.reshape(k, m // 4, 4).sum(axis=2).max() <= 2
    if method == "optimal_full":
        assert (t.sum(axis=(2, 3)) == 8).all()
    if method in ("optimal", "greedy"):    # both maximal, and every maximal mask keeps 7 or 8
        assert np.isin(t.sum(axis=(2, 3)), [7, 8]).all()


@given(weights(max_size=24), st.sampled_from(["index", "torch"]))
def test_greedy_matches_scalar_rule_and_is_maximal(w, ties):
    tm = ref.tile_masks(w, ties=ties)
    t = tiles(w)
    for i, j in itertools.product(range(tm.shape[0]), range(tm.shape[1])):
        assert int(tm[i, j]) == greedy_one_tile(t[i, j], ties)
    mask = tiles(ref.mask_from_tiles(tm))
    full_row = mask.sum(axis=3, keepdims=True) == 2
    full_col = mask.sum(axis=2, keepdims=True) == 2
    # maximal: no dropped value could be added without breaking a row or column constraint
    assert np.all(mask | full_row | full_col)


@given(weights(max_size=24))
def test_tie_rules_agree_when_magnitudes_are_distinct(w):
    mag = np.abs(tiles(w)).reshape(-1, 16)
    distinct = np.array([len(set(row)) == 16 for row in mag.tolist()])
    a = ref.tile_masks(w, ties="index").ravel()
    b = ref.tile_masks(w, ties="torch").ravel()
    assert np.array_equal(a[distinct], b[distinct])


def test_torch_tie_order_is_the_networks_not_the_index_order():
    w = np.ones((4, 4), np.float16)   # all tied
    assert ref.tile_masks(w, ties="index")[0, 0] == greedy_one_tile(w, "index") == 0b0000_0000_0011_0011 | 0b1100_1100_0000_0000
    assert ref.tile_masks(w, ties="torch")[0, 0] == greedy_one_tile(w, "torch")
    assert ref.tile_masks(w, ties="torch")[0, 0] != ref.tile_masks(w, ties="index")[0, 0]


def test_candidates_are_all_maximal_masks_and_dominate_every_allowed_mask():
    bits = (np.arange(1 << 16)[:, None] >> np.arange(16)) & 1
    grid = bits.reshape(-1, 4, 4)
    allowed = np.flatnonzero((grid.sum(axis=2).max(axis=1) <= 2) & (grid.sum(axis=1).max(axis=1) <= 2))
    full = [v for v in allowed if bin(v).count("1") == 8]
    allowed_set = set(allowed.tolist())
    maximal = [v for v in allowed if all(v >> p & 1 or (v | 1 << p) not in allowed_set for p in range(16))]
    assert sorted(ref.PATTERNS.tolist()) == sorted(full) and len(full) == 90
    assert sorted(ref.MAXIMAL.tolist()) == sorted(maximal) and len(maximal) == 186
    cand = ref.MAXIMAL.astype(np.int64)
    assert ((allowed[:, None] & ~cand[None, :]) == 0).any(axis=1).all()
    # ... but not every allowed mask lies inside a full pattern: 7-value dead ends exist
    pats = ref.PATTERNS.astype(np.int64)
    assert not ((allowed[:, None] & ~pats[None, :]) == 0).any(axis=1).all()


def test_best_full_pattern_can_keep_less_than_greedy():
    # a 6-cycle of large values on rows/columns 0-2 plus one value at (3, 3): greedy keeps all 7;
    # a full pattern holds at most 5 of the cycle
    w = np.full((4, 4), 0.01, np.float32)
    for r, c in [(0, 0), (0, 1), (1, 0), (1, 2), (2, 1), (2, 2)]:
        w[r, c] = 100
    w[3, 3] = 1
    a = np.abs(w)
    kept = {m: a[ref.mask_from_tiles(ref.tile_masks(w, method=m))].sum() for m in ref.METHODS}
    assert kept["greedy"] == kept["optimal"] > kept["optimal_full"]


def kept_magnitude(w: np.ndarray, tm: np.ndarray) -> np.ndarray:
    """Per-tile float64 sum of |w| over the mask."""
    a = np.abs(tiles(w)).reshape(-1, 16).astype(np.float64)
    return (a * ((tm.ravel().astype(np.int64)[:, None] >> np.arange(16)) & 1)).sum(axis=1)


@given(weights(max_size=24))
def test_optimal_keeps_the_most_magnitude(w):
    best = kept_magnitude(w, ref.tile_masks(w, method="optimal"))
    # exact best over all 186 candidates, in float64
    a = np.abs(tiles(w)).reshape(-1, 16).astype(np.float64)
    inside = ((ref.MAXIMAL.astype(np.int64)[:, None] >> np.arange(16)) & 1).astype(np.float64)
    exact = (a @ inside.T).max(axis=1)
    assert np.all(best >= exact * (1 - SCORE_RTOL))
    for m in ("greedy", "optimal_full"):
        assert np.all(best >= kept_magnitude(w, ref.tile_masks(w, method=m)) * (1 - SCORE_RTOL))


@given(weights(multiple=32, max_size=96), st.sampled_from(OPTIONS))
def test_pack_then_unpack_is_identity_on_kept_values(w, option):
    method, ties = option
    s = ref.sparsify24(w, method=method, ties=ties)
    s.validate(full=True)
    assert np.array_equal(s.unpack().view(np.uint8), np.where(s.mask, w, np.zeros((), w.dtype)).view(np.uint8))
    assert np.array_equal(s.unpack_t(), s.unpack().T)


@given(weights(multiple=32, max_size=64))
def test_metadata_nibbles_name_two_increasing_positions(w):
    s = ref.sparsify24(w)
    m, k = s.shape
    logical = s.meta.reshape(-1).view(np.uint16)[ref.meta_offsets(m, k)].astype(np.int64)
    nib = (logical[:, :, None] >> (4 * np.arange(4))) & 15
    assert np.all((nib & 3) < (nib >> 2))
    # and the kept positions are among the two named ones
    idx = np.stack([nib & 3, nib >> 2], axis=3).reshape(m, k // 4, 2)
    named = np.zeros((m, k // 4, 4), bool)
    np.put_along_axis(named, idx, True, axis=2)
    assert np.all(named.reshape(m, k) | ~s.mask)


@pytest.mark.parametrize("m,k", [(32, 32), (64, 96), (128, 64)])
def test_metadata_layout_steps(m, k):
    off = ref.meta_offsets(m, k)
    assert sorted(off.ravel().tolist()) == list(range(m * k // 16))    # a permutation
    # step by step as the docstring says: interleave rows in 32, swap the 2x2 off-diagonals,
    # store column pairs interleaved column-major
    for r, c in itertools.product(range(m), range(k // 16)):
        d = (r // 32) * 32 + (r % 8) * 4 + (r % 32) // 8
        if d % 2 == 0 and c % 2 == 1:
            d, c2 = d + 1, c - 1
        elif d % 2 == 1 and c % 2 == 0:
            d, c2 = d - 1, c + 1
        else:
            c2 = c
        assert off[r, c] == (c2 // 2) * 2 * m + 2 * d + c2 % 2
    # each 32x32 block of w owns 128 contiguous bytes (64 words of 16 bits)
    for i, j in itertools.product(range(m // 32), range(k // 32)):
        block = np.sort(off[32 * i:32 * i + 32, 2 * j:2 * j + 2].ravel())
        assert block[-1] - block[0] == 63


def test_lone_kept_value_keeps_pytorch_slot():
    # per row group: lone kept column c -> slot 0 for c < 2, slot 1 for c >= 2; empty -> (0, 1)
    assert [ref.NIBBLE[1 << c] for c in range(4)] == [0 | 1 << 2, 1 | 2 << 2, 1 | 2 << 2, 2 | 3 << 2]
    assert ref.NIBBLE[0] == 0 | 1 << 2


@pytest.mark.parametrize("bad,err,match", [
    (np.zeros((32, 48), np.float16), ValueError, r"w.shape\[1\]: must be divisible by 32, got 48"),
    (np.zeros((20, 32), np.float16), ValueError, r"w.shape\[0\]: must be divisible by 32, got 20"),
    (np.zeros((32, 32), np.float64), TypeError, "dtype must be one of"),
    (np.zeros((32, 32), np.int32), TypeError, "dtype must be one of"),
    (np.zeros(32, np.float16), ValueError, "2-D"),
    (np.full((32, 32), np.nan, np.float32), ValueError, "must be finite"),
])
def test_reference_rejects_bad_input(bad, err, match):
    with pytest.raises(err, match=match):
        ref.sparsify24(bad)


def test_reference_rejects_bad_options():
    w = np.ones((32, 32), np.float16)
    with pytest.raises(ValueError, match="method: must be one of"):
        ref.sparsify24(w, method="best")
    with pytest.raises(ValueError, match="ties: must be one of"):
        ref.sparsify24(w, ties="random")


# ------------------------------------------------------------------------- kernel == reference

@given(weights(multiple=32, max_size=96), st.sampled_from(OPTIONS), st.sampled_from([4, 8, 16]), st.booleans(),
       st.booleans())
def test_kernel_equals_reference_bit_for_bit(w, option, row_threads, prefetch, pack_table):
    from sparsekit.gpu import sparsify24 as gpu
    method, ties = option
    want = ref.sparsify24(w, method=method, ties=ties)
    got = gpu.sparsify24(w, method=method, ties=ties, row_threads=row_threads, prefetch=prefetch,
                         pack_table=pack_table)
    for f in FIELDS:
        a, b = getattr(got, f), getattr(want, f)
        assert a.shape == b.shape and a.dtype == b.dtype, f
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), f
    got.validate(full=True)


def test_kernel_handles_rows_beyond_one_block():
    # 160 rows: the second block row is partly outside the matrix
    from sparsekit.gpu import sparsify24 as gpu
    w = np.random.default_rng(3).standard_normal((160, 32)).astype(np.float16)
    got, want = gpu.sparsify24(w), ref.sparsify24(w)
    for f in FIELDS:
        assert np.array_equal(getattr(got, f).view(np.uint8), getattr(want, f).view(np.uint8)), f


def test_kernel_returns_device_arrays_for_device_input():
    from numba import cuda
    from sparsekit.gpu import sparsify24 as gpu
    w = np.random.default_rng(4).standard_normal((32, 64)).astype(np.float32)
    got = gpu.sparsify24(cuda.to_device(w))
    assert hasattr(got.packed, "copy_to_host") and got.meta.shape == (32, 4)
    assert np.array_equal(got.packed.copy_to_host(), ref.sparsify24(w).packed)


@pytest.mark.parametrize("value", [np.nan, -np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_kernel_flags_non_finite_values(value, dtype):
    from sparsekit.gpu import sparsify24 as gpu
    w = np.ones((32, 32), dtype)
    w[17, 5] = value
    with pytest.raises(ValueError, match="must be finite"):
        gpu.sparsify24(w)


# fp16 greedy tests the sorted tile's largest key, the optimal kernels every value's exponent:
# each way, one non-finite value in the second half of a block (rows 4-7 of an 8x8) or the first
@pytest.mark.parametrize("option", [("greedy", "index", False), ("greedy", "torch", True),
                                    ("optimal_full", "index", False)])
@pytest.mark.parametrize("where", [(2, 30), (39, 9)])
def test_fp16_kernels_flag_the_largest_finite_value_but_not_beyond(option, where):
    from sparsekit.gpu import sparsify24 as gpu
    method, ties, prefetch = option
    w = np.full((64, 32), np.finfo(np.float16).max, np.float16)     # largest finite: no error
    gpu.sparsify24(w, method=method, ties=ties, prefetch=prefetch)
    w[where] = -np.inf
    with pytest.raises(ValueError, match="must be finite"):
        gpu.sparsify24(w, method=method, ties=ties, prefetch=prefetch)


@pytest.mark.parametrize("bad,err,match", [
    (np.zeros((32, 40), np.float16), ValueError, r"w.shape\[1\]: must be divisible by 32"),
    (np.zeros((32, 32), np.float64), TypeError, "dtype must be one of"),
    (np.zeros((64, 64), np.float16)[:, ::2], ValueError, "C-contiguous"),
])
def test_kernel_launcher_rejects_bad_input(bad, err, match):
    from sparsekit.gpu import sparsify24 as gpu
    with pytest.raises(err, match=match):
        gpu.sparsify24(bad)


def test_kernel_launcher_rejects_bad_tunables():
    from sparsekit.gpu import sparsify24 as gpu
    w = np.ones((32, 32), np.float16)
    with pytest.raises(ValueError, match="row_threads: must be one of"):
        gpu.sparsify24(w, row_threads=3)
    with pytest.raises(TypeError, match="prefetch: expected a bool"):
        gpu.sparsify24(w, prefetch=1)
    with pytest.raises(TypeError, match="pack_table: expected a bool"):
        gpu.sparsify24(w, pack_table=None)
    with pytest.raises(ValueError, match="min_blocks"):
        gpu.sparsify24(w, min_blocks=-1)
    with pytest.raises(ValueError, match="method: must be one of"):
        gpu.sparsify24(w, method="best")


def test_launch_bounds_default_to_64_registers_where_they_do_not_spill():
    from sparsekit.gpu import sparsify24 as gpu
    assert gpu.auto_min_blocks(16, "greedy", 16, False) == 8          # 128 threads x 8 = 1024 a SM
    assert gpu.auto_min_blocks(16, "optimal_full", 4, False) == 32
    assert gpu.auto_min_blocks(16, "optimal", 16, False) == 0          # the 186-candidate scorer spills
    assert gpu.auto_min_blocks(16, "greedy", 16, True) == 0            # prefetch needs 80 registers
    assert gpu.auto_min_blocks(32, "greedy", 16, False) == 0


@pytest.mark.parametrize("shape", [(0, 32), (32, 0), (0, 0)])
def test_empty_weights_give_empty_outputs(shape):
    from sparsekit.gpu import sparsify24 as gpu
    w = np.zeros(shape, np.float16)
    want, got = ref.sparsify24(w), gpu.sparsify24(w)
    m, k = shape
    expect = {"tile_masks": (m // 4, k // 4), "packed": (m, k // 2), "meta": (m, k // 16),
              "packed_t": (k, m // 2), "meta_t": (k, m // 16)}
    for f, s in expect.items():
        assert getattr(want, f).shape == getattr(got, f).shape == s, f


# ------------------------------------------------------------------------- experiment, bench, command at toy size

def test_experiment_runs_quick(tmp_path):
    from experiments.sparsify24 import EXPERIMENT
    from sparsekit.experiment import Context
    sec = EXPERIMENT.run(Context(quick=True, backend="simulator", out_dir=tmp_path))
    kept, correct, training = sec.tables[:3]
    assert all(r["correct"] for r in correct.records)
    by_mask = {(r["dist"], r["mask"]): r["kept_share"] for r in kept.records}
    for dist in ("normal", "uniform", "laplace"):
        assert by_mask[(dist, "optimal")] >= by_mask[(dist, "greedy (index ties)")]
        assert by_mask[(dist, "row-wise 2:4 (not transposable)")] >= by_mask[(dist, "optimal")]
    assert all(0.0 <= r["acc_with_24_mask"] <= 1.0 for r in training.records)
    assert (tmp_path / "sparsify24_kept.png").exists()


def test_bench_sanitize_run_passes_on_the_simulator():
    from experiments import bench_sparsify24 as bench
    from sparsekit.bench.sparsify24 import bytes_moved
    # the plumbing at 64x96, not the GPU run's 160x96 (26 s here, 10 s): every variant still has a partial
    # block of columns, row_threads=4 two blocks of rows; rows past one block at the default row_threads are
    # test_kernel_handles_rows_beyond_one_block's, and test_kernel_equals_reference_bit_for_bit draws every
    # variant at up to 96x96
    assert bench.sanitize_run((64, 96)) == 0
    assert bytes_moved(4096, 1024, 2) == int(4.375 * 4096 * 1024)


@pytest.mark.simulator("on a GPU the command times too: tests/gpu/test_sparsify24_gpu.py::test_bench_command_times")
def test_bench_command_reports_mask_quality_without_a_gpu(capsys):
    from sparsekit import cli
    assert cli.main(["bench", "sparsify24", "--m", "64", "--k", "64"]) == 0
    out = capsys.readouterr().out
    assert "optimal_full" in out and "no timings" in out
