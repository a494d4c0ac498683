"""Unstructured magnitude-pruned half-precision weights at LLM layer shapes: sparsekit's SpMM kernels against dense
cuBLAS, cuSPARSE CSR and cuSPARSELt 2:4 (GPU, PyTorch).

A linear layer ``Y = X W^T`` (``X``: N x K, ``W``: M x K, PyTorch CUDA tensors) for weights 4096 x 4096,
14336 x 4096 and 4096 x 14336: a seeded standard-normal float32 weight pruned by magnitude
(:func:`sparsekit.prune.magnitude`: the largest ``|w|`` of the whole weight, no structure) at 50, 70, 80 and 90 %,
cast to bfloat16 and float16; N in {8, 16, 32, 64, 256, 1024}. Kernels, each in the weight's dtype:

=================  ==========================================================================================
``dense cuBLAS``   ``torch.nn.functional.linear(X, W)`` on the pruned weight (tensor cores): every speedup's base
``cuSPARSE CSR``   ``torch.sparse.mm(W.to_sparse_csr(), X^T)`` (PyTorch's int64 indices); where PyTorch refuses
                   the dtype the point reads ``n/a`` with PyTorch's reason
``cuSPARSELt``     at 50 % only: ``F.linear(X, to_sparse_semi_structured(W24))``, ``W24`` the same dense weight
                   pruned 2:4 by magnitude (:func:`sparsekit.prune.n_m`), checked against its own product
``bitmap``         :func:`sparsekit.gpu.spmm_bitmap.spmm_bitmap_linear` on a TiledBitmap (N <= 64)
``tiled``          :func:`sparsekit.gpu.spmm_tiled.spmm_tiled_linear` on a TiledCSL of 64 x 64 tiles (N <= 64)
``csr``            :func:`sparsekit.gpu.spmm.spmm_csr` in its default configuration (``config="auto"``,
                   :func:`sparsekit.gpu.spmm.auto_route`: half precision with N <= 64 runs the TiledCSL row
                   kernel or the TiledBitmap kernel, past it the rows padded to ELL through ``uspmm`` (tensor
                   cores) where the padding is small, otherwise the staged CSR kernel with ``staged_tunables``;
                   the record's ``note`` names the route). It computes ``C = A @ B``, so it
                   is timed, as cuSPARSE is, with ``B = X^T`` made contiguous once outside the timing; its
                   ``C`` is ``Y^T``
=================  ==========================================================================================

A point: device time in microseconds (:func:`sparsekit.timing.measure`: median of 15 with the 10th and 90th
percentile, L2 flushed before each repeat, host dispatch hidden behind a spin kernel), speedup = dense time / the
kernel's, the bytes of the weight in the kernel's format (against dense's ``2 M K``) and those bytes over the
time as a share of the measured copy bandwidth (the weight only: ``X`` and ``Y`` are not counted), and for every
sparse kernel its largest error against the float32 product of the same 16-bit operands, ``correct`` when every
element is within the kernels' tests' bound (float32 sums in any order, one rounding). Each format is built once
per (shape, sparsity, dtype) and reused across N; the mask of a (shape, sparsity) serves both dtypes. Every point
is guarded (a failure prints FAIL and the run goes on), and ``--budget-s`` stops the run cleanly between points;
what was measured is written either way: ``DIR/spmm_unstructured.json`` (every record, the best of ours a point
against the baselines) and ``DIR/spmm_unstructured.png`` (speedup over dense against sparsity, a panel per shape
and dtype).

The sweep needs a CUDA GPU and PyTorch with CUDA: ``X``, the baselines and the checks are PyTorch CUDA tensors,
which the CUDA simulator does not provide; ``tests/test_bench_spmm_unstructured.py`` covers the parts that need
no GPU (options, estimate, budget stop, records, JSON and plot).

``sparsekit reproduce --only spmm_unstructured`` runs it too (``--quick``: 4096^2 at 50 and 90 %, N = 8 and 32,
bfloat16); without a GPU it checks ``spmm_csr``'s default route and the bitmap kernel at a toy shape instead.

    python -m experiments.bench_spmm_unstructured --out DIR     # every point: about 5 minutes on an H200
    python -m experiments.bench_spmm_unstructured --shapes 4096x4096 --sparsities 0.8 0.9 --widths 8 32 --dtypes bfloat16
"""
from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from experiments.spmm_points import DTYPES, REPEAT, error, error_bound, log, measured_us, on_device, point
from experiments.spmm_points import tiled
from sparsekit.cli_types import matrix_shape, record_file
from sparsekit.experiment import Context, Experiment, Section, Table, merge_records, read_record, save_figure
from sparsekit.formats import TiledBitmap
from sparsekit.prune import magnitude, n_m

SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336)]
SPARSITIES = [0.5, 0.7, 0.8, 0.9]
NS = [8, 16, 32, 64, 256, 1024]
DTYPE_NAMES = ["bfloat16", "float16"]
BUDGET_S = 540.0        # a default run takes about 5 minutes; one still going at 9 stops and writes what it has
OUT = Path("experiments/results")

DENSE, CUSPARSE, CUSPARSELT = "dense cuBLAS", "cuSPARSE CSR", "cuSPARSELt 2:4"
BITMAP, TILED, CSR_AUTO = "bitmap", "tiled 64x64", "csr auto"
OURS = (BITMAP, TILED, CSR_AUTO)
KERNELS = (DENSE, BITMAP, TILED, CSR_AUTO, CUSPARSE, CUSPARSELT)
SHORT = {DENSE: "dense", BITMAP: "bitmap", TILED: "tiled", CSR_AUTO: "csr", CUSPARSE: "cuSPARSE", CUSPARSELT: "2:4"}
PLOT_WIDTHS = (8, 32)

# Cost model of the run, for the estimate printed at the start. Host seconds on the H200 machine, taken as 1.5x
# faster than the 2-core workstation they were measured on (4096 x 4096 70 %: bench_spmm_tiled formats in 0.9 s
# there, about 1.4 s here).
PRUNE_S_PER_WEIGHT = 2.3e-8         # sparsekit.prune.magnitude: a partition of |w| (3.5e-8 on the workstation)
PRUNE24_S_PER_WEIGHT = 5e-8         # sparsekit.prune.n_m(w, 2, 4), once a shape
CAST_S_PER_WEIGHT = 3e-8            # the weight cast, pruned and copied to the device, a dtype
FORMAT_S_PER_KEPT = {"float16": 2.8e-7, "bfloat16": 4.3e-7}   # TiledBitmap, TiledCSL, CSR (+ its TiledCSL rows)
COMPILE_S = 2.0                     # a Numba kernel's first call
STARTUP_S = 15.0                    # CUDA, PyTorch, the copy-bandwidth measurement
POINT_OVERHEAD_S = (REPEAT + 3) * 4e-4   # flush, spin, events and the check, a timed kernel
SPARSE_FLOPS = 2e12                 # CUDA-core and cuSPARSE half-precision SpMM, FLOP/s (large N)


def estimate_s(shapes, sparsities, widths, dtypes) -> dict:
    """Seconds a run of these points should take on an H200 machine, by part (``total``: their sum)."""
    weights = sum(m * k for m, k in shapes)
    kept = sum(m * k * (1 - s) for m, k in shapes for s in sparsities)
    small = [n for n in widths if n <= 64]
    kernels_a_width = {n: 3 + 2 * (n <= 64) for n in widths}          # dense, csr, cuSPARSE (+ bitmap, tiled)
    timed = len(dtypes) * len(shapes) * len(sparsities) * sum(kernels_a_width.values())
    timed += len(dtypes) * len(shapes) * len(widths) * (0.5 in sparsities)        # cuSPARSELt
    sparse_flops = len(dtypes) * sum(2 * kept * n for n in widths) * 2              # csr and cuSPARSE
    parts = {
        "pruning": len(sparsities) * weights * PRUNE_S_PER_WEIGHT + (0.5 in sparsities) * weights * PRUNE24_S_PER_WEIGHT,
        "formats": sum(len(sparsities) * weights * CAST_S_PER_WEIGHT + kept * FORMAT_S_PER_KEPT[d] for d in dtypes),
        "timing": timed * POINT_OVERHEAD_S + (REPEAT + 3) * sparse_flops / SPARSE_FLOPS,
        "compilation": len(dtypes) * (3 * len(small) + len(widths) - len(small) + 2) * COMPILE_S,
        "start": STARTUP_S,
    }
    parts["total"] = sum(parts.values())
    return parts


