"""sparsekit/gpu/uspmm.py equals sparsekit/reference/uspmm.py for every variant, tunable, dtype, index
dtype and memory order (CUDA simulator without a GPU: tiny shapes, few threads),
and rejects bad input with a message naming the argument."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparsekit.gpu import uspmm as gu
from sparsekit.reference import uspmm as ru
from sparsekit.formats import ELL
from strategies import dense_arrays, ell_matrices, uniform_mask
from test_spmm import assert_fp32_accumulated, rhs_for

KERNEL_DTYPES = (np.float32, np.float16)

LISTING1 = st.fixed_dictionaries({
    "variant": st.just("listing1"),
    "nwarp": st.integers(1, 2),
    "vsize": st.integers(1, 3),
    "vecsize": st.sampled_from([1, 2, 4]),
})
# splits: the K range of each output tile over 1 to 3 blocks (more than the chunks or slots there are
# is clamped), partials summed in a fixed order
SPLITS = st.integers(1, 3)

# float16 reads the B tile 4 or 8 halves at a time, float32 2, 4 or 8 floats; kc a multiple of unroll
PIPELINED = {
    dt: st.fixed_dictionaries({"variant": st.just("pipelined"), "nwarp": st.integers(1, 2),
                               "rows_per_warp": st.integers(1, 3), "cols_per_lane": st.sampled_from(cpls),
                               "kc": st.sampled_from([4, 8, 16]), "unroll": st.sampled_from([2, 4]),
                               "min_blocks": st.integers(1, 2), "splits": SPLITS})
    for dt, cpls in ((np.float32, [2, 4, 8]), (np.float16, [4, 8]))
}

DIRECT = {
    dt: st.fixed_dictionaries({"variant": st.just("direct"), "nwarp": st.integers(1, 2),
                               "rows_per_warp": st.integers(1, 3), "cols_per_lane": st.sampled_from(cpls),
                               "unroll": st.sampled_from([2, 4]), "splits": SPLITS})
    for dt, cpls in ((np.float32, [2, 4, 8]), (np.float16, [4, 8]))
}

DENSE_TILE = st.fixed_dictionaries({"variant": st.just("dense_tile"), "nwarp": st.integers(1, 2),
                                    "rows_per_warp": st.sampled_from([4, 8]), "cols_per_lane": st.sampled_from([4, 8]),
                                    "kc": st.sampled_from([2, 4, 8]), "min_blocks": st.integers(1, 2),
                                    "splits": SPLITS})


# warp_split: float32 reads B 2, 4 or 8 floats at a time, float16 4 or 8 halves; B's width from
# every side of the interior (a column tile inside N, read with vector loads) and the edge tile
WARP_SPLIT = {
    dt: st.fixed_dictionaries({"variant": st.just("warp_split"), "nwarp": st.integers(1, 3),
                               "rows_per_warp": st.integers(1, 3), "cols_per_lane": st.sampled_from(cpls),
                               "unroll": st.sampled_from([2, 4, 8]), "min_blocks": st.integers(1, 3)})
    for dt, cpls in ((np.float32, [2, 4, 8]), (np.float16, [4, 8]))
}
WARP_SPLIT_N = st.sampled_from([1, 5, 64, 66, 128, 136])

def check_against_reference(ell, b, tunables):
    got = gu.uspmm(ell, b, **tunables)
    want = ru.uspmm(ell, b)
    assert isinstance(got, np.ndarray)
    assert got.flags.f_contiguous if not b.flags.c_contiguous else got.flags.c_contiguous
    assert_fp32_accumulated(got, want, ell.to_dense(), b, reduction=ell.kprime)


@given(data=st.data(), dtype=st.sampled_from(KERNEL_DTYPES), order=st.sampled_from("CF"))
def test_listing1_and_vec_match_reference(data, dtype, order):
    ell = data.draw(ell_matrices(dtype=dtype, max_size=40))
    b = np.asarray(data.draw(rhs_for(ell, max_n=7)), order=order)
    check_against_reference(ell, b, data.draw(LISTING1))


@given(data=st.data(), dtype=st.sampled_from(KERNEL_DTYPES))
def test_pipelined_matches_reference(data, dtype):
    """Several K chunks (both shared buffers in turn), partial column tiles, rows past M."""
    ell = data.draw(ell_matrices(dtype=dtype, max_size=14))
    b = data.draw(rhs_for(ell, max_n=9))
    check_against_reference(ell, b, data.draw(PIPELINED[dtype]))


@given(data=st.data(), dtype=st.sampled_from(KERNEL_DTYPES))
def test_direct_matches_reference(data, dtype):
    ell = data.draw(ell_matrices(dtype=dtype, max_size=16))
    b = data.draw(rhs_for(ell, max_n=9))
    check_against_reference(ell, b, data.draw(DIRECT[dtype]))


@given(data=st.data(), dtype=st.sampled_from(KERNEL_DTYPES))
def test_dense_tile_matches_reference(data, dtype):
    ell = data.draw(ell_matrices(dtype=dtype, max_size=14))
    b = data.draw(rhs_for(ell, max_n=9))
    check_against_reference(ell, b, data.draw(DENSE_TILE))


@given(data=st.data(), dtype=st.sampled_from(KERNEL_DTYPES))
def test_warp_split_matches_reference(data, dtype):
    """Each row's K' slots split over 1-3 warps (runs of 0 slots where K' < nwarp), full and tail
    steps of ``unroll`` entries, interior and edge column tiles, rows past M."""
    ell = data.draw(ell_matrices(dtype=dtype, max_size=10))
    b = data.draw(dense_arrays((ell.shape[1], data.draw(WARP_SPLIT_N)), dtype=dtype))
    check_against_reference(ell, b, data.draw(WARP_SPLIT[dtype]))


@given(data=st.data(), dtype=st.sampled_from(KERNEL_DTYPES))
def test_linear_layout_matches_reference(data, dtype):
    """Eq. 2: Y = X W^T from a row-major X, through Listing 1's column-major layout."""
    ell = data.draw(ell_matrices(dtype=dtype, max_size=20))
    n = data.draw(st.integers(1, 6))
    x = data.draw(dense_arrays((n, ell.shape[1]), dtype=dtype))
    got = gu.uspmm_linear(ell, x, **data.draw(LISTING1))
    want = ru.uspmm_linear(ell, x)
    assert got.flags.c_contiguous and got.shape == (n, ell.shape[0])
    assert_fp32_accumulated(got.T, want.T, ell.to_dense(), x.T, reduction=ell.kprime)


# Edge shapes the strategies may miss in 15 examples: K' = 0, K' = K, one row,
# M and N not multiples of 32, VSize or vecSize.
EDGE_CASES = [((1, 5), 0), ((33, 7), 7), ((37, 9), 0), ((66, 5), 5), ((3, 1), 1)]


@pytest.mark.parametrize("shape,kprime", EDGE_CASES)
@pytest.mark.parametrize("tunables", [dict(vsize=3, nwarp=2), dict(vsize=2, vecsize=4), dict(vsize=3, vecsize=2),
                                      dict(variant="pipelined", nwarp=1, rows_per_warp=8, cols_per_lane=2, kc=4,
                                           unroll=4),
                                      dict(variant="direct", nwarp=2, rows_per_warp=2, cols_per_lane=2, unroll=4),
                                      dict(variant="dense_tile", nwarp=1, rows_per_warp=4, cols_per_lane=4, kc=4),
                                      dict(variant="warp_split", nwarp=2, rows_per_warp=4, cols_per_lane=2, unroll=4)])
def test_edge_shapes(shape, kprime, tunables):
    rng = np.random.default_rng(kprime * 100 + shape[0])
    m, k = shape
    mask = uniform_mask(rng, m, k, kprime)
    ell = ELL.from_dense(rng.uniform(0.5, 2.0, shape).astype(np.float32), mask, index_dtype=np.int16)
    b = rng.uniform(-2.0, 2.0, (k, 5)).astype(np.float32)
    check_against_reference(ell, b, tunables)


def test_device_arrays_in_device_arrays_out():
    from numba import cuda
    rng = np.random.default_rng(1)
    w = rng.uniform(0.5, 2.0, (8, 6)).astype(np.float32)
    ell = gu.prepare(ELL.from_dense(w))
    b = rng.uniform(-1.0, 1.0, (6, 3)).astype(np.float32)
    got = gu.uspmm(ell, cuda.to_device(b))
    assert getattr(got, "__cuda_ndarray__", False)
    np.testing.assert_array_equal(got.copy_to_host(), gu.uspmm(ell, b))


# --- bad input: a clear error, never a wrong answer --------------------------------

@pytest.fixture
def small():
    w = np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 4.0]], dtype=np.float32)
    return ELL.from_dense(w), np.ones((3, 2), np.float32)


