"""The USpMM router's choices over a grid of problems, against a table recorded from the router itself.

The grid: every value dtype (float32, float16, bfloat16), N from 1 to 16384, B's memory order, 20 shapes
``M x K`` at 8 sparsities (the density ``K'/K`` the rules read), with and without the wgmma kernel (a compute
capability 9.0 device), and the tensor-core and few-columns switches of :func:`sparsekit.tune.heuristic`. The
recorded table (``tests/data/tune_routes.json``) holds each case's tunables, key order included: a change of
routing shows here as the cases it moves. To record a deliberate change, run ``python tests/test_tune_routes.py``
and review the diff of the cases it names.
"""
from __future__ import annotations

import itertools
import json
import string
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from sparsekit import tune
from sparsekit.checks import BFLOAT16

TABLE = Path(__file__).parent / "data" / "tune_routes.json"
DTYPES = (np.dtype(np.float32), np.dtype(np.float16), BFLOAT16)
NS = (1, 2, 4, 8, 16, 17, 32, 64, 65, 128, 256, 512, 1024, 2048, 4096, 16384)
ORDERS = ("C", "F")
SHAPES = ((64, 128), (128, 128), (128, 256), (128, 1152), (256, 256), (256, 1024), (384, 384), (512, 512),
          (512, 1024), (512, 4608), (768, 768), (1024, 512), (1024, 1024), (1024, 1536), (1536, 768), (2048, 512),
          (2048, 2048), (1024, 4096), (4096, 4096), (3000, 1000))
SPARSITIES = (0.3, 0.6, 0.7, 0.75, 0.81, 0.85, 0.9, 0.95)
#: (tensor_cores, few_columns): what ``config="auto"`` and ``"heuristic"`` use first (resolve's), then the
#: CUDA-core and the no-warp-split choices the measurements were fitted against.
SWITCHES = ((True, True), (False, True), (True, False), (False, False))
#: One character a case: the index of its tunables in the table's list of distinct configurations.
CODES = string.digits + string.ascii_letters


def cases():
    """``(dtype, n, order, m, k, kprime, wgmma, tensor_cores, few_columns)`` over the whole grid, in order."""
    for dtype, n, order, (m, k), sparsity, wgmma, (tc, few) in itertools.product(
            DTYPES, NS, ORDERS, SHAPES, SPARSITIES, (False, True), SWITCHES):
        yield dtype, n, order, m, k, round((1 - sparsity) * k), wgmma, tc, few


def routed(dtype, n, order, m, k, kprime, wgmma, tc, few) -> dict:
    """The tunables of one case: through :func:`sparsekit.tune.resolve` (what ``uspmm(config="heuristic")``
    and an uncached ``"auto"`` run) where it applies, else :func:`sparsekit.tune.heuristic` with the switches."""
    if tc and few:
        dell = SimpleNamespace(shape=(m, k), dtype=dtype,
                               host=SimpleNamespace(kprime=kprime, indices=np.zeros((m, kprime), dtype=np.int32)))
        return tune.resolve("heuristic", dell, n, order, wgmma=wgmma)
    return tune.heuristic(m, k, n, kprime, dtype, order, tensor_cores=tc, few_columns=few, wgmma=wgmma)


def record() -> dict:
    """The table of today's routing: the distinct configurations (as lists of ``[name, value]``) and a string
    of one code a case."""
    configs, codes = [], []
    for case in cases():
        items = [list(pair) for pair in routed(*case).items()]
        if items not in configs:
            configs.append(items)
        codes.append(CODES[configs.index(items)])
    block = len(codes) // (len(DTYPES) * len(NS) * len(ORDERS))
    lines = ["".join(codes[i:i + block]) for i in range(0, len(codes), block)]
    return dict(configs=configs, routes=lines)


def write(table: dict) -> str:
    """The table as JSON with one configuration and one line of routes (a dtype, N and order) a line."""
    configs = ",\n".join("  " + json.dumps(c) for c in table["configs"])
    routes = ",\n".join("  " + json.dumps(line) for line in table["routes"])
    return f'{{"configs": [\n{configs}\n], "routes": [\n{routes}\n]}}\n'



def test_every_case_routes_as_recorded():
    want = json.loads(TABLE.read_text())
    codes = "".join(want["routes"])
    assert len(codes) == len(list(cases()))
    moved = []
    for case, code in zip(cases(), codes):
        got = [list(pair) for pair in routed(*case).items()]
        expected = want["configs"][CODES.index(code)]
        if got != expected:
            moved.append((case, got, expected))
    assert not moved, f"{len(moved)} cases route differently; first: {moved[:3]}"


def test_the_table_covers_every_kind_of_route():
    """The grid reaches every variant the router sends to, and many settings of each."""
    configs = json.loads(TABLE.read_text())["configs"]
    variants = {dict(c)["variant"] for c in configs}
    assert variants == {"decode", "bitmap", "listing1", "pipelined", "direct", "dense_tile", "warp_split",
                        "tensor_core", "wgmma"}
    assert len(configs) >= 38


