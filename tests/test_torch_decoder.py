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


def test_tensor_parallel_bench_outside_torchrun_says_how_to_run(monkeypatch, capsys):
    from sparsekit.commands.torch_bench import _join_group

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert not _join_group(2)
    assert "torchrun --nproc-per-node 2" in capsys.readouterr().out