def test_rejects_wrong_rows(small):
    ell, _ = small
    with pytest.raises(ValueError, match=r"b: expected shape \(3, \*\)"):
        gu.uspmm(ell, np.ones((4, 2), np.float32))


def test_rejects_dtype_mismatch(small):
    ell, b = small
    with pytest.raises(TypeError, match=r"b: dtype must be one of \(float32\), got float16"):
        gu.uspmm(ell, b.astype(np.float16))


def test_rejects_non_contiguous(small):
    ell, _ = small
    with pytest.raises(ValueError, match="b: expected a C- or F-contiguous array"):
        gu.uspmm(ell, np.ones((3, 4), np.float32)[:, ::2])


@pytest.mark.parametrize("variant", ["pipelined", "direct", "dense_tile", "warp_split"])
def test_rejects_column_major_for_row_major_variants(small, variant):
    ell, b = small
    with pytest.raises(ValueError, match=f"b: variant '{variant}' needs a C-ordered"):
        gu.uspmm(ell, np.asfortranarray(np.ones((3, 4), np.float32)), variant=variant)


def test_rejects_float64(small):
    ell, b = small
    e64 = ELL(ell.values.astype(np.float64, order="F"), ell.indices, ell.shape)
    with pytest.raises(TypeError, match="ell: values dtype must be float32, float16 or bfloat16"):
        gu.uspmm(e64, b.astype(np.float64))


def test_rejects_index_past_k(small):
    ell, b = small
    bad = np.asfortranarray(ell.indices.copy())
    bad[1, 1] = 3
    with pytest.raises(ValueError, match=r"indices: indices must lie in \[0, 3\), found 3"):
        gu.uspmm(ELL(ell.values, bad, ell.shape), b)


@pytest.mark.parametrize("tunables,match", [
    (dict(vsize=16, nwarp=4), "exceeds 1024"),
    (dict(vsize=8, nwarp=2, vecsize=4), "sh_c needs 65536 bytes"),
    (dict(vecsize=3), "vecsize: must be 1, 2 or 4"),
    (dict(variant="fast"), "variant: must be one of"),
    (dict(variant="pipelined", kc=6, unroll=4), "kc: must be divisible by 4, got 6"),
    (dict(variant="pipelined", unroll=3), "unroll: must be 2 or 4"),
    (dict(variant="pipelined", cols_per_lane=3), "cols_per_lane: must be 2, 4 or 8"),
    (dict(variant="pipelined", kc=64, cols_per_lane=4, nwarp=8), r"two buffers .* need 91904 bytes"),
    (dict(variant="pipelined", min_blocks=0), "min_blocks: must be >= 1"),
    (dict(variant="direct", unroll=8), "unroll: must be 2 or 4"),
    (dict(variant="direct", cols_per_lane=3), "cols_per_lane: must be 2, 4 or 8"),
    (dict(variant="dense_tile", rows_per_warp=3), "cols_per_lane, rows_per_warp: must be 4 or 8 each"),
    (dict(variant="dense_tile", kc=15), "kc: must be divisible by 2, got 15"),
    (dict(variant="dense_tile", kc=64, cols_per_lane=8, nwarp=8), r"B and A tiles need 147456 bytes"),
    (dict(nwarp=0), "nwarp: must be >= 1"),
    (dict(variant="dense_tile", splits=0), "splits: must be >= 1"),
    (dict(variant="direct", splits=65), "splits: must be <= 64"),
    (dict(splits=2), "splits: variant 'listing1' does not split K"),
    (dict(variant="warp_split", splits=2), "splits: variant 'warp_split' does not split K"),
    (dict(variant="warp_split", unroll=3), "unroll: must be 2, 4 or 8"),
    (dict(variant="warp_split", cols_per_lane=3), "cols_per_lane: must be 2, 4 or 8"),
    (dict(variant="warp_split", nwarp=33), "nwarp: must be <= 32"),
    (dict(variant="warp_split", min_blocks=0), "min_blocks: must be >= 1"),
    (dict(variant="warp_split", nwarp=16, rows_per_warp=8, cols_per_lane=8), r"partial tiles need 131072 bytes"),
])
def test_rejects_bad_tunables(small, tunables, match):
    ell, b = small
    with pytest.raises(ValueError, match=match):
        gu.uspmm(ell, b, **tunables)


