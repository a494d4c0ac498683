"""USpMM at small N on a GPU: the warp-split kernel against the heuristic's choice and cuSPARSE CSR.

The problems are the ResNet-50 layer shapes of the Table 1 analog (N = 128, 81% uniform sparsity,
``experiments.uspmm_figures.table1_layers``), row-major B, float32 and float16. For each problem
and dtype this times (median of :func:`sparsekit.timing.measure`, L2 flushed):

* ``variant="warp_split"`` (:func:`sparsekit.gpu.uspmm._warp_split_kernel`) at every setting of
  :data:`SETTINGS`;
* ``config="heuristic"`` (:func:`sparsekit.tune.heuristic`'s choice, named in the output);
* cuSPARSE CSR through PyTorch (:func:`experiments.bench_uspmm.vendor_launches`).

Each of our results is checked against a float64 product (:meth:`Problem.correct`) and launched
twice more: the repeats must be bit-identical. Run it as a script on a GPU::

    python -m experiments.bench_uspmm_small_n [--dtypes float32,float16] [--repeat 15] [--out DIR]
    python -m experiments.bench_uspmm_small_n --extra         # also EXTRA_PROBLEMS (other N = 128 problems)
    python -m experiments.bench_uspmm_small_n --bounds        # the routing rule's gaps (BOUNDS_PROBLEMS)
    python -m experiments.bench_uspmm_small_n --latency       # Figs. 5-7's slow float32 points
    python -m experiments.bench_uspmm_small_n --fig6          # 128^3 at every sparsity of Fig. 6
    python -m experiments.bench_uspmm_small_n --wide          # the other --latency problems, few warps
    python -m experiments.bench_uspmm_small_n --sanitize      # tiny odd shapes, every setting shape
    python -m experiments.bench_uspmm_small_n --profile "M,K;M,K"   # one launch per kernel, for ncu

``--latency`` times :data:`LATENCY_PROBLEMS` (float32 points of Figs. 5-7 where cuSPARSE CSR came within 2x of
``auto`` before its warp-split latency rules) at :data:`LATENCY_SETTINGS`, against ``config="auto"`` instead of the
heuristic; ``--fig6`` times 128^3 at the 19 sparsities of Fig. 6 at :data:`FIG6_SETTINGS`.

``--sanitize`` runs the kernel once per tiny case (odd M, K, N; K' = 0 and K' = K; both dtypes)
and exits non-zero on a wrong answer: run it under ``compute-sanitizer --tool memcheck`` and
``--tool racecheck``. ``--profile`` launches the warp-split setting :data:`PROFILE_SETTING` and the
heuristic's choice once each on one float32 layer, for ``ncu -k regex:^kernel``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timezone

import numpy as np

if __package__ in (None, ""):                        # run as a script: the repository root on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

N = 128
SPARSITY = 0.81
#: Warp-split settings timed per problem: (nwarp, rows_per_warp, unroll, min_blocks), 4 columns a lane
#: (N = 128: one 16-byte read of B a lane in float32, 8 bytes in float16): the winners of nwarp 4/8/16 x
#: rows_per_warp 1/2/4 at unroll 8 and nwarp 8/16 x rows_per_warp 1/2 at unroll 4 without launch bounds, and
#: the same with min_blocks (registers capped so that more warps fit an SM; results/uspmm.md, Small-N kernel).
SETTINGS = [(8, 1, 4, 1), (8, 1, 4, 4), (4, 1, 8, 1), (4, 1, 8, 6), (8, 1, 8, 1), (8, 1, 8, 3),
            (16, 1, 4, 1), (4, 2, 8, 6), (4, 4, 8, 6), (8, 2, 4, 4)]
PROFILE_SETTING = (8, 1, 4, 4)
#: ``--extra``: N = 128 problems beyond ResNet-50 (Figs. 5-7 at 60%, 128^3 at 5% and 95%, 1024^2 at
#: 95%), N = 256, and larger M, to bound the routing rule: (M, K, N, sparsity).
EXTRA_PROBLEMS = [(128, 128, 128, 0.6), (256, 256, 128, 0.6), (512, 512, 128, 0.6), (768, 768, 128, 0.6),
                  (1024, 1024, 128, 0.6), (128, 128, 128, 0.05), (128, 128, 128, 0.95), (1024, 1024, 128, 0.95),
                  (1024, 1024, 256, 0.6), (2048, 2048, 128, 0.6), (4096, 1024, 128, 0.81), (4096, 2048, 128, 0.81)]
#: ``--bounds``: where the Small-N kernel's table (results/uspmm.md, Small-N kernel) leaves the routing rule open:
#: 1024 < M < 2048, density 0.3-0.4 above M = 1024, N = 64 and N = 256; timed at :data:`BOUNDS_SETTINGS`.
BOUNDS_PROBLEMS = [(1536, 1024, 128, 0.81), (1536, 512, 128, 0.81), (1536, 1536, 128, 0.6), (2048, 1024, 128, 0.6),
                   (2048, 1024, 128, 0.7), (1024, 1024, 128, 0.7), (512, 1024, 64, 0.81), (1024, 1024, 64, 0.6),
                   (2048, 512, 64, 0.81), (512, 2048, 256, 0.81), (2048, 512, 256, 0.81), (1024, 2048, 256, 0.81)]
#: (nwarp, rows_per_warp, unroll, min_blocks, cols_per_lane): the recommended S1 and S2, nw16 rpw1 u4, and S1
#: with 2 columns a lane (a 64-column tile for N = 64; float32 only) and with 8 (256 columns).
BOUNDS_SETTINGS = [(8, 1, 4, 1, 4), (4, 1, 8, 6, 4), (16, 1, 4, 1, 4), (8, 1, 4, 1, 2), (8, 1, 4, 1, 8)]
#: ``--latency``: float32 points of Figs. 5-7 where ``auto``, before the warp-split latency rules, came within 2x
#: of cuSPARSE CSR (results/uspmm.md, CUDA-core latency): 128^3 (launch- and latency-bound), 1024^3 at 90% and
#: 95% (the direct kernel), N = 1024 at small M, and N = 128..512 at M = K = 768, 1024.
LATENCY_PROBLEMS = ([(128, 128, 128, s) for s in (0.05, 0.3, 0.6, 0.8, 0.95)]
                    + [(1024, 1024, 1024, 0.9), (1024, 1024, 1024, 0.95), (128, 128, 1024, 0.6),
                       (256, 256, 1024, 0.6), (512, 512, 1024, 0.6), (768, 768, 128, 0.6), (1024, 1024, 128, 0.6),
                       (1024, 1024, 256, 0.6), (1024, 1024, 512, 0.6)])
#: (nwarp, rows_per_warp, unroll, min_blocks, cols_per_lane): sparsekit.tune's S1, then 4 warps, 1 row, unroll 4
#: (results/uspmm.md, CUDA-core latency) and its neighbours (2-16 warps, unroll 2-8, 2-8 columns a lane).
LATENCY_SETTINGS = [(8, 1, 4, 1, 4), (4, 1, 4, 1, 4), (2, 1, 4, 1, 4), (2, 1, 8, 1, 4), (4, 1, 2, 1, 4),
                    (4, 1, 8, 1, 4), (6, 1, 4, 1, 4), (4, 1, 4, 1, 8), (4, 1, 4, 1, 2), (16, 1, 4, 1, 4)]
#: ``--fig6``: 128^3 at 5%..95% (Fig. 6): the routed choice (S1), 16 warps (routed at 5-15%: results/uspmm.md,
#: CUDA-core latency) and 4 warps.
FIG6_SETTINGS = [(8, 1, 4, 1, 4), (16, 1, 4, 1, 4), (4, 1, 4, 1, 4)]
#: ``--wide``: the problems of :data:`LATENCY_PROBLEMS` other than 128^3, at fewer warps a block (the routed
#: settings of results/uspmm.md, CUDA-core latency, have 1 to 4) and wider steps.
WIDE_SETTINGS = [(2, 1, 4, 1, 4), (4, 1, 4, 1, 8), (1, 1, 4, 1, 4), (1, 1, 8, 1, 4), (3, 1, 4, 1, 4),
                 (2, 1, 4, 1, 8), (2, 1, 2, 1, 4), (1, 1, 4, 1, 8)]


def warp_split(nwarp: int, rows_per_warp: int, unroll: int, min_blocks: int = 1, cols_per_lane: int = 4) -> dict:
    """The tunables of one warp-split setting."""
    return dict(variant="warp_split", nwarp=nwarp, rows_per_warp=rows_per_warp, cols_per_lane=cols_per_lane,
                unroll=unroll, min_blocks=min_blocks)


def fits(cfg: dict, dtype) -> bool:
    """Whether the launcher takes ``cfg`` for ``dtype``: the warp-split kernel reads 4 or 8 halves a lane in
    float16."""
    item = np.dtype(dtype).itemsize
    return not (item == 2 and cfg["cols_per_lane"] == 2)


def setting_name(cfg: dict) -> str:
    mb = f" mb{cfg['min_blocks']}" if cfg.get("min_blocks", 1) != 1 else ""
    cpl = f" cpl{cfg['cols_per_lane']}" if cfg.get("cols_per_lane", 4) != 4 else ""
    return f"ws nw{cfg['nwarp']} rpw{cfg['rows_per_warp']} u{cfg['unroll']}{mb}{cpl}"


def resnet50_shapes() -> list[tuple[int, int]]:
    """The (M, K) of every distinct ResNet-50 weight shape of the Table 1 analog."""
    from experiments.uspmm_figures import table1_layers
    n, sparsity, shapes = table1_layers()["resnet50"]
    assert (n, sparsity) == (N, SPARSITY), (n, sparsity)
    return [(m, k) for m, k, _ in shapes]


def bench_layer(m: int, k: int, dtype, *, repeat: int, n: int = N, sparsity: float = SPARSITY,
                settings=SETTINGS, anchor: str = "heuristic", make=warp_split) -> list[dict]:
    """One record per provider for the problem (see the module docstring); ``settings``: argument tuples of
    ``make`` (:func:`warp_split`), those the launcher would refuse skipped (:func:`fits`);
    ``anchor``: ``config="heuristic"`` or ``config="auto"``, timed as the provider of that name."""
    from sparsekit.bench.uspmm import Problem, config_name, vendor_launches
    from sparsekit.arrays import to_host
    from sparsekit.gpu.uspmm import uspmm
    from sparsekit.timing import measure
    from sparsekit.tune import resolve
    p = Problem(m, k, n, sparsity, dtype)
    cfgs = [c for c in (make(*s) for s in settings) if fits(c, p.dtype)]
    launches = {setting_name(cfg): (lambda cfg=cfg: uspmm(p.dell, p.b, **cfg)) for cfg in cfgs}
    launches[anchor] = lambda: uspmm(p.dell, p.b, config=anchor)
    launches.update({name: f for name, f in vendor_launches(p, coo=False).items() if name.startswith("cuSPARSE CSR")})
    anchor_choice = config_name(resolve(anchor, p.dell, n, "C"))
    records = []
    for name, launch in launches.items():
        rec = dict(m=m, k=k, n=n, sparsity=sparsity, dtype=p.dtype.name, kprime=p.ell.kprime, provider=name)
        if name == anchor:
            rec["config"] = anchor_choice
        first = to_host(launch())
        rec["correct"] = p.correct(first)
        if not name.startswith("cuSPARSE"):
            rec["bit_identical"] = all((to_host(launch()).view(np.uint8) == first.view(np.uint8)).all()
                                       for _ in range(2))
        t = measure(launch, repeat=repeat, warmup=2)
        records.append(dict(rec, median_us=t.median_s * 1e6, p10_us=t.p10_s * 1e6, p90_us=t.p90_s * 1e6,
                            late=t.late))
    return records


def summary_rows(records) -> list[dict]:
    """Per (layer, dtype): cuSPARSE, the heuristic, the fastest warp-split setting, and each setting."""
    rows = {}
    for r in records:
        key = (r["dtype"], r["m"], r["k"], r["n"], r["sparsity"])
        row = rows.setdefault(key, dict(dtype=r["dtype"], m=r["m"], k=r["k"], n=r["n"], sparsity=r["sparsity"],
                                        kprime=r["kprime"], ws={}))
        if r["provider"].startswith("cuSPARSE"):
            row["cusparse"], row["cusparse_correct"] = r["median_us"], r["correct"]
        elif r["provider"] in ("heuristic", "auto"):
            row["heuristic"], row["heuristic_config"] = r["median_us"], r["config"]
        else:
            row["ws"][r["provider"]] = r["median_us"]
    for row in rows.values():
        row["best_ws"] = min(row["ws"], key=row["ws"].get)
    return list(rows.values())


def problem_name(row) -> str:
    """``MxK`` for the ResNet-50 layers (N = 128, 81%), else ``MxKxN s%``."""
    if (row["n"], row["sparsity"]) == (N, SPARSITY) and (row["m"], row["k"]) in resnet50_shapes():
        return f"{row['m']}x{row['k']}"
    return f"{row['m']}x{row['k']}x{row['n']} {round(100 * row['sparsity'])}%"


def table(records) -> str:
    """Markdown: per problem the three times (us), ours vs cuSPARSE, and the heuristic's choice; a * marks a
    cuSPARSE result outside the float32-accumulation bound (on the H100 most float16 ones; why is not known)."""
    lines = ["| dtype | M x K | K' | cuSPARSE CSR | heuristic | heuristic choice | best warp_split | setting | "
             "best ws vs cuSPARSE | best ws vs heuristic |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in summary_rows(records):
        best = row["ws"][row["best_ws"]]
        cus = row.get("cusparse", float("nan"))
        star = "" if row.get("cusparse_correct", True) else "*"
        lines.append(f"| {row['dtype']} | {problem_name(row)} | {row['kprime']} | {cus:.1f}{star} | "
                     f"{row['heuristic']:.1f} | {row['heuristic_config']} | {best:.1f} | {row['best_ws']} | "
                     f"{cus / best:.2f}x | {row['heuristic'] / best:.2f}x |")
    return "\n".join(lines)


def latency_table(records) -> str:
    """Markdown (``--latency``, ``--fig6``): per problem cuSPARSE CSR, ``auto`` and its choice, the fastest
    warp-split setting, and how it compares (times in us)."""
    lines = ["| problem | K' | cuSPARSE CSR | auto | auto's choice | best ws | setting | best vs cuSPARSE | "
             "best vs auto |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in summary_rows(records):
        best, cus, auto = row["ws"][row["best_ws"]], row.get("cusparse", float("nan")), row["heuristic"]
        lines.append(f"| {problem_name(row)} | {row['kprime']} | {cus:.1f} | {auto:.1f} | {row['heuristic_config']} | "
                     f"{best:.1f} | {row['best_ws']} | {cus / best:.2f}x | {auto / best:.2f}x |")
    return "\n".join(lines)


def settings_table(records, dtype: str) -> str:
    """Markdown: every warp-split setting's median (us) per problem of one dtype (- where not timed)."""
    rows = [r for r in summary_rows(records) if r["dtype"] == dtype]
    names = list(dict.fromkeys(name for r in rows for name in r["ws"]))
    lines = ["| M x K | K' | " + " | ".join(n.removeprefix("ws ") for n in names) + " |",
             "|---|---|" + "---|" * len(names)]
    for row in rows:
        lines.append(f"| {problem_name(row)} | {row['kprime']} | "
                     + " | ".join(f"{row['ws'][n]:.1f}" if n in row["ws"] else "-" for n in names) + " |")
    return "\n".join(lines)


