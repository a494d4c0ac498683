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
    assert variants == {"decode", "listing1", "pipelined", "direct", "dense_tile", "warp_split", "tensor_core",
                        "wgmma"}
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
