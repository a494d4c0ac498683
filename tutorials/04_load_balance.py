"""Tutorial 4: load balance. Who waits for whom, and three ways to fix it.

What you will learn
-------------------
* how uneven rows are after pruning (the slides: rows from 86.1% to 93.6%
  sparse at 90% overall), measured by :func:`sparsekit.balance.row_stats`;
* what that costs a thread-per-row warp (lockstep lanes wait for the longest
  row) and a block schedule (the last block to finish sets the time);
* Sputnik's row swizzle, and the slides' two ways to balance blocks: equal
  M-tiles with a variable K share (even, but a block may span output tiles),
  and variable M-tiles holding equal nonzeros (one tile per block, rows
  indivisible).

Run it: ``python tutorials/04_load_balance.py`` (``--quick`` for toy sizes).
"""
from __future__ import annotations

import sys

import numpy as np


def main(quick: bool = False) -> dict:
    from sparsekit.bench.spmm import suite_matrix
    from sparsekit import balance as bal
    from sparsekit.formats import CSR

    m, k = (128, 128) if quick else (512, 2048)
    pruned, _, _ = suite_matrix(m, k, 8, 0.9)
    rng = np.random.default_rng(0)
    # A skewed pattern for contrast: row densities from a power law, mean about 10%.
    dens = np.clip(0.1 * rng.pareto(2.0, size=m), 0.0, 1.0)[:, None]
    skewed = CSR.from_dense(rng.standard_normal((m, k)), rng.random((m, k)) < dens)

    out = {}
    for label, csr in (("magnitude-pruned", pruned), ("power-law rows", skewed)):
        s = bal.row_stats(csr)
        print(f"\n{label}: {s['rows']} rows, mean {s['mean']:.1f} nonzeros, cv {s['cv']:.2f}, "
              f"rows {100 * s['row_sparsity_min']:.1f}%-{100 * s['row_sparsity_max']:.1f}% sparse, "
              f"top 10% of rows hold {100 * bal.heavy_row_share(csr, 0.1):.0f}% of the work")
        # A thread per row: a warp costs 32 x its longest row.
        for name, order in (("natural", None), ("swizzled", bal.row_swizzle(csr))):
            r = bal.mapping_imbalance(csr, rows_per_warp=32, warps_per_block=1, order=order, slots=2)
            print(f"  thread per row, {name:8s}: {100 * r['warp_efficiency']:5.1f}% of lane-steps useful, "
                  f"2 block slots finish at {r['makespan']:.2f}x the ideal nnz/2")
        blocks = 16
        tile_m = max(1, m // blocks)
        plans = (bal.equal_m_tiles(csr, tile_m), bal.split_m(csr, blocks), bal.split_k(csr, tile_m, blocks))
        for plan in plans:
            print(f"  {plan.scheme:34s}: max/mean nonzeros per block {plan.imbalance:.2f}, "
                  f"blocks writing 2+ output tiles: {int((plan.tiles > 1).sum())}")
        # Every scheme still covers all the work exactly once.
        assert all(p.nnz.sum() == csr.nnz for p in plans)
        out[label] = {p.scheme: p.imbalance for p in plans}
    return out


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