class Budget:
    """The seconds a run may take from its start (``clock``: seconds)."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic):
        self.seconds, self.clock = seconds, clock
        self.start = clock()

    def elapsed(self) -> float:
        return self.clock() - self.start


def sweep(plan, widths, budget: Budget, build, bench) -> tuple[list[dict], bool]:
    """The records of ``bench(layer, n)`` for ``layer = build(*item)``, each item of ``plan`` in turn and each N of
    ``widths``, until ``budget`` is spent; a build or bench that raises prints FAIL and the sweep goes on.
    Returns the records and whether the budget stopped the sweep."""
    records = []
    for item in plan:
        for n in [None] + list(widths):
            elapsed = budget.elapsed()
            if elapsed >= budget.seconds:
                log(f"# budget of {budget.seconds:.0f} s spent at {elapsed:.0f} s: stopped before "
                    f"{item}" + ("" if n is None else f" N={n}") + f" ({len(records)} records kept)")
                return records, True
            if n is None:
                layer = point(f"format {item}", lambda: build(*item))
                if layer is None:
                    break
            else:
                records.extend(point(f"{item} N={n}", lambda: bench(layer, n)) or [])
    return records, False


def make_record(m, k, dname, sparsity, n, kernel, *, status="ok", reason="", times=None, dense_us=None,
                nbytes=None, err=None, note="", bandwidth=float("nan")) -> dict:
    """One point: ``times`` (median, p10, p90 microseconds), ``nbytes`` of the weight in the kernel's format,
    ``err`` (largest error, within bound) of a sparse kernel; speedup and bandwidth share follow from them."""
    us = times[0] if times else None
    return dict(shape=f"{m}x{k}", m=m, k=k, dtype=dname, sparsity=sparsity, n=n, kernel=kernel, status=status,
                reason=reason, us=us, p10_us=times[1] if times else None, p90_us=times[2] if times else None,
                speedup=dense_us / us if us and dense_us else None, bytes=nbytes,
                bytes_vs_dense=nbytes / (2 * m * k) if nbytes else None,
                pct_bandwidth=100 * nbytes / (us * 1e-6) / bandwidth if us and nbytes and bandwidth > 0 else None,
                max_err=err[0] if err else None, correct=err[1] if err else None, note=note)


def line(records) -> str:
    """The printed line of one (shape, dtype, sparsity, N): each kernel's time, speedup, bandwidth share, check."""
    r0 = records[0]
    parts = []
    for r in sorted(records, key=lambda r: KERNELS.index(r["kernel"])):
        name = SHORT[r["kernel"]]
        if r["status"] != "ok":
            parts.append(f"{name} {r['status']}")
            continue
        text = f"{name} {r['us']:.1f}"
        if r["kernel"] != DENSE:
            text += f" {r['speedup']:.2f}x" if r["speedup"] else " ?x"
            text += f" {r['pct_bandwidth']:.0f}%bw" if r["pct_bandwidth"] is not None else ""
            text += {True: " ok", False: " BAD", None: ""}[r["correct"]]
        parts.append(text)
    return f"{r0['shape']} {r0['dtype']} {r0['sparsity']:.0%} N={r0['n']:4d}: " + " | ".join(parts)


def summarize(records) -> list[dict]:
    """Per (shape, dtype, sparsity, N): the fastest correct kernel of ours, its speedup over dense, and its time
    against cuSPARSE CSR's and cuSPARSELt's (a ratio > 1: ours faster)."""
    points: dict = {}
    for r in records:
        points.setdefault((r["shape"], r["dtype"], r["sparsity"], r["n"]), []).append(r)
    rows = []
    for (shp, dname, sp, n), recs in points.items():
        ok = {r["kernel"]: r for r in recs if r["status"] == "ok" and r["us"]}
        ours = [ok[k] for k in OURS if k in ok and ok[k]["correct"]]
        best = min(ours, key=lambda r: r["us"]) if ours else None
        row = dict(shape=shp, dtype=dname, sparsity=sp, n=n, best_ours=best["kernel"] if best else None,
                   best_us=best["us"] if best else None, speedup_vs_dense=best["speedup"] if best else None)
        for name, key in ((CUSPARSE, "vs_cusparse"), (CUSPARSELT, "vs_cusparselt")):
            row[key] = ok[name]["us"] / best["us"] if best and name in ok else None
        rows.append(row)
    return rows