def test_warp_split_rejects_two_halves_a_lane():
    ell16 = ELL.from_dense(np.array([[1.0, 0.0], [0.0, 2.0]], dtype=np.float16))
    with pytest.raises(ValueError, match=r"cols_per_lane: must be 2, 4 or 8 \(4 or 8 for float16"):
        gu.uspmm(ell16, np.ones((2, 3), np.float16), variant="warp_split", cols_per_lane=2)


def test_warp_split_repeats_bit_identical():
    """The warps' partial sums meet in shared memory in the fixed order 0, 1, ...: repeats agree bit
    for bit (the GPU test repeats this at real sizes, where warps finish in varying order)."""
    rng = np.random.default_rng(3)
    mask = np.zeros((5, 40), dtype=bool)
    for r in range(5):
        mask[r, rng.choice(40, size=23, replace=False)] = True
    ell = ELL.from_dense(rng.standard_normal((5, 40)).astype(np.float32), mask)
    b = rng.standard_normal((40, 70)).astype(np.float32)
    cfg = dict(variant="warp_split", nwarp=3, rows_per_warp=2, cols_per_lane=2, unroll=2)
    first = gu.uspmm(ell, b, **cfg)
    assert (first.view(np.uint32) == gu.uspmm(ell, b, **cfg).view(np.uint32)).all()
    assert_fp32_accumulated(first, ru.uspmm(ell, b), ell.to_dense(), b, reduction=ell.kprime)


def test_rejects_non_ell(small):
    _, b = small
    with pytest.raises(TypeError, match="ell: expected a sparsekit.formats.ELL"):
        gu.uspmm(np.eye(3, dtype=np.float32), b)


# --- autotuner and CLI (no timing without a GPU) ------------------------------------------------

def test_tune_space_holds_the_paper_settings_and_fits_the_launcher():
    from sparsekit.gpu.uspmm import SHARED_LIMIT, pipelined_shared_bytes
    from sparsekit.tune import space

    def listing1(configs):
        return {(c["nwarp"], c["vsize"], c["vecsize"]) for c in configs if c["variant"] == "listing1"}
    for dtype in KERNEL_DTYPES:
        assert listing1(space(dtype, "F")) == {(1, 8, 1), (2, 8, 2)}
        assert {(1, 8, 1), (2, 8, 1), (1, 8, 2), (2, 8, 2)} <= listing1(space(dtype, full=True))
        for full in (False, True):
            configs = space(dtype, full=full)
            assert {"pipelined", "direct", "dense_tile", "warp_split"} <= {c["variant"] for c in configs}
            assert all(pipelined_shared_bytes(c["nwarp"] * c["rows_per_warp"], c["cols_per_lane"], c["kc"])
                       <= SHARED_LIMIT for c in configs if c["variant"] == "pipelined")
    assert all(c["variant"] == "listing1" for c in space(np.float32, "F", full=True))


def test_tune_cache_round_trip_and_auto(tmp_path, monkeypatch, small):
    from sparsekit import tune
    monkeypatch.setenv("SPARSEKIT_TUNE_CACHE", str(tmp_path / "cache.json"))
    ell, b = small
    dell = gu.prepare(ell)
    assert tune.lookup(dell, 2, "C") is None
    assert tune.resolve("auto", dell, 2, "C") == tune.heuristic(2, 3, 2, 2, np.float32, "C")
    cfg = dict(variant="listing1", nwarp=1, vsize=2, vecsize=2)
    key = tune.problem_key(tune._device_name(), 2, 3, 2, 2, np.float32, np.int32, "C")
    tune._store(key, dict(config=cfg, median_us=1.0))
    assert tune.resolve("auto", dell, 2, "C") == cfg
    np.testing.assert_array_equal(gu.uspmm(dell, b, config="auto"), gu.uspmm(dell, b, **cfg))
    with pytest.raises(ValueError, match="config: expected a dict of tunables, 'auto' or 'heuristic'"):
        gu.uspmm(dell, b, config="fastest")


