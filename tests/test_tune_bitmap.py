"""Tuning the TiledBitmap kernel's launch: the search lists its defaults and neighbouring block shapes for both half
dtypes (every one run by ``uspmm`` and equal to the reference), a winner carrying ``rows``, ``slices``, ``stages``
(and ``splits``) round-trips through the tune cache and is what ``config="auto"`` launches, and what the kernel cannot
take is refused by name: by the launcher (recorded by the search) or, in the cache, as a stale entry. The searches
run with a stand-in timer (tests/tune_toys.py); tests/gpu/test_tune_bfloat16_gpu.py times one on a GPU."""
from __future__ import annotations

import itertools
import json
import re
import warnings

import numpy as np
import pytest

from sparsekit import router, tune, tune_cache
from sparsekit.bench.uspmm import config_name
from sparsekit.checks import BFLOAT16
from sparsekit.reference import uspmm as reference
from spmm_close import assert_half_close
from tune_toys import countdown, toy_problem  # noqa: F401 (countdown: a fixture)

HALF = (np.dtype(np.float16), BFLOAT16)
#: The toy weight: 3 blocks of 16 rows (partial strips of 2, 4 and 8 row blocks), 4 groups of 32 columns (one a slice
#: of 4; slices of 8 partly empty).
M, K = 48, 128


def _shape(cfg: dict) -> tuple:
    return cfg["rows"], cfg["slices"], cfg["stages"]


@pytest.mark.parametrize("full", [False, True], ids=["default", "full"])
def test_half_precision_spaces_list_the_bitmap_defaults_then_neighbours(full):
    """float16 and bfloat16, either order of B: the launcher's defaults first, then other block shapes (at most 12 by
    default), each once, each a winner the cache keeps; float32 has none."""
    from sparsekit.gpu.spmm_bitmap import default_config
    configs = tune.bitmap_configs(full)
    assert configs[0] == router.BITMAP.tunables() == dict(variant="bitmap")
    shapes = [_shape(cfg) for cfg in configs[1:]]
    default = default_config(M, K, 8)
    assert len(set(shapes)) == len(shapes) and (default["rows"], default["slices"], default["stages"]) not in shapes
    assert all(router.Config.valid(cfg) and router.Config(**cfg).tunables() == cfg for cfg in configs)
    if not full:
        assert len(configs) <= 12
        assert {s[0] for s in shapes} == {2, 4, 8} and {s[1] for s in shapes} == {1, 2, 4}
        assert {s[2] for s in shapes} == {4, 8}
    else:
        assert set(tune.BITMAP_SHAPES) < set(shapes)
    for dtype, order in itertools.product(HALF, "CF"):
        assert [cfg for cfg in tune.space(dtype, order, full=full) if cfg["variant"] == "bitmap"] == configs
    assert not any(cfg["variant"] == "bitmap" for order in "CF" for cfg in tune.space(np.float32, order, full=full))


def test_bitmap_fits_is_the_launchers_rule():
    """Every shape of the full grid left out of the space (:func:`tune.bitmap_fits` false) is one ``uspmm`` refuses by
    name; the rest are in the full space (each run below)."""
    from sparsekit.gpu.uspmm import prepare, uspmm
    ell, b = toy_problem(np.float16, m=M, k=K)
    dell = prepare(ell)
    grid = set(itertools.product(*tune.BITMAP_FULL_GRID))
    listed = {_shape(cfg) for cfg in tune.bitmap_configs(full=True)[1:]}
    left_out = {shape for shape in grid if not tune.bitmap_fits(*shape)}
    assert left_out and grid - left_out - listed == {(4, 4, 4)}             # the defaults, listed as such
    for shape in sorted(left_out):
        with pytest.raises(ValueError, match=r"rows \* slices"):
            uspmm(dell, b, **tune.bitmap(*shape))


@pytest.mark.parametrize("dtype, order, n, full",
                         [(dtype, order, 9, full) for dtype in HALF for order, full in (("C", False), ("F", False),
                                                                                        ("C", True))]
                         + [(BFLOAT16, "C", 64, False)],
                         ids=["f16-C", "f16-F", "f16-C-full", "bf16-C", "bf16-F", "bf16-C-full", "bf16-C-n64"])