def plot(records, path: Path) -> str:
    """Speedup over dense against sparsity, a panel per shape (a row of panels per dtype): the best of ours (each
    point named by its kernel) and cuSPARSE CSR, lines, and cuSPARSELt 2:4, a marker at 50 %, at N = 8 and 32
    (the two smallest N run where those are not); ``y = 1`` (dense) drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    shapes = sorted({(r["m"], r["k"]) for r in records})
    dtypes = sorted({r["dtype"] for r in records})
    present = sorted({r["n"] for r in records})
    widths = [n for n in PLOT_WIDTHS if n in present] or present[:2]
    best = summarize(records)
    fig, axes = plt.subplots(len(dtypes), len(shapes), figsize=(4.2 * len(shapes), 3.4 * len(dtypes)),
                             squeeze=False)
    for row, dname in zip(axes, dtypes):
        for ax, (m, k) in zip(row, shapes):
            shp = f"{m}x{k}"
            for color, n in zip(("C0", "C3", "C2", "C1"), widths):
                ours = sorted((b["sparsity"], b["speedup_vs_dense"], SHORT[b["best_ours"]]) for b in best
                              if b["shape"] == shp and b["dtype"] == dname and b["n"] == n and b["speedup_vs_dense"])
                if ours:
                    ax.plot([o[0] for o in ours], [o[1] for o in ours], "-o", color=color, label=f"best of ours N={n}")
                    for s, speedup, kernel in ours:               # which of ours it is
                        ax.annotate(kernel, (s, speedup), textcoords="offset points", xytext=(3, 4), fontsize=6,
                                    color=color)
                for kernel, style in ((CUSPARSE, "--s"), (CUSPARSELT, "*")):
                    pts = sorted((r["sparsity"], r["speedup"]) for r in records
                                 if r["shape"] == shp and r["dtype"] == dname and r["n"] == n
                                 and r["kernel"] == kernel and r["speedup"] and r["correct"] is not False)
                    if pts:
                        ax.plot(*zip(*pts), style, color=color, ms=9 if kernel == CUSPARSELT else 5,
                                label=f"{kernel} N={n}")
            ax.axhline(1.0, color="black", lw=0.8)
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(FormatStrFormatter("%gx"))
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.set_title(f"{shp} {dname}", fontsize=9)
            ax.set_xlabel("sparsity")
        row[0].set_ylabel("speedup over dense cuBLAS")
    axes[0][0].legend(fontsize=6)
    return save_figure(fig, path)


#: The fields that name a point of the sweep (``--merge``).
RECORD_KEY = ("shape", "dtype", "sparsity", "n", "kernel")


def merged(old: dict, records: list[dict], facts: dict) -> tuple[list[dict], dict]:
    """``records`` merged into ``old`` (an earlier record as :func:`sparsekit.experiment.read_record` gives it: its
    points measured again replaced, the others kept) and the facts to write with them: this run's, after the
    earlier record's, its ``command`` the list of every command, the earlier ones first."""
    earlier = old.get("command") or []
    facts = {**{k: v for k, v in old.items() if k not in ("records", "summary")}, **facts,
             "command": (earlier if isinstance(earlier, list) else [earlier]) + [facts["command"]]}
    return merge_records(old["records"], records, RECORD_KEY), facts


def write(records, out: Path, **facts) -> list[Path]:
    """``out/spmm_unstructured.json`` (``facts``, every record, the summary) and ``out/spmm_unstructured.png``
    (no plot without a timed sparse point)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "spmm_unstructured.json"
    path.write_text(json.dumps(dict(facts, records=records, summary=summarize(records)), indent=1))
    written = [path]
    if any(r["kernel"] != DENSE and r["speedup"] for r in records):
        written.append(out / plot(records, out / "spmm_unstructured.png"))
    return written


# ---------------------------------------------------------------------------------------------------------------
# On the GPU
# ---------------------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def weight(m: int, k: int) -> np.ndarray:
    """The seeded standard-normal float32 ``M x K`` weight (one a shape: the plan runs shape by shape)."""
    return np.random.default_rng([m, k]).standard_normal((m, k), dtype=np.float32)


@functools.lru_cache(maxsize=1)
def magnitude_mask(m: int, k: int, sparsity: float) -> np.ndarray:
    """:func:`weight` pruned by magnitude (both dtypes keep the same entries)."""
    return magnitude(weight(m, k), sparsity)


@functools.lru_cache(maxsize=1)
def mask_24(m: int, k: int) -> np.ndarray:
    """:func:`weight` pruned 2:4 by magnitude along its rows (K)."""
    return n_m(weight(m, k), 2, 4)


class Kernel(NamedTuple):
    """How to run one kernel on a layer: ``run(x, xt)`` (``linear``: it returns ``Y``, else ``Y^T``), the widest N
    it takes, and, for an N, a note on what runs and the weight's bytes it reads; ``weight32``: the float32
    weight it multiplies, where not the layer's pruned one."""

    run: Callable
    linear: bool
    max_n: int | None
    describe: Callable[[int], tuple[str, int]]
    weight32: object = None