def test_dict_configs_pass_through_and_unknown_names_are_refused():
    dell = SimpleNamespace(shape=(64, 128), dtype=np.dtype(np.float32),
                           host=SimpleNamespace(kprime=16, indices=np.zeros((64, 16), dtype=np.int32)))
    given = dict(variant="direct", cols_per_lane=4, rows_per_warp=2, nwarp=4, unroll=4)
    got = tune.resolve(given, dell, 8, "C")
    assert got == given and got is not given
    with pytest.raises(ValueError, match="config: expected a dict of tunables, 'auto' or 'heuristic'"):
        tune.resolve("fastest", dell, 8, "C")


if __name__ == "__main__":
    TABLE.write_text(write(record()))
    print(f"recorded {len(list(cases()))} cases to {TABLE}")


# --- the router's data -------------------------------------------------------------------------------------------

def test_every_rule_names_a_record_that_exists():
    from sparsekit.router import RULES
    results = Path(__file__).resolve().parents[1] / "experiments" / "results"
    for rule in RULES:
        record = rule.measured.split()[0].rstrip(":")
        assert (results / record).is_file(), f"{rule.measured!r}: no experiments/results/{record}"


def test_every_rule_decides_some_case_of_the_grid():
    """No rule is shadowed by those above it (on this grid): each is the first to hold somewhere."""
    from sparsekit.router import RULES, Problem
    first = set()
    for dtype, n, order, m, k, kprime, wgmma, tc, few in cases():
        p = Problem(m, k, n, kprime, dtype, order, tensor_cores=tc, few_columns=few, wgmma=wgmma)
        first.add(next(i for i, rule in enumerate(RULES) if rule.when(p)))
    assert first == set(range(len(RULES)))


def test_bfloat16_past_the_decode_kernel_takes_float16s_tensor_core_setting():
    """bfloat16 (no CUDA-core kernel takes it) stays on the decode kernel up to its widest N, with a column-major B
    and with ``tensor_cores=False`` (but where the bitmap kernel's rule holds: :func:`sparsekit.router._bitmap`);
    wider with a row-major B it runs on the tensor cores, at float16's setting for the same problem wherever
    float16 runs on them (the same kernel with the bf16 MMA)."""
    from sparsekit.gpu.spmm_tiled import MAX_N
    from sparsekit.router import DECODE_BF16_MAX_N, Problem, _bitmap
    assert DECODE_BF16_MAX_N == MAX_N
    half = np.dtype(np.float16)
    same = bitmap = 0
    for dtype, n, order, m, k, kprime, wgmma, tc, few in cases():
        if dtype != BFLOAT16:
            continue
        got = routed(dtype, n, order, m, k, kprime, wgmma, tc, few)
        if _bitmap(Problem(m, k, n, kprime, dtype, order, tensor_cores=tc, few_columns=few, wgmma=wgmma)):
            assert got == dict(variant="bitmap"), (n, order, m, k, kprime, tc)
            bitmap += 1
            continue
        if n <= DECODE_BF16_MAX_N or order != "C" or not tc:
            assert got == dict(variant="decode"), (n, order, m, k, kprime, tc)
            continue
        assert got["variant"] == "tensor_core", (n, m, k, kprime, few)
        float16 = routed(half, n, order, m, k, kprime, wgmma, tc, few)
        if float16["variant"] == "tensor_core":
            assert got == float16, (n, m, k, kprime, few)
            same += 1
    assert same > 1000 and bitmap > 100


def test_bfloat16_where_float16_keeps_to_the_cuda_cores():
    """Where float16 takes no tensor-core setting (a density under the tensor-core threshold, or a grid of at most
    a wave with a small K), bfloat16 gets float16's tensor-core setting for the grid: the defaults over many waves,
    the small-grid setting below."""
    from sparsekit.router import TC_DEFAULT, TC_MIN_DENSITY, tc_small_grid
    kprime = 100
    assert kprime / 4096 < TC_MIN_DENSITY[np.dtype(np.float16)]
    assert tune.heuristic(4096, 4096, 4096, kprime, np.float16, "C")["variant"] != "tensor_core"
    assert tune.heuristic(4096, 4096, 4096, kprime, BFLOAT16, "C") == TC_DEFAULT.tunables()
    assert tune.heuristic(128, 128, 128, 40, np.float16, "C")["variant"] != "tensor_core"
    assert tune.heuristic(128, 128, 128, 40, BFLOAT16, "C") == tc_small_grid(128, 4).tunables()


def test_the_last_rule_holds_everywhere():
    """Every problem gets a configuration: the table ends in a rule without a condition."""
    from sparsekit.router import RULES, Problem
    assert RULES[-1].when(Problem(1, 1, 1, 0, np.dtype(np.float32), "C"))


