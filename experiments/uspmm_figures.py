"""USpMM: the uniform-sparsity paper's Figures 5-8 and Table 1 on this machine.

"Uniform Sparsity in Deep Neural Networks", Section 4.3. Each figure is a list
of problems; :func:`sparsekit.bench.uspmm.bench_problem` times every
provider on each (our Listing 1 USpMM (1, 8), USpMM-Vec (2, 8), the
pipelined, direct, dense-tile and tensor-core kernels, ``config="auto"``; cuSPARSE CSR/COO and dense cuBLAS through PyTorch)
and returns one record each, with % of the roofline speed of light:

* Fig. 5: M = K from 128 to 1024, N = 128 and 1024, 60% uniform sparsity;
* Fig. 6: sparsity 5..95% at 128^3 and 1024^3 (with cuSPARSE COO and CSR);
* Fig. 7: N from 128 to 16384 at M = K = 1024, 60%;
* Fig. 8: USpMM-Vec over (NWarp, VSize) at 1024^3, across sparsity;
* Table 1: the prunable weight shapes of Transformer-Big (N = 1024, 65%) and
  ResNet-50 (N = 128, 81%), geometric-mean speedup over cuSPARSE CSR per
  model, each layer counted as often as it occurs (the paper's averaging).

On the simulator (no GPU) nothing can be timed: the same problem lists run
scaled down to tiny shapes, each variant is checked against the NumPy
reference, and the tables carry the roofline speed of light and ``correct``.
Quick mode on a GPU keeps every figure but float32 only, two points a curve,
Listing 1 (paper layout), the pipelined kernel and ``auto`` against cuSPARSE
CSR and cuBLAS (under ~30 s with compilation).
"""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from sparsekit.experiment import Context, Experiment, Section, Table

PAPER = ("Paper (A100, fp16, cuSPARSE 11.6): USpMM/USpMM-Vec beat cuSPARSE CSR at every size of Fig. 5, "
         "up to 13.73x; at 60% sparsity 2.74x (128^3, USpMM) and 1.50x (1024^3, USpMM-Vec), at 95% 2.32x and "
         "3.29x (Fig. 6); 1.62x at N = 16384 (Fig. 7); Table 1 geomean speedups 1.49x/1.62x (Transformer-Big, "
         "N = 1024, 65%) and 1.31x/1.01x (ResNet-50, N = 128, 81%) for USpMM/USpMM-Vec.")


def _ours(dtype, quick: bool = False) -> dict:
    from sparsekit.bench.uspmm import our_providers
    return our_providers(dtype, quick=quick)


