"""Decode- and prefill-shape timing of sparsekit/gpu/spmm_bitmap.py (TiledBitmap on tensor cores) against dense cuBLAS (GPU, PyTorch).

One line a point: shape, dtype, sparsity, N, device time of the bitmap kernel (default tunables) and of dense
``torch.nn.functional.linear`` on the pruned weight (cuBLAS, tensor cores, the same dtype), in microseconds
(median of 15, L2 flushed before each repeat, host dispatch hidden behind a spin kernel:
sparsekit.timing.measure), the speedup over dense, the share of the copy bandwidth over the TiledBitmap's bytes,
its bytes against dense's, and the largest error against the float32 product (ok: within the tests' bound).
At 50 % also cuSPARSELt 2:4 (``torch.sparse.to_sparse_semi_structured`` on a 2:4-pruned weight of the same
shape). The weights are unstructured (random entries pruned: magnitude pruning of a random matrix);
the kernel's time depends on the density, not the pattern. ``--sweep`` first times the tunables around the
default at a few points. Every point is guarded: a failure prints FAIL and the run goes on.

    python -m experiments.bench_spmm_bitmap                  # every point
    python -m experiments.bench_spmm_bitmap --shapes 14336x4096 --sparsities 0.8 --widths 8 32 --sweep

Recorded in ``experiments/results/spmm_bitmap.md``.
"""
import argparse
import time

import numpy as np

from experiments.spmm_points import DTYPES, REPEAT, bitmap_on_device, error, error_bound, log, point, timed
from sparsekit.cli_types import matrix_shape
from sparsekit.gpu import spmm_bitmap as gb
from sparsekit.timing import measured_bandwidth

T0 = time.time()
SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336)]
SPARSITIES = [0.5, 0.6, 0.7, 0.8, 0.9]
NS = [8, 16, 32, 64]


def sweep(dev, x, dense_us):
    """Tunables around the default for one weight and ``x``: blocks of 4 to 16 warps, rings of 4 and 8 chunks
    (where a block's rings fit 48 KB), 1 to 8 splits."""
    m, k = dev.shape
    tried = [dict(rows=rows, slices=slices, splits=splits, stages=stages)
             for rows, slices in ((4, 4), (2, 4), (4, 2), (8, 2), (2, 2), (4, 1))
             for stages in (4, 8) if rows * slices * (stages * gb.CHUNK + gb.MAX_RECORD) <= 48 * 1024 - 4
             for splits in (1, 2, 4, 8)]
    results = []
    for tun in tried:
        t = point(f"sweep {tun}", lambda: timed(lambda: gb.spmm_bitmap_linear(dev, x, **tun)))
        if t:
            results.append((t, tun))
    results.sort(key=lambda r: r[0])
    t_def = timed(lambda: gb.spmm_bitmap_linear(dev, x))
    log(f"#   sweep {m}x{k} N={x.shape[0]}: default {t_def:.1f} us (dense {dense_us:.1f}); best: "
        + "; ".join(f"{t:.1f} {tun}" for t, tun in results[:4]) + f"; worst {results[-1][0]:.1f}")


def cusparselt_us(m, k, n, tdt):
    """cuSPARSELt 2:4 through PyTorch at the same shape, or None where PyTorch cannot."""
    import torch
    import torch.nn.functional as F
    from torch.sparse import to_sparse_semi_structured
    w = torch.randn(m, k, device="cuda", dtype=tdt)
    w = w * torch.tensor([1, 1, 0, 0], device="cuda", dtype=tdt).repeat(m, k // 4)
    ws = to_sparse_semi_structured(w)
    x = torch.randn(max(n, 8), k, device="cuda", dtype=tdt)
    return timed(lambda: F.linear(x, ws))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", type=matrix_shape, default=SHAPES, help="weights MxK")
    ap.add_argument("--widths", nargs="+", type=int, default=NS, help="N (rows of X)")
    ap.add_argument("--sparsities", nargs="+", type=float, default=SPARSITIES)
    ap.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), default=None,
                    help="default: bfloat16 at every shape, float16 at the first")
    ap.add_argument("--sweep", action="store_true", help="time the tunables around the default first")
    args = ap.parse_args(argv)
    import torch
    import torch.nn.functional as F
    rng = np.random.default_rng(0)
    bw = point("copy bandwidth", measured_bandwidth) or float("nan")
    log(f"# copy bandwidth {bw / 1e12:.2f} TB/s; times in us (median of {REPEAT}, L2 flushed); speedup = dense / ours")
    log("# shape dtype sparsity N: bitmap_us dense_us | speedup | BW share | bytes/dense | err(ok) | 2:4 cuSPARSELt us")
    if args.dtypes:
        runs = [(mk, d) for mk in args.shapes for d in args.dtypes]
    else:
        runs = [(args.shapes[0], "bfloat16"), (args.shapes[0], "float16")] + [(mk, "bfloat16") for mk in args.shapes[1:]]
    for (m, k), dname in runs:
        ndt, tdt = DTYPES[dname], getattr(torch, dname)
        bits = rng.standard_normal((m, k), dtype=np.float32).astype(ndt).view(np.uint16)
        xs = {n: torch.randn(n, k, device="cuda", dtype=tdt) for n in args.widths}
        dense_us = {}
        for sp in args.sparsities:
            tb = time.time()
            mask = rng.random((m, k), dtype=np.float32) >= sp
            dev = point("format", lambda: bitmap_on_device(bits, mask, ndt))
            if dev is None:
                continue
            nbytes = dev.host.nbytes().total
            wp = torch.from_numpy(np.where(mask, bits, np.uint16(0)).view(np.int16)).cuda().view(tdt)
            wp32 = wp.float()
            log(f"# {m}x{k} {dname} {sp:.0%}: formatted in {time.time() - tb:.1f} s; {nbytes / 1e6:.1f} MB "
                f"({nbytes / (2 * m * k):.2f} of dense)")
            for n in args.widths:
                x = xs[n]
                if n not in dense_us:
                    dense_us[n] = point("dense", lambda: timed(lambda: F.linear(x, wp)))
                if args.sweep:
                    point("sweep", lambda: sweep(dev, x, dense_us[n]))
                ref, bound = error_bound(x.float(), wp32, dname)
                e = point("run", lambda: error(gb.spmm_bitmap_linear(dev, x), ref, bound))
                t = point(f"bitmap {m}x{k} {sp} N={n}", lambda: timed(lambda: gb.spmm_bitmap_linear(dev, x)))
                lt = point("cusparselt", lambda: cusparselt_us(m, k, n, tdt)) if sp == 0.5 else None
                fmt = lambda v: f"{v:7.1f}" if v else "   fail"
                ratio = f"{dense_us[n] / t:5.2f}x" if t and dense_us[n] else "  n/a"
                share = f"{nbytes / (t * 1e-6) / bw:4.0%}" if t else " n/a"
                errs = f"{e[0]:.3g}({'ok' if e[1] else 'BAD'})" if e else "fail"
                log(f"{m}x{k} {dname} {sp:.0%} N={n:2d}: {fmt(t)} {fmt(dense_us[n])} | {ratio} | {share} | "
                    f"{nbytes / (2 * m * k):.2f} | {errs}" + (f" | {lt:.1f}" if lt else ""))
    log(f"# done at {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
