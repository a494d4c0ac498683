"""Teaching-track benchmarks: CPU loop orders, tiling and the 20-problem suite; GPU lessons.

Not an experiment module (``experiments/teaching.py`` is); run it as a script::

    python -m experiments.bench_teaching loop-orders [--quick]   # every CSR order + tile grid at 1024 x 1024 x 256, 90%
    python -m experiments.bench_teaching cpu-suite [--quick]     # the 20 suite problems vs scipy.sparse and BLAS
    python -m experiments.bench_teaching cpu-conv [--quick]      # the slides' 3x3 conv layers: im2col + SpMM vs BLAS
    python -m experiments.bench_teaching specialize [--quick]    # SparseRT-style kernels: compile vs run time
    python -m experiments.bench_teaching gpu [--quick] [--out DIR]   # lessons vs cuSPARSE/cuBLAS, conv vs cuDNN
    python -m experiments.bench_teaching default-check [--out DIR]   # each SpMM function's default vs its best
    python -m experiments.bench_teaching sanitize                # each GPU lesson once, tiny (compute-sanitizer)

Each benchmark is one function returning one record per configuration (times
with spread, ``correct``); the script prints them as a markdown table and,
with ``--out``, writes JSON. The problems, the timers and the per-matrix
benchmarks (CPU and GPU) are :mod:`sparsekit.bench.spmm`'s, which
``sparsekit bench spmm`` runs; the sweeps here and the teaching experiment
build on them.

On a shared 2-core machine, run the CPU benchmarks as
``OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive python ...``: two OpenBLAS
threads on contended cores took 16 ms for a GEMM that one thread does in 1 ms,
and spinning OpenMP workers of Numba's ``prange`` steal the cores from
whatever runs next. The records state the thread counts.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

from sparsekit.arrays import cuda_torch
from sparsekit.bench.spmm import (Checker, bench_cpu_matrix, bench_gpu_problem, device_timer, spmm_bound,
                                  suite_matrix, tune_tiles, wall_time)

SPARSITIES = (0.9, 0.95)
#: The slides' sparse 3x3 convolutions (Table 3): (image size, input channels, output channels).
CONV_LAYERS = ((56, 64, 64), (28, 128, 128), (14, 256, 256), (7, 512, 512))


# --------------------------------------------------------------------------- problems

def suite_problems(quick: bool = False):
    """``(number, m, k, n, use_case, sparsity)`` for the 20 problems at 90% (quick: 4 of them, shrunk)."""
    from sparsekit.models import SPMM_SUITE

    probs = [(p.number, p.m, p.k, p.n, p.use_case, 0.9) for p in SPMM_SUITE]
    if quick:
        probs = [(num, max(8, m // 16), max(8, k // 16), max(4, n // 16), use, s)
                 for num, m, k, n, use, s in probs[::5]]
    return probs


# --------------------------------------------------------------------------- CPU

def bench_loop_orders(m: int = 1024, k: int = 1024, n: int = 256, sparsity: float = 0.9, *,
                      repeat: int = 5) -> list[dict]:
    """Every CSR loop order, serial and parallel, and the tuned tiled kernel, with ratio to the naive order.

    "naive" is the slides' baseline order ``i, j, k`` on CSR: the dot-product order ``inner``.
    """
    from sparsekit.cpu.spmm import ORDERS, spmm_csr, spmm_csr_tiled

    csr, b, a = suite_matrix(m, k, n, sparsity)
    correct = Checker(a, b)
    recs = []
    for order in ORDERS:
        for par in (False, True):
            fn = lambda: spmm_csr(csr, b, order, parallel=par)          # noqa: E731
            med, p10, p90 = wall_time(fn, repeat)
            recs.append({"kernel": f"{order}", "parallel": par, "ms": med * 1e3, "p10_ms": p10 * 1e3,
                         "p90_ms": p90 * 1e3, "correct": correct(fn())})
    for par in (False, True):
        (tn, tk), _ = tune_tiles(csr, b, parallel=par, repeat=max(2, repeat // 2))
        fn = lambda: spmm_csr_tiled(csr, b, tile_n=tn, tile_k=tk, parallel=par)   # noqa: E731
        med, p10, p90 = wall_time(fn, repeat)
        recs.append({"kernel": f"tiled (tile_n={tn}, tile_k={tk})", "parallel": par, "ms": med * 1e3,
                     "p10_ms": p10 * 1e3, "p90_ms": p90 * 1e3, "correct": correct(fn())})
    sp = csr.to_scipy()
    med, p10, p90 = wall_time(lambda: sp @ b, repeat)
    recs.append({"kernel": "scipy.sparse csr @ dense", "parallel": False, "ms": med * 1e3,
                 "p10_ms": p10 * 1e3, "p90_ms": p90 * 1e3, "correct": correct(sp @ b)})
    naive = next(r["ms"] for r in recs if r["kernel"] == "inner" and not r["parallel"])
    for r in recs:
        r["speedup_vs_naive"] = naive / r["ms"]
    return recs


def bench_cpu_suite(problems, *, repeat: int = 5, tune: bool = True) -> list[dict]:
    """:func:`bench_cpu_matrix` for every suite problem."""
    recs = []
    for num, m, k, n, use, s in problems:
        csr, b, a = suite_matrix(m, k, n, s)
        recs.append({"problem": num, "M": m, "K": k, "N": n, "use": use, "sparsity": s,
                     **bench_cpu_matrix(csr, b, a, repeat=repeat, tune=tune)})
    return recs


def bench_specialize(sizes=(16, 32, 64, 128), *, n: int = 256, sparsity: float = 0.9, repeat: int = 10):
    """SparseRT-style specialisation: compile and run time against the generic rowwise kernel."""
    from sparsekit.specialize import compare

    recs = []
    for s in sizes:
        csr, b, a = suite_matrix(s, s, n, sparsity)
        recs.append(compare(csr, b, repeat=repeat))
    return recs


def conv_weight(size: int, cin: int, cout: int, sparsity: float):
    """One layer's seeded 3x3 weight as ``C_out x 9 C_in``, magnitude-pruned: (rng, dense, CSR).

    The generator is returned so each benchmark draws its input from the same stream.
    """
    from sparsekit.formats import CSR
    from sparsekit.prune import magnitude

    rng = np.random.default_rng([size, cin, cout, int(sparsity * 1000)])
    w = rng.standard_normal((cout, cin * 9)).astype(np.float32)
    mask = magnitude(w, sparsity)
    wd = np.where(mask, w, np.float32(0))
    return rng, wd, CSR.from_dense(wd, mask)


def bench_cpu_conv(*, sparsities=SPARSITIES, repeat: int = 5, quick: bool = False) -> list[dict]:
    """The slides' Table 3 layers on the CPU: im2col + our SpMM, virtual im2col, im2col + dense BLAS (ms)."""
    from sparsekit.cpu import conv as cconv
    from sparsekit.reference.conv import conv2d_direct

    recs = []
    layers = [(7, 16, 16)] if quick else CONV_LAYERS
    for size, cin, cout in layers:
        for s in sparsities:
            rng, wd, csr = conv_weight(size, cin, cout, s)
            w4 = wd.reshape(cout, cin, 3, 3)
            x = rng.standard_normal((cin, size, size)).astype(np.float32)
            want = conv2d_direct(x, w4)
            runs = {"im2col+SpMM": lambda: cconv.conv2d_im2col(csr, x),
                    "virtual im2col": lambda: cconv.conv2d_virtual(csr, x),
                    "im2col+dense BLAS": lambda: cconv.conv2d_dense(w4, x)}
            row = {"image": size, "C_in": cin, "C_out": cout, "sparsity": s}
            tol = 1e-4 * float(np.abs(want).max())
            for name, fn in runs.items():
                row[name + " ms"] = wall_time(fn, repeat)[0] * 1e3
                row[name + " correct"] = bool(np.allclose(fn(), want, rtol=1e-4, atol=tol))
            row["best sparse vs dense"] = row["im2col+dense BLAS ms"] / min(row["im2col+SpMM ms"],
                                                                          row["virtual im2col ms"])
            recs.append(row)
    return recs