def figure_points(quick: bool) -> dict:
    """name -> list of (M, K, N, sparsity) for each figure (GPU sizes); quick keeps two points a curve."""
    sizes = (128, 1024) if quick else (128, 256, 512, 768, 1024)
    sparsities = (0.6, 0.95) if quick else tuple(round(0.05 * i, 2) for i in range(1, 20))
    ns = (128, 4096) if quick else (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
    return {
        "fig5": [(s, s, n, 0.6) for n in (128, 1024) for s in sizes],
        "fig6": [(s, s, s, sp) for s in (128, 1024) for sp in sparsities],
        "fig7": [(1024, 1024, n, 0.6) for n in ns],
        "fig8": [(1024, 1024, 1024, sp) for sp in ((0.6,) if quick else (0.5, 0.6, 0.7, 0.8, 0.9, 0.95))],
    }


FIG8_SHAPES = ((1, 8), (2, 8), (1, 4), (2, 4))
#: Quick mode (GPU): float32 only, Fig. 8 at the paper's USpMM setting, two layers a model.
QUICK_FIG8_SHAPES = ((1, 8),)


def table1_layers() -> dict:
    """model -> (N, sparsity, [(m, k, count)]) of the prunable weight shapes."""
    from sparsekit import models
    out = {}
    for name, n, sp in (("transformer-big", 1024, 0.65), ("resnet50", 128, 0.81)):
        shapes = defaultdict(int)
        for layer in models.model(name, batch=1):
            if layer.weights:
                shapes[(layer.m, layer.k)] += layer.count
        out[name] = (n, sp, [(m, k, c) for (m, k), c in sorted(shapes.items())])
    return out


def _geomean(pairs) -> float:
    """Geometric mean of values weighted by counts: [(value, count)]."""
    total = sum(c for _, c in pairs)
    return math.exp(sum(c * math.log(v) for v, c in pairs) / total) if total else float("nan")


# --------------------------------------------------------------------------- GPU

def gpu_section(ctx: Context, dtype: str, *, ours: dict | None = None, vendors=None, repeat: int | None = None,
                on_table=lambda table: None) -> Section:
    """Every figure and Table 1 for ``dtype`` on the GPU. ``ours`` (name -> tunables or config
    string), ``vendors`` (as :func:`sparsekit.bench.uspmm.bench_problem` takes it) and ``repeat``
    default to this experiment's (quick or full); ``experiments/bench_uspmm.py --figures-auto``
    passes fewer providers to time ``auto`` over every full-size point in one short run, and an
    ``on_table`` called with each finished :class:`Table` (to save as it goes)."""
    from sparsekit.bench.uspmm import bench_problem
    pts = figure_points(ctx.quick)
    repeat = repeat or (10 if ctx.quick else 20)
    ours = _ours(dtype, ctx.quick) if ours is None else ours
    if vendors is None:
        vendors = "fast" if ctx.quick else True                 # quick: cuSPARSE CSR and cuBLAS only
    tables, figures = [], []
    for fig in ("fig5", "fig6", "fig7"):
        recs = []
        for (m, k, n, sp) in ctx.progress(pts[fig], desc=fig):
            recs += bench_problem(m, k, n, sp, dtype, providers=ours, vendors=vendors, repeat=repeat, seed=ctx.seed)
        tables.append(Table(f"{fig} {dtype}", recs, csv_name=f"uspmm_{fig}_{dtype}.csv"))
        on_table(tables[-1])
        figures.append(_plot(ctx, fig, recs, dtype))
    shapes = QUICK_FIG8_SHAPES if ctx.quick else FIG8_SHAPES
    provs = {f"USpMM-Vec2 ({a},{b})": dict(variant="listing1", nwarp=a, vsize=b, vecsize=2) for a, b in shapes}
    provs.update({f"USpMM ({a},{b})": dict(variant="listing1", nwarp=a, vsize=b, vecsize=1) for a, b in shapes})
    recs = []
    for (m, k, n, sp) in ctx.progress(pts["fig8"], desc="fig8"):
        recs += bench_problem(m, k, n, sp, dtype, providers=provs, vendors=False, repeat=repeat, seed=ctx.seed)
    tables.append(Table(f"fig8 {dtype}", recs, csv_name=f"uspmm_fig8_{dtype}.csv"))
    on_table(tables[-1])
    figures.append(_plot_fig8(ctx, recs, dtype))
    t1_recs, summary = [], []
    for model, (n, sp, shapes) in table1_layers().items():
        if ctx.quick:
            shapes = shapes[:2]
        speed = defaultdict(list)
        for (m, k, count) in ctx.progress(shapes, desc=model):
            for r in bench_problem(m, k, n, sp, dtype, providers=ours, vendors=vendors, repeat=repeat,
                                   seed=ctx.seed):
                t1_recs.append(dict(r, model=model, count=count))
                if "speedup_vs_cusparse_csr" in r:
                    speed[r["provider"]].append((r["speedup_vs_cusparse_csr"], count))
        for prov, pairs in speed.items():
            summary.append(dict(model=model, n=n, sparsity=sp, dtype=dtype, provider=prov,
                                geomean_speedup_vs_cusparse_csr=_geomean(pairs), layers=sum(c for _, c in pairs)))
    tables.append(Table(f"table1 layers {dtype}", t1_recs, csv_name=f"uspmm_table1_layers_{dtype}.csv"))
    on_table(tables[-1])
    tables.append(Table(f"Table 1 analog {dtype}: geomean speedup over cuSPARSE CSR", summary,
                        csv_name=f"uspmm_table1_{dtype}.csv"))
    on_table(tables[-1])
    return Section(f"USpMM figures ({dtype})", text=PAPER, tables=tables, figures=figures)


def _plot(ctx, fig, recs, dtype) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    x_key = {"fig5": "m", "fig6": "sparsity", "fig7": "n"}[fig]
    groups = sorted({r["n"] for r in recs}) if fig == "fig5" else sorted({r["m"] for r in recs}) if fig == "fig6" else [None]
    fig_, axes = plt.subplots(1, len(groups), figsize=(6 * len(groups), 4), squeeze=False)
    for ax, g in zip(axes[0], groups):
        sel = [r for r in recs if g is None or r["n" if fig == "fig5" else "m"] == g]
        for prov in dict.fromkeys(r["provider"] for r in sel):
            pts = sorted((r[x_key], r["tflops"]) for r in sel if r["provider"] == prov and "tflops" in r)
            if pts:
                ax.plot(*zip(*pts), marker="o", label=prov)
        sol = sorted({(r[x_key], 2 * r["kprime"] * r["m"] * r["n"] / (r["sol_us"] * 1e-6) / 1e12)
                      for r in sel if "sol_us" in r})
        if sol:
            ax.plot(*zip(*sol), "k--", label="roofline speed of light")
        ax.set_xlabel(x_key)
        ax.set_ylabel("TFLOP/s (2 nnz N)")
        ax.set_yscale("log")
        if fig in ("fig5", "fig7"):
            ax.set_xscale("log", base=2)
        ax.set_title(f"{fig} {dtype}" + ("" if g is None else f" ({'N' if fig == 'fig5' else 'M=K=N'}={g})"))
        ax.legend(fontsize=7)
    name = f"uspmm_{fig}_{dtype}.png"
    fig_.tight_layout()
    fig_.savefig(ctx.out_dir / name, dpi=110)
    plt.close(fig_)
    return name


def _plot_fig8(ctx, recs, dtype) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    provs = list(dict.fromkeys(r["provider"] for r in recs))
    sps = sorted({r["sparsity"] for r in recs})
    grid = np.full((len(provs), len(sps)), np.nan)
    for r in recs:
        if "tflops" in r:
            grid[provs.index(r["provider"]), sps.index(r["sparsity"])] = r["tflops"]
    fig, ax = plt.subplots(figsize=(1.2 * len(sps) + 3, 0.5 * len(provs) + 1.5))
    im = ax.imshow(grid, aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(sps)), [f"{s:.0%}" for s in sps])
    ax.set_yticks(range(len(provs)), provs)
    for i in range(len(provs)):
        for j in range(len(sps)):
            if not np.isnan(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", color="w", fontsize=7)
    fig.colorbar(im, label="TFLOP/s")
    ax.set_title(f"Fig. 8 analog: (NWarp, VSize) at 1024^3, {dtype}")
    name = f"uspmm_fig8_{dtype}.png"
    fig.tight_layout()
    fig.savefig(ctx.out_dir / name, dpi=110)
    plt.close(fig)
    return name


# --------------------------------------------------------------------------- simulator

def _tiny(m, k, n) -> tuple[int, int, int]:
    """A GPU problem scaled to a simulator-sized one (keeps M != K != N, odd sizes)."""
    return max(3, m // 64 + 1), max(3, k // 32 + 2), max(2, n // 512 + 1)


def _simulator(ctx: Context) -> Section:
    from sparsekit.gpu.uspmm import uspmm
    from sparsekit.reference.uspmm import uspmm as ref
    from sparsekit.roofline import speed_of_light
    from sparsekit.tune import make_ell
    recs = []
    pts = figure_points(True)
    chosen = [("fig5", pts["fig5"][0]), ("fig6", pts["fig6"][-1]), ("fig7", pts["fig7"][-1]), ("fig8", pts["fig8"][0])]
    for fig, (m, k, n, sp) in ctx.progress(chosen, desc="uspmm (simulator)"):
        for dtype in ("float32", "float16"):
            tm, tk, tn = _tiny(m, k, n)
            ell = make_ell(tm, tk, sp, dtype, seed=ctx.seed)
            b = np.random.default_rng(ctx.seed).standard_normal((tk, tn)).astype(dtype)
            want = ref(ell, b).astype(np.float64)
            scale = np.abs(ell.to_dense().astype(np.float64)) @ np.abs(b.astype(np.float64))
            for name, cfg in _ours(dtype, ctx.quick).items():
                kw = dict(config=cfg) if isinstance(cfg, str) else dict(cfg)
                order = kw.pop("layout", "C")                    # "F": B column-major (Eq. 2)
                got = uspmm(ell, np.asarray(b, order=order), **kw).astype(np.float64)
                tol = ell.kprime * 2.0 ** -24 * scale + np.finfo(dtype).eps * np.abs(want) + 1e-7
                recs.append(dict(figure=fig, paper_problem=f"{m}x{k}x{n} {sp:.0%}", m=tm, k=tk, n=tn, dtype=dtype,
                                 provider=name, correct=bool((np.abs(got - want) <= tol).all()),
                                 gpu_problem_sol_us=speed_of_light("ell", m, k, n, density=1 - sp,
                                                                   dtype=dtype).seconds * 1e6))
    text = ("No GPU: every variant ran on the CUDA simulator at tiny shapes standing in for each figure's "
            "problems and was checked against sparsekit/reference/uspmm.py; the speed of light is the roofline's for "
            "the paper-size problem on an H100. Run on a GPU for the timed figures.\n\n" + PAPER)
    return Section("USpMM figures (simulator: correctness only)", text=text,
                   tables=[Table("uspmm simulator check", recs, csv_name="uspmm_simulator.csv")])


def run(ctx: Context) -> Section:
    if not ctx.on_gpu:
        return _simulator(ctx)
    sections = [gpu_section(ctx, dtype) for dtype in (("float32",) if ctx.quick else ("float32", "float16"))]
    return Section("USpMM: Figures 5-8 and Table 1", text=PAPER,
                   tables=[t for s in sections for t in s.tables], figures=[f for s in sections for f in s.figures])


EXPERIMENT = Experiment("uspmm", "USpMM kernels: Figures 5-8 and Table 1", "uniform-sparsity.txt", run)
