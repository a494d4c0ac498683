"""Sparse persistent RNN ("Sparse Persistent RNNs"): Table 1's ablation and a Figure 2 analog.

Three parts:

1. **Bank conflicts and padding** (CPU, always): ``sparsekit.rnn_layout``'s
   analyzer replays the operate stage's shared-memory loads at Table 1's
   configuration (layer 1152, batch 4, density 10%) for the naive layout,
   wide loads and the bank-aware layout (Appendix A, Algorithm 1), beside the
   paper's penalty column; and the ``<index, 0>`` padding waste of a
   row-balanced and of a magnitude-pruned (unbalanced) mask (the paper: ~20%).
2. **Kernels**: on the simulator (quick), each Table 1 configuration runs as a
   single block at a toy size and is checked against the reference (no
   timings: simulated time means nothing). On a GPU, the Table 1 ablation in
   us/step against the GEMM loop, the graph-captured GEMM loop and cuDNN,
   with the paper's speedups beside ours (``experiments/bench_persistent_rnn.py``
   does the measuring).
3. **Figure 2 analog and Figures 3-4 timed** (GPU, not quick): density,
   layer size, batch and timesteps varied around layer 1792, annotated with
   the speedup over the next-best baseline; and the largest layer that stays
   on chip per density, Lamport and grid barrier, each timed.
4. **Recorded H100 results** (any backend, from
   ``experiments/results/persistent_rnn_h100.json``): the last GPU run's
   Figure 2 and Figures 3-4 points (unless measured now), the Figures 3-4
   model (the largest layer on chip per density from sm_90 register counts and
   the H100's occupancy rules) and the persistent LSTM against cuDNN
   (Appendix B, Tables 2-3, with the Deep Speech 2 layers).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sparsekit.experiment import Experiment, Section, Table, save_figure

#: what the recorded H100 runs measured (experiments/results/persistent_rnn.md explains each part)
RECORDED = Path(__file__).resolve().parent / "results" / "persistent_rnn_h100.json"

PAPER_PENALTY = {"naive": 1.3, "wide": 1.0, "bank_aware": 0.3}


def conflict_table(hidden: int = 1152, density: float = 0.1, batch: int = 4, seed: int = 0,
                   tprs=((32, 8), (16, 10))) -> list[dict]:
    """Analyzer penalties of Table 1's three layouts, float32 and float16 h, for each (tpr, rows per block)."""
    from sparsekit import prune
    from sparsekit.rnn_layout import balance, bank_aware, bank_conflicts

    rng = np.random.default_rng(seed)
    u = rng.standard_normal((hidden, hidden)).astype(np.float32)
    mask = prune.row_balanced(u, 1.0 - density)
    records = []
    for tpr, rpb in tprs:
        lay = balance(u, mask, tpr=tpr)
        for itemsize, dtype in ((4, "float32"), (2, "float16")):
            aware = bank_aware(lay, width=batch * itemsize)
            rows = {"naive": bank_conflicts(lay, batch=batch, scheme="naive", rows_per_block=rpb, itemsize=itemsize),
                    "wide": bank_conflicts(lay, batch=batch, scheme="wide", rows_per_block=rpb, itemsize=itemsize),
                    "bank_aware": bank_conflicts(aware, batch=batch, scheme="wide", rows_per_block=rpb,
                                                 itemsize=itemsize)}
            for name, rep in rows.items():
                records.append({"h dtype": dtype, "tpr": tpr, "configuration": name, "penalty": rep.penalty,
                                "extra wavefronts / request": rep.extra_per_request,
                                "extra wavefronts / step": rep.wavefronts - rep.ideal,
                                "paper penalty": PAPER_PENALTY[name]})
    return records