class Refused(Exception):
    """PyTorch does not offer a baseline for this dtype or shape (the point reads ``n/a``)."""


def refusal(err: Exception) -> bool:
    """Whether ``err`` is PyTorch refusing an operation (a dtype or layout it does not implement)."""
    text = str(err).lower()
    return isinstance(err, NotImplementedError) or any(
        s in text for s in ("not implemented", "not supported", "unsupported", "only supports"))


@dataclass
class Layer:
    """One pruned weight in every format, built once and reused across N."""

    m: int
    k: int
    sparsity: float
    dname: str
    wp: object                     # the pruned weight, torch, the dtype
    wp32: object                   # its float32 copy
    kernels: dict = field(default_factory=dict)
    refused: dict = field(default_factory=dict)
    failed: dict = field(default_factory=dict)

    def add(self, name: str, make: Callable[[], Kernel]) -> None:
        """``make()``'s kernel; where it raises, the reason (``n/a`` where PyTorch refuses, else FAIL)."""
        try:
            self.kernels[name] = make()
        except Refused as err:
            self.refused[name] = str(err)
            log(f"# n/a {name} {self.m}x{self.k} {self.dname}: {err}")
        except Exception as err:       # a failed format is reported at every N, the run goes on
            self.failed[name] = f"format: {type(err).__name__}: {str(err)[:300]}"
            log(f"FAIL format {name} {self.m}x{self.k} {self.dname} {self.sparsity:.0%}: {self.failed[name]}")