# --------------------------------------------------------------------------- GPU

def split_configs(n: int, *, wide: bool = True) -> dict:
    """The grid search of :func:`sparsekit.gpu.spmm.spmm_csr`'s staged kernel (rows swizzled): label -> keyword
    arguments. ``warps_per_row`` x rows per block (blocks of 4 or 8 warps) x ``cols_per_lane``, with
    vector loads of 4 columns where ``n`` allows them (``wide``: also without, and ``unroll = 8``)."""
    out = {}
    vectors = (4, 1) if n % 4 == 0 else (1,)
    for vec in vectors if wide else vectors[:1]:
        for wpr, wpb in ((1, 4), (1, 8), (2, 4), (2, 8), (4, 4), (4, 8), (8, 8)):
            for cpl in (1, 2):
                out[f"gpu.spmm staged wpr={wpr} wpb={wpb} vec={vec} cpl={cpl}"] = dict(
                    swizzle=True, warps_per_row=wpr, warps_per_block=wpb, vector=vec, cols_per_lane=cpl)
        if wide:
            for wpr, wpb in ((2, 8), (4, 8)):
                out[f"gpu.spmm staged wpr={wpr} wpb={wpb} vec={vec} cpl=1 unroll=8"] = dict(
                    swizzle=True, warps_per_row=wpr, warps_per_block=wpb, vector=vec, cols_per_lane=1, unroll=8)
    return out


