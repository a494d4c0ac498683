"""USpMM and the SpMM baselines on a real GPU: real shapes against a float64 product,
repeats bit-identical, PyTorch/CuPy inputs without copies, config="auto"."""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

CONFIGS = [
    dict(variant="listing1", nwarp=1, vsize=8),
    dict(variant="listing1", nwarp=2, vsize=8, vecsize=2),
    dict(variant="listing1", nwarp=1, vsize=8, vecsize=4),
    dict(variant="pipelined", nwarp=8, rows_per_warp=4, cols_per_lane=4, kc=32, unroll=4, min_blocks=2),
    dict(variant="pipelined", nwarp=8, rows_per_warp=2, cols_per_lane=8, kc=16, unroll=2, min_blocks=2),
    dict(variant="pipelined", nwarp=4, rows_per_warp=3, cols_per_lane=4, kc=8, unroll=4),
    dict(variant="direct", nwarp=4, rows_per_warp=2, cols_per_lane=8, unroll=4),
    dict(variant="direct", nwarp=2, rows_per_warp=3, cols_per_lane=4, unroll=2),
    dict(variant="dense_tile", nwarp=8, rows_per_warp=8, cols_per_lane=4, kc=16, min_blocks=2),
    dict(variant="dense_tile", nwarp=8, rows_per_warp=4, cols_per_lane=8, kc=16),
    # the K range split over several blocks per output tile (partials summed in a fixed order)
    dict(variant="dense_tile", nwarp=8, rows_per_warp=8, cols_per_lane=4, kc=16, min_blocks=2, splits=4),
    dict(variant="pipelined", nwarp=8, rows_per_warp=4, cols_per_lane=4, kc=32, unroll=4, min_blocks=2, splits=3),
    dict(variant="direct", nwarp=4, rows_per_warp=2, cols_per_lane=8, unroll=4, splits=8),
    # each row's K' slots split over the warps of a block, partials summed in shared memory
    dict(variant="warp_split", nwarp=8, rows_per_warp=2, cols_per_lane=4, unroll=8),
    dict(variant="warp_split", nwarp=3, rows_per_warp=3, cols_per_lane=8, unroll=2),
    dict(variant="warp_split", nwarp=8, rows_per_warp=1, cols_per_lane=4, unroll=4, min_blocks=4),
]


@pytest.fixture(scope="module", params=[(1024, 1024, 1024, 0.6, np.float32), (1000, 999, 777, 0.6, np.float16),
                                        (4096, 4096, 256, 0.9, np.float32)], ids=str)
def problem(request):
    from sparsekit.bench.uspmm import Problem
    m, k, n, s, dt = request.param
    return Problem(m, k, n, s, dt)


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "-".join(f"{v}" for v in c.values()))
def test_real_shapes_correct_and_bit_identical(problem, cfg):
    from sparsekit.gpu.uspmm import uspmm
    first = uspmm(problem.dell, problem.b, **cfg).copy_to_host()
    again = uspmm(problem.dell, problem.b, **cfg).copy_to_host()
    assert problem.correct(first)
    assert (first.view(np.uint8) == again.view(np.uint8)).all()


def test_torch_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    from sparsekit.bench.uspmm import Problem
    from sparsekit.gpu.uspmm import uspmm, uspmm_linear
    p = Problem(256, 300, 64, 0.7, np.float32)
    b = torch.from_numpy(p.b_host).cuda()
    c = uspmm(p.dell, b, config="auto")
    assert isinstance(c, torch.Tensor) and c.is_cuda
    assert p.correct(c.cpu().numpy())
    y = uspmm_linear(p.dell, b.T.contiguous())
    assert isinstance(y, torch.Tensor) and tuple(y.shape) == (64, 256)
    assert p.correct(y.cpu().numpy().T)


def test_spmm_baselines_real_shape():
    from experiments.bench_uspmm import check_spmm_baselines
    for dt in (np.float32, np.float16):
        recs = check_spmm_baselines(dt)
        assert all(r["correct"] for r in recs), recs


