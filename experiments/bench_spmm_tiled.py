"""Decode-shape timing of sparsekit/gpu/spmm_tiled.py's tile kernel against its row kernel and dense cuBLAS (GPU, PyTorch).

One line a point: shape, dtype, sparsity, N, device time of the tile kernel (64 x 64 tiles, default tunables),
of the row kernel (tile (1, TK), X staged as X^T: what uspmm's decode path runs) and of dense
``torch.nn.functional.linear`` on the pruned weight, in microseconds (median of 15, L2 flushed before each
repeat, host dispatch hidden behind a spin kernel: sparsekit.timing.measure), the speedups over dense, the
tile kernel's share of the copy bandwidth over its weight bytes, and the largest error of each kernel against
the float32 product of the same bfloat16/float16 operands (ok: within the tests' bound, float32 sums in another
order plus one rounding). After the 4096^2 bfloat16 points, a few tunables of the tile kernel at 80 %. Every
point is guarded: a failure prints FAIL and the run goes on.

    python -m experiments.bench_spmm_tiled            # every point: about 3-4 minutes on an H200
    python -m experiments.bench_spmm_tiled --shapes 4096x4096 14336x4096 --widths 8 16 32 --dtypes bfloat16

Recorded in ``experiments/results/uspmm_decode.md`` ("The tensor-core tile kernel").
"""
import argparse
import sys
import time

import numpy as np

from experiments.spmm_points import DTYPES, REPEAT, error, error_bound, log, on_device, point, tiled, timed
from sparsekit.cli_types import matrix_shape
from sparsekit.gpu import spmm_tiled as gt
from sparsekit.formats import TiledCSL
from sparsekit.timing import measured_bandwidth

T0 = time.time()
SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336)]
SPARSITIES = [0.7, 0.8, 0.9]
NS = [8, 16, 32, 64]
BUDGET_S = 240          # past this many seconds the tunables sweep stops


def uniform_mask(rng, m, k, sparsity):
    """Each row keeps the same number of columns, at random (uniform sparsity)."""
    kp = round(k * (1 - sparsity))
    r = rng.random((m, k), dtype=np.float32)
    thr = np.partition(r, kp - 1, axis=1)[:, kp - 1:kp]
    return r <= thr