#: The provider name of ``spmm_csr``'s default call in :func:`sweep_providers`.
DEFAULT_CALL = "gpu.spmm csr default (auto)"


def sweep_providers(csr, n: int) -> dict:
    """The staged-kernel grid (:func:`split_configs`), lesson 7 (``row_split``), the previous best two of
    ours and the default call (:data:`DEFAULT_CALL`: ``spmm_csr(a, b)``, its tunables chosen by
    ``config="auto"``), by name -> ``launch(b_dev)``."""
    from sparsekit.gpu import spmm as prod
    from sparsekit.gpu import spmm_lessons as les
    from sparsekit.formats import CSR

    d = les.prepare(csr)
    p = prod.prepare(csr, CSR)
    out = {"4 warp_per_row_swizzled": lambda b: les.warp_per_row_swizzled(d, b),
           "gpu.spmm csr swizzle cpl=4": lambda b: prod.spmm_csr(p, b, swizzle=True, cols_per_lane=4),
           DEFAULT_CALL: lambda b: prod.spmm_csr(p, b)}
    for wpr in (2, 4, 8):
        out[f"7 row_split wpr={wpr}"] = lambda b, wpr=wpr: les.row_split(d, b, warps_per_row=wpr)
    for name, kw in split_configs(n).items():
        out[name] = lambda b, kw=kw: prod.spmm_csr(p, b, **kw)
    return out


def summarize_gpu(problem: tuple, recs: list[dict]) -> dict:
    """The slides' Table 1 row: best of ours (correct only) vs cuSPARSE and cuBLAS."""
    num, m, k, n, use, s = problem
    ours = [r for r in recs if "torch" not in r["provider"] and r["correct"]]
    best = min(ours, key=lambda r: r["us"]) if ours else {"provider": "none correct", "us": float("nan")}
    lesson = {r["provider"]: r["us"] for r in recs}
    row = {"problem": num, "M": m, "K": k, "N": n, "use": use, "sparsity": s,
           "best_ours": best["provider"], "best_us": best["us"],
           "warp_per_row_us": lesson.get("2 warp_per_row"), "swizzled_us": lesson.get("4 warp_per_row_swizzled"),
           "smem_tiled_swizzled_us": lesson.get("3+4 smem_tiled_swizzled"),
           "thread_group_us": lesson.get("5 thread_group"), "balanced_blocks_us": lesson.get("6 balanced_blocks"),
           "row_split_us": lesson.get("7 row_split"), "staged_us": lesson.get("gpu.spmm staged (staged_tunables)"),
           "cusparse_us": lesson.get("cuSPARSE CSR (torch)"), "cublas_us": lesson.get("cuBLAS dense (torch)"),
           "all_correct": all(r["correct"] for r in recs)}
    if row["cusparse_us"] and ours:
        row["speedup_vs_cusparse"] = row["cusparse_us"] / best["us"]
    if row["cublas_us"] and ours:
        row["speedup_vs_cublas"] = row["cublas_us"] / best["us"]
    return row


