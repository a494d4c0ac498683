"""The tune cache: malformed files and entries count as absent with one warning, stores are atomic and locked,
a failing store warns instead of losing the search, and processes storing and reading at once never tear it."""
from __future__ import annotations

import json
import multiprocessing
import os
import sys
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from sparsekit import tune, tune_cache

CONFIG = dict(variant="pipelined", nwarp=4, rows_per_warp=4, cols_per_lane=4)


def _dell(m: int = 64, k: int = 128, kprime: int = 16):
    """What :func:`tune_cache.lookup` reads of a :class:`sparsekit.gpu.uspmm.DeviceELL`, without a device."""
    host = SimpleNamespace(kprime=kprime, indices=np.zeros((m, kprime), dtype=np.int32))
    return SimpleNamespace(shape=(m, k), dtype=np.dtype(np.float32), host=host)


def _key(dell, n: int, order: str = "C") -> str:
    m, k = dell.shape
    return tune_cache.problem_key("test-gpu", m, k, n, dell.host.kprime, dell.dtype, dell.host.indices.dtype, order)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private cache file and device name (lookups need no GPU)."""
    path = tmp_path / "cache" / "uspmm.json"
    monkeypatch.setenv("SPARSEKIT_TUNE_CACHE", str(path))
    monkeypatch.setattr(tune_cache, "_device_name", lambda: "test-gpu")
    tune_cache._LOADED.clear()
    return path


def test_store_then_lookup_round_trips(cache):
    dell = _dell()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tune_cache.lookup(dell, 8, "C") is None                      # no file yet: no warning
        tune_cache._store(_key(dell, 8), dict(config=CONFIG, median_us=1.5))
        assert tune_cache.lookup(dell, 8, "C") == CONFIG
        assert tune_cache.lookup(dell, 9, "C") is None
    assert json.loads(cache.read_text())[_key(dell, 8)]["median_us"] == 1.5
    assert [p.name for p in cache.parent.iterdir() if p.suffix == ".tmp"] == []   # no temporary file left


@pytest.mark.parametrize("text", ["", "{", "\x00\xff garbage", "[1, 2]", "null", "42", '"uspmm"'],
                         ids=["empty", "truncated", "binary", "list", "null", "number", "string"])
def test_malformed_file_counts_as_empty_with_one_warning(cache, text):
    cache.parent.mkdir(parents=True)
    cache.write_text(text, encoding="latin-1")
    dell = _dell()
    with pytest.warns(RuntimeWarning, match="expected a JSON object of tuned configurations") as caught:
        assert tune_cache.lookup(dell, 8, "C") is None
        assert tune_cache.resolve("auto", dell, 8, "C") == tune_cache.resolve("heuristic", dell, 8, "C")
        assert tune_cache.lookup(dell, 8, "C") is None
    assert len(caught) == 1
    with pytest.warns(RuntimeWarning, match="expected a JSON object"):    # the store replaces the bad file
        tune_cache._store(_key(dell, 8), dict(config=CONFIG))
    assert tune_cache.lookup(dell, 8, "C") == CONFIG


@pytest.mark.parametrize("entry", [{}, {"median_us": 3.0}, {"config": None}, {"config": [1, 2]},
                                   {"config": {"nwarp": 4}}, {"config": {"variant": 3}}, "tiled", None,
                                   {"config": dict(CONFIG, bogus=3)}, {"config": dict(CONFIG, variant="gone")},
                                   {"config": dict(CONFIG, nwarp=-4)}, {"config": dict(CONFIG, nwarp="4")},
                                   {"config": dict(CONFIG, batch=1.5)}, {"config": dict(CONFIG, rows=2)},
                                   {"config": dict(variant="bitmap", rows=2, nwarp=4)},
                                   {"config": dict(variant="bitmap", slices=1.0)}],
                         ids=["empty", "no-config", "null-config", "list-config", "no-variant", "int-variant",
                              "string", "null", "stale-tunable", "stale-variant", "negative", "string-int",
                              "float-value", "bitmap-tunable-elsewhere", "not-the-bitmap-kernels", "bitmap-float"])
def test_malformed_entry_counts_as_absent_with_one_warning(cache, entry):
    dell = _dell()
    good = _dell(m=32)
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps({_key(dell, 8): entry, _key(good, 8): dict(config=CONFIG)}))
    with pytest.warns(RuntimeWarning, match="1 entry without a config") as caught:
        assert tune_cache.lookup(dell, 8, "C") is None
        assert tune_cache.lookup(good, 8, "C") == CONFIG                       # the good entry is still served
        assert tune_cache.lookup(dell, 8, "C") is None
    assert len(caught) == 1


@pytest.mark.parametrize("config", [CONFIG, dict(variant="warp_split", nwarp=8, rows_per_warp=1, cols_per_lane=4,
                                                  unroll=8, min_blocks=6),
                                    dict(variant="wgmma", precision="tf32+bf16", bm=128, bn=256, kc=16, stages=4),
                                    dict(variant="tensor_core", bm=64, bn=128, kc=32, warps_m=2, warps_n=4, stages=4),
                                    dict(variant="decode"), dict(variant="bitmap"),
                                    dict(variant="bitmap", rows=2, slices=4, stages=8, splits=3)],
                         ids=["pipelined", "warp_split", "wgmma", "tensor_core", "decode", "bitmap", "bitmap-tuned"])
def test_every_kind_of_tuned_winner_is_served(cache, config):
    """What tune can store (the variants and their tunables, the switches space() does not vary) is no stale entry."""
    dell = _dell()
    tune_cache._store(_key(dell, 8), dict(config=config))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tune_cache.lookup(dell, 8, "C") == config


def test_failing_store_warns_and_keeps_the_cache(cache):
    dell = _dell()
    tune_cache._store(_key(dell, 8), dict(config=CONFIG))
    before = cache.read_text()
    with pytest.warns(RuntimeWarning, match="could not store .*TypeError.*returned but not cached"):
        tune_cache._store(_key(dell, 9), dict(config=CONFIG, median_us=object()))   # not JSON: fails mid-write
    assert cache.read_text() == before
    assert [p.name for p in cache.parent.iterdir() if p.suffix == ".tmp"] == []


def test_store_into_an_unwritable_place_warns(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("SPARSEKIT_TUNE_CACHE", str(blocker / "uspmm.json"))   # its folder is a file
    with pytest.warns(RuntimeWarning, match="could not store"):
        tune_cache._store("k", dict(config=CONFIG))


def _store_and_read(path: str, worker: int, count: int, failures) -> None:
    """Store ``count`` entries of this worker, after each reading every entry it stored so far and checking the
    file parses; any warning or mismatch is reported through ``failures``."""
    os.environ["SPARSEKIT_TUNE_CACHE"] = path
    tune_cache._device_name = lambda: "test-gpu"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for i in range(count):
                tune_cache._store(_key(_dell(m=worker * 1000 + i + 1), 8), dict(config=dict(CONFIG, nwarp=i + 1)))
                for j in range(i + 1):
                    got = tune_cache.lookup(_dell(m=worker * 1000 + j + 1), 8, "C")
                    if got != dict(CONFIG, nwarp=j + 1):
                        failures.put(f"worker {worker}: entry {j} read back as {got}")
                        return
    except Exception as err:                                      # a warning turned error, or a torn file
        failures.put(f"worker {worker}: {type(err).__name__}: {err}")


@pytest.mark.skipif(sys.platform == "win32", reason="fcntl locks are POSIX")
@pytest.mark.parametrize("trial", range(3))
def test_two_processes_storing_and_reading_never_tear_or_lose_entries(cache, trial):
    ctx = multiprocessing.get_context("fork")
    failures = ctx.Queue()
    count = 12
    workers = [ctx.Process(target=_store_and_read, args=(str(cache), w, count, failures)) for w in (1, 2)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(timeout=60)
        assert p.exitcode == 0
    problems = []
    while not failures.empty():
        problems.append(failures.get())
    assert problems == []
    data = json.loads(cache.read_text())
    assert len(data) == 2 * count                                 # no store lost another's entry
    assert all(tune_cache._valid_entry(entry) for entry in data.values())


@pytest.mark.gpu
def test_tune_returns_its_winner_when_the_store_fails(tmp_path, monkeypatch):
    """The search's result survives a cache that cannot be written (here its folder is a file)."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("SPARSEKIT_TUNE_CACHE", str(blocker / "uspmm.json"))
    ell = tune.make_ell(256, 256, 0.75, np.float32)
    configs = [tune.heuristic(256, 256, 32, ell.kprime, np.float32, "C")]
    with pytest.warns(RuntimeWarning, match="could not store"):
        winner, records = tune.tune(ell, 32, configs=configs, repeat=3)
    assert winner == configs[0] and records[0]["correct"]


