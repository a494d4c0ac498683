"""``python -m sparsekit bench spmm --dtype float16|bfloat16`` on a real GPU, end to end: every provider's record
timed and correct against the float32 product of the same 16-bit operands (the same records on the simulator with
a stand-in timer: tests/test_bench_spmm_dtype.py)."""
from __future__ import annotations

import math
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

OURS = ("spmm_csr auto (route: bitmap)", "spmm_bitmap", "spmm_tiled row kernel")
DENSE, CUSPARSE = "cuBLAS dense (torch)", "cuSPARSE CSR (torch)"


def _records(out: str) -> dict:
    """The GPU table of the command's output: provider -> {column: text}."""
    lines = [line for line in out.splitlines() if line.startswith("| ")]
    keys = [k.strip() for k in lines[0].strip("|").split("|")]
    return {cells[0]: dict(zip(keys, cells)) for cells in
            ([c.strip() for c in line.strip("|").split("|")] for line in lines[1:])}


@pytest.mark.timing
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_bench_spmm_half_end_to_end(dtype):
    """Suite problem 11 (512 x 512 at 90 %) with N = 16: ``spmm_csr``'s default takes the bitmap route; ours, dense
    cuBLAS and cuSPARSE CSR each timed (p10 <= median <= p90) and ours correct, with the weight's bytes and a share of
    the copy bandwidth; the exit status 0. A cuSPARSE refusal of the dtype would read ``PyTorch refuses: ...``
    (then it is the one record without a time)."""
    pytest.importorskip("torch", reason="the dense and cuSPARSE baselines, and bfloat16's B, come from PyTorch")
    run = subprocess.run([sys.executable, "-m", "sparsekit", "bench", "spmm", "--problem", "11", "--dtype", dtype,
                          "--n", "16"], capture_output=True, text=True, timeout=900)
    print(run.stdout, run.stderr)
    assert run.returncode == 0, run.stderr
    assert f"CPU: not timed in {dtype}" in run.stdout
    recs = _records(run.stdout)
    assert list(recs) == [*OURS, DENSE, CUSPARSE]
    bytes_of = {name: int(rec["weight_bytes"]) for name, rec in recs.items() if rec["weight_bytes"] != "None"}
    assert bytes_of[DENSE] == 2 * 512 * 512
    assert bytes_of["spmm_csr auto (route: bitmap)"] == bytes_of["spmm_bitmap"]
    for name, rec in recs.items():
        if name == CUSPARSE and rec["reason"].startswith("PyTorch refuses: "):
            continue
        # cuSPARSE's 16-bit product may leave the float32-sum bound: reported, the exit status stays 0
        assert rec["correct"] in (("True", "False") if name == CUSPARSE else ("True",)) and rec["reason"] == "", rec
        us, p10, p90 = (float(rec[k]) for k in ("us", "p10_us", "p90_us"))
        assert 0 < p10 <= us <= p90 and math.isfinite(p90), rec
        assert 0 < float(rec["pct_bandwidth"]) < 100 and float(rec["speedup_vs_dense"]) > 0, rec
    assert float(recs[DENSE]["speedup_vs_dense"]) == 1.0