def test_every_bitmap_setting_equals_the_reference(dtype, order, n, full):
    """Each TiledBitmap setting of the space runs through ``uspmm`` and equals the NumPy reference within float32
    accumulation and one rounding to the dtype, in B's memory order (N = 64: the widest, whose accumulators the
    slices sum through the rings; the dtypes differ there only in the MMA and the rounding)."""
    from sparsekit.gpu.uspmm import prepare, uspmm
    ell, b = toy_problem(dtype, order, n, m=M, k=K)
    dell = prepare(ell)
    want = reference.uspmm(ell, b)
    for cfg in tune.bitmap_configs(full):
        got = uspmm(dell, b, **cfg)
        assert got.dtype == dtype and (got.flags.f_contiguous if order == "F" else got.flags.c_contiguous), \
            config_name(cfg)
        assert_half_close(got, want, ell.to_dense(), b)


# --- the winner, the cache and config="auto" --------------------------------------------------------------------------

@pytest.fixture
def bitmap_launches(monkeypatch):
    """The keywords of every TiledBitmap launch ``uspmm`` makes (either form), the launches themselves unchanged."""
    from sparsekit.gpu import uspmm as gpu_uspmm
    launches = []

    def recorded(launcher):
        def launch(a, b, **tunables):
            launches.append(tunables)
            return launcher(a, b, **tunables)
        return launch
    for name in ("spmm_bitmap", "spmm_bitmap_linear"):
        monkeypatch.setattr(gpu_uspmm, name, recorded(getattr(gpu_uspmm, name)))
    return launches


@pytest.mark.simulator("the search's plumbing with a stand-in timer; on a GPU, tests/gpu/test_tune_bfloat16_gpu.py")
@pytest.mark.parametrize("dtype", HALF, ids=lambda d: d.name)
def test_a_tuned_bitmap_winner_round_trips_and_auto_launches_it(dtype, countdown, bitmap_launches):
    """The search over the TiledBitmap settings (all correct) caches its winner, here the last timed, with its rows,
    slices and stages; ``uspmm(config="auto")`` launches the kernel with exactly those, bit for bit the result of
    naming them, within the bound of the reference."""
    from sparsekit.gpu.uspmm import prepare, resolved, uspmm
    ell, b = toy_problem(dtype, m=M, k=K)
    configs = tune.bitmap_configs()
    winner, records = tune.tune(ell, b.shape[1], configs=configs, repeat=1)
    assert all(r["correct"] and "error" not in r for r in records)
    assert winner == configs[-1] and {"rows", "slices", "stages"} <= set(winner)
    [entry] = json.loads(countdown.read_text()).values()
    assert entry["config"] == winner
    dell = prepare(ell)
    assert tune_cache.lookup(dell, b.shape[1], "C") == winner and resolved("auto", dell, b.shape[1], "C") == winner
    bitmap_launches.clear()
    got = uspmm(dell, b, config="auto")
    assert bitmap_launches == [router.Config(**winner).keywords()]
    np.testing.assert_array_equal(got.view(np.uint16), uspmm(dell, b, **winner).view(np.uint16))
    assert_half_close(got, reference.uspmm(ell, b), ell.to_dense(), b)