def build(m: int, k: int, sparsity: float, dname: str, *, widths) -> Layer:
    """The weight pruned at ``sparsity`` in ``dname`` and in each kernel's format, on the device."""
    import torch
    import torch.nn.functional as F

    from sparsekit.formats import CSR
    from sparsekit.gpu import spmm as gs
    from sparsekit.gpu import spmm_bitmap as gb
    from sparsekit.gpu import spmm_tiled as gt

    t0 = time.perf_counter()
    ndt, tdt = DTYPES[dname], getattr(torch, dname)
    mask = magnitude_mask(m, k, sparsity)
    t_prune = time.perf_counter() - t0
    dense = weight(m, k).astype(ndt)
    bits = dense.view(np.uint16)
    wp = torch.from_numpy(np.where(mask, bits, np.uint16(0)).view(np.int16)).cuda().view(tdt)
    layer = Layer(m, k, sparsity, dname, wp, wp.float())

    @functools.cache
    def sparse():
        """The pruned weight as a prepared CSR, once: ``csr`` runs it and ``bitmap`` its TiledBitmap (the one
        ``spmm_csr``'s bitmap route builds), so each format is built once a point."""
        return gs.prepare(CSR.from_dense(dense, mask), CSR)

    def bitmap():
        dev = sparse().bitmap()
        return Kernel(lambda x, xt: gb.spmm_bitmap_linear(dev, x), True, gb.MAX_N,
                      lambda n: ("", dev.host.nbytes().total))

    def tiles():
        dev = on_device(tiled(bits, mask, (64, 64), ndt))
        return Kernel(lambda x, xt: gt.spmm_tiled_linear(dev, x), True, gt.MAX_N,
                      lambda n: ("", dev.host.nbytes().total))

    def csr():
        dev = sparse()
        routes = {gs.auto_route(dev, n) for n in widths}
        if "rows" in routes:
            dev.tiled_rows()                  # the half-precision routes' formats, built here rather than in a point
        if "bitmap" in routes:
            dev.bitmap()
        if "ell" in routes:
            dev.padded_ell()

        def describe(n):
            route = gs.auto_route(dev, n)
            if route == "rows":
                return "TiledCSL rows (spmm_tiled row kernel)", dev.tiled_rows().host.nbytes().total
            if route == "bitmap":
                return "TiledBitmap (spmm_bitmap)", dev.bitmap().host.nbytes().total
            if route == "ell":
                return "rows padded to ELL (uspmm auto)", dev.padded_ell().host.nbytes().total
            return f"staged CSR {gs.staged_tunables(dev, n)}", dev.host.nbytes().total

        return Kernel(lambda x, xt: gs.spmm_csr(dev, xt), False, None, describe)

    def cusparse():
        wcsr = wp.to_sparse_csr()
        try:
            torch.sparse.mm(wcsr, torch.zeros(k, 8, device="cuda", dtype=tdt))
            torch.cuda.synchronize()
        except Exception as err:
            if refusal(err):
                raise Refused(f"{type(err).__name__}: {str(err).splitlines()[0][:200]}") from err
            raise
        nbytes = sum(t.numel() * t.element_size() for t in (wcsr.values(), wcsr.col_indices(), wcsr.crow_indices()))
        return Kernel(lambda x, xt: torch.sparse.mm(wcsr, xt), False, None,
                      lambda n: (f"torch {torch.__version__}", nbytes))

    def cusparselt():
        from torch.sparse import to_sparse_semi_structured

        w24 = torch.from_numpy(np.where(mask_24(m, k), bits, np.uint16(0)).view(np.int16)).cuda().view(tdt)
        try:
            ws = to_sparse_semi_structured(w24)
        except Exception as err:
            if refusal(err):
                raise Refused(f"{type(err).__name__}: {str(err).splitlines()[0][:200]}") from err
            raise
        nbytes = sum(t.numel() * t.element_size() for t in (ws.packed, ws.meta) if t is not None)
        return Kernel(lambda x, xt: F.linear(x, ws), True, None, lambda n: (type(ws).__name__, nbytes),
                      weight32=w24.float())

    for name, make in ((BITMAP, bitmap), (TILED, tiles), (CSR_AUTO, csr), (CUSPARSE, cusparse)):
        layer.add(name, make)
    if sparsity == 0.5:
        layer.add(CUSPARSELT, cusparselt)
    torch.cuda.synchronize()
    log(f"# {m}x{k} {dname} {sparsity:.0%}: pruned in {t_prune:.1f} s, formatted in "
        f"{time.perf_counter() - t0 - t_prune:.1f} s; nnz {int(mask.sum())}")
    return layer