def test_tune_cache_is_read_once_and_again_when_the_file_changes(tmp_path, monkeypatch, small):
    """``config="auto"`` looks its problem up on every call: the file is parsed once, and again only when it
    changed on disk (another process tuning, or ``sparsekit tune``)."""
    import json
    import os

    from sparsekit import tune
    path = tmp_path / "cache.json"
    monkeypatch.setenv("SPARSEKIT_TUNE_CACHE", str(path))
    dell = gu.prepare(small[0])
    key = tune.problem_key(tune._device_name(), 2, 3, 2, 2, np.float32, np.int32, "C")
    first = dict(variant="listing1", nwarp=1, vsize=2, vecsize=2)
    tune._store(key, dict(config=first, median_us=1.0))
    parsed = []
    real_load = json.load
    monkeypatch.setattr(json, "load", lambda f: parsed.append(1) or real_load(f))
    for _ in range(3):
        assert tune.lookup(dell, 2, "C") == first
    assert len(parsed) == 1
    second = dict(variant="listing1", nwarp=2, vsize=4, vecsize=1)
    path.write_text(json.dumps({key: dict(config=second, median_us=0.5)}) + "\n" * 3)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert tune.lookup(dell, 2, "C") == second
    assert len(parsed) == 2
    looked_up = tune.lookup(dell, 2, "C")
    looked_up["nwarp"] = 99                             # a caller's copy: the cached contents stay
    assert tune.lookup(dell, 2, "C") == second
    path.unlink()
    assert tune.lookup(dell, 2, "C") is None


@pytest.mark.parametrize("m,k,n,kprime,want", [
    # the float32 winners of the H100 tuning sweep (experiments/results/uspmm.md);
    # its two small-grid problems (128^3, 1024 x 1024 x 128) are in SPLIT_RUN below (that sweep had no splits)
    (1024, 1024, 1024, 410, ("dense_tile", 4, 8, 8, 16, 2)),
    (1024, 1024, 16384, 410, ("dense_tile", 4, 8, 8, 16, 2)),
    (1024, 1024, 1024, 205, ("dense_tile", 4, 8, 8, 16, 2)),
    (512, 512, 1024, 205, ("dense_tile", 4, 4, 8, 16, 2)),
    (1024, 1024, 1024, 51, ("direct", 4, 2, 4, 4)),
    (4096, 4096, 1024, 410, ("direct", 4, 2, 4, 4)),
    # 85%: not tuned; the direct kernel's times at 80% (105 us) and 90% (60.4 us)
    # put it below the dense-tile kernel's 92.1 us measured there
    (1024, 1024, 1024, 154, ("direct", 4, 2, 4, 4)),
])
def test_heuristic_picks_the_tuned_winners(m, k, n, kprime, want):
    """The CUDA-core winners (that tuning run had neither the tensor-core nor the warp-split kernel:
    ``tensor_cores=False, few_columns=False``)."""
    from sparsekit import tune
    variant, *shape = want
    assert tune.heuristic(m, k, n, kprime, np.float32, "C", tensor_cores=False, few_columns=False) == \
        getattr(tune, variant)(*shape)
    assert tune.heuristic(m, k, n, kprime, np.float32, "F")["variant"] == "listing1"


@pytest.mark.parametrize("m,k,n,kprime,want,note", [
    # the float16 winners of `bench_uspmm.py --tune-table float16` on the H100, 2026-11-23
    (1024, 1024, 1024, 410, ("dense_tile", 4, 4, 8, 16, 2), "110.1 us"),
    (1024, 1024, 16384, 410, ("dense_tile", 4, 8, 8, 16, 2), "1136 us"),
    (1024, 1024, 1024, 51, ("direct", 8, 2, 4, 4), "37.1 us"),
    (4096, 4096, 1024, 410, ("direct", 8, 2, 4, 4), "630 us"),
    (128, 128, 128, 51, ("pipelined", 4, 1, 8, 32, 4, 2, 4), "11.2 us"),
    (1024, 1024, 128, 410, ("dense_tile", 4, 4, 8, 16, 2, 4), "38.5 us"),
    (1024, 1024, 1024, 205, ("direct", 8, 2, 4, 4), "108.6 us"),
    (512, 512, 1024, 205, ("dense_tile", 4, 4, 8, 16, 2), "47.8 us; the winner, the same with splits=2, 46.8 us"),
])
def test_heuristic_picks_the_float16_tuned_winners(m, k, n, kprime, want, note):
    """The CUDA-core winners (that tuning run had neither the tensor-core nor the warp-split kernel:
    ``tensor_cores=False, few_columns=False``)."""
    from sparsekit import tune
    variant, *shape = want
    assert tune.heuristic(m, k, n, kprime, np.float16, "C", tensor_cores=False, few_columns=False) == \
        getattr(tune, variant)(*shape)


