"""Uniform-sparse weights at LLM decode shapes: ``uspmm(config="auto")`` against dense cuBLAS, in half precision.

At the batch sizes of decoding (``N`` = 1 to 128 tokens) a linear layer is bound by reading its weight.
This benchmark times what a user's call runs, ``sparsekit.gpu.uspmm.uspmm(weight, b, config="auto")`` on a
prepared weight (the router's kernel for the shape, dtype and ``N``, named in each record's ``route``: the ELL-rows
or TiledCSL row kernel, TiledBitmap on tensor cores, or the tensor-core tile kernel), on
the layer shapes of a Llama-style model (4096 x 4096 attention, 14336 x 4096 and 4096 x 14336 MLP),
uniform sparsity 50-90 %, float16 and bfloat16, against what a user runs instead: dense cuBLAS in the same
dtype (``torch.nn.functional.linear``), cuSPARSELt 2:4 at 50 % (``to_sparse_semi_structured``) and
cuSPARSE CSR (``torch.sparse.mm``). Device time (``sparsekit.timing.measure``: CUDA events behind a spin
kernel, L2 flushed, median), the compressed bytes of the format the route reads and the share of the measured
copy bandwidth they reach, and the one-time cost of pruning, formatting and ``prepare`` (with the layouts the
routes of the swept ``N`` build from the ELL). ``B`` is row-major ``K x N``
(``C = A @ B``); at ``N = 1`` that is also the linear layer's ``x``.

``crossover`` gives, per shape, dtype and sparsity, the largest ``N`` at which ours still beats dense.
``sparsekit bench uspmm-decode`` runs :func:`sweep` and :func:`write_results`; the experiment
``experiments/bench_uspmm_decode.py`` runs :func:`sweep` and :func:`plot`.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from sparsekit.experiment import save_figure
from sparsekit.router import compact_wins

SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336)]
SPARSITIES = [0.5, 0.6, 0.7, 0.8, 0.9]
NS = [1, 8, 16, 32, 64, 128]
DTYPES = ["float16", "bfloat16"]
QUICK_SHAPES, QUICK_SPARSITIES, QUICK_NS = [(4096, 4096)], [0.5, 0.8, 0.9], [1, 8, 16]


def value_dtype(name: str) -> np.dtype:
    """The NumPy dtype of ``"float16"`` or ``"bfloat16"`` (``ml_dtypes.bfloat16``)."""
    import ml_dtypes

    return np.dtype(np.float16) if name == "float16" else np.dtype(ml_dtypes.bfloat16)


def pruned_weight(m: int, k: int, sparsity: float, dtype: np.dtype, seed: int):
    """A seeded N(0, 1) weight pruned uniformly (every row keeps its K' largest ``|w|``), as ELL.

    Returns ``(ell, dense_pruned, seconds)``: the seconds of pruning and formatting (``prepare`` is timed by the
    caller)."""
    from sparsekit.formats import ELL
    from sparsekit.prune import uniform

    w = np.random.default_rng(seed).standard_normal((m, k), dtype=np.float32).astype(dtype)
    t0 = time.perf_counter()
    mask = uniform(w.astype(np.float32), sparsity)
    ell = ELL.from_dense(w, mask, index_dtype=np.int16 if k <= 32768 else np.int32)
    seconds = time.perf_counter() - t0
    return ell, np.where(mask, w, np.zeros((), dtype)).astype(dtype), seconds


def route_layout(dell, variant: str, n: int):
    """``(builds, nbytes)``: a callable building (once, then cached on ``dell``) the layout ``variant`` reads at
    ``N = n``, and that layout's bytes."""
    if variant == "decode" and n == 1 and compact_wins(dell.host.values.shape[1], dell.shape[1], dell.shape[0]):
        return dell.compact_rows, lambda: sum(int(a.nbytes) for a in dell.compact_rows())
    if variant == "decode" and n == 1:
        return dell.ell_rows, lambda: sum(int(a.nbytes) for a in dell.ell_rows())
    if variant == "decode":
        return dell.tiled_rows, lambda: dell.tiled_rows().host.nbytes().total
    if variant == "bitmap":
        return dell.bitmap, lambda: dell.bitmap().host.nbytes().total
    return (lambda: None), lambda: dell.host.nbytes().total


def _torch_dtype(name: str):
    import torch

    return {"float16": torch.float16, "bfloat16": torch.bfloat16}[name]


def sweep(shapes, sparsities, ns, dtypes, *, repeat: int = 15, seed: int = 0, progress=lambda it, desc: it):
    """One record per (shape, dtype, sparsity, N) on the GPU: times in microseconds, the route, ``correct``."""
    import torch
    import torch.nn.functional as F
    from numba import cuda

    from sparsekit.bench.spmm import error_bound
    from sparsekit.gpu.uspmm import prepare, resolved, uspmm
    from sparsekit.timing import measure, measured_bandwidth

    bandwidth = measured_bandwidth()
    dev = torch.device("cuda")
    records = []
    for (m, k) in progress(shapes, "shapes"):
        for dname in dtypes:
            tdt = _torch_dtype(dname)
            wd = torch.randn(m, k, device=dev, dtype=tdt)
            bs = {n: torch.randn(k, n, device=dev, dtype=tdt) for n in ns}
            xs = {n: bs[n].t().contiguous() for n in ns}
            dense = {n: measure(lambda: F.linear(xs[n], wd), repeat=repeat).median_s for n in ns}
            for s in sparsities:
                ell, pruned, prune_s = pruned_weight(m, k, s, value_dtype(dname), seed)
                t0 = time.perf_counter()
                dell = prepare(ell)
                routes = {n: resolved("auto", dell, n, "C").get("variant", "listing1") for n in ns}
                layouts = {n: route_layout(dell, routes[n], n) for n in ns}
                for build, _ in layouts.values():
                    build()
                cuda.synchronize()
                prepare_s = time.perf_counter() - t0
                wp = torch.from_numpy(pruned.view(np.int16)).to(dev).view(tdt)
                extra = _baselines(wp, xs, bs, ns, s, repeat)
                for n in ns:
                    out = uspmm(dell, bs[n], config="auto")
                    got = torch.as_tensor(out, device=dev).float()
                    want, tol = error_bound(xs[n].float(), wp.float(), dname)          # Y^T = (A B)^T
                    correct = bool(((got.T - want).abs() <= tol).all())
                    t = measure(lambda: uspmm(dell, bs[n], config="auto"), repeat=repeat).median_s
                    nbytes = layouts[n][1]()
                    records.append(dict(m=m, k=k, dtype=dname, sparsity=s, n=n, route=routes[n], ours_us=t * 1e6,
                                        dense_us=dense[n] * 1e6, cusparselt_us=extra.get(("cslt", n)),
                                        cusparse_csr_us=extra.get(("csr", n)), speedup=dense[n] / t,
                                        weight_mb=nbytes / 1e6, pct_bandwidth=100 * nbytes / t / bandwidth,
                                        prune_format_s=prune_s, prepare_s=prepare_s, correct=correct))
    return records, bandwidth


def _baselines(wp, xs, bs, ns, sparsity, repeat):
    """cuSPARSELt 2:4 (at 50 %, of the dense weight pruned 2:4) and cuSPARSE CSR, microseconds."""
    import torch
    import torch.nn.functional as F

    from sparsekit.timing import measure

    out = {}
    if sparsity == 0.5:
        try:
            from torch.sparse import to_sparse_semi_structured

            groups = wp.reshape(wp.shape[0], -1, 4)
            keep = groups.abs().topk(2, dim=-1).indices
            w24 = (groups * torch.zeros_like(groups).scatter_(-1, keep, 1)).reshape(wp.shape)
            ws = to_sparse_semi_structured(w24)
            for n in ns:
                if n % 8 == 0:
                    out[("cslt", n)] = measure(lambda: F.linear(xs[n], ws), repeat=repeat).median_s * 1e6
        except (RuntimeError, ValueError, TypeError, ImportError):
            pass
    try:
        wcsr = wp.to_sparse_csr()
        for n in ns:
            out[("csr", n)] = measure(lambda: torch.sparse.mm(wcsr, bs[n]), repeat=max(3, repeat // 3)).median_s * 1e6
    except (RuntimeError, NotImplementedError):
        pass
    return out


def crossover(records) -> list[dict]:
    """Per shape, dtype and sparsity: the largest N at which ours beats dense (0: none)."""
    rows = {}
    for r in records:
        key = (f"{r['m']}x{r['k']}", r["dtype"], r["sparsity"])
        best = rows.setdefault(key, 0)
        if r["speedup"] > 1.0 and r["n"] > best:
            rows[key] = r["n"]
    return [dict(shape=s, dtype=d, sparsity=sp, largest_n_faster_than_dense=n) for (s, d, sp), n in rows.items()]


def plot(records, path: Path) -> str:
    """Speedup over dense against sparsity, one line per N, a panel per shape and dtype; the bandwidth
    ceiling of 4 bytes a kept weight against 2 a dense one, ``0.5 / (1 - s)``, dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FormatStrFormatter

    panels = sorted({(f"{r['m']}x{r['k']}", r["dtype"]) for r in records}, key=lambda p: (p[1], p[0]))
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False)
    for ax, (shape, dname) in zip(axes.ravel(), panels):
        mine = [r for r in records if f"{r['m']}x{r['k']}" == shape and r["dtype"] == dname]
        for n in sorted({r["n"] for r in mine}):
            pts = sorted((r["sparsity"], r["speedup"]) for r in mine if r["n"] == n)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"N={n}")
        s = np.linspace(min(r["sparsity"] for r in mine), max(r["sparsity"] for r in mine), 50)
        ax.plot(s, 0.5 / (1 - s), "k--", lw=1, label="bytes ceiling")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FormatStrFormatter("%gx"))      # 0.5x, 1x, 2x: not powers of ten
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%gx"))
        ax.tick_params(axis="y", which="minor", labelsize=6)
        ax.set_title(f"{shape} {dname}", fontsize=9)
        ax.set_xlabel("sparsity")
    for row in axes:
        row[0].set_ylabel("speedup over dense cuBLAS")
    axes[0][-1].legend(fontsize=7)
    return save_figure(fig, path)


#: The fields that name a point of the sweep (:func:`merged_with`).
RECORD_KEY = ("m", "k", "dtype", "sparsity", "n")


def merged_with(old: dict, records: list[dict], command: str) -> tuple[list[dict], str]:
    """``records`` merged into ``old`` (an earlier ``uspmm_decode.json`` as :func:`sparsekit.experiment.read_record`
    gives it: its points this run measured again replaced, the others kept) and the commands of both, for
    :func:`write_results`."""
    from sparsekit.experiment import merge_records

    return merge_records(old["records"], records, RECORD_KEY), "; ".join(filter(None, (old.get("command"), command)))


def write_results(records, bandwidth, out: Path, command: str) -> None:
    """The JSON record and the plot of a sweep."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "uspmm_decode.json").write_text(json.dumps(dict(command=command, bandwidth=bandwidth,
                                                           records=records, crossover=crossover(records)), indent=1))
    plot(records, out / "uspmm_decode.png")