def test_config_names_every_tunable_of_the_launchers():
    """:class:`sparsekit.router.Config`'s fields are the keywords the launchers take, its variants theirs and the
    wgmma kernel's precisions (a tuned winner naming anything else is a stale cache entry)."""
    import dataclasses
    import inspect

    from sparsekit.gpu import spmm_bitmap, uspmm, uspmm_tc, uspmm_wgmma
    from sparsekit.router import PRECISIONS, VARIANTS, Config
    run = inspect.signature(uspmm._run).parameters
    cuda_core = {name for name, p in run.items() if p.kind is p.KEYWORD_ONLY}
    tensor = {name for dtype in uspmm_tc.DEFAULTS for name in uspmm_tc.DEFAULTS[dtype]} | set(uspmm_wgmma.DEFAULTS)
    assert {f.name for f in dataclasses.fields(Config)} == cuda_core | tensor | spmm_bitmap.TUNABLES
    assert set(VARIANTS) == set(uspmm.VARIANTS) | {"tensor_core", "wgmma", "decode", "bitmap"}
    assert set(PRECISIONS) == set(uspmm_wgmma.PRECISIONS) | {uspmm_wgmma.DEFAULTS["precision"]}


def test_tunables_and_keywords():
    from sparsekit.router import WGMMA_WAVE, Config
    assert WGMMA_WAVE.tunables() == dict(variant="wgmma", bm=64, bn=128, kc=32, stages=6, producers=256)
    assert WGMMA_WAVE.keywords() == dict(bm=64, bn=128, kc=32, stages=6, producers=256)
    assert Config.valid(WGMMA_WAVE.tunables())
    for bad in (dict(variant="gone"), dict(variant="direct", nwarp=-1), dict(variant="direct", nwarp="4"),
                dict(variant="direct", bogus=1), dict(variant="wgmma", precision="fp64"), ["direct"], None):
        assert not Config.valid(bad), bad


def test_the_tuners_names_are_the_routed_settings():
    """:mod:`sparsekit.tune` names the routed settings as their launchers' keywords and the warp-split makers'
    arguments: the same settings as the router's."""
    from sparsekit import router
    for name in ("WGMMA_LARGE", "WGMMA_MID", "WGMMA_WAVE", "WGMMA_HALF", "WGMMA_QUARTER", "WGMMA_EIGHTH"):
        assert dict(variant="wgmma", **getattr(tune, name)) == getattr(router, name).tunables()
    for name in ("S1", "S2", "S1C2", "W16", "W4", "W1"):
        assert tune.warp_split(*getattr(tune, "WARP_SPLIT_" + name)) == getattr(router, "WARP_SPLIT_" + name).tunables()
    for dtype, cfg in router.TC_LARGE.items():
        assert tune.tensor_core(**tune.TC_LARGE[dtype]) == cfg.tunables()
    assert tune.tensor_core(**tune.TC_HALF_WAVE[np.dtype(np.float32)]) == router.TC_HALF_WAVE.tunables()


# --- resolved once per weight, N, order and device ----------------------------------------------------------------

def test_auto_is_resolved_once_per_weight_n_and_order(tmp_path, monkeypatch):
    """``uspmm(..., config="auto")`` resolves a weight's configuration on its first call for an ``n`` and order
    and reuses it; a winner this process stores is picked up on the next call."""
    import sparsekit.gpu.uspmm as gu
    from sparsekit import tune_cache
    monkeypatch.setenv("SPARSEKIT_TUNE_CACHE", str(tmp_path / "uspmm.json"))
    calls = []
    real = gu.resolve
    monkeypatch.setattr(gu, "resolve", lambda *args, **kw: calls.append(args[2:4]) or real(*args, **kw))
    ell = tune.make_ell(64, 48, 0.5, np.float32)
    dell = gu.prepare(ell)
    b = np.random.default_rng(0).standard_normal((48, 5)).astype(np.float32)
    first = gu.uspmm(dell, b, config="auto")
    for _ in range(3):
        np.testing.assert_array_equal(gu.uspmm(dell, b, config="auto"), first)
    assert calls == [(5, "C")]
    gu.uspmm(dell, np.asfortranarray(b), config="auto")
    gu.uspmm(dell, np.ascontiguousarray(b[:, :4]), config="auto")
    gu.uspmm(dell, b, config="heuristic")
    assert calls == [(5, "C"), (5, "F"), (4, "C"), (5, "C")]
    winner = dict(variant="listing1", nwarp=2, vsize=4, vecsize=1)
    key = tune_cache.problem_key(tune_cache._device_name(), 64, 48, 5, ell.kprime, np.float32, ell.indices.dtype, "C")
    tune_cache._store(key, dict(config=winner, median_us=1.0))
    assert gu.resolved("auto", dell, 5, "C") == winner
    assert len(calls) == 5
    got = gu.resolved("auto", dell, 5, "C")
    got["nwarp"] = 99                                    # the caller's copy: the kept resolution stays
    assert gu.resolved("auto", dell, 5, "C") == winner and len(calls) == 5