def config(d):
    """The tile kernel's default launch for ``d`` at N = 8 and 64: word rounds, stages, shared bytes, splits."""
    if d is None:
        return "no tiles"
    tm, tk = d.host.tile
    nthreads = 32 * tm // gt.warp_rows(tm)
    rounds = gt.word_rounds(d.max_words, nthreads)
    parts = [f"weight {d.host.words.nbytes / 1e6:.1f} MB, max {d.max_words} words a tile, {nthreads} threads, "
             f"{rounds} word rounds, splits {gt.default_splits(d)}"]
    for n in (8, 64):
        stages = gt.copy_stages(tm, tk, n, rounds, nthreads, True)
        nbytes = gt.shared_bytes(tm, tk, n, rounds, nthreads, True, stages, -(-d.host.grid[1] // gt.default_splits(d)))
        parts.append(f"N={n}: {stages} stages, {nbytes} B shared")
    return "; ".join(parts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", type=matrix_shape, default=SHAPES, help="weights MxK")
    ap.add_argument("--widths", nargs="+", type=int, default=NS, help="N (columns of X^T)")
    ap.add_argument("--sparsities", nargs="+", type=float, default=SPARSITIES)
    ap.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), default=None,
                    help="default: bfloat16 at every shape, float16 at the first")
    args = ap.parse_args(argv)
    import torch
    import torch.nn.functional as F
    shapes, widths, sparsities = args.shapes, args.widths, args.sparsities
    rng = np.random.default_rng(0)
    bw = point("copy bandwidth", measured_bandwidth) or float("nan")
    log(f"# copy bandwidth {bw / 1e12:.2f} TB/s; times in us (median of {REPEAT}, L2 flushed); speedup = dense / ours")
    log("# shape dtype sparsity N: tile_us row_us dense_us | tile_x row_x | tile_BW | err_tile(ok) err_row(ok)")
    if args.dtypes:
        runs = [(mk, d) for mk in shapes for d in args.dtypes]
    else:
        runs = [(shapes[0], "bfloat16"), (shapes[0], "float16")] + [(mk, "bfloat16") for mk in shapes[1:]]
    kept = {}
    for (m, k), dname in runs:
        ndt, tdt = DTYPES[dname], getattr(torch, dname)
        w32 = rng.standard_normal((m, k), dtype=np.float32)
        bits = w32.astype(ndt).view(np.uint16)
        xs = {n: torch.randn(n, k, device="cuda", dtype=tdt) for n in widths}
        dense_us = {}
        for sp in sparsities:
            tb = time.time()
            mask = uniform_mask(rng, m, k, sp)
            wp = torch.from_numpy(np.where(mask, bits, np.uint16(0)).view(np.int16)).cuda().view(tdt)
            wp32 = wp.float()
            a_tile = point("format tiles", lambda: tiled(bits, mask, (64, 64), ndt))
            a_row = point("format rows", lambda: tiled(bits, mask, TiledCSL.row_tile(k), ndt))
            d_tile = on_device(a_tile) if a_tile is not None else None
            d_row = on_device(a_row) if a_row is not None else None
            if (m, k) == (4096, 4096) and dname == "bfloat16" and sp == 0.8:
                kept.update(bits=bits, mask=mask, d_tile=d_tile, wp32=wp32, xs=xs)
            log(f"# {m}x{k} {dname} {sp:.0%}: formatted in {time.time() - tb:.1f} s; {config(d_tile)}")
            for n in widths:
                x = xs[n]
                ref, bound = error_bound(x.float(), wp32, dname)
                if n not in dense_us:
                    dense_us[n] = point("dense", lambda: timed(lambda: F.linear(x, wp)))
                t_tile = t_row = e_tile = e_row = None
                if d_tile is not None:
                    e_tile = point("tile run", lambda: error(gt.spmm_tiled_linear(d_tile, x), ref, bound))
                    t_tile = point(f"tile {m}x{k} {sp} N={n}", lambda: timed(lambda: gt.spmm_tiled_linear(d_tile, x)))
                if d_row is not None:
                    e_row = point("row run", lambda: error(gt.spmm_tiled_linear(d_row, x), ref, bound))
                    t_row = point(f"row {m}x{k} {sp} N={n}", lambda: timed(lambda: gt.spmm_tiled_linear(d_row, x)))
                fmt = lambda t: f"{t:7.1f}" if t else "   fail"
                ratio = lambda t: f"{dense_us[n] / t:5.2f}x" if t and dense_us[n] else "  n/a"
                share = (f"{(a_tile.words.nbytes + a_tile.offsets.nbytes) / (t_tile * 1e-6) / bw:4.0%}"
                         if t_tile else " n/a")
                errs = " ".join(f"{e[0]:.3g}({'ok' if e[1] else 'BAD'})" if e else "fail" for e in (e_tile, e_row))
                log(f"{m}x{k} {dname} {sp:.0%} N={n:2d}: {fmt(t_tile)} {fmt(t_row)} {fmt(dense_us[n])} | "
                    f"{ratio(t_tile)} {ratio(t_row)} | {share} | {errs}")
        if kept and {8, 32} <= set(widths):
            sweep(kept)
            kept.clear()
    log(f"# done at {time.time() - T0:.0f} s")


def sweep(kept):
    """Tunables of the tile kernel at 4096^2 80 % bfloat16: rows a warp, copy stages, splits, tile shapes."""
    if kept.get("d_tile") is None:
        return
    d = kept["d_tile"]
    base = gt.default_splits(d)
    log(f"# tunables at 4096x4096 bfloat16 80 % (defaults: rows_per_warp 32, stages copy_stages(), splits {base})")
    for n, tun in ((8, dict(rows_per_warp=16)), (8, dict(stages=6)), (8, dict(splits=max(1, base // 2))),
                   (8, dict(splits=2 * base)), (32, dict(rows_per_warp=16)), (32, dict(splits=2 * base))):
        if time.time() - T0 > BUDGET_S:
            log("# time budget reached: sweep stopped")
            return
        x = kept["xs"][n]
        t = point(f"tunables {tun}", lambda: timed(lambda: gt.spmm_tiled_linear(d, x, **tun)))
        if t:
            log(f"  tile (64, 64) N={n:2d} {tun}: {t:7.1f} us")
    for tile in ((64, 128),):
        a = point(f"format {tile}", lambda: tiled(kept["bits"], kept["mask"], tile, DTYPES["bfloat16"]))
        if a is None:
            continue
        dt = on_device(a)
        for n in (8, 32):
            if time.time() - T0 > BUDGET_S:
                log("# time budget reached: sweep stopped")
                return
            x = kept["xs"][n]
            t = point(f"tile {tile} N={n}", lambda: timed(lambda: gt.spmm_tiled_linear(dt, x)))
            if t:
                log(f"  tile {tile} N={n:2d}: {t:7.1f} us ({config(dt)})")


if __name__ == "__main__":
    sys.exit(main())
