"""Measurements of sparsekit.torch: host overhead per op (``sparsekit bench dispatch``) and the decoder
end to end (``sparsekit bench e2e``): decode and prefill tokens/s eager, compiled and in CUDA graphs
against the dense model, output agreement with the dense model of the pruned weights, weight memory
and one sparse fine-tuning step. Each returns a list of records (one dict a row)."""
from __future__ import annotations

import copy
import time

import torch

from sparsekit.torch.decoder import Decoder, linear_weight_bytes
from sparsekit.torch.graphs import capture_graph, graph_time
from sparsekit.torch.nn import SparseLinear, sparsify_

__all__ = ["DISPATCH_PROBLEMS", "dispatch", "e2e", "capture_graph", "graph_time", "agreement", "sharded_agreement",
           "fine_tune_step", "TOLERANCE", "disagreements", "all_reduce_us"]

#: (out, in, N, dtype, sparsity): the shapes whose host overhead motivated the fast launch, and decode.
DISPATCH_PROBLEMS = [(4096, 4096, 16, torch.float16, 0.8), (1024, 1024, 1024, torch.float32, 0.8),
                     (1024, 1024, 1024, torch.float16, 0.8), (4096, 4096, 1, torch.bfloat16, 0.8),
                     (14336, 4096, 1, torch.bfloat16, 0.8)]
#: Largest |sparse - dense(pruned)| / max|dense(pruned)| accepted end to end: both round every layer's
#: output to the 16-bit dtype, in different summation orders (float32 accumulation).
TOLERANCE = {torch.float16: 2e-2, torch.bfloat16: 5e-2}
_CALLS = 200


def wall_time(step, calls: int, sync=torch.cuda.synchronize) -> float:
    """Wall seconds per ``step()`` called back to back from the host after a warm-up, the queue drained by
    ``sync()`` (the CUDA device's by default) before and after."""
    for _ in range(10):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        step()
    sync()
    return (time.perf_counter() - t0) / calls


def dispatch(problems=DISPATCH_PROBLEMS, calls: int = _CALLS) -> list[dict]:
    """Device time, wall time and their difference per call (inference, no autograd): the layer (its eager
    fast path), the custom op it calls when traced without autograd (so it runs the layer's kernel), and
    ``torch.matmul`` on the dense pruned weight."""
    out = []
    for m, k, n, dtype, sparsity in problems:
        torch.manual_seed(0)
        dense = torch.nn.Linear(k, m, bias=False, device="cuda", dtype=dtype)
        layer = SparseLinear.from_dense(dense, sparsity=sparsity)
        x = torch.randn(n, k, device="cuda", dtype=dtype)
        w = layer.to_dense().weight
        op = torch.ops.sparsekit.sparse_linear_inference.default
        args = (x, layer.values, layer.indices, k, layer.weight_id, True)
        for name, step in (("SparseLinear", lambda: layer(x)),
                           ("sparsekit::sparse_linear_inference", lambda: op(*args)),
                           ("torch.matmul", lambda: torch.matmul(x, w.T))):
            with torch.no_grad():
                step()
                device, wall = graph_time(step, calls), wall_time(step, calls)
            out.append(dict(problem=f"{m}x{k} N={n}", dtype=str(dtype).removeprefix("torch."), sparsity=sparsity,
                            product=name, device_us=round(device * 1e6, 2), wall_us=round(wall * 1e6, 2),
                            overhead_us=round((wall - device) * 1e6, 2)))
    return out


def _models(cfg, dtype, sparsity, pattern="uniform", seed=0, copies=True):
    """The dense model and its copy sparsified to ``pattern`` at ``sparsity``, its layers keeping ``copies``
    (:attr:`~sparsekit.torch.SparseLinear.inference_copies`), on the GPU."""
    dense = Decoder(cfg, seed, device="cuda", dtype=dtype).eval()
    if not sparsity:
        return dense, dense
    return dense, sparsify_(copy.deepcopy(dense), pattern=pattern, sparsity=sparsity, inference_copies=copies)