# `bench_uspmm.py --split-explore` on the H100, 2026-11-23: small output grids (N = 128 at
# M <= 2048, 128^3; Fig. 5, Fig. 6 and the ResNet-50 layers of Table 1) with the K range split.
# Rows: problem, the heuristic's choice (variant, shape..., splits), its time, the fastest measured.
SPLIT_RUN = [
    (256, 256, 128, 102, np.float32, ("pipelined", 4, 1, 8, 32, 4, 2, 8), 14.7, 12.7),
    (512, 512, 128, 205, np.float32, ("pipelined", 4, 1, 8, 32, 4, 2, 4), 18.1, 18.1),
    (768, 768, 128, 307, np.float32, ("dense_tile", 4, 4, 8, 16, 2, 4), 28.9, 28.9),
    (1024, 1024, 128, 410, np.float32, ("dense_tile", 4, 4, 8, 16, 2, 4), 33.6, 33.6),
    (128, 128, 128, 122, np.float32, ("pipelined", 4, 1, 8, 32, 4, 2, 4), 11.2, 11.2),
    (128, 128, 128, 51, np.float32, ("pipelined", 4, 1, 8, 32, 4, 2, 4), 10.7, 10.7),
    (128, 128, 128, 6, np.float32, ("direct", 4, 2, 4, 4, 1), 8.6, 8.6),
    (256, 256, 1024, 102, np.float32, ("pipelined", 4, 1, 8, 32, 4, 2, 1), 19.9, 19.9),
    (64, 576, 128, 109, np.float32, ("pipelined", 4, 1, 8, 32, 4, 2, 8), 14.3, 14.3),
    (128, 1152, 128, 219, np.float32, ("pipelined", 4, 1, 8, 32, 4, 2, 8), 17.4, 17.4),
    (256, 2304, 128, 438, np.float32, ("pipelined", 4, 1, 8, 32, 4, 2, 8), 25.7, 25.7),
    (512, 4608, 128, 876, np.float32, ("direct", 4, 2, 4, 4, 16), 58.8, 58.8),
    (1024, 256, 128, 49, np.float32, ("pipelined", 4, 1, 8, 32, 4, 2, 2), 16.7, 15.8),
    (2048, 512, 128, 97, np.float32, ("pipelined", 4, 1, 8, 32, 4, 2, 1), 30.4, 30.4),
    (1000, 2048, 128, 389, np.float32, ("direct", 4, 2, 4, 4, 8), 48.4, 48.3),
    (2048, 1024, 128, 195, np.float32, ("dense_tile", 4, 4, 8, 16, 2, 4), 42.3, 42.3),
    (1024, 1024, 128, 51, np.float32, ("direct", 4, 2, 4, 4, 4), 19.6, 19.6),
    (256, 256, 128, 102, np.float16, ("pipelined", 4, 1, 8, 32, 4, 2, 8), 15.7, 13.4),
    (512, 512, 128, 205, np.float16, ("pipelined", 4, 1, 8, 32, 4, 2, 4), 19.3, 19.3),
    (768, 768, 128, 307, np.float16, ("dense_tile", 4, 4, 8, 16, 2, 4), 32.9, 32.9),
    (1024, 1024, 128, 410, np.float16, ("dense_tile", 4, 4, 8, 16, 2, 4), 38.2, 38.2),
    (128, 128, 128, 122, np.float16, ("pipelined", 4, 1, 8, 32, 4, 2, 4), 11.8, 11.8),
    (128, 128, 128, 51, np.float16, ("pipelined", 4, 1, 8, 32, 4, 2, 4), 11.2, 11.2),
    (128, 128, 128, 6, np.float16, ("direct", 4, 2, 4, 4, 1), 8.4, 8.4),
    (256, 256, 1024, 102, np.float16, ("pipelined", 4, 1, 8, 32, 4, 2, 1), 20.9, 20.9),
    (64, 576, 128, 109, np.float16, ("pipelined", 4, 1, 8, 32, 4, 2, 8), 15.2, 15.2),
    (128, 1152, 128, 219, np.float16, ("pipelined", 4, 1, 8, 32, 4, 2, 8), 18.6, 18.6),
    (256, 2304, 128, 438, np.float16, ("pipelined", 4, 1, 8, 32, 4, 2, 8), 27.3, 27.3),
    (512, 4608, 128, 876, np.float16, ("direct", 4, 2, 4, 4, 16), 58.9, 58.9),
    (1024, 256, 128, 49, np.float16, ("pipelined", 4, 1, 8, 32, 4, 2, 2), 17.9, 17.1),
    (2048, 512, 128, 97, np.float16, ("pipelined", 4, 1, 8, 32, 4, 2, 1), 30.8, 30.3),
    (1000, 2048, 128, 389, np.float16, ("direct", 4, 2, 4, 4, 8), 47.7, 47.7),
    (2048, 1024, 128, 195, np.float16, ("dense_tile", 4, 4, 8, 16, 2, 4), 43.6, 43.6),
    (1024, 1024, 128, 51, np.float16, ("direct", 4, 2, 4, 4, 4), 19.9, 19.9),
]


@pytest.mark.parametrize("m,k,n,kprime,dtype,want,picked_us,best_us", SPLIT_RUN)
def test_heuristic_splits_small_grids_as_measured(m, k, n, kprime, dtype, want, picked_us, best_us):
    """On every problem of the split run the heuristic's choice among the K-split kernels is the fastest
    setting measured, or one within 20% of it (256^2 x 128: splits 8 for 4, 14.7 vs 12.7 us; the others
    within 6%). That run had no warp-split kernel (``few_columns=False``; :data:`SMALL_N_RUN` routes most
    of these problems to it now)."""
    from sparsekit import tune
    variant, *shape, splits = want
    assert tune.heuristic(m, k, n, kprime, dtype, "C", tensor_cores=False, few_columns=False) == \
        getattr(tune, variant)(*shape, splits=splits)
    assert picked_us <= 1.2 * best_us