def bench_gpu_conv(*, sparsities=SPARSITIES, repeat: int = 20, quick: bool = False, timer=None) -> list[dict]:
    """The slides' Table 3: 3x3 convolutions (padding 1, batch 1) as im2col + our SpMM vs cuDNN and im2col + cuBLAS."""
    torch = cuda_torch()
    if torch is None:
        return []
    import torch.nn.functional as F

    from sparsekit.gpu import spmm as prod
    from sparsekit.formats import CSR

    timer = device_timer(repeat) if timer is None else timer
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    recs = []
    layers = CONV_LAYERS[-1:] if quick else CONV_LAYERS
    for size, cin, cout in layers:
        for s in sparsities:
            rng, wd, csr = conv_weight(size, cin, cout, s)
            p = prod.prepare(csr, CSR)
            x = torch.as_tensor(rng.standard_normal((1, cin, size, size)).astype(np.float32), device="cuda")
            w4 = torch.as_tensor(wd.reshape(cout, cin, 3, 3), device="cuda")
            wmat = torch.as_tensor(wd, device="cuda")

            def ours():
                cols = F.unfold(x, 3, padding=1)[0]                      # (C*9, H*W), im2col on the GPU
                return prod.spmm_csr(p, cols, swizzle=True)

            providers = {"im2col + our SpMM (gpu.spmm swizzle)": ours,
                         "cuDNN conv2d (torch)": lambda: F.conv2d(x, w4, padding=1),
                         "im2col + cuBLAS GEMM (torch)": lambda: wmat @ F.unfold(x, 3, padding=1)[0]}
            want = F.conv2d(x.double(), w4.double(), padding=1)[0].reshape(cout, -1).cpu().numpy()
            cols64 = F.unfold(x.double(), 3, padding=1)[0].cpu().numpy()
            bound = spmm_bound(wd.astype(np.float64), cols64, want)
            row = {"image": size, "C_in": cin, "C_out": cout, "sparsity": s}
            for name, fn in providers.items():
                try:
                    got = torch.as_tensor(fn()).reshape(cout, -1).double().cpu().numpy()
                    med, _, _ = timer(fn)
                except Exception as err:   # record and go on (one-shot GPU runs)
                    row[name + " us"], row[name + " correct"] = float("nan"), f"{type(err).__name__}: {err}"[:120]
                    continue
                row[name + " us"] = med * 1e6
                row[name + " correct"] = bool((np.abs(got - want) <= bound).all())
            row["speedup_vs_cudnn"] = row["cuDNN conv2d (torch) us"] / row["im2col + our SpMM (gpu.spmm swizzle) us"]
            recs.append(row)
    return recs


def sanitize() -> int:
    """Run every GPU lesson kernel and the staged CSR kernel once on small matrices (for
    compute-sanitizer) and check them."""
    from sparsekit.gpu import spmm as prod
    from sparsekit.gpu import spmm_lessons as les

    csr, b, a = suite_matrix(70, 45, 40, 0.7)
    correct = Checker(a, b)
    bad = 0
    for name, fn, _ in les.LESSONS:
        ok = correct(fn(csr, b))
        print(f"{name}: {'ok' if ok else 'WRONG'}")
        bad += not ok
    ok = correct(les.smem_tiled(csr, b, swizzle=True)) and correct(les.thread_group(csr, b, k_split=3))
    print(f"smem_tiled swizzle / thread_group k_split=3: {'ok' if ok else 'WRONG'}")
    bad += not ok
    # gpu.spmm's staged CSR kernel, with rows longer than one staged chunk (several chunks per row).
    long_rows = suite_matrix(9, 300, 40, 0.3)
    for kw in SANITIZE_STAGED:
        for mat, rhs, dense in ((csr, b, a), long_rows):
            ok = Checker(dense, rhs)(prod.spmm_csr(mat, rhs, **kw))
            print(f"gpu.spmm staged {kw} on {mat.shape}: {'ok' if ok else 'WRONG'}")
            bad += not ok
    return int(bad > 0)