def _step_runner(model, mode: str, batch: int, tokens: int, start: int):
    """A no-argument step running ``model`` on fixed inputs in ``mode``: eager, compile
    (``torch.compile(fullgraph=True)``), graph (a CUDA graph of the eager step) or compile-graph (a CUDA
    graph of the compiled step: the elementwise work fused and no host cost)."""
    cfg = model.cfg
    model.allocate_cache(batch, start + tokens)
    x = torch.randn(batch, tokens, cfg.hidden, device="cuda", dtype=next(model.parameters()).dtype)
    positions = torch.arange(start, start + tokens, device="cuda")
    compiled = mode in ("compile", "compile-graph")
    if compiled:
        torch._dynamo.reset()                        # each model and shape compiled afresh (no recompile limit)
    fn = torch.compile(model, fullgraph=True) if compiled else model

    def step():
        return fn(x, positions)

    with torch.no_grad():
        for _ in range(3):
            step()
    if mode not in ("graph", "compile-graph"):
        return step
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        step()
    return graph.replay


#: Timed windows of ``repeats`` steps a point (:func:`_tokens_per_s`): the median's rate is reported.
WINDOWS = 5


def _tokens_per_s(step, batch: int, tokens: int, repeats: int) -> float:
    """Tokens/s of ``step()``: after a first step and ``repeats`` more (the clocks up from idle, the copies and
    plans built), the median over :data:`WINDOWS` windows of ``repeats`` steps timed with CUDA events. A fixed
    count of steps on every rank (a sharded step all-reduces)."""
    events = [torch.cuda.Event(enable_timing=True) for _ in range(WINDOWS + 1)]
    with torch.no_grad():
        for _ in range(1 + repeats):
            step()
        events[0].record()
        for end in events[1:]:
            for _ in range(repeats):
                step()
            end.record()
    events[-1].synchronize()
    ms = sorted(a.elapsed_time(b) for a, b in zip(events, events[1:]))
    return batch * tokens * repeats / (ms[len(ms) // 2] * 1e-3)


def _difference(model: Decoder, reference: Decoder, tokens: int = 16) -> float:
    """max |model - reference| / max |reference| on a prefill of ``tokens`` then one decode step."""
    p = next(reference.parameters())
    torch.manual_seed(1)
    x = torch.randn(1, tokens, reference.cfg.hidden, device=p.device, dtype=p.dtype)
    worst = 0.0
    with torch.no_grad():
        for m in (model, reference):
            m.allocate_cache(1, tokens + 1)
        for xs, pos in ((x, torch.arange(tokens, device=p.device)), (x[:, -1:], torch.tensor([tokens], device=p.device))):
            ys, yd = model(xs, pos).float(), reference(xs, pos).float()
            worst = max(worst, float((ys - yd).abs().max() / yd.abs().max()))
    return worst


def agreement(dense: Decoder, sparse: Decoder, tokens: int = 16) -> float:
    """max |sparse - dense(pruned)| / max |dense(pruned)| on a prefill then one decode step."""
    return _difference(sparse, _densified(sparse), tokens)


def fine_tune_step(sparse: Decoder, lr: float = 1e-3, tokens: int = 8) -> dict:
    """One SGD step on the kept weights (forward, backward, optimizer) against the dense model of the pruned
    weights under the same step with its gradient masked: the largest relative difference of the updated
    kept values (the sparse layers store nothing else, so the pattern holds by construction)."""
    dense = _densified(sparse)
    p = next(sparse.parameters())
    torch.manual_seed(2)
    x = torch.randn(2, tokens, sparse.cfg.hidden, device=p.device, dtype=p.dtype)
    pos = torch.arange(tokens, device=p.device)
    from sparsekit.torch.ops import dense_weight

    for model in (sparse, dense):
        model.allocate_cache(2, tokens)
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        model(x, pos).float().square().mean().backward()
        if model is dense:
            for (_, smod), (_, dmod) in zip(_linears(sparse), _linears(dense)):
                dmod.weight.grad *= smod.to_dense().weight != 0
        opt.step()
    worst = 0.0
    for (_, smod), (_, dmod) in zip(_linears(sparse), _linears(dense)):
        got = dense_weight(smod.values.detach(), smod.indices, smod.in_features).float()
        kept = got != 0
        want = dmod.weight.detach().float()[kept]
        worst = max(worst, float((got[kept] - want).abs().max() / want.abs().max()))
    return dict(max_relative_difference=worst)


def _densified(sparse: Decoder) -> Decoder:
    """A copy of ``sparse`` with every SparseLinear replaced by its ``nn.Linear`` (pruned entries zero)."""
    dense = copy.deepcopy(sparse)
    for name, mod in list(dense.named_modules()):
        if isinstance(mod, SparseLinear):
            parent, _, attr = name.rpartition(".")
            setattr(dense.get_submodule(parent), attr, mod.to_dense())
    return dense


def _linears(model):
    return [(n, m) for n, m in model.named_modules() if isinstance(m, (SparseLinear, torch.nn.Linear))]


def sharded_agreement(model: Decoder, rank: int, world: int, tokens: int = 16):
    """``(sharded, difference)``: ``model`` sharded for ``rank`` of ``world`` (:func:`sparsekit.torch.parallel.
    tensor_parallel_`, on a copy) and max |sharded - unsharded| / max |unsharded| on a prefill then one
    decode step (every rank sees the whole output)."""
    from sparsekit.torch.parallel import tensor_parallel_

    sharded = tensor_parallel_(copy.deepcopy(model), rank, world)
    return sharded, _difference(sharded, model, tokens)


def all_reduce_us(shape, dtype, device, calls: int = 50) -> float:
    """Microseconds one ``torch.distributed.all_reduce`` of a tensor of ``shape`` takes over the default group,
    ``calls`` back to back after a warm-up (:func:`wall_time`; the row-parallel layers' sum: two a decoder layer).
    Every rank of the group must call it alike."""
    import torch.distributed as dist

    y = torch.zeros(shape, dtype=dtype, device=device)
    sync = torch.cuda.synchronize if y.is_cuda else (lambda: None)
    return wall_time(lambda: dist.all_reduce(y), calls, sync) * 1e6


def e2e(cfg, dtypes, sparsities, modes, batches=(1, 8, 32), prefills=(512, 2048), decode_at: int = 128,
        repeats: int = 10, progress=lambda it, desc: it, tp: int = 1, pattern: str = "uniform",
        copies=True) -> list[dict]:
    """Decode (``batches``) and prefill (``prefills``, batch 1) tokens/s in each mode, dense and sparse (every
    linear layer pruned to ``pattern``: :data:`sparsekit.torch.PATTERNS`; a row's ``pattern`` is "dense" at
    sparsity 0; ``copies``: the layers' ``inference_copies``, named in a row's ``copies``, "-" when dense); the
    sparse rows carry the speedup over dense, the weight memory ratio (after the runs: the ELL rows and the
    copies built for inference: compact rows, TiledBitmaps, cuSPARSELt's) and the output agreement.
    ``tp > 1``: each model sharded over the ``torch.distributed`` group (this process is one rank; every
    rank runs the same steps), the rows also carry the sharded model's difference from the unsharded one and
    the time of one all-reduce of the step's activations (:func:`all_reduce_us`, eager, back to back)."""
    import torch.distributed as dist

    rank = dist.get_rank() if tp > 1 else 0
    out = []
    for dtype in dtypes:
        reduce_us = {rows: round(all_reduce_us((rows, cfg.hidden), dtype, "cuda"), 1)          # a step's sums
                     for rows in sorted({*batches, *prefills})} if tp > 1 else {}
        for sparsity in progress(sparsities, f"e2e {dtype}"):
            dense, model = _models(cfg, dtype, sparsity, pattern, copies=copies)
            err = agreement(dense, model) if sparsity else 0.0
            dense_bytes = linear_weight_bytes(dense)
            tp_err = 0.0
            if tp > 1:
                model, tp_err = sharded_agreement(model, rank, tp)
                dense = model if not sparsity else None
            rows = []
            for mode in modes:
                for phase, batch, tokens, start in ([("decode", b, 1, decode_at) for b in batches]
                                                    + [("prefill", 1, t, 0) for t in prefills]):
                    rate = _tokens_per_s(_step_runner(model, mode, batch, tokens, start), batch, tokens, repeats)
                    rows.append(dict(dtype=str(dtype).removeprefix("torch."), sparsity=sparsity,
                                     pattern=pattern if sparsity else "dense",
                                     copies=copies_label(copies) if sparsity else "-", mode=mode,
                                     phase=phase, batch=batch, tokens=tokens, tokens_per_s=round(rate, 1),
                                     max_relative_error=err, tp=tp, tp_relative_difference=tp_err,
                                     **({"all_reduce_us": reduce_us[batch * tokens]} if tp > 1 else {})))
            # after the runs, with the TiledBitmaps they built; a rank holds 1 / tp of every weight
            memory = tp * linear_weight_bytes(model) / dense_bytes
            out.extend(dict(r, weight_memory_vs_dense=round(memory, 3)) for r in rows)
            del dense, model
            torch.cuda.empty_cache()
    base = {(r["dtype"], r["mode"], r["phase"], r["batch"], r["tokens"]): r["tokens_per_s"]
            for r in out if r["sparsity"] == 0}
    for r in out:
        key = (r["dtype"], r["mode"], r["phase"], r["batch"], r["tokens"])
        r["speedup_vs_dense"] = round(r["tokens_per_s"] / base[key], 3) if key in base else None
    return out


def disagreements(records: list[dict]) -> list[str]:
    """One line for each :func:`e2e` row whose output is farther than :data:`TOLERANCE` from the dense model of
    the pruned weights (``max_relative_error``) or, sharded, from the unsharded model (``tp_relative_difference``)."""
    out = []
    for r in records:
        tol = TOLERANCE[getattr(torch, r["dtype"])]
        if max(r["max_relative_error"], r["tp_relative_difference"]) > tol:
            out.append(f"{r['dtype']} {r['sparsity']:.0%} tp {r['tp']}: output differs from the dense model by "
                       f"{r['max_relative_error']:.2e} and from the unsharded one by "
                       f"{r['tp_relative_difference']:.2e} (tolerance {tol:.0e})")
    return out


#: The fields that name a point of :func:`e2e`'s records (``sparsekit bench e2e --merge``).
RECORD_KEY = ("dtype", "sparsity", "pattern", "copies", "mode", "phase", "batch", "tokens", "tp")
#: Markers of the patterns other than uniform in the plot (uniform sparsity with every copy draws the lines), and
#: of uniform models keeping fewer copies (``--copies``).
_PATTERN_MARKERS = {"2:4": "s", "unstructured": "^"}
_COPIES_MARKERS = {"none": "x"}


def copies_label(copies) -> str:
    """A model's ``inference_copies`` as its records name it: "all", "none" or the names joined by "+"."""
    if copies is True or copies is False:
        return "all" if copies else "none"
    return "+".join(sorted(copies)) or "none"


def _kind(r: dict) -> tuple[str, str]:
    """A row's pattern and copies (records from before either field: uniform, every copy)."""
    return r.get("pattern", "uniform"), r.get("copies", "all")


def _marker(kind: tuple[str, str]) -> str:
    """The plot's marker for rows of ``kind`` (:func:`_kind`)."""
    pattern, copies = kind
    if copies not in ("all", "-"):
        return _COPIES_MARKERS.get(copies, "+")
    return _PATTERN_MARKERS.get(pattern, "o")


def _plot_e2e(plt, rows: list[dict]) -> None:
    """Tokens/s over dense against sparsity: a panel per mode (and per tensor-parallel width past 1), a line
    per phase and batch over uniform sparsity, solid for bfloat16 and dashed for float16; 2:4 and unstructured
    models, and models keeping fewer copies, as points of their own markers (:func:`_marker`)."""
    panels = sorted({(r.get("tp", 1), r["mode"]) for r in rows},             # eager, compile, graph, compile-graph
                    key=lambda p: (p[0], "graph" in p[1], "compile" in p[1]))
    slots = len(panels) + 1 if len(panels) > 1 else 1               # the legend gets a panel of its own
    cols = min(4, slots)
    rows_of_panels = -(-slots // cols)
    fig, axes = plt.subplots(rows_of_panels, cols, figsize=(max(5.0, 3.4 * cols), 2.9 * rows_of_panels + 0.4),
                             sharey=True, squeeze=False)
    axes = axes.ravel()
    workloads = sorted({(r["phase"], r["batch"], r["tokens"]) for r in rows})
    colour = {w: f"C{i % 10}" for i, w in enumerate(workloads)}
    label = {w: f"{w[0]} b{w[1]}" + (f" t{w[2]}" if w[0] == "prefill" else "") for w in workloads}
    kinds = sorted({_kind(r) for r in rows if r["sparsity"]}, key=lambda k: (k != ("uniform", "all"), k))
    for ax, (tp, mode) in zip(axes, panels):
        for dtype, style in (("bfloat16", "-"), ("float16", "--")):
            for w in workloads:
                for kind in kinds:
                    line = kind == ("uniform", "all")
                    pts = sorted((r["sparsity"], r["speedup_vs_dense"]) for r in rows
                                 if r["sparsity"] and (r.get("tp", 1), r["mode"], r["dtype"], r["phase"], r["batch"],
                                                       r["tokens"], _kind(r)) == (tp, mode, dtype, *w, kind))
                    if pts:
                        ax.plot(*zip(*pts), linestyle=style if line else "none", marker=_marker(kind),
                                ms=3 if line else 5, color=colour[w], label=label[w] if line else "_nolegend_")
        ax.axhline(1.0, color="grey", lw=0.5)
        ax.set_xlim(0.45, 0.95)
        ax.set_title(mode + (f", tp {tp}" if tp > 1 else ""), fontsize=9)
        ax.set_xlabel("sparsity", fontsize=8)
    for ax in axes[len(panels):]:
        ax.axis("off")
    for ax in axes[::cols]:
        ax.set_ylabel("tokens/s over dense", fontsize=8)
    lines = {h.get_label(): h for ax in axes for h in ax.get_lines() if h.get_label() in label.values()}
    handles = {label[w]: lines[label[w]] for w in workloads if label[w] in lines}
    names = {"s": "squares", "^": "triangles", "x": "crosses", "+": "pluses"}
    title = "solid: bfloat16, dashed: float16" + "".join(
        f"\n{names[_marker(kind)]}: {kind[0]}" + ("" if kind[1] == "all" else f", copies {kind[1]}")
        for kind in kinds if kind != ("uniform", "all"))
    legend = dict(fontsize=7, title=title, title_fontsize=7)
    where = axes[len(panels)] if len(panels) > 1 else axes[0]
    where.legend(handles.values(), handles.keys(), loc="center" if len(panels) > 1 else "best", **legend)


def write(records: list[dict], out, name: str) -> list[str]:
    """``name``.csv, ``name``.json and ``name``.png (a bar chart of the rows) in the folder ``out``."""
    import json
    from pathlib import Path

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sparsekit.experiment import save_figure, write_csv

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(records, out / f"{name}.csv")
    (out / f"{name}.json").write_text(json.dumps(records, indent=1))
    if records and "overhead_us" in records[0]:                 # the dispatch records
        labels = [f"{r['problem']} {r['dtype']}\n{r['product']}" for r in records]
        fig, ax = plt.subplots(figsize=(max(6, len(records) * 0.9), 4))
        ax.bar(labels, [r["device_us"] for r in records], label="device")
        ax.bar(labels, [r["overhead_us"] for r in records], bottom=[r["device_us"] for r in records],
               label="host overhead")
        ax.set_ylabel("us per call")
        ax.tick_params(axis="x", labelsize=6, rotation=90)
    else:
        _plot_e2e(plt, [r for r in records if r["sparsity"] and r["speedup_vs_dense"] is not None])
        fig = plt.gcf()
    return [f"{name}.csv", f"{name}.json", save_figure(fig, out / f"{name}.png")]