def padding_table(hidden: int = 1152, density: float = 0.1, seed: int = 0) -> list[dict]:
    from sparsekit import prune
    from sparsekit.rnn_layout import balance

    rng = np.random.default_rng(seed)
    u = rng.standard_normal((hidden, hidden)).astype(np.float32)
    return [{"mask": name, "kpad": lay.kpad, "nnz": lay.nnz, "padding waste": lay.waste}
            for name, lay in (("row_balanced", balance(u, prune.row_balanced(u, 1 - density), tpr=1)),
                              ("magnitude (unbalanced)", balance(u, prune.magnitude(u, 1 - density), tpr=1)))]


def simulator_check(hidden: int = 24, steps: int = 3) -> list[dict]:
    """Each Table 1 configuration as one block against reference.persistent_rnn (no timing)."""
    from experiments.bench_persistent_rnn import CONFIGS, plan_for, problem
    from sparsekit.reference import persistent_rnn as ref_rnn

    records = []
    for dt in ("float32", "float16"):
        u, mask, bp, h0 = problem(hidden, 0.25, 4, steps, np.dtype(dt), seed=1)
        want = ref_rnn.rnn_forward(u, bp, h0, steps)
        for config in CONFIGS:
            plan = plan_for(u, mask, config, 4, rows_per_block=-(-hidden * 4 // 32) * 32 // 4)
            got = plan(bp, h0, steps)
            err = float(np.abs(got.astype(np.float64) - want).max())
            records.append({"dtype": dt, "configuration": config, "max |error|": err,
                            "tolerance": ref_rnn.tolerance(u.dtype, plan.layout.kpad),
                            "correct": err <= ref_rnn.tolerance(u.dtype, plan.layout.kpad)})
    return records


def _plot_penalties(records, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in records if r["tpr"] == 32 and r["h dtype"] == "float32"]
    fig, ax = plt.subplots(figsize=(5, 3))
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r["penalty"] for r in rows], 0.4, label="analyzer (H100 model)")
    ax.bar(x + 0.2, [r["paper penalty"] for r in rows], 0.4, label="paper (V100)")
    ax.set_xticks(x, [r["configuration"] for r in rows])
    ax.set_ylabel("bank-conflict penalty")
    ax.set_title("Table 1: layer 1152, batch 4, density 10%")
    ax.legend()
    save_figure(fig, path)


