"""Device time of one ``SparseLinear`` call against ``F.linear`` at decode widths, bfloat16, on a GPU::

    python experiments/bench_sparse_linear.py

Shapes 4096x4096, 14336x4096, 4096x14336; uniform sparsity 50-90 %; N = 1, 8, 16. Each product runs 50
times in a CUDA graph (no host cost) over 4 weights in rotation (so the MLP weights do not stay in L2); the
time is a call's share. Prints ours, dense, the speedup and the weight's bytes over our time. Recorded in
``experiments/results/torch_decoder.md``.
"""
from __future__ import annotations

SHAPES = ((4096, 4096), (14336, 4096), (4096, 14336))
SPARSITIES = (0.5, 0.7, 0.8, 0.9)
WIDTHS = (1, 8, 16)
ROTATION = 4


def graph_time(step, calls: int = 50) -> float:
    """Microseconds a ``step()`` replayed ``calls`` times from one CUDA graph."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            step()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def main() -> None:
    import torch
    import torch.nn.functional as F

    from sparsekit.torch import SparseLinear

    torch.manual_seed(0)
    print("shape sparsity N: ours_us dense_us speedup weight_TB/s")
    for m, k in SHAPES:
        dense = [torch.nn.Linear(k, m, bias=False, device="cuda", dtype=torch.bfloat16) for _ in range(ROTATION)]
        for n in WIDTHS:
            x = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            with torch.no_grad():
                td = graph_time(lambda: [F.linear(x, d.weight) for d in dense]) / ROTATION
                for sparsity in SPARSITIES:
                    layers = [SparseLinear.from_dense(d, sparsity=sparsity) for d in dense]
                    ts = graph_time(lambda: [layer(x) for layer in layers]) / ROTATION
                    print(f"{m}x{k} {sparsity:.0%} N={n}: {ts:7.1f} {td:7.1f} {td / ts:5.2f}x "
                          f"{layers[0].weight_bytes() / ts / 1e6:6.2f}")


if __name__ == "__main__":
    main()
