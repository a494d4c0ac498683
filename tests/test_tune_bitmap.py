"""Tuning the TiledBitmap kernel's launch: the search lists its defaults and neighbouring block shapes for both half
dtypes (every one run by ``uspmm`` and equal to the reference), a winner carrying ``rows``, ``slices``, ``stages``
(and ``splits``) round-trips through the tune cache and is what ``config="auto"`` launches, and what the kernel cannot
take is refused by name: by the launcher (recorded by the search) or, in the cache, as a stale entry. The searches
run with a stand-in timer (tests/tune_toys.py); tests/gpu/test_tune_bfloat16_gpu.py times one on a GPU."""
from __future__ import annotations

import itertools
import json
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