def test_split_bit_identical_over_many_launches():
    """Which block of an output tile finishes last changes from launch to launch on the GPU; the
    partials are summed in one order whatever it is: 20 launches, one bit pattern."""
    from sparsekit.bench.uspmm import Problem
    from sparsekit.gpu.uspmm import uspmm
    p = Problem(1024, 1024, 128, 0.6, np.float32)
    for cfg in (dict(variant="dense_tile", nwarp=8, rows_per_warp=4, cols_per_lane=4, kc=16, min_blocks=2, splits=8),
                dict(variant="direct", nwarp=4, rows_per_warp=2, cols_per_lane=4, unroll=4, splits=8)):
        first = uspmm(p.dell, p.b, **cfg).copy_to_host()
        assert p.correct(first)
        for _ in range(20):
            assert (uspmm(p.dell, p.b, **cfg).copy_to_host().view(np.uint32) == first.view(np.uint32)).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("m,k", [(512, 1024), (1000, 2048), (2048, 512), (64, 147)])
def test_warp_split_resnet50_layers_bit_identical(m, k, dtype):
    """ResNet-50 layer shapes of the Table 1 analog (N = 128, 81%): correct, and 20 launches (warps of a
    block finishing in varying order) give one bit pattern: the partials are summed in a fixed order."""
    from sparsekit.bench.uspmm import Problem
    from sparsekit.gpu.uspmm import uspmm
    p = Problem(m, k, 128, 0.81, dtype)
    for cfg in (dict(variant="warp_split", nwarp=8, rows_per_warp=2, cols_per_lane=4, unroll=8),
                dict(variant="warp_split", nwarp=16, rows_per_warp=1, cols_per_lane=4, unroll=4),
                dict(variant="warp_split", nwarp=4, rows_per_warp=1, cols_per_lane=4, unroll=8, min_blocks=6)):
        first = uspmm(p.dell, p.b, **cfg).copy_to_host()
        assert p.correct(first)
        bits = first.view(np.uint16 if dtype == np.float16 else np.uint32)
        for _ in range(20):
            assert (uspmm(p.dell, p.b, **cfg).copy_to_host().view(bits.dtype) == bits).all()


@pytest.mark.timing
def test_dispatch_benchmark_records_every_row(tmp_path):
    """``experiments/bench_uspmm_dispatch.py``: a host time for every problem, B kind and config, and both floors
    (its refusal without a GPU: tests/test_uspmm.py)."""
    import json

    from experiments import bench_uspmm_dispatch as bench
    from sparsekit.arrays import cuda_torch
    assert bench.main(["--calls", "3", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "uspmm_dispatch.json").read_text())["rows"]
    timed = [r for r in rows if "problem" in r]
    kinds = 2 if cuda_torch() else 1
    assert len(timed) == len(bench.PROBLEMS) * kinds * 2 and all(r["host_us"] > 0 for r in timed)
    assert {r["config"] for r in timed} == {"auto", "direct"}
    assert len([r for r in rows if "floor" in r]) == 3


@pytest.mark.timing
def test_bench_and_tune_commands(tmp_path, monkeypatch, capsys):
    """``sparsekit bench uspmm`` times every provider on a toy problem, each result correct (exit 0; with
    ``--tf32-weights`` too), and
    ``sparsekit tune`` caches a winner for the problem (their no-GPU refusal: tests/test_uspmm.py)."""
    from sparsekit.gpu.uspmm import prepare
    from sparsekit import tune
    from sparsekit.cli import main
    monkeypatch.setenv("SPARSEKIT_TUNE_CACHE", str(tmp_path / "cache.json"))
    argv = ["--m", "64", "--k", "64", "--n", "64", "--sparsity", "0.5", "--repeat", "3"]
    assert main(["bench", "uspmm", *argv]) == 0
    out = capsys.readouterr().out
    assert out.startswith("device: ") and "| auto |" in out and "pct_sol" in out and "\nauto ran: " in out
    assert main(["bench", "uspmm", *argv, "--tf32-weights"]) == 0             # every result correct there too
    assert "| auto |" in capsys.readouterr().out
    assert main(["tune", *argv]) == 0
    assert "cached in" in capsys.readouterr().out
    winner = tune.lookup(prepare(tune.make_ell(64, 64, 0.5, "float32", seed=0)), 64, "C")
    assert winner is not None and winner["variant"] in {c["variant"] for c in tune.space(np.float32, "C")}
