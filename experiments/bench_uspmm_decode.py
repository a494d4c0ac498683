"""Uniform-sparse weights at LLM decode shapes: ``uspmm(config="auto")`` against dense cuBLAS, in half precision.

On a GPU: the sweep of :mod:`sparsekit.bench.uspmm_decode` (Llama-style layer shapes, uniform sparsity 50-90 %,
N = 1 to 128, float16 and bfloat16, against dense cuBLAS, cuSPARSELt 2:4 and cuSPARSE CSR; ``sparsekit bench
uspmm-decode`` runs it too), its crossover table (the largest ``N`` at which ours still beats dense) and plot.
On the simulator (``reproduce --quick`` without a GPU): correctness of every route at a toy shape.
"""
from __future__ import annotations

import numpy as np

from sparsekit.bench.uspmm_decode import (DTYPES, NS, QUICK_NS, QUICK_SHAPES, QUICK_SPARSITIES, SHAPES, SPARSITIES,
                                          crossover, plot, pruned_weight, sweep, value_dtype)
from sparsekit.experiment import Context, Experiment, Section, Table

#: The simulator's toy shape (M, K).
TOY = (96, 160)


def check_toy(seed: int = 0) -> list[dict]:
    """Correctness at a toy shape, every dtype, the decode and bitmap routes at a few N (runs on the simulator)."""
    from sparsekit.gpu.uspmm import prepare, uspmm
    from sparsekit.reference.uspmm import uspmm as reference

    out = []
    for dname in DTYPES:
        ell, _, _ = pruned_weight(*TOY, 0.8, value_dtype(dname), seed)
        dell = prepare(ell)
        for variant, n in (("decode", 1), ("decode", 8), ("bitmap", 8), ("bitmap", 16)):
            b = np.random.default_rng(seed + n).standard_normal((TOY[1], n)).astype(value_dtype(dname))
            got = np.asarray(uspmm(dell, b, variant=variant)).astype(np.float32)
            want = reference(ell, b).astype(np.float32)
            out.append(dict(shape=f"{TOY[0]}x{TOY[1]}", dtype=dname, route=variant, n=n,
                            max_abs_error=float(np.abs(got - want).max()),
                            correct=bool(np.allclose(got, want, rtol=2.0 ** -7, atol=1e-3))))
    return out


def run(ctx: Context) -> Section:
    if not ctx.on_gpu:
        recs = check_toy(ctx.seed)
        return Section("Decode-shape SpMM (toy check on the simulator)",
                       text="Correctness of the decode and bitmap routes at a toy shape; timings need a GPU.",
                       tables=[Table("Toy check", recs)])
    shapes, sps, ns = (QUICK_SHAPES, QUICK_SPARSITIES, QUICK_NS) if ctx.quick else (SHAPES, SPARSITIES, NS)
    recs, bw = sweep(shapes, sps, ns, DTYPES, seed=ctx.seed, progress=ctx.progress)
    fig = plot(recs, ctx.out_dir / "uspmm_decode_speedup.png")
    return Section("Decode-shape SpMM against dense cuBLAS",
                   text=f"Copy bandwidth measured: {bw / 1e12:.2f} TB/s.",
                   tables=[Table("Device time", recs), Table("Crossover", crossover(recs))], figures=[fig])


EXPERIMENT = Experiment("uspmm_decode", "Uniform-sparse half-precision SpMM at LLM decode shapes",
                        "uniform-sparsity.txt", run)