def _plot_sweep(records, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    axes = [a for a in ("density", "hidden", "batch", "steps") if any(r["axis"] == a for r in records)]
    base = [r for r in records if r["axis"] == "base"]
    fig, axs = plt.subplots(1, len(axes), figsize=(4 * len(axes), 3.2), squeeze=False)
    for ax, axis in zip(axs[0], axes):
        ax.set_title(f"({'abcd'['density hidden batch steps'.split().index(axis)]}) {axis}, others at the base",
                     fontsize=8)
        rs = sorted([r for r in records if r["axis"] == axis] + base, key=lambda r: r[axis])
        xs = [r[axis] for r in rs]
        for key, label in (("ours_us", "sparse persistent (ours)"), ("gemm_graph_us", "GEMM loop, CUDA graph"),
                           ("cudnn_rnn_us", "cuDNN RNN"), ("cusparse_csr_us", "cuSPARSE CSR per step")):
            ax.plot(xs, [r.get(key, np.nan) for r in rs], marker="o", label=label)
        for r in rs:
            if r.get("speedup_vs_next_best") and r.get("ours_us"):
                ax.annotate(f"{r['speedup_vs_next_best']:.1f}x", (r[axis], r["ours_us"]), fontsize=7,
                            textcoords="offset points", xytext=(0, -10))
        ax.set_xlabel(axis)
        ax.set_xscale("log" if axis in ("density", "steps") else "linear")
        ax.set_ylabel("us / step")
        ax.set_yscale("log")
    axs[0][0].legend(fontsize=7)
    save_figure(fig, path)


def _plot_capacity(records, timed, path):
    """Figures 3-4 analog: the largest layer that stays on chip per density and synchronisation (offline model),
    with the points timed on the GPU (``timed``: sweep records of axis ``fig34_*``)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for sync, marker in (("lamport", "o"), ("lamport (2 buffers, the paper's)", "s"), ("barrier", "^")):
        rs = sorted((r for r in records if r["sync"] == sync), key=lambda r: r["density"])
        ax.plot([100 * r["density"] for r in rs], [r["largest_hidden"] for r in rs], marker=marker, label=sync)
    for r in timed:
        if not r.get("ours_us"):
            continue
        lamport = r["axis"].endswith("lamport")
        ax.scatter([100 * r["density"]], [r["hidden"]], color="k", marker="x", zorder=3)
        speedup = f", {r['speedup_vs_next_best']:.1f}x" if r.get("speedup_vs_next_best") else ""
        ax.annotate(f"{'L' if lamport else 'B'}: {r['ours_us']:.2g} us/step{speedup}",
                    (100 * r["density"], r["hidden"]), fontsize=6, textcoords="offset points",
                    xytext=(5, 4 if lamport else -9))
    ax.set_xscale("log")
    ax.set_xlabel("density (%)")
    ax.set_ylabel("largest layer on chip")
    ax.set_title("H100, float16, batch 4: offline model; x: timed (L Lamport, B grid barrier;\n"
                 "us/step and speedup over the best baseline)", fontsize=8)
    ax.legend(fontsize=7)
    save_figure(fig, path)


_SWEEP_KEYS = ["axis", "hidden", "density", "batch", "steps", "ours", "ours_tpr", "chunk", "ours_us", "gemm_graph_us",
               "cudnn_rnn_us", "cusparse_csr_us", "next_best", "speedup_vs_next_best", "correct"]


def _sweep_tables_and_figures(sweep, capacity, out_dir, when: str, timed_before=()):
    """Figure 2 and Figures 3-4 from sweep records; ``timed_before``: Figures 3-4 points timed apart from the sweep,
    shown when the sweep has none."""
    fig2 = [r for r in sweep if r["axis"] in ("base", "steps", "hidden", "density", "batch")]
    timed = [r for r in sweep if r["axis"].startswith("fig34")] or list(timed_before)
    _plot_sweep(fig2, out_dir / "figure2.png")
    _plot_capacity(capacity, timed, out_dir / "figure3_4_capacity.png")
    return ([Table(f"Figure 2 analog around layer 1792 ({when}), us/step", [{k: r.get(k) for k in _SWEEP_KEYS}
                                                                            for r in fig2], "figure2.csv"),
             Table(f"Figures 3-4 analog timed ({when}): largest layer on chip per density, 64 steps",
                   [{k: r.get(k) for k in _SWEEP_KEYS} for r in timed], "figure3_4_timed.csv")],
            ["figure2.png", "figure3_4_capacity.png"])


def _timed_large(data) -> list[dict]:
    """The record's timed layers past 48 KB of shared memory (``run2.final``: 8192 units, 1%, 64 steps) as Figures 3-4
    points."""
    return [{"axis": "fig34_" + ("lamport" if r["variant"].startswith("lamport") else "barrier"),
             "hidden": r["hidden"], "density": r["density"], "batch": 4, "steps": 64, "ours_us": r["us_per_step"],
             "ours_tpr": r["tpr"], "correct": r["correct"], "when": data["run2"]["date"]}
            for r in data["run2"]["final"] if r["hidden"] >= 8192 and r.get("correct")]


def _recorded_sweep(data) -> tuple[list[dict], str]:
    """The sweep points of the recorded sweep runs, each point from the newest run that measured it (a later run fills
    in the points an earlier one was cut off before), and the dates of the runs they come from."""
    points, dates = {}, []
    for name in sorted(data["sweeps"]):
        run = data["sweeps"][name]
        new = [r for r in run.get("sweep", []) if "ours_us" in r]
        for r in new:
            points[(r["axis"], r["hidden"], r["density"], r["batch"], r["steps"])] = r
        if new:
            dates.append(run["date"])
    return list(points.values()), " and ".join(dates)


def recorded_section(out_dir, with_sweep: bool = True) -> tuple[list, list, str]:
    """Tables and figures of the recorded H100 runs (no GPU needed); ``with_sweep=False`` leaves the Figure 2 and
    Figures 3-4 parts to a sweep measured now."""
    data = json.loads(RECORDED.read_text())
    tables, figures = [], []
    if with_sweep:
        sweep, dates = _recorded_sweep(data)
        tables, figures = _sweep_tables_and_figures(sweep, data["capacity_offline"], out_dir, f"H100, {dates}",
                                                    _timed_large(data))
    tables += [Table("Figures 3-4 analog: largest layer on chip (offline register counts + H100 occupancy rules)",
                     data["capacity_offline"], "capacity.csv"),
               Table(f"Appendix B: persistent LSTM vs cuDNN LSTM on the H100 ({data['run1']['date']}), us/step",
                     data["run1"]["lstm"], "lstm_recorded.csv"),
               Table(f"Appendix B: Deep Speech 2 layers, shuffle reduction and launch bounds "
                     f"(H100, {data['sweeps']['run1']['date']}), us/step", data["sweeps"]["run1"]["ds2"],
                     "lstm_ds2_recorded.csv")]
    text = " Recorded H100 results: experiments/results/persistent_rnn.md gives the commands."
    return tables, figures, text


def run(ctx) -> Section:
    conflicts = conflict_table(tprs=((32, 8),) if ctx.quick else ((32, 8), (16, 10)))
    padding = padding_table()
    _plot_penalties(conflicts, ctx.out_dir / "table1_penalty.png")
    tables = [Table("Table 1 bank-conflict penalty (analyzer), layer 1152, batch 4, density 10%", conflicts,
                    "table1_penalty.csv"),
              Table("Padding waste of <index, 0> rows", padding, "padding_waste.csv")]
    figures = ["table1_penalty.png"]
    text = ("Analyzer penalty = wavefronts / ideal - 1 of the operate stage's shared loads (H100 model: 32 banks, "
            "v4 loads by quarter-warps, 8-byte loads by half-warps). On the H100 the analyzer's predicted conflict "
            "count matched Nsight Compute's `l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld` exactly for 7 "
            "of 8 kernels (see experiments/results/persistent_rnn.md). The paper's penalty column is 1.3 / 1.0 / 0.3.")
    if ctx.on_gpu:
        from experiments import bench_persistent_rnn as bench
        timing = bench.time_table(ctx.out_dir, sizes=(1152,) if ctx.quick else (1152, 1792),
                                  tprs=(16,) if ctx.quick else (8, 16, 32), extras=not ctx.quick)
        tables.append(Table("Table 1 ablation on this GPU (float16, batch 4, density 10%, 256 steps), us/step",
                            timing, "table1_timing.csv"))
    else:
        tables.append(Table("Each Table 1 kernel as one simulated block vs the reference", simulator_check(),
                            "simulator_check.csv"))
        text += " Simulator: kernels checked for correctness only; timings need a GPU."
    measured_now = ctx.on_gpu and not ctx.quick
    if measured_now:
        from experiments import bench_persistent_rnn as bench
        data = json.loads(RECORDED.read_text())
        sweep_tables, sweep_figures = _sweep_tables_and_figures(bench.sweep(ctx.out_dir), data["capacity_offline"],
                                                                ctx.out_dir, "this GPU, now", _timed_large(data))
        tables += sweep_tables
        figures += sweep_figures
    rec_tables, rec_figures, rec_text = recorded_section(ctx.out_dir, with_sweep=not measured_now)
    tables += rec_tables
    figures += rec_figures
    text += rec_text
    return Section("Sparse persistent RNN (Table 1, Figure 2, Figures 3-4, LSTM)", text=text, tables=tables,
                   figures=figures)


EXPERIMENT = Experiment("persistent_rnn", "Sparse persistent RNN: Table 1 ablation and Figure 2 analog",
                        "sparse-persistent-rnns.txt", run)