#: ``--sanitize`` cases: (M, K, N, K'), odd sizes, N not a multiple of 4 or 128, K' = 0 and K' = K.
SANITIZE_CASES = [(37, 45, 19, 9), (70, 300, 136, 57), (5, 7, 3, 7), (33, 20, 130, 0)]
SANITIZE_SETTINGS = [warp_split(4, 2, 8), warp_split(3, 3, 4), warp_split(8, 1, 2, cols_per_lane=8),
                     warp_split(8, 1, 4, min_blocks=4), warp_split(3, 1, 8, cols_per_lane=8)]


def sanitize() -> int:
    """Each sanitizer case once per setting and dtype; 0 when every result matched."""
    from sparsekit.bench.uspmm import U32
    from sparsekit.gpu.uspmm import uspmm
    from sparsekit.formats import ELL
    bad = 0
    rng = np.random.default_rng(5)
    for m, k, n, kprime in SANITIZE_CASES:
        mask = np.zeros((m, k), dtype=bool)
        for r in range(m):
            mask[r, rng.choice(k, size=kprime, replace=False)] = True
        for dt in (np.float32, np.float16):
            ell = ELL.from_dense(rng.standard_normal((m, k)).astype(dt), mask)
            b = rng.standard_normal((k, n)).astype(dt)
            a64, b64 = ell.to_dense().astype(np.float64), b.astype(np.float64)
            exact, scale = a64 @ b64, np.abs(a64) @ np.abs(b64)
            bound = kprime * U32 * scale + np.finfo(dt).eps * np.abs(exact) + np.finfo(dt).smallest_subnormal
            for cfg in SANITIZE_SETTINGS:
                got = uspmm(ell, b, **cfg).astype(np.float64)
                if not (np.abs(got - exact) <= bound).all():
                    bad += 1
                    print(f"WRONG: {m}x{k}x{n} K'={kprime} {np.dtype(dt).name} {cfg}")
    print("every warp-split case ran and matched" if not bad else f"{bad} wrong")
    return 1 if bad else 0


