"""The sparse decoder on the CPU path: outputs equal the dense model of the pruned weights, the fine-tuning
step equals dense masked SGD, weight memory shrinks with sparsity, torch.compile traces it with no graph
break; the reproduce experiment is registered and the GPU benchmarks refuse to time the simulator."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="sparsekit.torch needs the optional torch extra")

from experiments.torch_decoder import SPARSITIES, check_tiny  # noqa: E402
from sparsekit.experiment import discover  # noqa: E402
from sparsekit.torch.decoder import TINY, Decoder  # noqa: E402


def test_tiny_decoder_rows():
    rows = check_tiny()
    assert [r["sparsity"] for r in rows] == list(SPARSITIES)
    assert all(r["correct"] and r["graph_breaks"] == 0 for r in rows)
    assert all(r["fine_tune_max_relative_difference"] < 1e-6 for r in rows)
    memory = [r["weight_memory_vs_dense"] for r in rows]
    assert memory == sorted(memory, reverse=True)


def test_weight_memory_at_llama_width():
    """4 bytes a kept weight against 2 dense, rows padded to a multiple of 8: at 80 % on a 4096-wide layer
    0.4 of the dense bytes (the tiny decoder's rows of 13 kept pad to 16, so its ratio is higher)."""
    from sparsekit.torch import SparseLinear

    dense = torch.nn.Linear(4096, 256, bias=False).to(torch.bfloat16)
    layer = SparseLinear.from_dense(dense, sparsity=0.8)
    assert layer.weight_bytes() / (4096 * 256 * 2) <= 0.45


def test_decode_step_continues_the_prefill():
    model = Decoder(TINY).double()
    x = torch.randn(2, 6, TINY.hidden, dtype=torch.float64)
    model.allocate_cache(2, 6)
    whole = model(x, torch.arange(6))
    model.allocate_cache(2, 6)
    model(x[:, :5], torch.arange(5))
    last = model(x[:, 5:], torch.tensor([5]))
    torch.testing.assert_close(last, whole[:, 5:])


def test_experiment_registered():
    assert "torch_decoder" in discover()


@pytest.mark.simulator("the no-GPU refusal; on a GPU tests/gpu/test_torch_gpu.py checks the layer and decoder "
                       "these benchmarks time")
@pytest.mark.parametrize("name", ["dispatch", "e2e"])
def test_benchmarks_need_a_gpu(name, capsys):
    from sparsekit.cli import main

    assert main(["bench", name]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().out


def test_two_four_decoder_bench_refuses_another_sparsity(capsys):
    from sparsekit.cli import main

    assert main(["bench", "e2e", "--pattern", "2:4", "--sparsity", "0.8"]) == 2
    assert "--pattern 2:4 keeps 2 of every 4 weights: --sparsity 0.5, got 0.8" in capsys.readouterr().err


def test_tensor_parallel_bench_outside_torchrun_says_how_to_run(monkeypatch, capsys):
    from sparsekit.commands.torch_bench import _join_group

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert not _join_group(2)
    assert "torchrun --nproc-per-node 2" in capsys.readouterr().out


def test_rows_past_the_tolerance_are_reported():
    from sparsekit.torch.bench import TOLERANCE, disagreements

    tol = TOLERANCE[torch.bfloat16]
    row = dict(dtype="bfloat16", sparsity=0.8, tp=2, max_relative_error=tol / 2, tp_relative_difference=tol / 2)
    assert disagreements([row, dict(row, sparsity=0.0, max_relative_error=0.0)]) == []
    sharded_off = dict(row, tp_relative_difference=2 * tol)
    pruned_off = dict(row, dtype="float16", max_relative_error=TOLERANCE[torch.float16] * 1.5)
    lines = disagreements([row, sharded_off, pruned_off])
    assert len(lines) == 2 and "80% tp 2" in lines[0] and lines[1].startswith("float16")


def test_e2e_records_are_written_with_a_panel_per_mode_and_width(tmp_path):
    import json

    from sparsekit.torch.bench import write

    rows = [dict(dtype=dtype, sparsity=s, pattern=pattern, mode=mode, phase="decode", batch=1, tokens=1, tp=tp,
                 tokens_per_s=100.0 * (1 + s), speedup_vs_dense=1 + s, max_relative_error=0.0,
                 tp_relative_difference=0.0, weight_memory_vs_dense=1 - s)
            for dtype in ("bfloat16", "float16")
            for s, pattern in ((0.0, "dense"), (0.8, "uniform"), (0.9, "uniform"), (0.5, "2:4"))
            for mode in ("graph", "eager") for tp in (1, 2)]
    assert write(rows, tmp_path, "e2e") == ["e2e.csv", "e2e.json", "e2e.png"]
    assert json.loads((tmp_path / "e2e.json").read_text()) == rows
    assert (tmp_path / "e2e.png").stat().st_size > 0
    assert write(rows[:3], tmp_path, "one") == ["one.csv", "one.json", "one.png"]      # a single panel
    fewer = [dict(r, copies=copies) for r in rows if r["pattern"] == "uniform" for copies in ("none", "compact")]
    assert write(rows + fewer, tmp_path, "copies") == ["copies.csv", "copies.json", "copies.png"]


def test_e2e_names_the_copies_a_model_keeps(capsys):
    """``--copies``: all, none or names of COPIES (records carry "all", "none" or names joined by "+")."""
    from sparsekit.cli import main
    from sparsekit.torch.bench import RECORD_KEY, copies_label

    assert copies_label(True) == "all" and copies_label(False) == "none" and copies_label(()) == "none"
    assert copies_label(("compact", "bitmap")) == "bitmap+compact" and "copies" in RECORD_KEY
    assert main(["bench", "e2e", "--copies", "compact,dense"]) == 2
    assert "must be all, none or names of compact, bitmap, cusparselt joined by commas" in capsys.readouterr().err