#: The staged-kernel configurations :func:`sanitize` runs (every code path: split, several rows
#: per block, vector loads of 2 and 4, two column slices per lane, unroll 8, rows in natural order).
SANITIZE_STAGED = (
    dict(swizzle=True, warps_per_row=2, warps_per_block=4, vector=4, cols_per_lane=2),
    dict(swizzle=True, warps_per_row=1, warps_per_block=4, vector=1),
    dict(swizzle=False, warps_per_row=8, warps_per_block=8, vector=2, cols_per_lane=1, unroll=8),
    dict(swizzle=True, warps_per_row=4, warps_per_block=8, vector=1, cols_per_lane=2),
)


def sweep_gpu(problems, *, repeat: int = 10, budget_s: float = float("inf"), timer=None) -> list[dict]:
    """:func:`sweep_providers` on each problem against cuSPARSE: one record per (problem, provider)
    with ``speedup_vs_cusparse`` (NaN without PyTorch); prints the best per problem and each
    provider's geometric mean. ``timer`` as for :func:`bench_gpu_problem`."""
    recs = []
    for num, m, k, n, use, s in within_budget(problems, budget_s):
        csr, b, a = suite_matrix(m, k, n, s)
        got = bench_gpu_problem(csr, b, a, repeat=repeat, providers=sweep_providers(csr, n), timer=timer)
        base = next((r["us"] for r in got if r["provider"] == "cuSPARSE CSR (torch)"), float("nan"))
        for r in got:
            recs.append({"problem": num, "M": m, "K": k, "N": n, **r, "speedup_vs_cusparse": base / r["us"]})
        ours = [r for r in got if "torch" not in r["provider"] and r["correct"]]
        best = min(ours, key=lambda r: r["us"])
        default = next(r for r in recs[-len(got):] if r["provider"] == DEFAULT_CALL)
        default["default_over_best"] = ratio = default["us"] / best["us"]
        print(f"problem {num} ({m}x{k}x{n}): best {best['provider']} {best['us']:.1f} us, default {default['us']:.1f} "
              f"us ({ratio:.2f}x best), cuSPARSE {base:.1f} us, all correct "
              f"{all(r['correct'] for r in got)}", flush=True)
    summary = []
    for name in dict.fromkeys(r["provider"] for r in recs):
        mine = [r for r in recs if r["provider"] == name]
        summary.append({"provider": name, "problems": len(mine),
                        "geomean_vs_cusparse": geomean(r["speedup_vs_cusparse"] for r in mine),
                        "wins": sum(r["speedup_vs_cusparse"] > 1 for r in mine),
                        "all_correct": all(r["correct"] for r in mine)})
    ratios = [r["default_over_best"] for r in recs if "default_over_best" in r]
    print(f"\n## gpu_sweep_summary\n\n{markdown(summary)}\n\nthe default call within 10 % of the best: "
          f"{sum(x <= 1.1 for x in ratios)} of {len(ratios)} problems (worst {max(ratios, default=float('nan')):.2f}x)")
    return recs


#: Where ``gpu-sweep`` records live in the repository: ``default-check`` re-times each problem's fastest
#: ``spmm_csr`` configuration found there.
SWEEP_RECORDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "teaching_gpu_sweep.json")
#: Block side of the blocked-ELL problems (that of the USpMM baselines, ``experiments/bench_uspmm.py``).
BLOCK = 4
#: ``default-check``'s provider names of the COO and blocked-ELL calls: the default and the format's own kernel.
COO_AUTO, COO_OWN = "spmm_coo auto", "spmm_coo config=None"
BELL_AUTO, BELL_OWN = "spmm_blocked_ell auto", "spmm_blocked_ell config=None"


