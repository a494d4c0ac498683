"""Tutorial 1: loop orders. Why the same SpMM runs 10x faster with its loops swapped.

What you will learn
-------------------
* the slides' loop-interchange table (cache lines each array loads per loop
  order) is a rule you can compute, and a cache simulator agrees with it;
* for CSR x dense, Gustavson's row-wise order reads ``B`` and ``C`` along
  rows, while the textbook dot-product order (``i, j, k``) reads ``B`` down
  its columns; the timings follow the table.

Run it: ``python tutorials/01_loop_orders.py`` (add ``--quick`` for toy sizes).
Every step checks its result against ``sparsekit/reference/spmm.py``.
"""
from __future__ import annotations

import sys

import numpy as np


def main(quick: bool = False) -> dict:
    from sparsekit.cpu import spmm as cpu
    from sparsekit.bench.spmm import suite_matrix, wall_time
    from sparsekit.reference.spmm import spmm_csr
    from sparsekit import loop_orders as lo

    # Step 1. The slides' table for C[i][j] += A[i][k] * B[k][j] in the order i, j, k.
    print("Step 1: the slides' table (B = floats per cache line)")
    for row in lo.cost_table(lo.dense_nest("ijk")):
        print(f"  {row['loop']:>5s}   A {row['A']:>6s}   B {row['B']:>6s}   C {row['C']:>6s}")

    # Step 2. The same rule for all six orders, checked by replaying the addresses through a
    # 4-line LRU cache (16 x 16 matrices, 4 floats per line).
    print("\nStep 2: every order, rule vs simulated cache")
    table = lo.order_table(n=16, line=4, capacity=4)
    for r in table:
        pred = r["total predicted"]
        sim = r["A simulated"] + r["B simulated"] + r["C simulated"]
        print(f"  {r['order']}: {r['A (table)']:>6s} {r['B (table)']:>6s} {r['C (table)']:>6s}"
              f"   lines predicted {pred:5d}, simulated {sim:5d}")
        assert pred == sim

    # Step 3. CSR x dense in each order: time it and check it.
    m, k, n = (128, 128, 64) if quick else (1024, 1024, 256)
    csr, b, _ = suite_matrix(m, k, n, 0.9)
    want = spmm_csr(csr, b)
    print(f"\nStep 3: CSR SpMM {m}x{k} (90% sparse) x {k}x{n}, serial, wall clock")
    times = {}
    for order in cpu.ORDERS:
        got = cpu.spmm_csr(csr, b, order)
        assert np.allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
        times[order] = wall_time(lambda: cpu.spmm_csr(csr, b, order), 3)[0]
        print(f"  {order:8s} {times[order] * 1e3:8.3f} ms")
    # The table's prediction for CSR: the dot-product order loads B by elements, row-wise by lines.
    sizes = {"M": m, "K": k, "N": n, "r": 16, "c": 16}
    row_lines = lo.predicted_misses(lo.csr_nest("rowwise"), sizes, line=16)["B"]
    dot_lines = lo.predicted_misses(lo.csr_nest("inner"), sizes, line=16)["B"]
    print(f"  model: B lines inner / rowwise = {dot_lines / row_lines:.0f} (64-byte lines of floats)")
    print(f"  measured: inner / rowwise = {times['inner'] / times['rowwise']:.1f}x")
    return times


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