def bench(layer: Layer, n: int, *, bandwidth: float) -> list[dict]:
    """The records of every kernel on ``layer`` at width ``n`` (dense first: the speedups' base), and its line."""
    import torch
    import torch.nn.functional as F

    m, k, dname, sp = layer.m, layer.k, layer.dname, layer.sparsity
    gen = torch.Generator(device="cuda").manual_seed(n)
    x = torch.randn(n, k, device="cuda", dtype=getattr(torch, dname), generator=gen)
    xt = x.t().contiguous()
    x32 = x.float()
    rec = functools.partial(make_record, m, k, dname, sp, n, bandwidth=bandwidth)
    dense = point(f"dense {m}x{k} N={n}", lambda: measured_us(lambda: F.linear(x, layer.wp)))
    dense_us = dense[0] if dense else None
    records = [rec(DENSE, times=dense, dense_us=dense_us, nbytes=2 * m * k) if dense
               else rec(DENSE, status="FAIL", reason="timing")]
    checks = {}
    for name, kern in layer.kernels.items():
        if kern.max_n is not None and n > kern.max_n:
            continue
        w32 = layer.wp32 if kern.weight32 is None else kern.weight32
        if id(w32) not in checks:
            checks[id(w32)] = error_bound(x32, w32, dname)
        ref, bound = checks[id(w32)]
        result = (lambda y: y) if kern.linear else (lambda y: y.t())
        err = point(f"{name} run", lambda: error(result(kern.run(x, xt)), ref, bound))
        times = point(f"{name} {m}x{k} {sp} N={n}", lambda: measured_us(lambda: kern.run(x, xt)))
        note, nbytes = kern.describe(n)
        if times is None or err is None:
            records.append(rec(name, status="FAIL", reason="run" if err is None else "timing", note=note))
        else:
            records.append(rec(name, times=times, dense_us=dense_us, nbytes=nbytes, err=err, note=note))
    for name, reason in layer.refused.items():
        records.append(rec(name, status="n/a", reason=reason))
    for name, reason in layer.failed.items():
        records.append(rec(name, status="FAIL", reason=reason))
    log(line(records))
    return records


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", type=matrix_shape, default=SHAPES, help="weights MxK")
    ap.add_argument("--sparsities", nargs="+", type=float, default=SPARSITIES)
    ap.add_argument("--widths", nargs="+", type=int, default=NS, help="N (rows of X)")
    ap.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), default=DTYPE_NAMES)
    ap.add_argument("--budget-s", type=float, default=BUDGET_S,
                    help="stop between points once this many seconds have passed (what was measured is written)")
    ap.add_argument("--out", type=Path, default=OUT, help="folder of spmm_unstructured.json and .png")
    ap.add_argument("--merge", type=record_file, default=None, metavar="JSON",
                    help="an earlier spmm_unstructured.json: write it with this run's points replacing its own (the "
                         "others and its commands kept)")
    args = ap.parse_args(argv)
    if args.merge is not None:
        try:
            args.merge = read_record(args.merge, RECORD_KEY, "spmm_unstructured")
        except ValueError as err:
            ap.error(f"--merge {err}")
    for s in args.sparsities:
        if not 0 <= s < 1:
            ap.error(f"--sparsities: each must lie in [0, 1), got {s}")
    for n in args.widths:
        if n < 1:
            ap.error(f"--widths: each N must be at least 1, got {n}")
    return args


def measure_sweep(shapes, sparsities, widths, dtypes, budget_s: float, out: Path, command: str,
                  merge: dict | None = None):
    """The sweep on the GPU: every point of ``shapes x sparsities x dtypes`` at ``widths`` until ``budget_s``, its
    records written to ``out`` (:func:`write`), merged into ``merge`` (an earlier record as
    :func:`sparsekit.experiment.read_record` gives it) where given; returns ``(records, stopped, written)``."""
    budget = Budget(budget_s)
    est = estimate_s(shapes, sparsities, widths, dtypes)
    log(f"# estimated {est['total']:.0f} s on an H200 (" + ", ".join(f"{k} {v:.0f} s" for k, v in est.items()
                                                              if k != "total") + f"); budget {budget.seconds:.0f} s")
    import torch

    from sparsekit.timing import measured_bandwidth

    torch.set_float32_matmul_precision("highest")       # the float32 reference without TF32
    bw = point("copy bandwidth", measured_bandwidth) or float("nan")
    log(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; copy bandwidth {bw / 1e12:.2f} TB/s; "
        f"times in us (median of {REPEAT}, L2 flushed); Nx = dense / kernel; %bw = weight bytes / time / copy "
        f"bandwidth; ok = within the float32 bound")
    plan = [(m, k, s, d) for m, k in shapes for s in sparsities for d in dtypes]
    records, stopped = sweep(plan, widths, budget, functools.partial(build, widths=widths),
                             functools.partial(bench, bandwidth=bw))
    facts = dict(command=command, device=torch.cuda.get_device_name(), torch=torch.__version__, bandwidth=bw,
                 estimate_s=est, elapsed_s=budget.elapsed(), stopped_by_budget=stopped)
    kept, facts = merged(merge, records, facts) if merge is not None else (records, facts)
    written = write(kept, out, **facts)
    bad = [r for r in records if r["status"] == "FAIL" or r["correct"] is False]
    log("# best of ours a point (speedup over dense; ours against cuSPARSE CSR and cuSPARSELt):")
    for row in summarize(records):
        vs = lambda v: f"{v:.2f}x" if v else "-"
        log(f"  {row['shape']} {row['dtype']} {row['sparsity']:.0%} N={row['n']:4d}: {row['best_ours']} "
            f"{vs(row['speedup_vs_dense'])}; vs cuSPARSE {vs(row['vs_cusparse'])}; vs 2:4 {vs(row['vs_cusparselt'])}")
    log(f"# {len(records)} records, {len(bad)} failed or out of bound; "
        f"{'stopped by the budget; ' if stopped else ''}wrote " + ", ".join(map(str, written))
        + f"; done at {budget.elapsed():.0f} s")
    return records, stopped, written