@pytest.mark.simulator("the cache read with a stand-in timer; on a GPU, tests/gpu/test_tune_bfloat16_gpu.py")
def test_a_cached_split_bitmap_winner_is_served_and_launched(countdown, bitmap_launches):
    """A winner that also splits K (here column-major B: the linear form) is served without a warning and launched
    with all four tunables."""
    from sparsekit.gpu.uspmm import prepare, uspmm
    ell, b = toy_problem(BFLOAT16, "F", m=M, k=K)
    dell = prepare(ell)
    n = b.shape[1]
    winner = tune.bitmap(2, 4, 8) | dict(splits=2)
    key = tune_cache.problem_key(tune_cache._device_name(), M, K, n, ell.kprime, BFLOAT16, ell.indices.dtype, "F")
    tune_cache._store(key, dict(config=winner, median_us=1.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tune_cache.lookup(dell, n, "F") == winner
        got = uspmm(dell, b, config="auto")
    assert bitmap_launches == [dict(rows=2, slices=4, stages=8, splits=2)]
    assert got.flags.f_contiguous
    assert_half_close(got, reference.uspmm(ell, b), ell.to_dense(), b)


# --- refusals ------------------------------------------------------------------------------------------------------

def test_the_configs_bitmap_tunables_are_the_kernels():
    from sparsekit.gpu.spmm_bitmap import TUNABLES
    assert router.CLOSED_TUNABLES["bitmap"] == TUNABLES


@pytest.mark.simulator("the search's plumbing with a stand-in timer; on a GPU, tests/gpu/test_tune_bfloat16_gpu.py")
def test_the_search_records_the_launchers_refusals_by_name(countdown):
    """Settings the launcher refuses (a ring that does not wrap by a mask, no warps, more than 32 warps, rings past
    48 KB) are recorded with the launcher's reason and never win."""
    ell, _ = toy_problem(np.float16, m=M, k=K)
    refused = {(4, 4, 6): r"stages: a power of two \(the ring wraps by a mask\), got 6",
               (0, 4, 4): r"rows: must be >= 1, got 0",
               (8, 8, 4): r"rows \* slices: a block has at most 32 warps, got 8 \* 8",
               (4, 4, 8): r"rows \* slices \* stages: the rings of a block's 16 warps \(8 chunks of 512 bytes each\) "
                          r"exceed 48 KB of shared memory"}
    configs = [tune.bitmap(*shape) for shape in refused] + [router.BITMAP.tunables()]
    winner, records = tune.tune(ell, 9, configs=configs, repeat=1)
    for record, why in zip(records, refused.values()):
        assert not record["correct"] and "median_us" not in record
        assert re.fullmatch(why, record["error"]), record["error"]
    assert records[-1]["correct"] and winner == router.BITMAP.tunables()


STALE = [dict(variant="bitmap", nwarp=4), dict(variant="bitmap", rows=2, precision="auto"),
         dict(variant="decode", stages=4), dict(variant="pipelined", nwarp=4, rows=2),
         dict(variant="tensor_core", slices=2)]


@pytest.mark.parametrize("config", STALE, ids=config_name)
def test_tunables_a_kernel_does_not_take_are_a_stale_cache_entry(config, countdown):
    """``rows`` and ``slices`` are the TiledBitmap kernel's alone, which (like the decode kernel) takes nothing else:
    ``uspmm`` refuses such a configuration by name, and the cache ignores it with one warning, so ``config="auto"``
    runs the router's choice instead of failing."""
    from sparsekit.gpu.uspmm import prepare, uspmm
    ell, b = toy_problem(np.float16, m=M, k=K)
    dell = prepare(ell)
    assert not router.Config.valid(config)
    if config["variant"] in router.CLOSED_TUNABLES:
        with pytest.raises(TypeError, match=rf"uspmm: variant='{config['variant']}' takes "):
            uspmm(dell, b, **config)
    key = tune_cache.problem_key(tune_cache._device_name(), M, K, 9, ell.kprime, np.float16, ell.indices.dtype, "C")
    countdown.write_text(json.dumps({key: dict(config=config)}))
    with pytest.warns(RuntimeWarning, match="1 entry without a config of tunables this version takes"):
        assert tune_cache.lookup(dell, 9, "C") is None
    assert tune_cache.resolve("auto", dell, 9, "C") == tune_cache.resolve("heuristic", dell, 9, "C")


@pytest.mark.parametrize("value", ["4", -1, 2.0, True, None])
def test_bitmap_tunables_of_another_type_are_invalid(value):
    assert router.Config.valid(tune.bitmap(4, 2, 8))
    for name in ("rows", "slices", "stages", "splits"):
        assert not router.Config.valid(dict(tune.bitmap(4, 2, 8), **{name: value})), name