def best_swept_csr(sweep: list[dict], problem: int) -> str | None:
    """The fastest correct explicit ``spmm_csr`` configuration (a :func:`sweep_providers` name other than
    :data:`DEFAULT_CALL`) among the ``gpu-sweep`` records ``sweep`` of ``problem``; None when there is none."""
    mine = [r for r in sweep if r["problem"] == problem and r["correct"] and r["provider"].startswith("gpu.spmm")
            and r["provider"] != DEFAULT_CALL]
    return min(mine, key=lambda r: r["us"])["provider"] if mine else None


def _timed_calls(csr, b, a, calls: dict, *, repeat: int, timer) -> dict:
    """:func:`bench_gpu_problem` of ``calls`` (name -> ``launch(b_dev)``) on ``csr`` (its dense ``a``) times
    ``b``: name -> record (cuSPARSE CSR and cuBLAS too, where PyTorch sees the GPU)."""
    return {r["provider"]: r for r in bench_gpu_problem(csr, b, a, repeat=repeat, providers=calls, timer=timer)}


def _default_over_best(recs: dict, default: str, other: str) -> float:
    """``default``'s device time over the faster correct one of ``default`` and ``other`` (NaN if neither is)."""
    ran = [recs[name]["us"] for name in (default, other) if recs[name]["correct"]]
    return recs[default]["us"] / min(ran) if ran else float("nan")


def check_defaults(problems, *, repeat: int = 10, budget_s: float = float("inf"), timer=None,
                   sweep: list[dict] | None = None) -> tuple[list[dict], list[dict]]:
    """Each SpMM function's default call against its other configurations on each suite problem:

    - ``spmm_coo`` (``config="auto"``: the CSR kernels) against ``config=None`` (its atomic kernel), on the suite
      matrix as COO;
    - ``spmm_blocked_ell`` (``config="auto"``) against ``config=None`` (thread per element of C), on a
      blocked-uniform matrix of the problem's shape and sparsity (:data:`BLOCK`-square blocks of an N(0, 1) draw,
      :func:`sparsekit.prune.blocked_uniform`);
    - ``spmm_csr`` (:data:`DEFAULT_CALL`) against the problem's fastest explicit configuration of the ``gpu-sweep``
      records ``sweep`` (:func:`best_swept_csr`), timed again here; without one, against ``staged_tunables``
      passed explicitly.

    Returns ``(rows, detail)``: one row per problem (each function's default and best device us, the default
    over the best, the one-time ``as_csr`` conversion in host ms, everything correct) and every timed record.
    ``timer`` as for :func:`bench_gpu_problem`."""
    from sparsekit.formats import COO, CSR, BlockedELL, convert
    from sparsekit.gpu import spmm as gs
    from sparsekit.prune import blocked_uniform

    rows, detail = [], []
    for num, m, k, n, use, s in within_budget(problems, budget_s):
        csr, b, a = suite_matrix(m, k, n, s)
        _, b_blocked, w = suite_matrix(m, k, n, 0.0)                 # a dense N(0, 1) draw of the shape
        blocked = BlockedELL.from_dense(w, blocked_uniform(w, s, BLOCK), block=BLOCK)
        coo, bell = gs.prepare(convert(csr, COO), COO), gs.prepare(blocked, BlockedELL)
        convert_ms = {}
        for name, dev in (("coo", coo), ("blocked_ell", bell)):
            t0 = time.perf_counter()
            gs.as_csr(dev)                                            # built once, kept on the prepared matrix
            convert_ms[name] = (time.perf_counter() - t0) * 1e3
        swept = sweep_providers(csr, n)
        best_known = best_swept_csr(sweep or [], num)
        if best_known not in swept:                                   # no record, or a name this grid lacks
            best_known = "gpu.spmm staged (staged_tunables)"
            p = gs.prepare(csr, CSR)
            swept[best_known] = lambda x, p=p: gs.spmm_csr(p, x, **gs.staged_tunables(p, n))
        calls = {COO_AUTO: lambda x: gs.spmm_coo(coo, x), COO_OWN: lambda x: gs.spmm_coo(coo, x, config=None),
                 DEFAULT_CALL: swept[DEFAULT_CALL], best_known: swept[best_known]}
        recs = _timed_calls(csr, b, a, calls, repeat=repeat, timer=timer)
        blocked_calls = {BELL_AUTO: lambda x: gs.spmm_blocked_ell(bell, x),
                         BELL_OWN: lambda x: gs.spmm_blocked_ell(bell, x, config=None)}
        brecs = _timed_calls(gs.as_csr(bell).host, b_blocked, blocked.to_dense(), blocked_calls, repeat=repeat,
                             timer=timer)
        detail += [{"problem": num, "matrix": "magnitude", **r} for r in recs.values()]
        detail += [{"problem": num, "matrix": f"blocked-uniform {BLOCK}x{BLOCK}", **r} for r in brecs.values()]
        rows.append({
            "problem": num, "M": m, "K": k, "N": n, "sparsity": s,
            "coo_auto_us": recs[COO_AUTO]["us"], "coo_none_us": recs[COO_OWN]["us"],
            "coo_default_over_best": _default_over_best(recs, COO_AUTO, COO_OWN),
            "coo_convert_ms": convert_ms["coo"],
            "bell_auto_us": brecs[BELL_AUTO]["us"], "bell_none_us": brecs[BELL_OWN]["us"],
            "bell_default_over_best": _default_over_best(brecs, BELL_AUTO, BELL_OWN),
            "bell_convert_ms": convert_ms["blocked_ell"],
            "csr_default_us": recs[DEFAULT_CALL]["us"], "csr_best_known": best_known.removeprefix("gpu.spmm "),
            "csr_best_known_us": recs[best_known]["us"],
            "csr_default_over_best": _default_over_best(recs, DEFAULT_CALL, best_known),
            "cusparse_us": recs.get("cuSPARSE CSR (torch)", {}).get("us"),
            "all_correct": all(r["correct"] for r in (*recs.values(), *brecs.values()))})
        row = rows[-1]
        print(f"problem {num} ({m}x{k}x{n}): default / best: coo {row['coo_default_over_best']:.2f}x, blocked_ell "
              f"{row['bell_default_over_best']:.2f}x, csr {row['csr_default_over_best']:.2f}x; "
              f"all correct {row['all_correct']}", flush=True)
    for fn, key in (("coo", "coo"), ("blocked_ell", "bell"), ("csr", "csr")):
        ratios = [r[f"{key}_default_over_best"] for r in rows]
        print(f"spmm_{fn}: the default call within 10 % of the best on {sum(x <= 1.1 for x in ratios)} of "
              f"{len(ratios)} problems (worst {max(ratios, default=float('nan')):.2f}x)")
    return rows, detail