def main(argv=None) -> int:
    args = parse(argv)
    measure_sweep(args.shapes, args.sparsities, args.widths, args.dtypes, args.budget_s, args.out,
                  "python -m experiments.bench_spmm_unstructured " + " ".join(sys.argv[1:] if argv is None else argv),
                  merge=args.merge)
    return 0


# ---------------------------------------------------------------------------------------------------------------
# sparsekit reproduce
# ---------------------------------------------------------------------------------------------------------------

#: The simulator's toy weight (M, K): K cuts a 32-column group, M a 16-row block.
TOY = (40, 150)
#: ``reproduce --quick`` on a GPU: one shape, the ends of the sparsity range, a decode and a wider N, bfloat16.
QUICK = dict(shapes=[(4096, 4096)], sparsities=[0.5, 0.9], widths=[8, 32], dtypes=["bfloat16"])


def check_toy(seed: int = 0) -> list[dict]:
    """On the simulator: ``spmm_csr``'s default route and the bitmap kernel on a magnitude-pruned toy weight
    (50 and 90 %, both dtypes, N = 8 and 24) against the float32 product of the same 16-bit operands, within the
    tests' bound; the TiledBitmap's bytes against dense."""
    from sparsekit.formats import CSR
    from sparsekit.gpu import spmm as gs
    from sparsekit.gpu import spmm_bitmap as gb

    m, k = TOY
    out = []
    for dname in DTYPE_NAMES:
        ndt = DTYPES[dname]
        for sparsity in (0.5, 0.9):
            mask = magnitude(weight(m, k), sparsity)
            dense = np.where(mask, weight(m, k), 0).astype(ndt)
            csr = gs.prepare(CSR.from_dense(dense, mask), CSR)
            bitmap = gb.prepare(TiledBitmap.from_csr(csr.host))
            for n in (8, 24):
                b = np.random.default_rng(seed + n).standard_normal((k, n)).astype(ndt)
                ref, bound = error_bound(b.T.astype(np.float32), dense.astype(np.float32), dname)
                for kernel, run in ((f"csr auto ({gs.auto_route(csr, n)})", lambda: gs.spmm_csr(csr, b)),
                                    ("bitmap", lambda: gb.spmm_bitmap(bitmap, b))):
                    err = np.abs(np.asarray(run()).astype(np.float32).T - ref)
                    out.append(dict(shape=f"{m}x{k}", dtype=dname, sparsity=sparsity, n=n, kernel=kernel,
                                    bitmap_bytes_vs_dense=round(bitmap.host.nbytes().total / (2 * m * k), 3),
                                    max_abs_error=float(err.max()), correct=bool((err <= bound).all())))
    return out


def run(ctx: Context) -> Section:
    if not ctx.on_gpu:
        return Section("Unstructured half-precision SpMM (toy check on the simulator)",
                       text="`spmm_csr`'s default route and the TiledBitmap kernel against the float32 product at "
                            "a toy shape; timings need a GPU.", tables=[Table("Toy check", check_toy(ctx.seed))])
    sizes = QUICK if ctx.quick else dict(shapes=SHAPES, sparsities=SPARSITIES, widths=NS, dtypes=DTYPE_NAMES)
    records, stopped, written = measure_sweep(**sizes, budget_s=BUDGET_S, out=ctx.out_dir,
                                              command="sparsekit reproduce --only spmm_unstructured"
                                                      + (" --quick" if ctx.quick else ""))
    text = ("Magnitude-pruned weights at Llama layer shapes: the fastest of ours against dense cuBLAS, cuSPARSE "
            "CSR and cuSPARSELt 2:4" + (" (stopped by its budget)." if stopped else "."))
    return Section("Unstructured half-precision SpMM against dense, cuSPARSE and cuSPARSELt", text=text,
                   tables=[Table("Best of ours a point", summarize(records))],
                   figures=[Path(w).name for w in written if str(w).endswith(".png")])


if __name__ == "__main__":
    sys.exit(main())


EXPERIMENT = Experiment("spmm_unstructured", "Unstructured magnitude-pruned half-precision SpMM at LLM layer shapes",
                        "spmm-course-slides.txt", run)
