"""A Llama-style decoder with every linear layer uniform-sparse (sparsekit.torch).

On a GPU: decode and prefill tokens/s (2 layers of the 4096/14336 size, bfloat16, 80 and 90 %, eager and
CUDA graphs) against the dense model. Everywhere (the simulator, CI): the tiny configuration on the CPU
path: outputs against the dense model of the pruned weights, weight memory, one sparse fine-tuning step
against dense masked SGD, and torch.compile(fullgraph=True) tracing it with no graph break.
"""
from __future__ import annotations

from sparsekit.experiment import Context, Experiment, Section, Table

SPARSITIES = (0.5, 0.7, 0.8, 0.9)


def check_tiny(seed: int = 0) -> list[dict]:
    """The tiny decoder on the CPU path at each sparsity."""
    import copy

    import torch

    from sparsekit.torch import sparsify_
    from sparsekit.torch.bench import TOLERANCE, agreement, fine_tune_step
    from sparsekit.torch.decoder import TINY, Decoder, linear_weight_bytes

    out = []
    for sparsity in SPARSITIES:
        dense = Decoder(TINY, seed).to(torch.bfloat16)
        sparse = sparsify_(copy.deepcopy(dense), sparsity=sparsity)
        sparse.allocate_cache(1, 4)
        with torch.no_grad():
            explained = torch._dynamo.explain(sparse)(torch.randn(1, 4, TINY.hidden, dtype=torch.bfloat16),
                                                      torch.arange(4))
        err = agreement(dense, sparse)
        step = fine_tune_step(sparsify_(Decoder(TINY, seed), sparsity=sparsity))
        out.append(dict(sparsity=sparsity, max_relative_error=err, tolerance=TOLERANCE[torch.bfloat16],
                        weight_memory_vs_dense=round(linear_weight_bytes(sparse) / linear_weight_bytes(dense), 3),
                        fine_tune_max_relative_difference=step["max_relative_difference"],
                        graph_breaks=explained.graph_break_count,
                        correct=err <= TOLERANCE[torch.bfloat16] and explained.graph_break_count == 0))
    return out


def run(ctx: Context) -> Section:
    try:
        import torch
    except ImportError:
        return Section("Sparse decoder in PyTorch", text="Skipped: needs the optional torch extra.")
    tables = [Table("Tiny decoder, CPU path (bfloat16)", check_tiny(ctx.seed), csv_name="torch_decoder_tiny.csv")]
    figures = []
    if ctx.on_gpu and torch.cuda.is_available():
        from dataclasses import replace

        from sparsekit.torch.bench import e2e, write
        from sparsekit.torch.decoder import LLAMA_8_LAYERS

        recs = e2e(replace(LLAMA_8_LAYERS, layers=2), [torch.bfloat16], [0.0, 0.8, 0.9], ["eager", "graph"],
                   batches=(1, 8), prefills=(512,), progress=ctx.progress)
        tables.append(Table("Decoder tokens/s (2 layers, bfloat16)", recs, csv_name="torch_decoder_e2e.csv"))
        figures = [write(recs, ctx.out_dir, "e2e")[-1]]
    return Section("Sparse decoder in PyTorch",
                   text="Every linear layer of a Llama-style decoder as a SparseLinear (uniform sparsity); "
                        "outputs within the stated tolerance of the dense model with the pruned weights.",
                   tables=tables, figures=figures)


EXPERIMENT = Experiment("torch_decoder", "Uniform-sparse Llama-style decoder in PyTorch", "uniform-sparsity.txt", run)
