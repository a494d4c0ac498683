"""Predicted (speed of light) vs measured speedup over dense, from recorded H100 runs.

The Sparsity Roofline (Section 3.4) says the predicted speedup equals the
measured one exactly when the sparse and the dense kernel reach the same
fraction of their speed of light. This script takes the USpMM issue's measured
table (``experiments/results/uspmm.md``, written by ``bench_uspmm.py --table``
on the H100), recomputes each problem's speed of light with
:mod:`sparsekit.roofline` (H100 datasheet peaks; ELL with int32 indices for
ours, CSR for cuSPARSE, dense for cuBLAS) and prints one row per (problem,
sparse kernel) with both speedups and both fractions of speed of light.

Usage: ``python experiments/roofline_vs_measured.py [results/uspmm.md]``
"""
from __future__ import annotations

import sys
from pathlib import Path

from sparsekit import roofline
from sparsekit.experiment import markdown_table

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


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else Path(__file__).parent / "results" / "uspmm.md"
    print(markdown_table(compare_rows(measured_rows(path))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
