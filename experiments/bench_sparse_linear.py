"""Device time of one ``SparseLinear`` call against ``F.linear`` at decode widths, bfloat16, on a GPU::

    python -m experiments.bench_sparse_linear [--pattern uniform|unstructured|2:4] [--widths 1 8 16 64]

Shapes 4096x4096, 14336x4096, 4096x14336; sparsity 50-90 % (2:4: 50 %); N = 1, 8, 16 (the sparse kernel)
and 64 (dense GEMM on the weight densified for the call). Each product runs 50
times in a CUDA graph (no host cost) over 4 weights in rotation (so the MLP weights do not stay in L2); the
time is a call's share. Prints ours, dense, the speedup, the weight's bytes over our time, and cuSPARSE
(``torch.sparse`` CSR of the same pruned weight times ``x^T``; "-" where torch refuses it). Recorded in
``experiments/results/torch_decoder.md``.
"""
from __future__ import annotations

SHAPES = ((4096, 4096), (14336, 4096), (4096, 14336))
SPARSITIES = (0.5, 0.7, 0.8, 0.9)
WIDTHS = (1, 8, 16, 64)
ROTATION = 4


def graph_time(step, calls: int = 50) -> float:
    """Microseconds a ``step()`` replayed ``calls`` times from one CUDA graph."""
    from sparsekit.torch.bench import graph_time as seconds

    return seconds(step, calls) * 1e6


def _cusparse(layers, x) -> str:
    """Microseconds of cuSPARSE CSR (through torch.sparse) on the layers' pruned weights, or "-"."""
    import torch

    try:
        csrs = [layer.to_dense().weight.detach().to_sparse_csr() for layer in layers]
        xt = x.T.contiguous()
        return f"{graph_time(lambda: [torch.sparse.mm(c, xt) for c in csrs]) / len(csrs):7.1f}"
    except (RuntimeError, NotImplementedError):
        return "-"


def main(pattern: str = "uniform", widths=WIDTHS) -> None:
    import torch
    import torch.nn.functional as F

    from sparsekit.torch import SparseLinear

    torch.manual_seed(0)
    print(f"{pattern}: shape sparsity N: ours_us dense_us speedup weight_TB/s cusparse_us")
    for m, k in SHAPES:
        dense = [torch.nn.Linear(k, m, bias=False, device="cuda", dtype=torch.bfloat16) for _ in range(ROTATION)]
        for n in widths:
            x = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            with torch.no_grad():
                td = graph_time(lambda: [F.linear(x, d.weight) for d in dense]) / ROTATION
                for sparsity in (0.5,) if pattern == "2:4" else SPARSITIES:
                    layers = [SparseLinear.from_dense(d, sparsity=sparsity, pattern=pattern) for d in dense]
                    ts = graph_time(lambda: [layer(x) for layer in layers]) / ROTATION
                    print(f"{m}x{k} {sparsity:.0%} N={n}: {ts:7.1f} {td:7.1f} {td / ts:5.2f}x "
                          f"{layers[0].weight_bytes() / ts / 1e6:6.2f} {_cusparse(layers, x)}")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pattern", choices=("uniform", "unstructured", "2:4"), default="uniform")
    parser.add_argument("--widths", type=int, nargs="+", default=list(WIDTHS), help="rows of x (N)")
    args = parser.parse_args()
    main(args.pattern, args.widths)