def profile(shapes) -> None:
    """For each (M, K): one launch each of :data:`PROFILE_SETTING` and the heuristic's choice
    (float32), for ncu, in that order."""
    from numba import cuda

    from sparsekit.bench.uspmm import Problem, config_name
    from sparsekit.gpu.uspmm import uspmm
    from sparsekit.tune import resolve
    for m, k in shapes:
        p = Problem(m, k, N, SPARSITY, np.float32)
        for label, kw in (("warp_split " + setting_name(warp_split(*PROFILE_SETTING)), warp_split(*PROFILE_SETTING)),
                          ("heuristic " + config_name(resolve("heuristic", p.dell, N, "C")),
                           dict(config="heuristic"))):
            uspmm(p.dell, p.b, **kw)
            cuda.synchronize()
            print(f"profiled: {m}x{k}x{N} float32 {label}")


def floor_us(repeat: int) -> float:
    """Median device time (us) of an empty Numba kernel of one block, measured like the problems:
    what every measured time includes besides the work (launch, L2 flush aftermath)."""
    from numba import cuda

    from sparsekit.timing import measure

    @cuda.jit
    def empty(x):
        if cuda.threadIdx.x == 1024:                 # never true: the kernel does nothing
            x[0] = 0.0

    x = cuda.device_array(1, np.float32)
    return measure(lambda: empty[1, 32](x), repeat=repeat, warmup=2).median_s * 1e6


