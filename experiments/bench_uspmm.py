"""USpMM benchmark on a GPU: our kernels against cuSPARSE, cuBLAS and the roofline.

Not an experiment module (no EXPERIMENT; ``experiments/uspmm_figures.py`` is):
run it as a script on a GPU::

    python -m experiments.bench_uspmm --table [--dtype float32] [--out DIR]   # the headline table
    python -m experiments.bench_uspmm --check [--out DIR]     # real shapes vs float64, repeats bit-identical
    python -m experiments.bench_uspmm --sweep [--out DIR]     # every tunable on the sweep problems
    python -m experiments.bench_uspmm --tune-table --table    # tune each table problem, then the table
    python -m experiments.bench_uspmm --explore               # pipelined settings on more problems
    python -m experiments.bench_uspmm --sanitize [pipelined|wgmma]  # each kernel once, tiny (compute-sanitizer)
    python -m experiments.bench_uspmm --split-explore float32,float16   # K-split settings on small grids
    python -m experiments.bench_uspmm --figures-auto float32,float16    # every figure point: auto vs vendors
    ... --wait-for F1,F2   # compile first, then wait for these files before timing anything

Every timing goes through :func:`sparsekit.bench.uspmm.bench_problem` (``sparsekit bench uspmm`` and the
figures call it too): one record per provider with device time, TFLOP/s, % of the roofline speed of light
and ``correct``; vendor baselines through PyTorch when it is installed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timezone

import numpy as np

from sparsekit.arrays import cuda_torch
from sparsekit.bench.uspmm import TABLE_KEYS, U32, Problem, bench_problem, markdown, our_providers

#: The headline table: (M, K, N, sparsity).
TABLE_PROBLEMS = [(1024, 1024, 1024, 0.60), (1024, 1024, 16384, 0.60), (1024, 1024, 1024, 0.95),
                  (4096, 4096, 1024, 0.90), (128, 128, 128, 0.60)]
#: Problems of ``--sweep`` (float16: the first only).
SWEEP_PROBLEMS = [(1024, 1024, 1024, 0.60), (4096, 4096, 1024, 0.90), (1024, 1024, 16384, 0.60)]


def check_real_shapes(dtype) -> list[dict]:
    """Every variant on real shapes (odd sizes included) against float64; two runs bit-identical."""
    from sparsekit.gpu.uspmm import uspmm, uspmm_linear
    from numba import cuda

    from sparsekit.tune import dense_tile, direct, pipelined
    out = []
    configs = dict(our_providers(dtype))
    configs = {k: v for k, v in configs.items() if isinstance(v, dict) and "layout" not in v}
    configs["pipelined wide"] = pipelined(8, 2, 8, 16, 2, 2)
    configs["direct"] = direct(8, 2, 4, 4)
    configs["dense tile"] = dense_tile(4, 8, 8, 16, 2)
    for (m, k, n, s) in [(1024, 1024, 1024, 0.6), (1000, 999, 777, 0.6), (4096, 4096, 1024, 0.9), (97, 130, 33, 0.3)]:
        p = Problem(m, k, n, s, dtype)
        for name, cfg in configs.items():
            r1 = uspmm(p.dell, p.b, **cfg).copy_to_host()
            r2 = uspmm(p.dell, p.b, **cfg).copy_to_host()
            out.append(dict(m=m, k=k, n=n, sparsity=s, dtype=np.dtype(dtype).name, provider=name,
                            correct=p.correct(r1), bit_identical=bool((r1.view(np.uint8) == r2.view(np.uint8)).all())))
        # Eq. 2: Y = X W^T from row-major X
        x = np.ascontiguousarray(p.b_host.T)
        y = uspmm_linear(p.dell, cuda.to_device(x)).copy_to_host()
        out.append(dict(m=m, k=k, n=n, sparsity=s, dtype=np.dtype(dtype).name, provider="uspmm_linear (Eq. 2)",
                        correct=p.correct(y.T), bit_identical=True))
    return out


def check_spmm_baselines(dtype) -> list[dict]:
    """Our CSR/COO/blocked-ELL kernels on a real shape against float64."""
    from sparsekit.gpu import spmm as gs
    from sparsekit.formats import COO, CSR, BlockedELL
    from sparsekit.prune import blocked_uniform
    out = []
    p = Problem(1024, 1024, 512, 0.7, dtype)
    csr = CSR.from_dense(p.dense, p.ell.mask())
    for name, fn in [("csr", lambda: gs.spmm_csr(csr, p.b)), ("csr swizzle", lambda: gs.spmm_csr(csr, p.b, swizzle=True)),
                     ("coo", lambda: gs.spmm_coo(COO.from_dense(p.dense, p.ell.mask()), p.b))]:
        out.append(dict(provider=name, dtype=np.dtype(dtype).name, correct=p.correct(fn().copy_to_host())))
    w = np.random.default_rng(3).standard_normal((1024, 1024)).astype(dtype)
    bell = BlockedELL.from_dense(w, blocked_uniform(w, 0.7, 4), block=4)
    pb = Problem(1024, 1024, 512, 0.7, dtype)
    got = gs.spmm_blocked_ell(bell, pb.b).copy_to_host().astype(np.float64)
    exact = bell.to_dense().astype(np.float64) @ pb.b_host.astype(np.float64)
    scale = np.abs(bell.to_dense().astype(np.float64)) @ np.abs(pb.b_host.astype(np.float64))
    ok = np.abs(got - exact) <= 1024 * U32 * scale + 2 * np.finfo(dtype).eps / 2 * np.abs(exact) + 1e-30
    out.append(dict(provider="blocked-ell b=4", dtype=np.dtype(dtype).name, correct=bool(ok.all())))
    return out


def sanitize_case(only: str = "all") -> None:
    """Each kernel once on small odd shapes (for compute-sanitizer memcheck/racecheck);
    ``only="pipelined,direct,dense_tile"``: those variants alone; ``only="wgmma"``: :func:`sanitize_wgmma` alone
    (not part of ``"all"``: on the H100 the two together took 120 s under each tool, the limit of
    ``experiments/gpu_check.sh``'s steps)."""
    from sparsekit.gpu import spmm as gs
    from sparsekit.gpu.uspmm import uspmm, uspmm_linear
    from sparsekit.formats import COO, CSR, BlockedELL
    from sparsekit.tune import dense_tile, direct, pipelined
    for dtype in (np.float32, np.float16):
        p = Problem(77, 45, 37, 0.6, dtype)
        q = Problem(70, 300, 136, 0.7, dtype)        # several K chunks, both buffers, a partial column tile
        for cfg in [dict(), dict(vecsize=2, nwarp=2), dict(vecsize=4), dict(vsize=3, nwarp=2),
                    pipelined(8, 2, 4, 16, 4, 2), pipelined(4, 3, 2, 8, 2, 1), pipelined(4, 4, 8, 32, 4, 2),
                    direct(8, 2, 4, 4), direct(4, 3, 2, 2), dense_tile(4, 8, 4, 16, 2), dense_tile(8, 4, 2, 8, 1),
                    pipelined(4, 3, 2, 8, 2, 1, splits=3), direct(4, 3, 2, 2, splits=3),
                    dense_tile(8, 4, 2, 8, 1, splits=3)]:
            if only != "all" and cfg.get("variant") not in only.split(","):
                continue
            for prob in (p, q) if cfg.get("variant") in ("pipelined", "direct", "dense_tile") else (p,):
                assert prob.correct(uspmm(prob.dell, prob.b, **cfg).copy_to_host()), cfg
        if only != "all":
            continue
        assert p.correct(uspmm_linear(p.dell, np.ascontiguousarray(p.b_host.T)).T)
        csr = CSR.from_dense(p.dense, p.ell.mask())
        assert p.correct(gs.spmm_csr(csr, p.b_host, swizzle=True))
        assert p.correct(gs.spmm_coo(COO.from_dense(p.dense, p.ell.mask()), p.b_host))
        w = np.ones((8, 12), dtype)
        bell = BlockedELL.from_dense(w, np.kron(np.eye(2, 3, dtype=bool), np.ones((4, 4), bool)), block=4)
        got = gs.spmm_blocked_ell(bell, np.ones((12, 5), dtype))
        assert (got == 4).all()
    if "wgmma" in only.split(","):                   # (a run of its own: under racecheck it takes as long as the rest)
        sanitize_wgmma()
    print("sanitize case: every kernel ran and matched")


def sanitize_wgmma() -> None:
    """The wgmma kernel (a compute capability 9.0 GPU; skipped elsewhere) at every setting
    :func:`sparsekit.tune.heuristic` routes to, on partial tiles in both precisions its default ``"auto"`` picks:
    K' = 140 (bf16 corrections) with B by cp.async, K' = 80 (3xTF32) with N % 4 != 0 (B by plain loads); each within
    the float32 contract's bound and bit-identical on repeat."""
    from sparsekit.gpu import uspmm_wgmma as wg
    from sparsekit.gpu.uspmm_tc import error_reduction
    from sparsekit import tune
    if not wg.supported():
        print("sanitize case: no compute capability 9.0 GPU, the wgmma kernel left out")
        return
    problems = {"tf32+bf16": Problem(130, 200, 196, 0.3, np.float32),
                "3xtf32": Problem(130, 200, 99, 0.6, np.float32)}
    for name in ("WGMMA_LARGE", "WGMMA_MID", "WGMMA_WAVE", "WGMMA_HALF", "WGMMA_QUARTER", "WGMMA_EIGHTH"):
        for precision, p in problems.items():
            assert wg.auto_precision(p.dell) == precision
            first, again = (wg.uspmm(p.dell, p.b, **getattr(tune, name)).copy_to_host() for _ in range(2))
            assert p.correct(first, error_reduction(p.ell.kprime, np.float32)), (name, precision)
            assert (first.view(np.uint32) == again.view(np.uint32)).all(), (name, precision)


def sweep(problems, dtype, *, out=None, save=lambda: None) -> list[dict]:
    """Every configuration of :func:`sparsekit.tune.space` on each problem (the tuning data);
    records are appended to ``out`` and ``save()`` is called after each problem."""
    out = [] if out is None else out
    for (m, k, n, s) in problems:
        out += _tuned_records("sweep", Problem(m, k, n, s, dtype), full=True, repeat=10)
        save()
    return out


def _tuned_records(label, p, **tune_args) -> list[dict]:
    """:func:`sparsekit.tune.tune` on problem ``p`` (caching its winner): one record per configuration
    with its % of speed of light; prints the winner."""
    from sparsekit.tune import tune
    winner, recs = tune(p.ell, p.n, **tune_args)
    sol = p.sol_s()
    head = dict(m=p.m, k=p.k, n=p.n, sparsity=p.sparsity, dtype=np.dtype(p.dtype).name)
    out = [dict(head, **r, **(dict(pct_sol=100 * sol / (r["median_us"] * 1e-6)) if "median_us" in r else {}))
           for r in recs]
    print(f"{label} {p.m}x{p.k}x{p.n} {p.sparsity:.0%} {head['dtype']}: {winner} "
          f"{min(r['median_us'] for r in recs if r['correct']):.1f} us", flush=True)
    return out


#: ``--explore`` problems: the settings of :data:`sparsekit.tune.PIPELINED_SHAPES` on each.
EXPLORE_PROBLEMS = [(1024, 1024, 1024, 0.60), (1024, 1024, 1024, 0.80), (1024, 1024, 1024, 0.95),
                    (4096, 4096, 1024, 0.90), (1024, 1024, 128, 0.60), (128, 128, 128, 0.60),
                    (1024, 1024, 16384, 0.60)]


def explore(dtypes, *, save=lambda: None, out=None) -> list[dict]:
    """Every :data:`sparsekit.tune.PIPELINED_SHAPES` setting and the vendor
    baselines on ``EXPLORE_PROBLEMS`` (the data :func:`sparsekit.tune.heuristic` is fitted to)."""
    from sparsekit.gpu.uspmm import _pipelined_kernel
    from sparsekit.tune import PIPELINED_SHAPES, pipelined
    out = [] if out is None else out
    for d in dtypes:
        provs = {f"pipelined {shape}": pipelined(*shape) for shape in PIPELINED_SHAPES}
        provs["heuristic"] = "heuristic"
        for (m, k, n, s) in EXPLORE_PROBLEMS:
            recs = bench_problem(m, k, n, s, d, providers=provs, repeat=10 if n > 4096 else 20)
            out += recs
            best = min((r for r in recs if r.get("correct") and "torch" not in r["provider"]),
                       key=lambda r: r["median_us"])
            csr = next((r.get("median_us") for r in recs if r["provider"] == "cuSPARSE CSR (torch)"), None)
            print(f"explore {m}x{k}x{n} {s:.0%} {d}: best {best['provider']} {best['median_us']:.1f} us "
                  f"({best['pct_sol']:.1f}% SoL), cuSPARSE CSR {csr} us", flush=True)
            save()
        for shape in PIPELINED_SHAPES:
            regs = _pipelined_kernel(*shape[:5], d == "float16", shape[5]).get_regs_per_thread()
            print(f"registers {d} pipelined {shape}: {sorted(set(regs.values()))}", flush=True)
    return out


#: Tuned besides the table's problems by ``--tune-table``: data for the heuristic.
TUNE_EXTRA = [(1024, 1024, 128, 0.60), (1024, 1024, 1024, 0.80), (512, 512, 1024, 0.60)]


def tune_table(dtypes, *, save=lambda: None, out=None) -> list[dict]:
    """:func:`sparsekit.tune.tune` (default space) on every ``TABLE_PROBLEMS`` and ``TUNE_EXTRA``
    problem, caching the winners for ``config="auto"``; one record per configuration and problem."""
    out = [] if out is None else out
    for d in dtypes:
        for (m, k, n, s) in TABLE_PROBLEMS + TUNE_EXTRA:
            out += _tuned_records("tuned", Problem(m, k, n, s, d), repeat=10 if n > 4096 else 20)
            save()
    return out


#: ``--split-explore`` problems: outputs with fewer 32 x 128 tiles than the H100 has SMs (Fig. 5 at
#: N = 128, Fig. 6 at 128^3, Fig. 5 at N = 1024 below M = 512, ResNet-50 layers of Table 1 at N = 128),
#: and 1024^3 60% to compare the unsplit settings with the tuning run before the split.
SPLIT_PROBLEMS = [(256, 256, 128, 0.6), (512, 512, 128, 0.6), (768, 768, 128, 0.6), (1024, 1024, 128, 0.6),
                  (128, 128, 128, 0.05), (128, 128, 128, 0.6), (128, 128, 128, 0.95), (256, 256, 1024, 0.6),
                  (64, 576, 128, 0.81), (128, 1152, 128, 0.81), (256, 2304, 128, 0.81), (512, 4608, 128, 0.81),
                  (1024, 256, 128, 0.81), (2048, 512, 128, 0.81), (1000, 2048, 128, 0.81), (2048, 1024, 128, 0.81),
                  (1024, 1024, 128, 0.95), (1024, 1024, 1024, 0.6)]


def split_providers() -> dict:
    """The K-split settings of ``--split-explore`` (``splits`` is a launch argument: one compilation per
    shape), with the heuristic of this commit."""
    from sparsekit.tune import dense_tile, direct, pipelined
    provs = {"heuristic": "heuristic"}
    provs.update({f"dense_tile 32x128 s{s}": dense_tile(4, 4, 8, 16, 2, splits=s) for s in (1, 2, 4, 8)})
    provs.update({f"dense_tile 64x128 s{s}": dense_tile(4, 8, 8, 16, 2, splits=s) for s in (2, 4, 8)})
    provs.update({f"dense_tile 16x128 nw4 s{s}": dense_tile(4, 4, 4, 16, 4, splits=s) for s in (2, 4, 8)})
    provs.update({f"pipelined 8x128 s{s}": pipelined(4, 1, 8, 32, 4, 2, splits=s) for s in (1, 2, 4, 8)})
    provs.update({f"direct 8x128 s{s}": direct(4, 2, 4, 4, splits=s) for s in (1, 4, 8, 16)})
    return provs


def split_explore(dtypes, *, problems=None, save=lambda: None, out=None) -> list[dict]:
    """:func:`split_providers` and the vendors' CSR and dense products on ``problems`` (default
    ``SPLIT_PROBLEMS``)."""
    out = [] if out is None else out
    for d in dtypes:
        for (m, k, n, s) in SPLIT_PROBLEMS if problems is None else problems:
            recs = bench_problem(m, k, n, s, d, providers=split_providers(), vendors="fast", repeat=15)
            out += recs
            ours = [r for r in recs if r.get("correct") and "torch" not in r["provider"]]
            best = min(ours, key=lambda r: r["median_us"])
            csr = next((r.get("median_us") for r in recs if r["provider"] == "cuSPARSE CSR (torch)"), None)
            heur = next((r.get("median_us") for r in recs if r["provider"] == "heuristic"), None)
            print(f"split {m}x{k}x{n} {s:.0%} {d}: best {best['provider']} {best['median_us']:.1f} us, "
                  f"heuristic {heur} us, cuSPARSE CSR {csr} us", flush=True)
            save()
    return out


def warm_up(dtypes, configs) -> None:
    """Compile every configuration (dicts of tunables) for ``dtypes`` on a tiny problem, so that
    timing can start the moment the GPU is free (``--wait-for``)."""
    from sparsekit.gpu.uspmm import prepare, uspmm
    from numba import cuda

    from sparsekit.tune import make_ell
    for d in dtypes:
        dell = prepare(make_ell(40, 64, 0.5, d))
        b = cuda.to_device(np.ones((64, 72), dtype=d))
        for cfg in {json.dumps(c, sort_keys=True): c for c in configs}.values():
            cfg = dict(cfg)
            bb = cuda.to_device(np.asfortranarray(np.ones((64, 72), dtype=d))) if cfg.pop("layout", "C") == "F" else b
            uspmm(dell, bb, **cfg)
    cuda.synchronize()


def wait_for(paths, *, poll_s=1.0, limit_s=600.0) -> None:
    """Return once every file of ``paths`` exists (other jobs on the GPU have finished), or after
    ``limit_s`` seconds, printing which were still missing (their jobs then overlap the timing)."""
    import time
    start = time.monotonic()
    while not all(os.path.exists(f) for f in paths) and time.monotonic() - start < limit_s:
        time.sleep(poll_s)
    missing = [f for f in paths if not os.path.exists(f)]
    print(f"waited {time.monotonic() - start:.0f} s for {', '.join(paths)}"
          + (f"; STILL MISSING (timing overlaps those jobs): {', '.join(missing)}" if missing else ""), flush=True)


def figure_configs(dtype) -> list[dict]:
    """Every configuration ``auto`` (heuristic) and :data:`FIGURE_PROVIDERS` use over the full figures."""
    from experiments.uspmm_figures import FIG8_SHAPES, figure_points, table1_layers
    from sparsekit.gpu.uspmm_wgmma import supported
    from sparsekit.tune import heuristic
    pts = [pt for fig, pts in figure_points(False).items() for pt in pts]
    pts += [(m, k, n, sp) for n, sp, shapes in table1_layers().values() for (m, k, _) in shapes]
    wgmma = supported()
    out = [heuristic(m, k, n, max(1, round(k * (1 - sp))), dtype, "C", wgmma=wgmma) for (m, k, n, sp) in pts]
    out += [c for c in FIGURE_PROVIDERS.values() if isinstance(c, dict)]
    out += [dict(variant="listing1", nwarp=a, vsize=b, vecsize=v) for a, b in FIG8_SHAPES for v in (1, 2)]
    return out


#: ``--figures-auto`` providers: ``auto`` (the heuristic unless the tune cache has the problem) and
#: the paper's USpMM (1, 8) in its own layout (B column-major).
FIGURE_PROVIDERS = {"auto": "auto",
                    "USpMM (1,8) B col-major": dict(variant="listing1", nwarp=1, vsize=8, vecsize=1, layout="F")}


def figures_auto(dtypes, out_dir, *, on_table=lambda table: None) -> list:
    """The full figure sweeps (every point of ``experiments/uspmm_figures.py`` without --quick) with
    :data:`FIGURE_PROVIDERS` against cuSPARSE CSR and dense cuBLAS; PNGs into ``out_dir``,
    ``on_table(table)`` after each table."""
    from pathlib import Path

    from experiments.uspmm_figures import gpu_section
    from sparsekit.experiment import Context
    ctx = Context(quick=False, backend="gpu", out_dir=Path(out_dir))
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    return [gpu_section(ctx, d, ours=FIGURE_PROVIDERS, vendors="fast", repeat=15, on_table=on_table) for d in dtypes]


def auto_vs_cusparse(records) -> str:
    """One line: at how many problems ``auto`` beat cuSPARSE CSR, and the problems where it did not."""
    times = {}
    for r in records:
        if r.get("median_us"):
            times.setdefault((r["m"], r["k"], r["n"], r["sparsity"]), {})[r["provider"]] = r["median_us"]
    pairs = [(key, t["auto"], t["cuSPARSE CSR (torch)"]) for key, t in times.items()
             if "auto" in t and "cuSPARSE CSR (torch)" in t]
    slower = [f"{m}x{k}x{n} {s:g}: {a:.1f} vs {c:.1f} us" for (m, k, n, s), a, c in pairs if a >= c]
    return (f"auto faster than cuSPARSE CSR at {len(pairs) - len(slower)}/{len(pairs)} points"
            + (f"; not at: {'; '.join(slower)}" if slower else ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--table", action="store_true", help="the headline table's five problems, every provider")
    ap.add_argument("--check", action="store_true", help="correctness and bit-identical repeats at real shapes")
    ap.add_argument("--sweep", action="store_true", help="every tunable configuration on the sweep problems")
    ap.add_argument("--sweep-first", action="store_true", help="sweep only the first sweep problem (1024^3, 60%%)")
    ap.add_argument("--explore", action="store_true", help="pipelined settings on EXPLORE_PROBLEMS (for the heuristic)")
    ap.add_argument("--tune-table", nargs="?", const="float32", metavar="DTYPES",
                    help="tune every --table problem first, for these comma-separated dtypes (default float32); "
                         "auto then uses the winners")
    ap.add_argument("--sanitize", nargs="?", const="all", help="each kernel once, tiny (for compute-sanitizer); "
                    "--sanitize pipelined,direct,dense_tile: those variants only; --sanitize wgmma: the wgmma kernel "
                    "at its routed settings")
    ap.add_argument("--split-explore", metavar="DTYPES", help="K-split settings on SPLIT_PROBLEMS, for these "
                    "comma-separated dtypes")
    ap.add_argument("--split-problems", metavar="INDICES", help="--split-explore on these comma-separated indices "
                    "of SPLIT_PROBLEMS only")
    ap.add_argument("--figures-auto", metavar="DTYPES", help="every point of the full figure sweeps: auto and "
                    "USpMM (1,8) B col-major against cuSPARSE CSR and dense cuBLAS (CSVs and PNGs into --out)")
    ap.add_argument("--wait-for", metavar="FILES", help="compile the kernels of the requested runs first, then "
                    "wait until these comma-separated files exist before timing")
    ap.add_argument("--wait-limit", type=float, default=600.0, help="seconds --wait-for waits at most")
    ap.add_argument("--dtype", choices=["float32", "float16"], action="append",
                    help="dtype(s) (default: both)")
    ap.add_argument("--out", help="folder for the JSON records")
    args = ap.parse_args(argv)
    dtypes = args.dtype or ["float32", "float16"]
    if args.sanitize:
        sanitize_case(args.sanitize)
        return 0
    from sparsekit.device import info
    dev = info()
    print(f"device: {dev.name}; date {datetime.now(timezone.utc):%Y-%m-%d}; torch: "
          f"{'yes' if cuda_torch() is not None else 'not installed (vendor baselines skipped)'}", flush=True)
    results = {}
    if args.wait_for:
        from sparsekit.tune import space
        warm = {}
        for flag, configs_of in ((args.split_explore, lambda d: [c for c in split_providers().values()
                                                                 if isinstance(c, dict)]),
                                 (args.tune_table, space), (args.figures_auto, figure_configs)):
            for d in filter(None, (flag or "").split(",")):
                warm.setdefault(d, []).extend(configs_of(d))
        for d, configs in warm.items():
            warm_up([d], configs)
        wait_for(args.wait_for.split(","), limit_s=args.wait_limit)

    def save():
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, "bench_uspmm.json"), "w") as f:
                json.dump(dict(device=dev.name, date=f"{datetime.now(timezone.utc):%Y-%m-%d}",
                               argv=sys.argv, results=results), f, indent=1, default=str)

    if args.check:
        recs = [r for d in dtypes for r in check_real_shapes(d) + check_spmm_baselines(d)]
        results["check"] = recs
        print(markdown(recs, ["m", "k", "n", "sparsity", "dtype", "provider", "correct", "bit_identical"]), flush=True)
        save()
    if args.sweep:
        recs = results["sweep"] = []
        for d in dtypes:
            probs = SWEEP_PROBLEMS if d == "float32" and not args.sweep_first else SWEEP_PROBLEMS[:1]
            sweep(probs, d, out=recs, save=save)
    if args.split_explore:
        recs = results["split_explore"] = []
        chosen = None if not args.split_problems else [SPLIT_PROBLEMS[int(i)] for i in args.split_problems.split(",")]
        split_explore(args.split_explore.split(","), problems=chosen, save=save, out=recs)
        print(markdown(recs, ["m", "k", "n", "sparsity", "dtype", "provider", "config", "median_us",
                              "speedup_vs_cusparse_csr", "correct"]), flush=True)
    if args.tune_table:
        recs = results["tune_table"] = []
        tune_table(args.tune_table.split(","), save=save, out=recs)
    if args.explore:
        recs = results["explore"] = []
        explore(dtypes, save=save, out=recs)
        print(markdown(recs, TABLE_KEYS), flush=True)
    if args.figures_auto:
        recs = results["figures_auto"] = []

        def on_table(table):
            recs.extend(dict(r, table=table.caption) for r in table.records)
            save()
            geo = [f"{r['model']} {r['provider']} {r['geomean_speedup_vs_cusparse_csr']:.2f}x" for r in table.records
                   if "geomean_speedup_vs_cusparse_csr" in r]
            print(f"{table.caption}: {len(table.records)} records; "
                  + ("geomean speedup over cuSPARSE CSR: " + ", ".join(geo) if geo else auto_vs_cusparse(table.records)),
                  flush=True)
        figures_auto(args.figures_auto.split(","), os.path.join(args.out or ".", "figures"), on_table=on_table)
    if args.table:
        recs = results["table"] = []
        for d in dtypes:
            for (m, k, n, s) in TABLE_PROBLEMS:
                recs += bench_problem(m, k, n, s, d)
                save()
        print(markdown(recs, TABLE_KEYS), flush=True)
    return exit_status([r for recs in results.values() for r in recs])


def exit_status(records) -> int:
    """1 when any result of our kernels is wrong or not bit-identical (they are named), else 0.

    A vendor (PyTorch) result outside our float32 bound is reported in the tables, not fatal."""
    bad = [r for r in records if "error" not in r and "torch" not in r.get("provider", "")
           and (r.get("correct") is False or r.get("bit_identical") is False)]
    if bad:
        print(f"{len(bad)} INCORRECT results:", bad[:5])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())
