"""Predicted (speed of light) vs measured speedup over dense, from recorded H100 runs.

The Sparsity Roofline (Section 3.4) says the predicted speedup equals the
measured one exactly when the sparse and the dense kernel reach the same
fraction of their speed of light. This script takes the USpMM issue's measured
table (``experiments/results/uspmm.md``, written by ``bench_uspmm.py --table``
on the H100), recomputes each problem's speed of light with
:mod:`sparsekit.roofline` (H100 datasheet peaks; ELL with int32 indices for
ours, CSR for cuSPARSE, dense for cuBLAS) and prints one row per (problem,
sparse kernel) with both speedups and both fractions of speed of light.

Usage: ``python experiments/roofline_vs_measured.py [results/uspmm.md]``; registered in
``sparsekit reproduce`` as ``roofline_validation`` (table + predicted-vs-measured plot). It
reads the recorded run, so it needs no GPU; a new H100 run of ``bench_uspmm.py --table``
refreshes the data.
"""
from __future__ import annotations

import sys
from pathlib import Path

from sparsekit import roofline
from sparsekit.experiment import Context, Experiment, Section, Table, markdown_table, save_figure

HEADER = "| m | k | n | sparsity | dtype | provider | median_us |"
SPARSE_KIND = {"tiled": "ell", "cuSPARSE CSR (torch)": "csr"}


def measured_rows(path: Path) -> list[dict]:
    """Rows of the first markdown table in ``path`` whose header starts with ``HEADER``."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(HEADER))
    keys = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(keys, (c.strip() for c in line.strip("|").split("|")))))
    return rows


def compare_rows(rows: list[dict]) -> list[dict]:
    problems: dict[tuple, dict[str, float]] = {}
    for r in rows:
        if not r["median_us"]:      # a provider that did not run for this problem
            continue
        key = (int(r["m"]), int(r["k"]), int(r["n"]), float(r["sparsity"]), r["dtype"])
        problems.setdefault(key, {})[r["provider"]] = float(r["median_us"]) * 1e-6
    out = []
    for (m, k, n, s, dtype), times in problems.items():
        dense_name = next((p for p in times if p.startswith("dense cuBLAS")), None)
        if dense_name is None:
            continue
        dense = roofline.speed_of_light("dense", m, k, n, dtype=dtype)
        for provider, kind in SPARSE_KIND.items():
            if provider not in times:
                continue
            sparse = roofline.speed_of_light(kind, m, k, n, density=1 - s, dtype=dtype)
            c = roofline.compare(dense, sparse, times[dense_name], times[provider])
            out.append({"m": m, "k": k, "n": n, "sparsity": s, "dtype": dtype, "sparse kernel": provider,
                        "predicted speedup": c["predicted_speedup"],
                        "measured speedup": c["measured_speedup"],
                        "dense % SoL": 100 * c["dense_fraction_of_sol"],
                        "sparse % SoL": 100 * c["sparse_fraction_of_sol"],
                        "bound (dense/sparse)": f"{c['bound_dense']}/{c['bound_sparse']}"})
    return out


RECORDED = Path(__file__).parent / "results" / "uspmm.md"


def run(ctx: Context) -> Section:
    rows = compare_rows(measured_rows(RECORDED))
    text = ("Data: the measured table of `experiments/results/uspmm.md` (lent H100, 2026-11-22, "
            "`bench_uspmm.py --table`), not a new measurement. Speed of light from `sparsekit.roofline` "
            "(H100 datasheet peaks). The Sparsity Roofline's claim (Section 3.4): predicted = measured "
            "speedup exactly when the sparse and the dense kernel reach the same fraction of their speed "
            "of light. Points far below the diagonal are sparse kernels much further from their roof "
            "than cuBLAS is from its own.")
    return Section("Sparsity Roofline against measured kernels (H100)", text=text,
                   tables=[Table("Predicted vs measured speedup over dense cuBLAS", rows)],
                   figures=[_plot(rows, ctx.out_dir / "predicted_vs_measured.png")])


def _plot(rows: list[dict], path: Path) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.6, 4.6))
    for provider, marker in zip(SPARSE_KIND, "os"):
        for dtype, color in (("float32", "tab:blue"), ("float16", "tab:orange")):
            pts = [(r["predicted speedup"], r["measured speedup"]) for r in rows
                   if r["sparse kernel"] == provider and r["dtype"] == dtype]
            if pts:
                xs, ys = zip(*pts)
                ax.scatter(xs, ys, marker=marker, color=color, label=f"{'ours (tiled)' if provider == 'tiled' else provider}, {dtype}")
    lo, hi = 0.01, 20
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="measured = predicted")
    ax.axhline(1.0, color="gray", lw=0.6, ls=":")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi),
           xlabel="predicted speedup over dense (speed of light)", ylabel="measured speedup over dense")
    ax.set_title("Sparsity Roofline vs the H100", fontsize=9)
    ax.legend(fontsize=7)
    return save_figure(fig, path)


EXPERIMENT = Experiment("roofline_validation", "Sparsity Roofline against measured kernels (H100)",
                        "The Sparsity Roofline (Section 3.4), with the USpMM issue's recorded run", run)


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else RECORDED
    print(markdown_table(compare_rows(measured_rows(path))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
