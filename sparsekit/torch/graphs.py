"""CUDA graphs for timing: a step captured after its warm-up, and device time from its replays (no host cost).
Below the layer's ops (which time cuSPARSELt's algorithms with it) and the benchmarks."""
from __future__ import annotations

import torch

__all__ = ["capture_graph", "graph_time"]


def capture_graph(step):
    """``step()`` run once on a side stream (the warm-up PyTorch requires before a capture), then captured in
    a CUDA graph: the graph and what the captured call returned (the tensors its replays write)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    return graph, out


def graph_time(step, calls: int) -> float:
    """Device seconds per ``step()`` replayed from a CUDA graph of ``calls`` steps (no host cost)."""
    graph, _ = capture_graph(lambda: [step() for _ in range(calls)])
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e-3 / calls