def test_bfloat16_and_float16_winners_never_share_a_key(cache):
    """Two weights of one shape, K' and index dtype, float16 and bfloat16 (prepared: the key reads the dtype the
    launchers check, bfloat16, not the uint16 bits the kernels see): each finds its own winner only, and
    ``config="auto"`` for bfloat16 does not take float16's (its CUDA-core kernels refuse bfloat16)."""
    from sparsekit.checks import BFLOAT16
    from sparsekit.gpu.uspmm import prepare

    f16, bf16 = (prepare(tune.make_ell(32, 64, 0.5, dtype, seed=1)) for dtype in (np.float16, BFLOAT16))
    assert bf16.dtype == BFLOAT16 and bf16.host.kprime == f16.host.kprime
    assert _key(bf16, 8) != _key(f16, 8) and "|bfloat16|" in _key(bf16, 8) and "|float16|" in _key(f16, 8)
    tune_cache._store(_key(f16, 8), dict(config=CONFIG, median_us=2.0))
    assert tune_cache.lookup(f16, 8, "C") == CONFIG
    assert tune_cache.lookup(bf16, 8, "C") is None
    assert tune_cache.resolve("auto", bf16, 8, "C") == dict(variant="decode")        # the router's choice
    decode = dict(variant="decode")
    tune_cache._store(_key(bf16, 8), dict(config=decode, median_us=1.0))
    assert tune_cache.lookup(bf16, 8, "C") == decode and tune_cache.lookup(f16, 8, "C") == CONFIG