def _read_sweep(path: str) -> list[dict]:
    """The ``gpu_sweep`` records of a ``gpu-sweep`` JSON at ``path`` (none when the file is missing)."""
    if not os.path.exists(path):
        print(f"no sweep records at {path}: spmm_csr's default is compared with staged_tunables given explicitly")
        return []
    with open(path) as f:
        return json.load(f)["gpu_sweep"]


def within_budget(problems, budget_s: float):
    """The ``problems`` one by one while less than ``budget_s`` seconds have passed since the first (then a note
    saying from which problem on none is measured)."""
    start = time.perf_counter()
    for prob in problems:
        if time.perf_counter() - start > budget_s:
            print(f"time budget of {budget_s} s spent: problems from {prob[0]} on are not measured")
            return
        yield prob


def _selected(problems, numbers: str | None):
    """``problems`` whose number is in the comma-separated ``numbers``, in that order (all when None)."""
    if numbers is None:
        return problems
    by_number = {p[0]: p for p in problems}
    return [by_number[int(x)] for x in numbers.split(",") if int(x) in by_number]


# --------------------------------------------------------------------------- script

def markdown(records: list[dict]) -> str:
    from sparsekit.experiment import markdown_table

    return markdown_table(records)


def geomean(xs) -> float:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("loop-orders", "cpu-suite", "cpu-conv", "specialize", "gpu", "gpu-sweep",
                                     "default-check", "sanitize"))
    ap.add_argument("--problems", default=None,
                    help="gpu, gpu-sweep, default-check: comma-separated suite problem numbers")
    ap.add_argument("--sweep", default=SWEEP_RECORDS,
                    help="default-check: the gpu-sweep JSON whose fastest spmm_csr configurations it re-times")
    ap.add_argument("--quick", action="store_true", help="toy sizes (CI)")
    ap.add_argument("--repeat", type=int, default=None, help="timed repeats per configuration")
    ap.add_argument("--out", default=None, help="folder for JSON results")
    ap.add_argument("--budget-s", type=float, default=float("inf"),
                    help="gpu: stop starting new suite problems after this many seconds")
    args = ap.parse_args(argv)
    out = {}
    if args.what == "sanitize":
        return sanitize()
    if args.what == "loop-orders":
        size = (128, 128, 64) if args.quick else (1024, 1024, 256)
        out["loop_orders"] = bench_loop_orders(*size, repeat=args.repeat or 5)
    elif args.what == "cpu-suite":
        out["cpu_suite"] = recs = bench_cpu_suite(suite_problems(args.quick), repeat=args.repeat or 5)
        wins = sum(r["speedup_vs_scipy"] > 1 for r in recs)
        within = sum(r["speedup_vs_scipy"] >= 1 / 1.5 for r in recs)
        print(f"faster than scipy on {wins}/{len(recs)}; within 1.5x on {within}/{len(recs)}; "
              f"geomean speedup vs scipy {geomean(r['speedup_vs_scipy'] for r in recs):.2f}")
    elif args.what == "cpu-conv":
        out["cpu_conv"] = bench_cpu_conv(repeat=args.repeat or 5, quick=args.quick)
    elif args.what == "specialize":
        sizes = (16, 32) if args.quick else (16, 32, 64, 128)
        out["specialize"] = bench_specialize(sizes, repeat=args.repeat or 10)
    elif args.what == "gpu-sweep":
        out["gpu_sweep"] = sweep_gpu(_selected(suite_problems(args.quick), args.problems),
                                     repeat=args.repeat or 10, budget_s=args.budget_s)
    elif args.what == "default-check":
        out["default_check"], out["default_check_detail"] = check_defaults(
            _selected(suite_problems(args.quick), args.problems), repeat=args.repeat or 10, budget_s=args.budget_s,
            sweep=_read_sweep(args.sweep))
    else:
        rows, detail = [], []
        for prob in within_budget(_selected(suite_problems(args.quick), args.problems), args.budget_s):
            num, m, k, n, use, s = prob
            csr, b, a = suite_matrix(m, k, n, s)
            recs = bench_gpu_problem(csr, b, a, repeat=args.repeat or 20, tune=True)
            detail += [{"problem": num, **r} for r in recs]
            row = summarize_gpu(prob, recs)
            rows.append(row)
            print(f"problem {num} ({m}x{k}x{n}): best {row['best_ours']} {row['best_us']:.1f} us | "
                  f"cuSPARSE {row.get('cusparse_us')} us | cuBLAS {row.get('cublas_us')} us | "
                  f"vs cuSPARSE {row.get('speedup_vs_cusparse')} | all correct {row['all_correct']}", flush=True)
            if args.out:   # keep what is measured even if the run is cut short
                os.makedirs(args.out, exist_ok=True)
                with open(os.path.join(args.out, "teaching_gpu_partial.json"), "w") as f:
                    json.dump({"gpu_suite": rows, "gpu_detail": detail}, f, indent=1, default=str)
        out["gpu_suite"], out["gpu_detail"] = rows, detail
        out["gpu_conv"] = bench_gpu_conv(quick=args.quick, repeat=args.repeat or 20)
        sp = [r.get("speedup_vs_cusparse") for r in rows if r.get("speedup_vs_cusparse")]
        print(f"faster than cuSPARSE on {sum(x > 1 for x in sp)}/{len(sp)}; geomean {geomean(sp):.2f}x")
    for key, recs in out.items():
        if key not in ("gpu_sweep", "default_check_detail"):     # one record per (problem, configuration): JSON only
            print(f"\n## {key}\n\n{markdown(recs)}")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"teaching_{args.what}.json"), "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