# The tensor-core and K-split measurements of experiments/results/uspmm_tc.md (H100, 2026-11-23): whether the tensor-core kernel beat the CUDA-core heuristic's choice (us: tensor-core
# setting / CUDA-core). "large": sparsekit.tune.TC_LARGE of the dtype, "one_wave": TC_ONE_WAVE, "default": TC_DEFAULT,
# "small": sparsekit.tune.tc_small_grid(K) (32 x 128 tiles, two blocks an SM, K split).
TC_ROUTING = [
    (1024, 1024, 1024, 410, np.float16, "default", "29.9 / 107.7"),
    (1024, 1024, 1024, 205, np.float16, "default", "27.9 / 94.4"),
    (1024, 1024, 1024, 102, np.float16, "default", "25.3 / 55.3"),
    (1024, 1024, 1024, 51, np.float16, "default", "25.3 / 34.6"),
    (1024, 1024, 16384, 410, np.float16, "large", "246.6 / 1136.8"),
    (4096, 4096, 1024, 410, np.float16, "large", "246.7 (64 x 256, one block an SM) / 506.9"),
    (1024, 1024, 128, 410, np.float16, "small", "18.2 / 28.8"),
    (512, 4608, 128, 876, np.float16, "small", "30.6 / 50.9"),
    (512, 1024, 128, 195, np.float16, "small", "17.6 / 30.0"),
    (512, 2048, 128, 389, np.float16, "small", "22.3 / 35.2"),
    (256, 2304, 128, 438, np.float16, "small", "22.7 / 27.1"),
    (2048, 512, 128, 97, np.float16, "small", "13.0 / 16.3"),
    (1000, 2048, 128, 389, np.float16, "small", "23.7 / 40.4"),
    (128, 1152, 128, 219, np.float16, "small", "17.6 / 18.6"),
    # grids of about one wave: one wave of tiles, tensor-core default / CUDA-core auto
    (768, 768, 1024, 307, np.float16, "default", "24.2 / 81.4"),
    (768, 768, 1024, 307, np.float32, "one_wave", "54.7 / 81.6; K groups: one-wave setting 47.8"),
    (1024, 1024, 512, 410, np.float16, "small", "21.1 unsplit / 25.9 two splits (128 tiles of 32 x 128)"),
    (1024, 1024, 1024, 410, np.float32, "one_wave", "70.7 / 91.5; K groups: 60.8 (cuBLAS 62.4)"),
    (1024, 1024, 1024, 205, np.float32, "one_wave", "71.1 / 91.6; K groups: 60.3 (cuBLAS 61.5)"),
    (1024, 1024, 16384, 410, np.float32, "large", "897.0 / 1120.8; 64 x 256 w1x4 669.4 / default 863.5"),
    (1024, 1024, 4096, 410, np.float32, "large", "184.4 / default 230.0 (grids of many waves)"),
    (1024, 1024, 2048, 410, np.float32, "large", "lean 102.0 / one-wave lean 107.4 / default lean 110.4 ("
                                                 "float32 lean; 128 tiles of 64 x 256)"),
    (4096, 4096, 1024, 1638, np.float32, "large", "664.2 / default 862.4 (grids of many waves)"),
    (1024, 1024, 1024, 154, np.float32, "one_wave", "71.1 / 83.2; K groups: 60.3 (cuBLAS 62.1)"),
    (1024, 1024, 1024, 102, np.float32, None, "71.4 / 60.1"),
    (1024, 1024, 1024, 51, np.float32, None, "71.3 / 35.9"),
    (4096, 4096, 1024, 410, np.float32, None, "885.9 (64 x 256) / 635.0"),
    (1024, 1024, 128, 410, np.float32, None, "42.5 (best split) / 33.7"),
    (512, 4608, 128, 876, np.float32, None, "80.4 (best split) / 54.9"),
    # experiments/results/gpu_verification.md: float32 60%, the defaults with two splits / the CUDA-core choice;
    # then ("later") experiments/results/uspmm_tc.md: the one-wave setting with two splits (routed since) / the
    # defaults with two splits
    (512, 512, 1024, 205, np.float32, "half_wave", "35.0 / dense tile 40.1 (64 tiles of 64 x 128); later 27.8 / 30.6"),
    (1024, 1024, 512, 410, np.float32, "half_wave", "51.1 / dense tile 70.9 (64 tiles); later 39.8 / 47.6"),
    (256, 256, 1024, 102, np.float32, None, "two splits 24.4, unsplit 21.9 / pipelined 19.6 (32 tiles)"),
    (128, 128, 1024, 51, np.float32, None, "unsplit 13.8 / pipelined 14.2 (16 tiles: within noise)"),
]