def latency_probes(repeat: int) -> dict:
    """Median device time (us) of probe kernels shaped like the warp-split kernel at 128^3 (128 blocks of
    256 threads, each thread 4 outputs of a 128 x 128 float32 C), timed like the problems (L2 flushed):
    what the launch, one DRAM round trip, two dependent ones (an entry, then the row of B it names) and
    the partial sums' barrier cost before any multiply-add. Each is checked against NumPy."""
    from numba import cuda

    from sparsekit.timing import measure

    @cuda.jit
    def empty(c):
        if cuda.threadIdx.x == 1024:                 # never true
            c[0] = 0.0

    @cuda.jit
    def one_load(b, c):                              # C = B: one read, one write a thread
        e = (cuda.blockIdx.x * 32 + cuda.threadIdx.x % 32) * 4
        if cuda.threadIdx.x < 32:
            for x in range(4):
                c[e + x] = b[e + x]

    @cuda.jit
    def two_loads(idx, b, c):                        # C[r] = B[idx[r]]: the read of B waits on idx
        r = cuda.blockIdx.x
        e = (cuda.threadIdx.x % 32) * 4
        row = idx[r]
        if cuda.threadIdx.x < 32:
            for x in range(4):
                c[r * 128 + e + x] = b[row * 128 + e + x]

    @cuda.jit
    def two_loads_sum(idx, b, c):                    # the same through shared memory and one barrier,
        r = cuda.blockIdx.x                          # 8 warps' partial rows summed in order
        w = cuda.threadIdx.x // 32
        e = (cuda.threadIdx.x % 32) * 4
        part = cuda.shared.array(1024, np.float32)
        row = idx[(r + w) % 128]
        for x in range(4):
            part[w * 128 + e + x] = b[row * 128 + e + x]
        cuda.syncthreads()
        if w == 0:
            for x in range(4):
                acc = part[e + x]
                for v in range(1, 8):
                    acc += part[v * 128 + e + x]
                c[r * 128 + e + x] = acc

    rng = np.random.default_rng(7)
    idx_h = rng.permutation(128).astype(np.int32)
    b_h = rng.standard_normal((128, 128)).astype(np.float32)
    idx, b, c = cuda.to_device(idx_h), cuda.to_device(b_h.ravel()), cuda.device_array(128 * 128, np.float32)
    rows = (np.arange(128)[:, None] + np.arange(8)[None, :]) % 128
    want = {"one_load": b_h, "two_loads": b_h[idx_h],
            "two_loads_sum": b_h[idx_h[rows]].sum(axis=1, dtype=np.float64)}
    launches = {"empty": lambda: empty[128, 256](c), "one_load": lambda: one_load[128, 256](b, c),
                "two_loads": lambda: two_loads[128, 256](idx, b, c),
                "two_loads_sum": lambda: two_loads_sum[128, 256](idx, b, c)}
    out = {}
    for name, launch in launches.items():
        launch()
        if name in want:
            assert np.allclose(c.copy_to_host().reshape(128, 128), want[name], rtol=1e-5, atol=1e-5), name
        out[name] = measure(launch, repeat=repeat, warmup=2).median_s * 1e6
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="float32,float16")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--out", default=None, help="directory for small_n.json")
    ap.add_argument("--sanitize", action="store_true")
    ap.add_argument("--extra", action="store_true", help="also time EXTRA_PROBLEMS")
    ap.add_argument("--bounds", action="store_true", help="time BOUNDS_PROBLEMS at BOUNDS_SETTINGS only")
    ap.add_argument("--latency", action="store_true", help="time LATENCY_PROBLEMS at LATENCY_SETTINGS against auto")
    ap.add_argument("--fig6", action="store_true", help="time 128^3 at Fig. 6's sparsities at FIG6_SETTINGS")
    ap.add_argument("--wide", action="store_true", help="time LATENCY_PROBLEMS but 128^3 at WIDE_SETTINGS")
    ap.add_argument("--probes", action="store_true", help="also time the latency probes (latency_probes)")
    ap.add_argument("--profile", default=None, metavar="M,K[;M,K...]")
    ap.add_argument("--from-json", default=None, metavar="PATH", help="print the tables of a saved run")
    args = ap.parse_args(argv)
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        print(f"Device {saved['device']}, started {saved['started']}, {saved['repeat']} repeats, L2 flushed; "
              f"empty kernel {saved['empty_kernel_us']:.1f} us\n")
        if saved.get("probes_us"):
            print("Latency probes (128 blocks x 256 threads, median us): "
                  + ", ".join(f"{name} {t:.2f}" for name, t in saved["probes_us"].items()) + "\n")
        latency = any(r["provider"] == "auto" for r in saved["records"])
        print(latency_table(saved["records"]) if latency else table(saved["records"]))
        for dt in dict.fromkeys(r["dtype"] for r in saved["records"]):
            print(f"\nEvery setting timed, {dt} (median us):\n")
            print(settings_table(saved["records"], dt))
        return 0
    if args.sanitize:
        return sanitize()
    if args.profile:
        profile([tuple(int(x) for x in shape.split(",")) for shape in args.profile.split(";")])
        return 0
    from sparsekit.device import info
    dev = info()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    floor = floor_us(args.repeat)
    probes = latency_probes(args.repeat) if args.probes else {}
    if probes:
        print("Latency probes (128 blocks x 256 threads, median us): "
              + ", ".join(f"{name} {t:.2f}" for name, t in probes.items()) + f"; empty kernel of one block {floor:.2f}")
    records = []

    def save():
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, "small_n.json"), "w") as f:
                json.dump(dict(device=dev.name, started=started, repeat=args.repeat, empty_kernel_us=floor,
                               probes_us=probes, records=records), f, indent=1)

    problems = [(m, k, N, SPARSITY) for m, k in resnet50_shapes()] + (EXTRA_PROBLEMS if args.extra else [])
    settings, anchor = SETTINGS, "heuristic"
    if args.bounds:
        problems, settings = BOUNDS_PROBLEMS, BOUNDS_SETTINGS
    if args.latency or args.fig6 or args.wide:
        problems, settings, anchor = [], [], "auto"
        if args.latency:
            problems, settings = LATENCY_PROBLEMS, LATENCY_SETTINGS
        if args.wide:
            problems = problems + [p for p in LATENCY_PROBLEMS if p[:3] != (128, 128, 128)]
            settings = list(dict.fromkeys(settings + WIDE_SETTINGS))
        if args.fig6:
            problems = problems + [(128, 128, 128, round(0.05 * i, 2)) for i in range(1, 20)]
            settings = list(dict.fromkeys(settings + FIG6_SETTINGS))
    for dt in args.dtypes.split(","):
        for m, k, n, sparsity in problems:
            records += bench_layer(m, k, np.dtype(dt), repeat=args.repeat, n=n, sparsity=sparsity,
                                   settings=settings, anchor=anchor)
            save()
            print(f"{dt} {m}x{k}x{n} {sparsity} done", flush=True)
    print(f"\nDevice {dev.name}, started {started}, {args.repeat} repeats, L2 flushed; "
          f"empty kernel {floor:.1f} us\n")
    print(latency_table(records) if anchor == "auto" else table(records))
    for dt in args.dtypes.split(","):
        print(f"\nEvery setting timed, {dt} (median us):\n")
        print(settings_table(records, dt))
    ours = [r for r in records if not r["provider"].startswith("cuSPARSE")]
    wrong = [r for r in ours if not r["correct"] or not r["bit_identical"]]
    vendor_off = sum(not r["correct"] for r in records if r["provider"].startswith("cuSPARSE"))
    print(f"\n{len(ours)} results of ours, {len(wrong)} wrong or not bit-identical; "
          f"{vendor_off} cuSPARSE results outside the float32-accumulation bound (* above)")
    for r in wrong:
        print("WRONG:", r)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