@pytest.mark.parametrize("m,k,n,kprime,dtype,routed,note", TC_ROUTING)
def test_heuristic_routes_to_tensor_cores_where_measured_faster(m, k, n, kprime, dtype, routed, note):
    from sparsekit import tune
    got = tune.heuristic(m, k, n, kprime, dtype, "C", few_columns=False)   # those runs had no warp-split kernel
    tiles32 = -(-m // 32) * -(-n // 128)
    want = {"default": tune.tensor_core(**tune.TC_DEFAULT[np.dtype(dtype)]), "large": tune.tensor_core(**tune.TC_LARGE[np.dtype(dtype)]),
            "one_wave": tune.tensor_core(**tune.TC_ONE_WAVE.get(np.dtype(dtype), {})),
            "half_wave": tune.tensor_core(**tune.TC_HALF_WAVE.get(np.dtype(dtype), {})),
            "small": tune.tc_small_grid(k, tiles32)}.get(routed)
    assert got == want if routed else got["variant"] != "tensor_core", (got, note)
    assert tune.heuristic(m, k, n, kprime, dtype, "F")["variant"] == "listing1"      # needs row-major B
    assert tune.heuristic(m, k, n, kprime, dtype, "C", tensor_cores=False)["variant"] != "tensor_core"


# The small-N kernel in experiments/results/uspmm.md (H100, 2026-11-23):
# problem, dtype, the heuristic's choice ("S1", "S2": sparsekit.tune.WARP_SPLIT_S1/S2, "S1c2": S1 with 2
# columns a lane; None: not the warp-split kernel), us of that choice / of the previous heuristic's choice.
SMALL_N_RUN = [
    (512, 1024, 128, 195, np.float32, "S1", "9.7 / 30.0 (cuSPARSE 21.1)"),
    (256, 2304, 128, 438, np.float32, "S1", "12.5 / 25.2"),
    (512, 4608, 128, 876, np.float32, "S1", "28.4 / 57.2"),
    (1000, 2048, 128, 389, np.float32, "S1", "24.6 / 43.6"),
    (1024, 512, 128, 97, np.float32, "S1", "10.5 / 22.4"),
    (1024, 1024, 128, 410, np.float32, "W4", "S1 22.7 / 33.7 (Fig. 5); 4 warps 18.2 / S1 22.5"),
    (128, 128, 128, 6, np.float32, "S1", "6.3 / 11.2"),
    (1024, 2048, 256, 389, np.float32, "S1", "46.5 / 67.3 (few warps: not measured at K > 1024)"),
    (2048, 512, 128, 97, np.float32, "S2", "15.3 / 30.7"),
    (2048, 1024, 128, 195, np.float32, "S2", "23.7 / 42.8"),
    (1536, 1536, 128, 614, np.float32, "S2", "37.1 / 54.2 (M K = 2.4M)"),
    (4096, 2048, 128, 389, np.float32, "S2", "77.4 / 133.4"),
    (2048, 2048, 128, 819, np.float32, None, "S2 68.7 / dense tile 67.3"),
    (512, 1024, 64, 195, np.float32, "S1c2", "8.4 / 32.9"),
    (2048, 512, 64, 97, np.float32, "S1c2", "13.7 / 46.9"),
    (512, 4608, 128, 876, np.float16, "S1", "20.1 / 30.9 (tensor cores)"),
    (1000, 2048, 128, 389, np.float16, "S1", "19.4 / 23.8"),
    (1024, 1024, 128, 307, np.float16, "S1", "17.2 / 18.5 (70%, d = 0.2998)"),
    (1536, 1024, 128, 195, np.float16, "S2", "16.7 / 18.8"),
    (512, 2048, 256, 389, np.float16, "S1", "19.7 / 23.9"),
    (1024, 1024, 128, 410, np.float16, None, "tensor cores 18.3 / warp split 20.3"),
    (2048, 512, 128, 97, np.float16, None, "tensor cores 13.4 / warp split 14.4"),
    (512, 1024, 64, 195, np.float16, None, "tensor cores 16.2 / warp split 21.2"),
    # the CUDA-core latency runs of experiments/results/uspmm.md (H100), float32: that choice / the
    # earlier one, same run ("W16", "W4", "W1": sparsekit.tune.WARP_SPLIT_W16/W4/W1; "wide4", "wide2": wide_warps,
# 8 columns a lane with 4 or 2 warps)
    (128, 128, 128, 122, np.float32, "W16", "6.0 / S1 6.4 (5%)"),
    (128, 128, 128, 109, np.float32, "W16", "6.0 / S1 6.3 (15%)"),
    (128, 128, 128, 102, np.float32, "S1", "S1 6.0 / 16 warps 6.0 (20%)"),
    (128, 128, 128, 51, np.float32, "S1", "S1 5.7 / 16 warps 5.4 (60%)"),
    (768, 768, 128, 307, np.float32, "W4", "13.7 / S1 17.2"),
    (1024, 512, 128, 97, np.float32, "S1", "S1 10.5; 4 warps not measured at K' < 256"),
    (1024, 1024, 1024, 102, np.float32, "W1", "41.0 / direct 60.3 (cuSPARSE 68.4)"),
    (1024, 1024, 1024, 51, np.float32, "W1", "27.6 / direct 35.8 (cuSPARSE 46.7)"),
    (128, 128, 1024, 51, np.float32, "wide4", "7.6 / pipelined 14.1"),
    (256, 256, 1024, 102, np.float32, "wide2", "14.1 / pipelined 19.9"),
    (1024, 1024, 256, 410, np.float32, "wide2", "28.4 / S1 40.9"),
    (512, 512, 1024, 205, np.float32, None, "tensor cores, two splits 35.0 / 8 columns 1 warp 35.1"),
    (1024, 1024, 512, 410, np.float32, None, "tensor cores, two splits 51.1 / 8 columns 1 warp 53.2"),
]


@pytest.mark.parametrize("m,k,n,kprime,dtype,chosen,note", SMALL_N_RUN)
def test_heuristic_routes_few_columns_to_the_warp_split_kernel_as_measured(m, k, n, kprime, dtype, chosen, note):
    from sparsekit import tune
    want = {"S1": tune.warp_split(*tune.WARP_SPLIT_S1), "S2": tune.warp_split(*tune.WARP_SPLIT_S2),
            "S1c2": tune.warp_split(*tune.WARP_SPLIT_S1C2), "W16": tune.warp_split(*tune.WARP_SPLIT_W16),
            "W4": tune.warp_split(*tune.WARP_SPLIT_W4), "W1": tune.warp_split(*tune.WARP_SPLIT_W1),
            "wide4": tune.warp_split(8, 1, 4, 4, 1), "wide2": tune.warp_split(8, 1, 2, 4, 1)}.get(chosen)
    got = tune.heuristic(m, k, n, kprime, dtype, "C")
    assert got == want if chosen else got["variant"] != "warp_split", (got, note)
    assert tune.heuristic(m, k, n, kprime, dtype, "C", few_columns=False)["variant"] != "warp_split"


@pytest.mark.parametrize("k,tiles,splits", [(512, 16, 1), (1024, 32, 2), (1152, 4, 2), (2048, 32, 4), (4608, 16, 4),
                                             (1024, 128, 1), (4608, 64, 2)])
def test_small_grid_split_keeps_eight_chunks_a_split(k, tiles, splits):
    """The measured best split counts of the K-split run: 8-9 chunks of 64 per split, at most 4 splits;
    and no more splits than keep the grid within one wave (1024 x 1024 x 512: 128 tiles, unsplit
    21.1 us against 25.9 with two splits)."""
    from sparsekit import tune
    assert tune.tc_small_grid(k, tiles)["splits"] == splits


def test_heuristic_keeps_short_k_small_grids_and_very_sparse_problems_on_cuda_cores():
    """Not measured on tensor cores: K below TC_MIN_K on a small grid (128^3, 256 x 256 x 128), and
    float16 sparser than the 95% point."""
    from sparsekit import tune
    for m, k, n, kprime in ((128, 128, 128, 51), (256, 256, 128, 102), (1024, 1024, 1024, 20)):
        assert tune.heuristic(m, k, n, kprime, np.float16, "C")["variant"] != "tensor_core"


def test_tensor_core_variant_goes_to_its_launcher(small):
    """``variant="tensor_core"`` (what float16 ``auto`` may pick) runs gpu.uspmm_tc with the other
    tunables and keeps the launcher's contract: NumPy in, NumPy out, b's dtype."""
    from sparsekit.gpu import uspmm_tc
    ell, b = small
    ell16 = ELL.from_dense(ell.to_dense().astype(np.float16))
    b16 = b.astype(np.float16)
    cfg = dict(bm=16, bn=16, kc=16, warps_m=1, warps_n=1, stages=2)
    got = gu.uspmm(ell16, b16, variant="tensor_core", **cfg)
    assert isinstance(got, np.ndarray) and got.dtype == np.float16
    np.testing.assert_array_equal(got, uspmm_tc.uspmm(ell16, b16, **cfg))


def test_heuristic_config_skips_the_cache(tmp_path, monkeypatch, small):
    from sparsekit import tune
    monkeypatch.setenv("SPARSEKIT_TUNE_CACHE", str(tmp_path / "cache.json"))
    ell, b = small
    dell = gu.prepare(ell)
    key = tune.problem_key(tune._device_name(), 2, 3, 2, 2, np.float32, np.int32, "C")
    tune._store(key, dict(config=dict(variant="listing1", nwarp=1, vsize=2, vecsize=2), median_us=1.0))
    assert tune.resolve("heuristic", dell, 2, "C") == tune.heuristic(2, 3, 2, 2, np.float32, "C")
    np.testing.assert_array_equal(gu.uspmm(dell, b, config="heuristic"), ru.uspmm(ell, b))


@pytest.mark.parametrize("argv", [["bench", "uspmm", "--m", "8", "--k", "8", "--n", "8", "--sparsity", "0.5"],
                                  ["tune", "--m", "8", "--k", "8", "--n", "8", "--sparsity", "0.5"]])
@pytest.mark.simulator("on a GPU both commands time: tests/gpu/test_uspmm_gpu.py::test_bench_and_tune_commands")
def test_cli_refuses_to_time_without_gpu(argv, capsys):
    from sparsekit.cli import main
    assert main(argv) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().out


def test_bench_refuses_tf32_weights_for_float16(capsys):
    from sparsekit.cli import main
    argv = ["bench", "uspmm", "--m", "8", "--k", "8", "--n", "8", "--sparsity", "0.5", "--dtype", "float16"]
    assert main([*argv, "--tf32-weights"]) == 2
    assert "--tf32-weights: float32 weights only" in capsys.readouterr().out


@pytest.mark.simulator("on a GPU it times: tests/gpu/test_uspmm_gpu.py::test_dispatch_benchmark_records_every_row")
def test_dispatch_benchmark_refuses_without_gpu():
    from experiments import bench_uspmm_dispatch
    with pytest.raises(RuntimeError, match="bench_uspmm_dispatch: needs a CUDA GPU"):
        bench_uspmm_dispatch.main(["--calls", "3"])


@pytest.mark.parametrize("tunables", [dict(variant="dense_tile", nwarp=1, rows_per_warp=4, cols_per_lane=4, kc=2,
                                           splits=3),
                                      dict(variant="pipelined", nwarp=1, rows_per_warp=2, cols_per_lane=4, kc=4,
                                           unroll=2, splits=2),
                                      dict(variant="direct", nwarp=2, rows_per_warp=1, cols_per_lane=4, unroll=2,
                                           splits=3)])
@pytest.mark.parametrize("kprime", [6, 0])
def test_split_repeats_bit_identical_and_leaves_tickets_zeroed(tunables, kprime):
    """A K-split launch sums its partial tiles in a fixed order (bit-identical repeats) and leaves
    every output tile's ticket at 0 for the next launch; K' = 0 gives zeros."""
    rng = np.random.default_rng(7)
    mask = np.zeros((11, 13), dtype=bool)
    for r in range(11):
        mask[r, rng.choice(13, size=kprime, replace=False)] = True
    ell = ELL.from_dense(rng.standard_normal((11, 13)).astype(np.float32), mask)
    dell = gu.prepare(ell)
    b = rng.standard_normal((13, 6)).astype(np.float32)
    first = gu.uspmm(dell, b, **tunables)
    again = gu.uspmm(dell, b, **tunables)
    assert (first.view(np.uint32) == again.view(np.uint32)).all()
    assert_fp32_accumulated(first, ru.uspmm(ell, b), ell.to_dense(), b, reduction=ell.kprime)
    tickets = [dev for key, dev in dell._cache.items() if isinstance(key, tuple) and key[0] == "split_tickets"]
    assert all((t.copy_to_host() == 0).all() for t in tickets)
    assert tickets or (tunables["variant"] == "direct" and ell.kprime == 0)    # no K' slots: nothing to split


def test_small_n_bench_runs_at_toy_size(monkeypatch, capsys):
    """experiments/bench_uspmm_small_n.py does not rot: its sanitizer cases (shrunk) run and match on the
    simulator, and its tables render from records shaped like a GPU run's."""
    from experiments import bench_uspmm_small_n as bench
    monkeypatch.setattr(bench, "SANITIZE_CASES", [(5, 7, 3, 7), (6, 9, 5, 0)])
    monkeypatch.setattr(bench, "SANITIZE_SETTINGS", [bench.warp_split(2, 2, 2), bench.warp_split(1, 1, 4, 2, 8)])
    assert bench.sanitize() == 0
    assert "every warp-split case ran and matched" in capsys.readouterr().out
    assert len(bench.resnet50_shapes()) == 21
    records = []
    for m, k in bench.resnet50_shapes()[:2]:
        base = dict(m=m, k=k, n=bench.N, sparsity=bench.SPARSITY, dtype="float32", kprime=3, correct=True)
        for i, s in enumerate(bench.SETTINGS):
            records.append(dict(base, provider=bench.setting_name(bench.warp_split(*s)), median_us=5.0 + i,
                                bit_identical=True))
        records.append(dict(base, provider="heuristic", config="direct", median_us=20.0, bit_identical=True))
        records.append(dict(base, provider="cuSPARSE CSR (torch)", median_us=40.0, correct=False))
    table = bench.table(records)
    assert "| float32 | 64x64 | 3 | 40.0* | 20.0 | direct | 5.0 | ws nw8 rpw1 u4 | 8.00x | 4.00x |" in table
    assert "nw4 rpw1 u8 mb6" in bench.settings_table(records, "float32")
    auto = [dict(r, provider="auto") if r["provider"] == "heuristic" else r for r in records[:len(records) // 2]]
    assert "| 64x64 | 3 | 40.0 | 20.0 | direct | 5.0 | ws nw8 rpw1 u4 | 8.00x | 4.00x |" in bench.latency_table(auto)
