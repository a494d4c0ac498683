"""GPU benchmark and multi-block checks of the sparse persistent RNN (sparsekit/gpu/persistent_rnn.py).

Not an experiment module (no EXPERIMENT): run it as a script on a GPU::

    python -m experiments.bench_persistent_rnn --out DIR [--parts check,time,sweep]
    python -m experiments.bench_persistent_rnn --sanitize [--sanitize-only OPTION]   # for compute-sanitizer

Parts (each prints a table and writes ``DIR/persistent_rnn_<part>.json``):

``check``  multi-block correctness against reference.persistent_rnn at several
           layer sizes and both dtypes for the four Table 1 configurations;
           repeated runs bitwise identical; a Lamport run with ``spin_limit=1``
           (forces spin timeouts, so the relaunch path must finish the job);
           a planted non-co-resident launch and a layer too large for shared
           memory refused before launch.
``time``   Table 1 at layers 1152 and 1792 (density 10%, batch 4, 256 steps,
           float16): us/step of naive / wide / bank-aware / Lamport for
           tpr in {8, 16, 32}, against torch.nn.RNN (cuDNN), a dense GEMM loop
           (cuBLAS through PyTorch, plain and captured in a CUDA graph),
           cuSPARSE CSR per step, and our kernel on the dense weight.
``sweep``  Figure 2 analog around layer 1792 (density, layer size, batch,
           timesteps) and the timed points of Figures 3-4 (the largest layer
           on chip per density, Lamport and grid barrier): ours against the
           graph-captured GEMM loop, cuDNN and cuSPARSE, with the speedup over
           the next-best; points in parallel processes.
``ablate`` Table 1's rows with the ablation options, the candidates for the
           1.5 us/step target at 1792, and the no-wait ablation.
``rest``   the sweep points that ``experiments/results/persistent_rnn_h100.json``
           does not hold.
``launch_bounds`` ``rest`` and Table 1's rows at 1152 and 1792 with launch bounds
           (``bound_registers``) on and off, the wide rows also with and
           without 16-byte loads of h (``vector``), in one process pool.
``exchange`` Table 1's rows, ``fold_h0`` and the exchange options (the 16-byte preset, weak L2 loads,
           the issue-first poll) at 1792 and 1152, traced, without waiting, and the steps points.
``ds2``    Appendix B's Deep Speech 2 LSTM layers (batch 1) with the shuffle
           reduction, chunked loads and launch bounds.
``lstm``   Appendix B (Tables 2-3): the persistent LSTM at the NMT and Deep
           Speech 2 layer sizes and densities, checked against the reference,
           against cuDNN LSTM and the graph-captured GEMM loop.
``explore`` candidate fixes side by side at layers 1792 and 1152, some traced
           (per-stage clock64 stamps: where a step's time goes); compiles in
           parallel processes, GPU work serialised by a lock.
``final``  Table 1 rows as first built (cg grid sync, ld.volatile) and as tuned
           (inline grid barrier, ld.relaxed.gpu), traced breakdowns, layers
           past 48 KB of shared memory, then the baselines; one process.
``capacity`` (no GPU) the Figures 3-4 analog: the largest layer on chip per
           density for Lamport and the grid barrier, from sm_90 register
           counts and the H100's occupancy rules.

``--ncu`` runs each Table 1 configuration once at layer 1152 for Nsight
Compute's shared-memory bank-conflict counters.

Device time comes from ``sparsekit.timing.measure`` (events behind a spin
kernel, median of repeats), L2 not flushed: the point of a persistent kernel
is that its weights stay on chip across steps.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone
from functools import lru_cache

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sparsekit.gpu import persistent_rnn as gpu_rnn  # noqa: E402
from sparsekit.reference import persistent_rnn as ref_rnn  # noqa: E402
from sparsekit import prune  # noqa: E402
from sparsekit.rnn_layout import balance, bank_aware  # noqa: E402

#: Table 1's rows: name -> (scheme, sync, bank-aware layout)
CONFIGS = {
    "naive": ("naive", "barrier", False),
    "wide": ("wide", "barrier", False),
    "bank_aware": ("wide", "barrier", True),
    "lamport": ("wide", "lamport", True),
}
#: Options of the Table 1 rows in the timing table: the inline grid barrier and ld.relaxed.gpu (faster for every row
#: than cooperative groups' grid sync and ld.volatile: ``results/persistent_rnn_h100.json``, ``run2.final``); the
#: wide-load barrier rows also move h in 16-byte groups (4.30 -> 2.45 us/step at 1792; Lamport keeps scalar loads,
#: 1.62 -> 2.14 with them); naive and wide without launch bounds, the faster choice at both 1152 and 1792
#: (results/persistent_rnn.md, Launch bounds; record ``sweeps.run3.bounds``); Lamport: h0 written by the kernel,
#: the 16-byte preset, all loads of h issued at once after a 300-cycle spin (results/persistent_rnn.md, Table 1 and
#: What the step is made of: 1.375 / 1.362 us/step at 1792 / 1152); ``LAMPORT_PREVIOUS``: the Lamport row before
#: the issue-first poll, which the exchange options are timed beside
LAMPORT_PREVIOUS = {"load": "relaxed"}
TABLE1_OPTIONS = {"naive": {"grid_sync": "atomic", "load": "relaxed", "bound_registers": False},
                  "wide": {"grid_sync": "atomic", "load": "relaxed", "vector": True, "bound_registers": False},
                  "bank_aware": {"grid_sync": "atomic", "load": "relaxed", "vector": True},
                  "lamport": {"load": "relaxed", "fold_h0": True, "preset": "vector", "poll": "issue",
                              "issue_delay": 300}}
#: The paper's Table 1 (V100): speedup over dense GEMM and bank-conflict penalty.
PAPER_TABLE1 = {"naive": (2.53, 1.3), "wide": (4.28, 1.0), "bank_aware": (4.56, 0.3), "lamport": (5.44, 0.3)}


def problem(hidden: int, density: float, batch: int, steps: int, dtype, seed: int = 0):
    """Row-balanced pruned U (rows' |U| sums <= 1/2), b' and h0 in [-1, 1]."""
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((hidden, hidden)).astype(np.float32)
    mask = prune.row_balanced(u, 1.0 - density) if density < 1 else np.ones_like(u, dtype=bool)
    u = np.where(mask, u, 0)
    u = (u / (2 * np.abs(u).sum(axis=1).max())).astype(dtype)
    bp = rng.uniform(-1, 1, (steps, batch, hidden)).astype(dtype)
    h0 = rng.uniform(-1, 1, (batch, hidden)).astype(dtype)
    return u, mask, bp, h0


def layout_for(u, mask, tpr: int, aware: bool):
    lay = balance(u, mask, tpr=tpr)
    return bank_aware(lay, width=4 * u.dtype.itemsize) if aware else lay


def plan_for(u, mask, config: str, tpr: int, batch: int = 4, **kw):
    """Table 1 configuration ``config`` with options ``kw``."""
    scheme, sync, aware = CONFIGS[config]
    return gpu_rnn.PersistentRNN(layout_for(u, mask, tpr, aware), batch, scheme=scheme, sync=sync, **kw)


def _save(out, name, records):
    if out:
        with open(os.path.join(out, f"persistent_rnn_{name}.json"), "w") as f:
            json.dump(records, f, indent=1, default=str)


def _table(records, keys):
    print(" | ".join(keys))
    for r in records:
        print(" | ".join(f"{r.get(k):.4g}" if isinstance(r.get(k), float) else str(r.get(k)) for k in keys))
    sys.stdout.flush()


# -- check ---------------------------------------------------------------------

def check(out=None, sizes=((256, "float32"), (1152, "float32"), (1152, "float16"), (1792, "float16"),
                           (2304, "float16"), (3000, "float16")), steps=64, tpr=8, extras=True):
    records = []
    for hidden, dt in sizes:
        u, mask, bp, h0 = problem(hidden, 0.1, 4, steps, np.dtype(dt), seed=hidden)
        want = ref_rnn.rnn_forward(u, bp, h0, steps)
        for config in CONFIGS:
            rec = {"hidden": hidden, "dtype": dt, "config": config}
            try:
                plan = plan_for(u, mask, config, tpr)
                a = plan(bp, h0, steps)
                b = plan(bp, h0, steps)
                err = float(np.abs(a.astype(np.float64) - want).max())
                tol = ref_rnn.tolerance(u.dtype, plan.layout.kpad)
                rec.update(blocks=plan.split.blocks, threads=plan.split.threads_per_block, max_err=err, tol=tol,
                           correct=bool(err <= tol), identical=bool(np.array_equal(a.view(np.uint16 if dt == "float16" else np.uint32),
                                                                                   b.view(np.uint16 if dt == "float16" else np.uint32))))
            except Exception as e:  # record, keep going: the table shows what failed
                rec.update(error=f"{type(e).__name__}: {e}"[:300], correct=False)
            records.append(rec)
    _table(records, ["hidden", "dtype", "config", "blocks", "threads", "max_err", "tol", "correct", "identical", "error"])

    extra = []
    if not extras:
        return records, extra
    # forced spin timeouts: every relaunch must resume where the last one stopped
    u, mask, bp, h0 = problem(1152, 0.1, 4, 16, np.float16, seed=1)
    want = ref_rnn.rnn_forward(u, bp, h0, 16)
    try:
        plan = plan_for(u, mask, "lamport", 8, spin_limit=1, max_relaunch=64)
        got = plan(bp, h0, 16)
        err = float(np.abs(got.astype(np.float64) - want).max())
        extra.append({"check": "lamport spin_limit=1 relaunch", "relaunches": plan.relaunches, "max_err": err,
                      "ok": bool(err <= ref_rnn.tolerance(u.dtype, plan.layout.kpad))})
    except Exception as e:
        extra.append({"check": "lamport spin_limit=1 relaunch", "ok": False, "error": f"{type(e).__name__}: {e}"[:300]})
    # planted non-co-resident launch: 4096 blocks of 32 threads with 33 KB shared each
    u, mask, bp, h0 = problem(4096, 0.01, 4, 2, np.float16, seed=2)
    for config in ("bank_aware", "lamport"):
        try:
            plan = plan_for(u, mask, config, 32, rows_per_block=1)
            plan(bp, h0, 2)
            extra.append({"check": f"non-co-resident refused ({config})", "ok": False, "error": "launched"})
        except ValueError as e:
            extra.append({"check": f"non-co-resident refused ({config})", "ok": "co-resident" in str(e),
                          "error": str(e)[:300]})
    # a layer too large for shared memory
    u, mask, bp, h0 = problem(6144, 0.01, 4, 2, np.float16, seed=3)
    try:
        plan_for(u, mask, "lamport", 32)
        extra.append({"check": "too large refused", "ok": False, "error": "accepted"})
    except ValueError as e:
        extra.append({"check": "too large refused", "ok": "largest that fits" in str(e), "error": str(e)[:300]})
    _table(extra, ["check", "ok", "relaunches", "max_err", "error"])
    _save(out, "check", {"kernels": records, "extra": extra})
    return records, extra


#: every kernel variant the sanitizers see (float16; float32: Table 1's four): Table 1's four, the ablation options
SANITIZE_VARIANTS = [(c, {}) for c in CONFIGS] + [
    ("naive", {"grid_sync": "atomic", "load": "relaxed"}),
    ("bank_aware", {"grid_sync": "atomic", "load": "relaxed", "index16": True, "chunk": 2}),
    ("lamport", {"load": "relaxed", "index16": True}),
    ("lamport", {"load": "relaxed", "index16": True, "chunk": 2}),
    ("lamport", {"double_buffer": True, "poll": "lead"}),
    ("lamport", {"load": "relaxed", "reduce": "shfl"}),
    ("lamport", {"load": "relaxed", "reduce": "shfl", "double_buffer": True}),
    ("lamport", {"load": "relaxed", "reduce": "shfl", "pipeline": True}),
    ("lamport", {"load": "relaxed", "reduce": "shfl", "chunk": 2}),
    ("bank_aware", {"grid_sync": "atomic", "load": "relaxed", "reduce": "shfl"}),
    ("naive", {"grid_sync": "cg", "reduce": "shfl"}),
    ("lamport", {"load": "relaxed", "vector": True}),
    ("lamport", {"load": "relaxed", "vector": True, "reduce": "shfl", "pipeline": True}),
    ("bank_aware", {"grid_sync": "atomic", "load": "relaxed", "vector": True}),
    ("lamport", {"load": "cg", "vector": True}),
    ("bank_aware", {"grid_sync": "atomic", "load": "cg"}),
    ("lamport", {"load": "relaxed", "fold_h0": True}),
    ("lamport", {"load": "relaxed", "fold_h0": True, "reduce": "shfl", "double_buffer": True}),
    ("lamport", {"load": "relaxed", "fold_h0": True, "preset": "vector"}),
    ("lamport", {"load": "relaxed", "preset": "vector", "double_buffer": True}),
    ("lamport", {"load": "relaxed", "poll": "issue", "fold_h0": True, "preset": "vector"}),
    ("lamport", {"load": "relaxed", "poll": "issue", "vector": True}),
    ("lamport", {"load": "relaxed", "poll": "issue", "issue_delay": 600, "fold_h0": True}),
    ("lamport", TABLE1_OPTIONS["lamport"]),
]


def sanitize(only=None):
    """Tiny multi-block runs of every configuration (for compute-sanitizer): 25 blocks, 6 steps.

    ``only``: just the float16 variants whose options name one of these options (comma-separated, e.g.
    ``vector`` or ``preset,fold_h0``)."""
    ok = True
    for dt in ("float32", "float16") if only is None else ("float16",):
        u, mask, bp, h0 = problem(200, 0.1, 4, 6, np.dtype(dt), seed=5)
        want = ref_rnn.rnn_forward(u, bp, h0, 6)
        variants = SANITIZE_VARIANTS if dt == "float16" else [(c, {}) for c in CONFIGS]
        for config, kw in [(c, kw) for c, kw in variants if only is None or set(only.split(",")) & set(kw)]:
            plan = plan_for(u, mask, config, 8, rows_per_block=8, **kw)
            got = plan(bp, h0, 6)
            err = float(np.abs(got.astype(np.float64) - want).max())
            good = err <= ref_rnn.tolerance(u.dtype, plan.layout.kpad)
            ok &= good
            print(f"sanitize {dt} {config} {kw}: blocks={plan.grid} max_err={err:.3g} ok={good}")
    print("SANITIZE_RUN", "PASS" if ok else "FAIL")


# -- time ----------------------------------------------------------------------

def _torch_baselines(u, bp, h0, steps, csr=True):
    """us/step of cuDNN RNN, the GEMM loop (plain and CUDA graph), cuSPARSE CSR per step (``csr``)."""
    import torch

    from sparsekit.timing import measure
    from sparsekit.torch.bench import capture_graph
    dev = torch.device("cuda")
    hidden, batch = u.shape[0], h0.shape[0]
    U = torch.tensor(u, device=dev)
    Ut = U.t().contiguous()
    BP = torch.tensor(bp, device=dev)
    H0 = torch.tensor(h0, device=dev)
    res = {}

    try:
        rnn = torch.nn.RNN(hidden, hidden, nonlinearity="tanh").to(dev, dtype=U.dtype)
        x = torch.randn(steps, batch, hidden, device=dev, dtype=U.dtype)
        with torch.no_grad():
            res["cudnn_rnn"] = measure(lambda: rnn(x, H0[None]), repeat=20, warmup=3, flush_l2=False).median_s
    except Exception as e:
        res["cudnn_rnn_error"] = f"{type(e).__name__}: {e}"[:200]

    def loop():
        h = H0
        for t in range(steps):
            h = torch.tanh(torch.addmm(BP[t], h, Ut))
        return h
    res["gemm_loop"] = measure(loop, repeat=10, warmup=2, flush_l2=False).median_s

    try:
        g, out_graph = capture_graph(loop)
        res["gemm_graph"] = measure(g.replay, repeat=20, warmup=3, flush_l2=False).median_s
        ref_last = ref_rnn.rnn_forward(u, bp, h0, steps)[-1]
        g.replay()
        torch.cuda.synchronize()
        res["gemm_graph_max_err"] = float(np.abs(out_graph.float().cpu().numpy() - ref_last).max())
    except Exception as e:
        res["gemm_graph_error"] = f"{type(e).__name__}: {e}"[:200]

    if not csr:
        return res
    try:
        Ucsr = U.to_sparse_csr()
        BPt = BP.transpose(1, 2).contiguous()

        def csr_loop():
            h = H0.t().contiguous()
            for t in range(steps):
                h = torch.tanh(torch.sparse.mm(Ucsr, h) + BPt[t])
            return h
        csr_loop()
        res["cusparse_csr"] = measure(csr_loop, repeat=5, warmup=2, flush_l2=False).median_s
    except Exception as e:
        res["cusparse_csr_error"] = f"{type(e).__name__}: {e}"[:200]
    return res


def time_table(out=None, sizes=(1152, 1792), tprs=(8, 16, 32), steps=256, dtype="float16", extras=True):
    """Table 1: every configuration at every tpr, the baselines, and (``extras``) the Lamport pipeline,
    fatter blocks, cuSPARSE and our kernel on the dense weight; ``extras=False`` is the quick mode's subset."""
    from numba import cuda

    from sparsekit.timing import measure
    records = []
    for hidden in sizes:
        u, mask, bp, h0 = problem(hidden, 0.1, 4, steps, np.dtype(dtype), seed=hidden)
        want = ref_rnn.rnn_forward(u, bp, h0, steps)
        t0 = time.time()
        base = _torch_baselines(u, bp, h0, steps, csr=extras)
        print(f"[baselines took {time.time() - t0:.1f} s]")
        print(f"H={hidden} baselines (us/step):",
              {k: (v * 1e6 / steps if isinstance(v, float) and not k.endswith("err") else v) for k, v in base.items()})
        for name in ("cudnn_rnn", "gemm_loop", "gemm_graph", "cusparse_csr"):
            if name in base:
                records.append({"hidden": hidden, "provider": name, "tpr": "", "us_per_step": base[name] * 1e6 / steps,
                                "correct": base.get(f"{name}_max_err", "") if name == "gemm_graph" else ""})
        d_bp, d_h0 = cuda.to_device(bp), cuda.to_device(h0)
        default16 = -(-hidden // 132)                     # rows per block of one block per SM
        variants = [(c, c, tpr, 0.1, TABLE1_OPTIONS[c]) for c in CONFIGS for tpr in tprs]
        if extras:
            variants += ([("lamport_pipeline", "lamport", 16, 0.1, {"pipeline": True})]
                         + [(f"lamport_rpb{k * default16}", "lamport", 16, 0.1, {"rows_per_block": k * default16})
                            for k in (2, 4)]
                         + [("dense_persistent_ours", "lamport", tpr, 1.0, {}) for tpr in (8, 16)])
        for provider, config, tpr, density, kw in variants:
            t0 = time.time()
            rec = {"hidden": hidden, "provider": provider, "tpr": tpr}
            try:
                if density < 1:
                    plan = plan_for(u, mask, config, tpr, **kw)
                else:
                    ud, md, _, _ = problem(hidden, 1.0, 4, steps, np.dtype(dtype), seed=hidden)
                    plan = plan_for(ud, md, config, tpr, **kw)
                hs = cuda.device_array((steps, 4, hidden), dtype=dtype)
                xchg, status = plan.buffers(steps)
                m = measure(lambda: plan.enqueue(d_bp, d_h0, steps, xchg, hs, status), repeat=20, warmup=3,
                            flush_l2=False)
                timeouts = int(status.copy_to_host()[0])
                rec.update(us_per_step=m.median_s * 1e6 / steps, p10=m.p10_s * 1e6 / steps, p90=m.p90_s * 1e6 / steps,
                           blocks=plan.split.blocks, threads=plan.split.threads_per_block, npt=plan.layout.npt,
                           smem=plan.smem, regs=plan.resources.get("registers"), timeouts=timeouts)
                if density < 1:
                    got = hs.copy_to_host()
                    err = float(np.abs(got.astype(np.float64) - want).max())
                    rec["correct"] = bool(err <= ref_rnn.tolerance(u.dtype, plan.layout.kpad)) and timeouts == 0
            except Exception as e:
                rec.update(error=f"{type(e).__name__}: {e}"[:300])
            rec["wall_s"] = time.time() - t0
            records.append(rec)
            _table([rec], list(rec))
            _save(out, "time", records)
        for r in records:
            if r["hidden"] == hidden and "us_per_step" in r:
                for key in ("gemm_graph", "gemm_loop", "cudnn_rnn"):
                    if key in base:
                        r[f"speedup_vs_{key}"] = base[key] * 1e6 / steps / r["us_per_step"]
                if r["provider"] in PAPER_TABLE1:
                    r["paper_speedup_vs_gemm"] = PAPER_TABLE1[r["provider"]][0]
    _table(records, ["hidden", "provider", "tpr", "us_per_step", "p10", "p90", "blocks", "threads", "npt", "regs",
                     "speedup_vs_gemm_graph", "speedup_vs_gemm_loop", "speedup_vs_cudnn_rnn", "correct", "timeouts", "error"])
    _save(out, "time", records)
    return records


#: Figure 2 (one axis varied around layer 1792, density 10%, batch 4, 256 steps): (axis, overrides of the base
#: point). Layer sizes up to 4096, the largest that stays on chip at 10% (FIG34_POINTS).
SWEEP_AXES = (
    [("base", {})]
    + [("density", {"density": v}) for v in (0.01, 0.02, 0.05, 0.2, 0.3)]
    + [("hidden", {"hidden": v}) for v in (1152, 2304, 2816, 3584, 4096)]
    + [("batch", {"batch": v}) for v in (1, 2, 8)]
    + [("steps", {"steps": v}) for v in (16, 64, 1024)]
)
#: Figures 3-4 analog, timed: at each density the largest layer the offline capacity model
#: (``capacity``, experiments/results/persistent_rnn.md) puts on chip, for Lamport and for the grid barrier:
#: (density, sync, hidden, tpr); run with the options the model assumed (chunk 8, 16-bit indices) first.
FIG34_POINTS = [(0.01, "lamport", 15360, 4), (0.01, "barrier", 13312, 4), (0.05, "lamport", 6656, 8),
                (0.05, "barrier", 6144, 8), (0.1, "lamport", 4096, 16), (0.1, "barrier", 4096, 16),
                (0.3, "lamport", 2560, 16), (0.3, "barrier", 2560, 16)]
#: our kernel's options in the sweeps, tried in order until one fits: batch 4 -> Lamport (bank-aware, wide
#: loads), other batches -> naive loads with the inline grid barrier and the shuffle reduction (the wide loads
#: need batch 4); the barrier points of Figures 3-4 -> bank-aware wide loads with the inline grid barrier.
SWEEP_OPTIONS = {"lamport": [{"load": "relaxed"}, {"load": "relaxed", "index16": True, "chunk": 8}],
                 "naive": [{"grid_sync": "atomic", "load": "relaxed", "reduce": "shfl"},
                           {"grid_sync": "atomic", "load": "relaxed", "reduce": "shfl", "index16": True, "chunk": 8}],
                 "bank_aware": [{"grid_sync": "atomic", "load": "relaxed"},
                                {"grid_sync": "atomic", "load": "relaxed", "index16": True, "chunk": 8}]}


def sweep_point(axis, hidden, density, batch, steps, config, tprs, options=None, dtype="float16", check_steps=16):
    """One Figure 2 / Figures 3-4 point: the baselines, then ours (the first of ``tprs`` x ``options``, default
    ``SWEEP_OPTIONS[config]``, that fits), checked against the reference over ``check_steps`` steps; speedup over
    the next-best baseline."""
    from numba import cuda, typeof

    from sparsekit.timing import measure
    t0 = time.time()
    rec = dict(axis=axis, hidden=hidden, density=density, batch=batch, steps=steps)
    try:
        u, mask, bp, h0 = problem(hidden, density, batch, steps, np.dtype(dtype), seed=7)
        with _gpu_section():
            b = _torch_baselines(u, bp, h0, steps)
        for key in ("gemm_graph", "cudnn_rnn", "cusparse_csr"):
            if key in b:
                rec[f"{key}_us"] = b[key] * 1e6 / steps
        want = ref_rnn.rnn_forward(u, bp[:check_steps], h0, min(check_steps, steps))
        for tpr in tprs:
            for kw in options or SWEEP_OPTIONS[config]:
                try:
                    with _gpu_section():
                        plan = plan_for(u, mask, config, tpr, batch=batch, **kw)
                        d_bp, d_h0 = cuda.to_device(bp), cuda.to_device(h0)
                        hs = cuda.device_array((steps, batch, hidden), dtype=dtype)
                        xchg, status = plan.buffers(steps)
                    args = plan._args(d_bp, xchg, hs, status, 0, steps, None, None, d_h0)   # h_in: fold_h0 writes it
                    plan.kernel.compile(tuple(typeof(a) for a in args))          # CPU only
                    with _gpu_section():
                        plan.check_coresident(args)
                        m = measure(lambda: plan.enqueue(d_bp, d_h0, steps, xchg, hs, status), repeat=10,
                                    warmup=2, flush_l2=False)
                        got = hs.copy_to_host()[:check_steps]
                        timeouts = int(status.copy_to_host()[0])
                except ValueError as e:
                    rec[f"tpr{tpr}{'_chunk' if kw.get('chunk') else ''}_error"] = str(e)[:160]
                    continue
                ours = m.median_s * 1e6 / steps
                err = float(np.abs(got.astype(np.float64) - want).max())
                rec.update(ours=config, ours_us=ours, ours_tpr=tpr, chunk=plan.chunk, smem=plan.smem,
                           blocks=plan.split.blocks, threads=plan.split.threads_per_block,
                           regs=plan.resources.get("registers"), local=plan.resources.get("local_bytes"),
                           correct=bool(err <= ref_rnn.tolerance(u.dtype, plan.layout.kpad)) and timeouts == 0)
                others = {k: rec[f"{k}_us"] for k in ("gemm_graph", "cudnn_rnn", "cusparse_csr") if f"{k}_us" in rec}
                if others:
                    best = min(others, key=others.get)
                    rec.update(next_best=best, speedup_vs_next_best=others[best] / ours)
                break
            if "ours_us" in rec:
                break
    except Exception as e:  # record, keep going: the table shows what failed
        rec.update(error=f"{type(e).__name__}: {e}"[:300])
    rec["wall_s"] = time.time() - t0
    return rec


def sweep_tasks(axes=SWEEP_AXES, fig34=FIG34_POINTS):
    """``[(sweep_point, kwargs), ...]``: the Figure 2 points around layer 1792, density 10%, batch 4, 256 steps (one
    axis varied at a time), then the timed Figures 3-4 points (largest layer per density, Lamport vs grid barrier)."""
    base = dict(hidden=1792, density=0.1, steps=256, batch=4)
    tasks = []
    for axis, over in axes:
        p = dict(base, **over)
        tasks.append((sweep_point, dict(axis=axis, config="lamport" if p["batch"] == 4 else "naive",
                                        tprs=(16, 8), **p)))
    for density, sync, hidden, tpr in fig34:
        config = "lamport" if sync == "lamport" else "bank_aware"
        tasks.append((sweep_point, dict(axis=f"fig34_{sync}", hidden=hidden, density=density, batch=4, steps=64,
                                        config=config, tprs=(tpr,), options=SWEEP_OPTIONS[config][::-1])))
    return tasks


_SWEEP_COLUMNS = ["axis", "hidden", "density", "batch", "steps", "ours", "ours_tpr", "chunk", "ours_us",
                  "gemm_graph_us", "cudnn_rnn_us", "cusparse_csr_us", "next_best", "speedup_vs_next_best", "regs",
                  "local", "correct", "error"]


def sweep(out=None, axes=SWEEP_AXES, fig34=FIG34_POINTS, jobs=8):
    """Figure 2 analog and the timed Figures 3-4 points (``sweep_tasks``); points in parallel processes
    (compiles overlap, GPU work serialised)."""
    records = run_parallel(sweep_tasks(axes, fig34), jobs, out, "sweep")
    _table(records, _SWEEP_COLUMNS)
    _save(out, "sweep", records)
    return records


#: The recorded H100 timings: Table 1, the Figure 2 sweeps, the launch-bounds grid (experiments/persistent_rnn.py
#: plots them)
RECORDED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "persistent_rnn_h100.json")


def _point_key(p: dict) -> tuple:
    return p["axis"], p["hidden"], p["density"], p["batch"], p["steps"]


def recorded_sweep(path=RECORDED) -> list[dict]:
    """Every record of the recorded Figure 2 sweeps (``sweeps.runN.sweep``), oldest first."""
    with open(path) as f:
        runs = json.load(f)["sweeps"]
    return [r for name in sorted(runs) for r in runs[name].get("sweep", [])]


def missing_sweep_tasks(path=RECORDED) -> list:
    """``sweep_tasks()`` less the points the record holds (``ours_us`` present)."""
    done = {_point_key(r) for r in recorded_sweep(path) if "ours_us" in r}
    return [(fn, kw) for fn, kw in sweep_tasks() if _point_key(kw) not in done]


def rest(out=None, jobs=8):
    """The sweep points the record does not hold (a sweep cut off by a timeout), as ``sweep`` runs them."""
    records = run_parallel(missing_sweep_tasks(), jobs, out, "rest")
    _table(records, _SWEEP_COLUMNS)
    _save(out, "rest", records)
    return records


#: Launch bounds and 16-byte loads of h for Table 1's rows at 1152 and 1792 (fp16, 10%, batch 4, 256 steps,
#: tpr 16; results/persistent_rnn.md, Launch bounds): (label, config, options); every row with ``bound_registers``
#: True and False.
_B = {"grid_sync": "atomic", "load": "relaxed"}
_L = {"load": "relaxed"}
_LV = {"load": "relaxed", "vector": True}
BOUNDS_VARIANTS = [(f"{c}{' vector' if vec else ''}{'' if bound else ' unbounded'}", c,
                    dict(_L if c == "lamport" else _B, **({"vector": True} if vec else {}), bound_registers=bound))
                   for c in CONFIGS for vec in ((False, True) if c in ("wide", "bank_aware") else (False,))
                   for bound in (True, False)]


def bounds_tasks(sizes=(1152, 1792)) -> list:
    """``BOUNDS_VARIANTS`` at each layer size as ``explore_one`` tasks."""
    return [(explore_one, dict(hidden=h, label=label, config=c, tpr=16, rpb_mult=1, kw=kw))
            for h in sizes for label, c, kw in BOUNDS_VARIANTS]


_BOUNDS_COLUMNS = ["hidden", "variant", "tpr", "us_per_step", "p10", "p90", "blocks", "threads", "npt", "regs",
                   "local", "correct", "error"]


def launch_bounds(out=None, jobs=8):
    """In one process pool: the sweep points the record does not hold (``missing_sweep_tasks``: Figures 3-4's
    largest layers) and the launch-bounds / 16-byte-load grid (``bounds_tasks``). Longest first (a
    problem's set-up grows with hidden^2: 15360 units take ~30 s of pruning on the CPU), the grid after the
    sweep points."""
    tasks = sorted(missing_sweep_tasks() + bounds_tasks(),
                   key=lambda t: -t[1]["hidden"] ** 2 if t[0] is sweep_point else 0)
    res = _launch_bounds_result(run_parallel(tasks, jobs, out, "launch_bounds_raw"))
    _table(res["sweep"], _SWEEP_COLUMNS)
    _table(res["bounds"], _BOUNDS_COLUMNS)
    _table(res["bounds_summary"], list(res["bounds_summary"][0]))
    _save(out, "launch_bounds", res)
    return res


def _launch_bounds_result(records: list[dict]) -> dict:
    """The launch-bounds pool's records split into sweep points and the launch-bounds grid, with its summary."""
    bounds = [r for r in records if "variant" in r]
    return {"sweep": [r for r in records if "axis" in r], "bounds": bounds, "bounds_summary": bounds_summary(bounds)}


def bounds_summary(records, sizes=(1152, 1792)) -> list[dict]:
    """Per Table 1 row of ``BOUNDS_VARIANTS``: the fastest correct variant at each layer size and whether one
    variant is the fastest at every size; last, per size, whether the ablation of each row's fastest variant is
    monotone (naive > wide > bank-aware > Lamport in us/step)."""
    config_of = {label: c for label, c, _ in BOUNDS_VARIANTS}
    best = {}
    for r in records:
        if r.get("correct") and r["hidden"] in sizes and r["variant"] in config_of:
            key = (config_of[r["variant"]], r["hidden"])
            if key not in best or r["us_per_step"] < best[key]["us_per_step"]:
                best[key] = r
    rows = []
    for c in CONFIGS:
        row = {"row": c}
        for h in sizes:
            b = best.get((c, h))
            row[f"fastest_{h}"], row[f"us_{h}"] = (b["variant"], b["us_per_step"]) if b else (None, None)
        labels = {row[f"fastest_{h}"] for h in sizes}
        row["same_at_every_size"] = len(labels) == 1 and None not in labels
        rows.append(row)
    mono = {"row": "monotone"}
    for h in sizes:
        us = [row[f"us_{h}"] for row in rows]
        mono[f"fastest_{h}"] = None not in us and all(a > b for a, b in zip(us, us[1:]))
    return rows + [mono]


def merge_launch_bounds(path, run, date, commit, recorded=RECORDED):
    """Store a ``launch_bounds`` part's output (``persistent_rnn_launch_bounds.json``, or ``persistent_rnn_launch_bounds_raw.json``
    of a run cut off before the end) in the recorded results as ``sweeps.<run>`` (sweep points, launch-bounds
    grid and its summary), where experiments/persistent_rnn.py plots its sweep points with the other recorded
    sweeps' ones."""
    with open(path) as f:
        res = json.load(f)
    if isinstance(res, list):
        res = _launch_bounds_result(res)
    with open(recorded) as f:
        data = json.load(f)
    data["sweeps"][run] = {"date": date, "commit": commit, **res}
    with open(recorded, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


def preflight():
    """Compile and run one small multi-block Lamport launch (200 units, 6 steps) against the reference before
    a long part: a broken environment (e.g. a NumPy that numba-cuda cannot compile against) stops the run in
    seconds instead of failing every point of a pool."""
    u, mask, bp, h0 = problem(200, 0.1, 4, 6, np.dtype("float16"), seed=5)
    plan = plan_for(u, mask, "lamport", 8, rows_per_block=8)
    err = float(np.abs(plan(bp, h0, 6).astype(np.float64) - ref_rnn.rnn_forward(u, bp, h0, 6)).max())
    if not err <= ref_rnn.tolerance(u.dtype, plan.layout.kpad):
        raise SystemExit(f"preflight: a 200-unit Lamport launch is wrong (max error {err:.3g})")
    print(f"preflight: {plan.split.blocks} blocks, max error {err:.3g}, numpy {np.__version__}")


#: the second GPU run's Table 1 rows: (label, config, options); "paper" rows are as the paper built them
#: (cooperative-groups grid barrier, ld.volatile), the others with the fixes
FINAL_VARIANTS = [
    ("naive (cg, volatile)", "naive", {}),
    ("naive (atomic, relaxed)", "naive", {"grid_sync": "atomic", "load": "relaxed"}),
    ("wide (cg, volatile)", "wide", {}),
    ("wide (atomic, relaxed)", "wide", {"grid_sync": "atomic", "load": "relaxed"}),
    ("bank_aware (cg, volatile)", "bank_aware", {}),
    ("bank_aware (atomic, relaxed)", "bank_aware", {"grid_sync": "atomic", "load": "relaxed"}),
    ("lamport (volatile)", "lamport", {}),
    ("lamport (relaxed)", "lamport", {"load": "relaxed"}),
    ("lamport (relaxed, idx16)", "lamport", {"load": "relaxed", "index16": True}),
    ("lamport (relaxed, idx16, chunk 8)", "lamport", {"load": "relaxed", "index16": True, "chunk": 8}),
]
#: past 48 KB of shared memory per block (the opt-in attribute): (hidden, density, config, tpr, options)
FINAL_LARGE = [(8192, 0.01, "lamport", 8, {"load": "relaxed", "index16": True, "chunk": 8}),
               (8192, 0.01, "bank_aware", 8, {"grid_sync": "atomic", "load": "relaxed", "index16": True, "chunk": 8}),
               (11520, 0.01, "lamport", 4, {"load": "relaxed", "index16": True, "chunk": 8})]


def final(out=None):
    """The second GPU run: Table 1 rows old and new at 1152 and 1792 (tpr 16), traced breakdowns, baselines,
    and layers past 48 KB of shared memory. Sequential (one process): compile ~2 s per kernel."""
    tasks = []
    for hidden in (1792, 1152):
        for label, config, kw in FINAL_VARIANTS if hidden == 1792 else [FINAL_VARIANTS[i] for i in (0, 1, 3, 5, 7)]:
            tasks.append((explore_one, dict(hidden=hidden, label=label, config=config, tpr=16, rpb_mult=1, kw=kw)))
    for label, config, kw in (FINAL_VARIANTS[3], FINAL_VARIANTS[7]):
        tasks.append((explore_one, dict(hidden=1792, label=label + " traced", config=config, tpr=16, rpb_mult=1,
                                        kw=kw, traced=True)))
    tasks += [(explore_one, dict(hidden=h, density=d, label=f"{config} {kw}", config=config, tpr=tpr, rpb_mult=1,
                                 kw=kw, steps=64)) for h, d, config, tpr, kw in FINAL_LARGE]
    records = []
    for fn, kw in tasks:
        records.append(fn(**kw))
        _table([records[-1]], [k for k in records[-1] if k != "p10"])
        _save(out, "final", records)
    for hidden in (1792, 1152):
        u, mask, bp, h0 = problem(hidden, 0.1, 4, 256, np.float16, seed=hidden)
        base = _torch_baselines(u, bp, h0, 256)
        records.append({"hidden": hidden, "variant": "baselines",
                        **{k: (v * 1e6 / 256 if isinstance(v, float) and not k.endswith("err") else v)
                           for k, v in base.items()}})
        print(records[-1])
        _save(out, "final", records)
    return records


# -- variants timed side by side (the exchange options) ------------------------------------------

#: Table 1's options with the Lamport row before the issue-first poll (``LAMPORT_PREVIOUS``): the rows the
#: exchange options are timed beside
_TABLE1_BASELINE = {**TABLE1_OPTIONS, "lamport": LAMPORT_PREVIOUS}
_VARIANT_COLUMNS = ["hidden", "variant", "steps", "us_per_step", "p10", "p90", "blocks", "threads", "regs", "local",
                    "correct", "max_err", "timeouts", "error"]


def variant_tasks(variants, step_variants, sizes=(1792, 1152), steps_points=(16, 64, 1024), traced=()) -> list:
    """Every variant ``(label, config, options[, tpr])`` (tpr 16 if not given) at 256 steps (1792 first), those
    named in ``traced`` traced at 1792, then the steps points at 1792 of those named in ``step_variants``; each
    checked against the reference over its first 64 steps."""
    variants = [(v + (16,))[:4] for v in variants]
    one = dict(rpb_mult=1, check_steps=64)
    tasks = [(explore_one, dict(hidden=h, label=label, config=c, kw=kw, tpr=tpr, **one))
             for h in sizes for label, c, kw, tpr in variants]
    tasks += [(explore_one, dict(hidden=sizes[0], label=label + " traced", config=c, kw=kw, tpr=tpr, traced=True,
                                 **one)) for label, c, kw, tpr in variants if label in traced]
    tasks += [(explore_one, dict(hidden=sizes[0], label=label, config=c, kw=kw, tpr=tpr, steps=n, **one))
              for n in steps_points for label, c, kw, tpr in variants if label in step_variants]
    return tasks


_RF = {"load": "relaxed", "fold_h0": True}


def _steps_of_fastest(records, variants, measured, jobs):
    """Records of the steps points (and a traced run) of the fastest correct Lamport variant at 1792 and
    256 steps among ``records``, when its name is not in ``measured`` (whose steps points were timed)."""
    timed = [r for r in records if r.get("hidden") == 1792 and r.get("steps") == 256 and r.get("correct")
             and r["variant"].startswith("lamport") and r["variant"].split()[-1] not in ("traced", "no_wait")]
    best = min(timed, key=lambda r: r["us_per_step"])["variant"] if timed else None
    if not best or best in measured:
        return []
    print("fastest at 1792:", best)
    chosen = [v for v in variants if v[0] == best]
    return run_parallel(variant_tasks(chosen, (best,), sizes=(1792,), traced=(best,))[1:], jobs)


def _tables(records, extra_column):
    """The variants' tables: every record (``_VARIANT_COLUMNS`` and ``extra_column``), then the traced ones."""
    _table(records, _VARIANT_COLUMNS + [extra_column])
    traced = [r for r in records if "step_ns" in r]
    _table(traced, ["hidden", "variant", "us_per_step", "clock_ghz", "step_ns", "load_wait_ns", "store_sync_ns",
                    "operate_ns", "reduce_write_ns", "polls"])


# -- exchange options: 16-byte preset, weak L2 loads, issue-first poll ---------------------------------------

_RFV = {**_RF, "preset": "vector"}
#: (label, Table 1 configuration, options[, tpr]): Table 1's rows, ``fold_h0``, then the exchange options
#: (results/persistent_rnn.md, Options measured slower): the 16-byte preset, weak L2 loads (``cg``), and
#: ``poll="issue"`` (the step's loads issued back to back with constant offsets, then checked: the SASS of
#: ``poll="batch"`` computes each address behind its check)
_RFI = {**_RFV, "poll": "issue"}
#: The exchange options of results/persistent_rnn.md, Options measured slower, with and without ``poll="issue"``;
#: ``exchange(variants=EXCHANGE_OPTION_VARIANTS)`` times them
EXCHANGE_OPTION_VARIANTS = [(c, c, _TABLE1_BASELINE[c]) for c in CONFIGS] + [
    ("lamport fold", "lamport", _RF),
    ("lamport fold vpreset", "lamport", _RFV),
    ("lamport fold issue", "lamport", _RFI),
    ("lamport fold issue vector", "lamport", {**_RFI, "vector": True}),
    ("lamport fold issue db", "lamport", {**_RFI, "double_buffer": True}),
    ("lamport fold issue cg", "lamport", {**_RFI, "load": "cg"}),
    ("lamport fold cg", "lamport", {**_RFV, "load": "cg"}),
]
#: ``poll="issue"`` with a spin of ``issue_delay`` cycles (150-1700) before the step's loads: issued at once right
#: after the block's own write, most first loads come back -0.0 (1.08 us/step with every h present, 3.9 with the
#: real exchange; results/persistent_rnn.md, What the step is made of); ``exchange(variants=ISSUE_DELAY_VARIANTS)``
ISSUE_DELAY_VARIANTS = [(c, c, _TABLE1_BASELINE[c]) for c in CONFIGS] + [
    ("lamport fold", "lamport", _RF),
    ("lamport fold cg", "lamport", {**_RFV, "load": "cg"}),
    ("lamport fold issue", "lamport", _RFI),
] + [(f"lamport fold issue d{d}", "lamport", {**_RFI, "issue_delay": d}) for d in (150, 300, 450, 600, 800, 1000,
                                                                                    1300, 1700)] + [
    ("lamport fold issue d600 cg", "lamport", {**_RFI, "issue_delay": 600, "load": "cg"}),
    ("lamport fold issue d1000 cg", "lamport", {**_RFI, "issue_delay": 1000, "load": "cg"}),
    ("lamport fold issue d600 vector", "lamport", {**_RFI, "issue_delay": 600, "vector": True}),
]
#: Table 1 with its Lamport row (issue-first poll, 300-cycle spin), the row before it (``LAMPORT_PREVIOUS``) beside it,
#: the delays around 300 (results/persistent_rnn.md, Table 1 and What the step is made of)
EXCHANGE_VARIANTS = [(c, c, TABLE1_OPTIONS[c]) for c in CONFIGS] + [
    ("lamport previous", "lamport", LAMPORT_PREVIOUS),
    ("lamport fold cg", "lamport", {**_RFV, "load": "cg"}),
] + [(f"lamport fold issue d{d}", "lamport", {**_RFI, "issue_delay": d}) for d in (200, 250, 350, 400)] + [
    ("lamport issue d300", "lamport", {"load": "relaxed", "poll": "issue", "issue_delay": 300}),
    ("lamport fold issue d300 cg", "lamport", {**_RFI, "issue_delay": 300, "load": "cg"}),
    ("lamport fold issue d300 vector", "lamport", {**_RFI, "issue_delay": 300, "vector": True}),
    ("lamport fold issue d400 vector", "lamport", {**_RFI, "issue_delay": 400, "vector": True}),
]
EXCHANGE_STEPS = ("lamport",)
EXCHANGE_TRACED = ("lamport",)
#: the no-wait ablation (``explore_one(ablate="no_wait")``): the loads of h with every value already there
EXCHANGE_NO_WAIT = ("lamport",)


def exchange(out=None, jobs=8, variants=None):
    """``EXCHANGE_VARIANTS`` at 1792 and 1152 (256 steps), some traced or also timed without waiting at 1792, the
    steps points at 1792; then the steps points of the fastest Lamport variant at 1792 if not among them."""
    variants = EXCHANGE_VARIANTS if variants is None else variants
    tasks = variant_tasks(variants, EXCHANGE_STEPS, traced=EXCHANGE_TRACED)
    tasks += [(explore_one, dict(hidden=1792, label=label + " no_wait", config=c, kw=kw, tpr=16, rpb_mult=1,
                                 check_steps=64, ablate="no_wait"))
              for label, c, kw in variants if label in EXCHANGE_NO_WAIT]
    records = run_parallel(tasks, jobs, out, "exchange")
    records += _steps_of_fastest(records, variants, EXCHANGE_STEPS, jobs)
    _tables(records, "us_per_step_no_wait")
    _save(out, "exchange", records)
    return records


# -- capacity: the largest layer that stays on chip (Figures 3-4 analog), offline -----------------------

#: H100 limits (cudaDeviceProp of the lent device: 64K registers, 228 KB shared memory, 2048 threads per SM)
H100 = {"sms": 132, "regs_per_sm": 65536, "smem_per_sm": 233472, "smem_per_block": 232448, "threads_per_sm": 2048,
        "warps_per_sm": 64, "blocks_per_sm": 32, "smem_reserved_per_block": 1024}


def offline_registers(sync, npt, tpr, words, batch=4, dtype="float16", **opts):
    """(registers, spill + stack bytes) of one kernel compiled for sm_90 without a GPU (docs/numba_notes.md's recipe)."""
    import numba.cuda.dispatcher as dispatcher
    from numba import types

    from sparsekit import offline

    class _Device:
        compute_capability = (9, 0)
    dispatcher.get_current_device = lambda: _Device()
    kernel = gpu_rnn._kernel(sync, "wide", np.dtype(dtype), npt, tpr, batch, "tanh", words, **opts)
    val = types.float16 if dtype == "float16" else types.float32
    a1, a2, a3 = (types.Array(t, n, "C") for t, n in ((val, 1), (val, 2), (val, 3)))
    sig = (types.Array(val, 2, "C"), types.Array(types.uint32 if opts.get("index16") else types.int16, 2, "C"),
           a3, a1, types.Array(types.uint32, 1, "C"), a3, a3, a2, types.Array(types.int64, 1, "C"),
           types.Array(types.int32, 1, "C"), a2) + (types.int64,) * 5
    bounds = (opts["threads"], 1) if opts.get("threads") else None
    use = offline.usage(offline.build(kernel, sig, (9, 0), launch_bounds=bounds, want_ptx=False).report)
    return use.registers, use.spill_store_bytes + use.stack_bytes   # stack: arrays demoted to local memory


def fits_on_chip(hidden, density, tpr, sync, buffers=1, batch=4, itemsize=2, limits=H100, regs_fn=None, chunk=8):
    """Whether a layer's persistent launch is co-resident on the device: (fits, details).

    The occupancy rules: registers per warp in units of 256, shared memory per
    block (+1 KB reserved) out of the SM's, threads and warps per SM; the
    weights must stay in registers (no spills).
    """
    k = max(1, round(density * hidden))
    kpad = -(-k // tpr) * tpr
    npt = kpad // tpr
    per_warp = max(1, 32 // tpr)
    rpb = -(-hidden // limits["sms"])
    rpb = -(-rpb // per_warp) * per_warp
    rpb = max(per_warp, min(rpb, 1024 // tpr // per_warp * per_warp))
    threads = rpb * tpr
    blocks = -(-hidden // rpb)
    stride = gpu_rnn.step_stride(hidden, batch)
    words = -(-(stride * itemsize // 4) // threads)
    smem = gpu_rnn.shared_bytes(hidden, batch, itemsize, threads, 1, buffers) + 16
    d = {"hidden": hidden, "density": density, "tpr": tpr, "sync": sync, "buffers": buffers, "npt": npt,
         "threads": threads, "blocks": blocks, "smem": smem}
    if smem > limits["smem_per_block"]:
        return False, dict(d, why="shared memory per block")
    opts = {"index16": True, "load": "relaxed", "chunk": chunk}
    if sync == "barrier":
        opts["grid_sync"] = "atomic"
    elif buffers == 2:
        opts["double_buffer"] = True
    regs, spill = regs_fn(sync, npt, tpr, words, **opts)
    d.update(regs=regs, spill=spill)
    if spill:
        return False, dict(d, why="registers (weights spill to local memory)")
    warps = -(-threads // 32)
    by_regs = limits["regs_per_sm"] // (-(-regs * 32 // 256) * 256) // warps
    by_smem = limits["smem_per_sm"] // (smem + limits["smem_reserved_per_block"])
    per_sm = min(by_regs, by_smem, limits["threads_per_sm"] // threads, limits["warps_per_sm"] // warps,
                 limits["blocks_per_sm"])
    d["blocks_per_sm"] = per_sm
    if blocks > per_sm * limits["sms"]:
        return False, dict(d, why="registers" if per_sm == by_regs else "shared memory")
    return True, d


def capacity(out=None, densities=(0.01, 0.02, 0.05, 0.1, 0.2, 0.3), tprs=(4, 8, 16, 32), step=512, hi=16384):
    """Figures 3-4 analog: the largest layer (a multiple of ``step``) that fits per density and synchronisation.

    Offline (no GPU): register counts from sm_90 compiles, shared memory and
    occupancy from the H100's limits; the launcher's co-residency check on
    the GPU is the ground truth it is spot-checked against.
    """
    cache = {}

    def regs(sync, npt, tpr, words, **o):
        key = (sync, npt, tpr, words, tuple(sorted(o.items())))
        if key not in cache:
            cache[key] = offline_registers(sync, npt, tpr, words, **o)
        return cache[key]
    records = []
    for density in densities:
        for sync, buffers in (("lamport", 1), ("lamport", 2), ("barrier", 1)):
            def fits(h):
                best = None
                for tpr in tprs:
                    ok, d = fits_on_chip(h, density, tpr, sync, buffers, regs_fn=regs)
                    if ok:
                        return True, d
                    best = d
                return False, best
            lo, high = 0, hi // step            # bisection over multiples of step (fits is monotone in H)
            why = None
            while lo < high:
                mid = (lo + high + 1) // 2
                ok, d = fits(mid * step)
                if ok:
                    lo, best = mid, d
                else:
                    high, why = mid - 1, d
            rec = {"density": density, "sync": sync if buffers == 1 else "lamport (2 buffers, the paper's)",
                   "largest_hidden": lo * step, "nnz": round(density * lo * step) * lo * step}
            if lo:
                rec.update(tpr=best["tpr"], regs=best.get("regs"), threads=best["threads"], smem=best["smem"])
            if why:
                rec["next_fails_on"] = why.get("why")
            records.append(rec)
            print(rec)
            sys.stdout.flush()
            _save(out, "capacity", records)
    return records


# -- explore: where a step's time goes, candidate fixes timed side by side ---------------------------

#: (label, config, tpr, rows_per_block multiple of one-block-per-SM, PersistentRNN options)
EXPLORE_VARIANTS = [
    ("naive/cg", "naive", 16, 1, {}),
    ("naive/atomic", "naive", 16, 1, {"grid_sync": "atomic"}),
    ("wide/cg", "wide", 16, 1, {}),
    ("wide/atomic", "wide", 16, 1, {"grid_sync": "atomic"}),
    ("bank_aware/cg", "bank_aware", 16, 1, {}),
    ("bank_aware/atomic", "bank_aware", 16, 1, {"grid_sync": "atomic"}),
    ("lamport", "lamport", 16, 1, {}),
    ("lamport/db", "lamport", 16, 1, {"double_buffer": True}),
    ("lamport/lead", "lamport", 16, 1, {"poll": "lead"}),
    ("lamport/db+lead", "lamport", 16, 1, {"double_buffer": True, "poll": "lead"}),
    ("lamport/db+idx16", "lamport", 16, 1, {"double_buffer": True, "index16": True}),
    ("lamport/db tpr8", "lamport", 8, 1, {"double_buffer": True}),
    ("lamport/db tpr32", "lamport", 32, 1, {"double_buffer": True}),
    ("lamport/db rpb x2", "lamport", 16, 2, {"double_buffer": True}),
]
#: layers past 48 KB of shared memory (opt-in attribute) and past the int32-index register budget:
#: (hidden, density, label, config, tpr, options), 64 steps
EXPLORE_LARGE = [
    (4608, 0.1, "lamport/db+idx16", "lamport", 16, {"double_buffer": True, "index16": True}),
    (4608, 0.1, "lamport/idx16", "lamport", 16, {"index16": True}),
    (5760, 0.01, "lamport/db+idx16", "lamport", 8, {"double_buffer": True, "index16": True}),
    (5760, 0.05, "lamport/db+idx16", "lamport", 16, {"double_buffer": True, "index16": True}),
    (8192, 0.01, "bank_aware/atomic+idx16", "bank_aware", 8, {"grid_sync": "atomic", "index16": True}),
    (8192, 0.01, "lamport/db+idx16", "lamport", 8, {"double_buffer": True, "index16": True}),
]
#: variants also run once with trace=True (per-stage clock64 stamps)
TRACED = ("naive/cg", "wide/cg", "wide/atomic", "lamport", "lamport/db")

_GPU_LOCK = None


def _init_worker(lock):
    global _GPU_LOCK
    _GPU_LOCK = lock


class _gpu_section:
    """Serialise GPU work across the worker processes (compilation runs in parallel outside it)."""

    def __enter__(self):
        if _GPU_LOCK is not None:
            _GPU_LOCK.acquire()

    def __exit__(self, *exc):
        if _GPU_LOCK is not None:
            _GPU_LOCK.release()


def run_parallel(tasks, jobs: int, out=None, name=None):
    """Run ``[(fn, kwargs), ...]`` in ``jobs`` spawned processes; GPU sections serialised by one lock.

    Returns the results in task order; with ``out``/``name`` the finished ones are saved as they come
    (a run cut off by a timeout keeps what it measured).
    """
    import multiprocessing as mp
    if jobs <= 1:
        return [fn(**kw) for fn, kw in tasks]
    ctx = mp.get_context("spawn")
    lock = ctx.Lock()
    done = {}
    with ctx.Pool(jobs, initializer=_init_worker, initargs=(lock,)) as pool:
        for i, res in pool.imap_unordered(_call, list(enumerate(tasks)), chunksize=1):
            done[i] = res
            print("done:", {k: v for k, v in res.items() if k in ("hidden", "variant", "network", "tpr", "us_per_step",
                                                                 "error")})
            sys.stdout.flush()
            if name:
                _save(out, name, [done[k] for k in sorted(done)])
    return [done[k] for k in sorted(done)]


def _call(item):
    i, (fn, kw) = item
    return i, fn(**kw)


def summarize_trace(stamps: np.ndarray, sync: str, skip: int = 8) -> dict:
    """Median cycles of each stage over blocks and steps (the first ``skip`` steps left out)."""
    s = stamps[:, skip:-1, :].astype(np.float64)
    nxt = stamps[:, skip + 1:, 0].astype(np.float64)
    out = {"load_wait": np.median(s[..., 1] - s[..., 0]), "store_sync": np.median(s[..., 2] - s[..., 1]),
           "operate": np.median(s[..., 3] - s[..., 2]), "reduce_write": np.median(s[..., 4] - s[..., 3])}
    if sync == "barrier":
        out["grid_barrier"] = np.median(s[..., 5] - s[..., 4])
    else:
        out["polls"] = float(np.mean(stamps[:, skip:, 5]))
    out["step"] = np.median(nxt - s[..., 0])
    return {k: float(v) for k, v in out.items()}


@lru_cache(maxsize=4)
def _problem_and_reference(hidden, density, steps, dtype, seed, check_steps=None):
    """``problem(...)`` and its reference states, of the first ``check_steps`` steps if given (cached: several
    variants share one problem per process)."""
    u, mask, bp, h0 = problem(hidden, density, 4, steps, np.dtype(dtype), seed=seed)
    return u, mask, bp, h0, ref_rnn.rnn_forward(u, bp, h0, min(steps, check_steps or steps))


def explore_one(hidden, label, config, tpr, rpb_mult, kw, steps=256, dtype="float16", traced=False, seed=None,
                density=0.1, ablate=None, check_steps=None):
    """One variant: compile (outside the GPU lock), then time, check and optionally trace it.

    ``ablate="no_wait"`` (Lamport; a benchmark-only ablation, no kernel
    change): after the normal run, time the kernel alone on the exchange
    buffer that run filled, so every value it polls is already there: no
    block waits for another, the loads themselves remain
    (``us_per_step_no_wait``; checked against the reference again).
    ``check_steps``: compare only the first so many steps with the reference (it costs seconds per step count).
    """
    from numba import cuda, typeof

    from sparsekit.timing import measure
    rec = {"hidden": hidden, "density": density, "variant": label, "tpr": tpr, "steps": steps}
    t0 = time.time()
    try:
        u, mask, bp, h0, want = _problem_and_reference(hidden, density, steps, dtype,
                                                       hidden if seed is None else seed, check_steps)
        kw = dict(kw)
        if rpb_mult != 1:
            per_warp = max(1, 32 // tpr)
            kw["rows_per_block"] = -(-(-(-hidden // 132) * rpb_mult) // per_warp) * per_warp
        with _gpu_section():
            plan = plan_for(u, mask, config, tpr, trace=traced, **kw)
            d_bp, d_h0 = cuda.to_device(bp), cuda.to_device(h0)
            hs = cuda.device_array((steps, 4, hidden), dtype=dtype)
            xchg, status = plan.buffers(steps)
        args = plan._args(d_bp, xchg, hs, status, 0, steps, None, None, d_h0)   # h_in: fold_h0 writes it
        plan.kernel.compile(tuple(typeof(a) for a in args))                      # CPU only
        rec["compile_s"] = time.time() - t0
        with _gpu_section():
            m = measure(lambda: plan.enqueue(d_bp, d_h0, steps, xchg, hs, status), repeat=20, warmup=3,
                        flush_l2=False)
            got = hs.copy_to_host()
            timeouts = int(status.copy_to_host()[0])
            stamps = plan.trace_cycles() if traced else None
            if ablate == "no_wait":
                launch = plan.kernel[plan.grid, plan.split.threads_per_block, 0, plan.smem]
                m2 = measure(lambda: launch(*args), repeat=20, warmup=3, flush_l2=False)
                again = hs.copy_to_host()[:len(want)]
                rec["us_per_step_no_wait"] = m2.median_s * 1e6 / steps
                rec["no_wait_correct"] = bool(np.abs(again.astype(np.float64) - want).max()
                                              <= ref_rnn.tolerance(u.dtype, plan.layout.kpad))
        err = float(np.abs(got[:len(want)].astype(np.float64) - want).max())
        rec.update(us_per_step=m.median_s * 1e6 / steps, p10=m.p10_s * 1e6 / steps, p90=m.p90_s * 1e6 / steps,
                   blocks=plan.grid, threads=plan.split.threads_per_block, npt=plan.layout.npt,
                   smem=plan.smem, regs=plan.resources.get("registers"), local=plan.resources.get("local_bytes"),
                   timeouts=timeouts, max_err=err,
                   correct=bool(err <= ref_rnn.tolerance(u.dtype, plan.layout.kpad)) and timeouts == 0)
        if traced:
            tr = summarize_trace(stamps, plan.sync)
            ghz = tr["step"] / (rec["us_per_step"] * 1e3)                       # cycles per ns
            rec["clock_ghz"] = ghz
            for k, v in tr.items():
                rec[f"{k}_ns" if k != "polls" else "polls"] = v / ghz if k != "polls" else v
    except Exception as e:  # record, keep going: the table shows what failed
        rec.update(error=f"{type(e).__name__}: {e}"[:300])
    rec["wall_s"] = time.time() - t0
    return rec


def explore(out=None, sizes=(1792, 1152), jobs=8):
    tasks = []
    for hidden in sizes:
        for label, config, tpr, rpb, kw in EXPLORE_VARIANTS:
            tasks.append((explore_one, dict(hidden=hidden, label=label, config=config, tpr=tpr, rpb_mult=rpb, kw=kw)))
            if label in TRACED and hidden == sizes[0]:
                tasks.append((explore_one, dict(hidden=hidden, label=label + " (traced)", config=config, tpr=tpr,
                                                rpb_mult=rpb, kw=kw, traced=True)))
    tasks += [(explore_one, dict(hidden=h, density=d, label=label, config=config, tpr=tpr, rpb_mult=1, kw=kw, steps=64))
              for h, d, label, config, tpr, kw in EXPLORE_LARGE]
    records = run_parallel(tasks, jobs, out, "explore")
    _table(records, ["hidden", "density", "variant", "tpr", "us_per_step", "p10", "p90", "blocks", "threads", "npt", "regs",
                     "smem", "correct", "max_err", "timeouts", "compile_s", "error"])
    traced = [r for r in records if "step_ns" in r]
    _table(traced, ["hidden", "variant", "us_per_step", "clock_ghz", "step_ns", "load_wait_ns", "store_sync_ns",
                    "operate_ns", "reduce_write_ns", "grid_barrier_ns", "polls"])
    _save(out, "explore", records)
    return records


#: The 1.5 us/step target at layer 1792 and Table 1's rows: (hidden, label, config, tpr, rows-per-block
#: multiple, options, explore_one extras). "no_wait" is a benchmark-only ablation: it changes the data (an exchange
#: buffer that already holds every h_t), not the kernel. Every kernel here has launch bounds (the default).
#: The first GPU run of these (commit 6623883) also timed: the shuffle reduction for Lamport (slower),
#: its double buffer, pipeline, 16-bit indices, tpr 8, 1 pair per thread, staggered loads and spin backoff
#: (results/persistent_rnn.md).
ABLATE_VARIANTS = (
    [(1792, "lamport", "lamport", 16, 1, _L, {"ablate": "no_wait"}),
     (1792, "lamport vector", "lamport", 16, 1, _LV, {"ablate": "no_wait"}),
     (1792, "lamport vector cg", "lamport", 16, 1, {"load": "cg", "vector": True}, {"ablate": "no_wait"}),
     (1792, "lamport cg", "lamport", 16, 1, {"load": "cg"}, {})]
    + [(1792, c, c, 16, 1, _B, {}) for c in ("naive", "wide", "bank_aware")]
    + [(1792, "wide vector", "wide", 16, 1, dict(_B, vector=True), {}),
       (1792, "bank_aware vector", "bank_aware", 16, 1, dict(_B, vector=True), {})]
    + [(1152, c, c, 16, 1, _B, {}) for c in ("naive", "wide", "bank_aware")]
    + [(1152, "lamport", "lamport", 16, 1, _L, {}),
       (1152, "lamport vector", "lamport", 16, 1, _LV, {}),
       (1792, "lamport rpb x2", "lamport", 16, 2, _L, {}),
       (1792, "lamport vector rpb x2", "lamport", 16, 2, _LV, {}),
       (1792, "lamport vector rpb16", "lamport", 16, 1, dict(_LV, rows_per_block=16), {}),
       (1792, "naive shfl", "naive", 16, 1, dict(_B, reduce="shfl"), {}),
       (1792, "lamport vector traced", "lamport", 16, 1, _LV, {"traced": True})])


def ablate(out=None, jobs=8):
    """Table 1's rows at 1152 and 1792 with the ablation options, the candidate fixes for the 1.5 us/step target
    side by side, and the no-wait ablation (where Lamport's step goes)."""
    tasks = [(explore_one, dict(hidden=h, label=label, config=c, tpr=tpr, rpb_mult=rpb, kw=kw, **extra))
             for h, label, c, tpr, rpb, kw, extra in ABLATE_VARIANTS]
    records = run_parallel(tasks, jobs, out, "ablate")
    _table(records, ["hidden", "variant", "tpr", "us_per_step", "p10", "p90", "us_per_step_no_wait", "blocks",
                     "threads", "npt", "regs", "local", "correct", "no_wait_correct", "error"])
    traced = [r for r in records if "step_ns" in r]
    _table(traced, ["hidden", "variant", "us_per_step", "clock_ghz", "step_ns", "load_wait_ns", "store_sync_ns",
                    "operate_ns", "reduce_write_ns", "grid_barrier_ns", "polls"])
    _save(out, "ablate", records)
    return records


#: Appendix B, Tables 2-3: (network, layer size, density, batch) of the pruned LSTMs.
LSTM_WORKLOADS = [("NMT", 256, 0.125, 4), ("NMT", 512, 0.0625, 4), ("NMT", 768, 0.0417, 4),
                  ("NMT", 1024, 0.047, 4), ("NMT", 1024, 0.125, 4), ("NMT", 1448, 0.047, 4),
                  ("DS2", 1760, 0.12, 1), ("DS2", 2560, 0.12, 1), ("DS2", 3072, 0.12, 1)]


def _lstm_problem(hidden, density, batch, steps, dtype):
    rng = np.random.default_rng(hidden)
    u = rng.standard_normal((4 * hidden, hidden)).astype(np.float32)
    mask = prune.row_balanced(u, 1.0 - density)
    u = np.where(mask, u, 0)
    u = (u / (2 * np.abs(u).sum(axis=1).max())).astype(dtype)
    bp = rng.uniform(-1, 1, (steps, batch, 4 * hidden)).astype(dtype)
    h0, c0 = (rng.uniform(-1, 1, (batch, hidden)).astype(dtype) for _ in range(2))
    return u, mask, bp, h0, c0


def lstm_baselines(net, hidden, density, batch, steps=256, dtype="float16"):
    """cuDNN LSTM (torch.nn.LSTM, its input GEMM included) and the graph-captured GEMM loop, us/step."""
    import torch

    from sparsekit.timing import measure
    from sparsekit.torch.bench import capture_graph
    rec = {"network": net, "hidden": hidden, "density": density, "batch": batch}
    u, mask, bp, h0, c0 = _lstm_problem(hidden, density, batch, steps, dtype)
    with _gpu_section():
        try:
            dev = torch.device("cuda")
            lstm = torch.nn.LSTM(hidden, hidden).to(dev, dtype=torch.float16)
            x = torch.randn(steps, batch, hidden, device=dev, dtype=torch.float16)
            H0, C0 = torch.tensor(h0, device=dev)[None], torch.tensor(c0, device=dev)[None]
            with torch.no_grad():
                rec["cudnn_lstm_us"] = measure(lambda: lstm(x, (H0, C0)), repeat=10, warmup=2,
                                               flush_l2=False).median_s * 1e6 / steps
            Ut, BP = torch.tensor(u, device=dev).t().contiguous(), torch.tensor(bp, device=dev)

            def loop():
                h, c = H0[0], C0[0]
                for t in range(steps):
                    z = torch.addmm(BP[t], h, Ut)
                    i, f, g, o = z.chunk(4, dim=1)
                    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                    h = torch.sigmoid(o) * torch.tanh(c)
                return h
            g, _ = capture_graph(loop)
            rec["gemm_graph_us"] = measure(g.replay, repeat=10, warmup=2, flush_l2=False).median_s * 1e6 / steps
        except Exception as e:
            rec["error"] = f"{type(e).__name__}: {e}"[:300]
    return rec


def lstm_one(net, hidden, density, batch, tpr, steps=256, dtype="float16", check_steps=6, **kw):
    """Our persistent LSTM at one workload and tpr: correctness over ``check_steps`` steps, then timing."""
    from numba import cuda, typeof

    from sparsekit.timing import measure
    rec = {"network": net, "hidden": hidden, "density": density, "batch": batch, "tpr": tpr}
    try:
        u, mask, bp, h0, c0 = _lstm_problem(hidden, density, batch, steps, dtype)
        config = "lamport" if batch == 4 else "naive"
        scheme, sync, aware = CONFIGS[config]
        lay = balance(u, mask, tpr=tpr)
        if aware:
            lay = bank_aware(lay, width=4 * u.dtype.itemsize, gates=4)
        if sync == "barrier":
            kw.setdefault("grid_sync", "atomic")
        with _gpu_section():
            plan = gpu_rnn.PersistentRNN(lay, batch, scheme=scheme, sync=sync, cell="lstm", **kw)
            d_bp, d_h0, d_c0 = cuda.to_device(bp), cuda.to_device(h0), cuda.to_device(c0)
            hs = cuda.device_array((steps, batch, hidden), dtype=dtype)
            cs = cuda.device_array((steps, batch, hidden), dtype=dtype)
            xchg, status = plan.buffers(steps)
        args = plan._args(d_bp, xchg, hs, status, 0, steps, cs, d_c0)
        plan.kernel.compile(tuple(typeof(a) for a in args))
        want_h, want_c = ref_rnn.lstm_forward(u, bp, h0, c0, check_steps)
        with _gpu_section():
            got_h, got_c = plan(bp[:check_steps], h0, check_steps, c0)
            m = measure(lambda: plan.enqueue(d_bp, d_h0, steps, xchg, hs, status, cs, d_c0), repeat=10,
                        warmup=2, flush_l2=False)
            timeouts = int(status.copy_to_host()[0])
        err = max(float(np.abs(got_h.astype(np.float64) - want_h).max()),
                  float(np.abs(got_c.astype(np.float64) - want_c).max()))
        tol = ref_rnn.lstm_tolerance(u.dtype, lay.kpad, check_steps)
        rec.update(ours=config, us_per_step=m.median_s * 1e6 / steps, blocks=plan.split.blocks,
                   threads=plan.split.threads_per_block, pairs_per_thread=4 * lay.npt,
                   regs=plan.resources.get("registers"), local=plan.resources.get("local_bytes"), max_err=err,
                   tol=tol, timeouts=timeouts,
                   correct=bool(err <= tol) and timeouts == 0, **{k: v for k, v in kw.items()})
    except Exception as e:
        rec["error"] = f"{type(e).__name__}: {e}"[:300]
    return rec


def lstm_table(out=None, steps=256, dtype="float16", tprs=(16, 32), jobs=8, workloads=LSTM_WORKLOADS,
               options=(("", {"index16": True}),), name="lstm"):
    """Appendix B: our persistent LSTM (Lamport for batch 4, naive + barrier for batch 1) vs cuDNN LSTM
    and the graph-captured GEMM loop, 256 steps, at the NMT and Deep Speech 2 sizes.

    ``options``: (label, PersistentRNN options) tried at every tpr; the fastest correct run is "ours"."""
    tasks = [(lstm_baselines, dict(net=n, hidden=h, density=d, batch=b, steps=steps)) for n, h, d, b in workloads]
    tasks += [(lstm_one, dict(net=n, hidden=h, density=d, batch=b, tpr=tpr, steps=steps, **kw))
              for n, h, d, b in workloads for tpr in tprs for _, kw in options]
    labels = [lab for _ in workloads for _ in tprs for lab, _ in options]
    results = run_parallel(tasks, jobs, out, f"{name}_raw")
    base = {(r["network"], r["hidden"], r["density"]): r for r in results[:len(workloads)]}
    runs = results[len(workloads):]
    for r, lab in zip(runs, labels):
        r["label"] = f"tpr{r['tpr']}{lab}"
    records = []
    for n, h, d, b in workloads:
        rec = dict(base[(n, h, d)])
        mine = [r for r in runs if (r["network"], r["hidden"], r["density"]) == (n, h, d)]
        ok = [r for r in mine if r.get("correct")]
        for r in mine:
            rec[r["label"]] = (f"{r['us_per_step']:.3g} us, {r.get('regs')} regs, {r.get('local')} B local, "
                               f"err {r['max_err']:.2g}" if "us_per_step" in r else r.get("error", "")[:160])
        if ok:
            best = min(ok, key=lambda r: r["us_per_step"])
            rec.update(ours=best["ours"], ours_us=best["us_per_step"], ours_variant=best["label"], correct=True)
            others = [rec[k] for k in ("cudnn_lstm_us", "gemm_graph_us") if k in rec]
            if others:
                rec["speedup_vs_next_best"] = min(others) / best["us_per_step"]
            if "cudnn_lstm_us" in rec:
                rec["speedup_vs_cudnn"] = rec["cudnn_lstm_us"] / best["us_per_step"]
        records.append(rec)
    _table(records, ["network", "hidden", "density", "batch", "cudnn_lstm_us", "gemm_graph_us", "ours", "ours_variant",
                     "ours_us", "speedup_vs_next_best", "speedup_vs_cudnn", "correct"]
           + sorted({r["label"] for r in runs}))
    _save(out, name, {"table": records, "runs": runs})
    return records


#: Deep Speech 2's three layers (batch 1) with the ablation options: the shuffle reduction, 16-bit indices,
#: chunked loads, launch bounds of one block per SM (default), which let 2560 and 3072 fit.
DS2_OPTIONS = (("", {"index16": True, "reduce": "shfl"}), (" chunk2", {"index16": True, "reduce": "shfl", "chunk": 2}),
               (" shared", {"index16": True}))


def ds2(out=None):
    """Appendix B's Deep Speech 2 rows (1760, 2560, 3072 units, 12%, batch 1) with ``DS2_OPTIONS``."""
    return lstm_table(out, workloads=[w for w in LSTM_WORKLOADS if w[0] == "DS2"], options=DS2_OPTIONS, name="ds2")


def ncu_runs(steps=8):
    """Each Table 1 configuration at layer 1152 (float32 and float16, tpr 16), for Nsight Compute.

    Run under ``ncu --metrics l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,...``;
    ``analyzer_prediction`` gives the matching rnn_layout.bank_conflicts numbers.
    """
    for dt in ("float32", "float16"):
        u, mask, bp, h0 = problem(1152, 0.1, 4, steps, np.dtype(dt), seed=11)
        for config in CONFIGS:
            plan = plan_for(u, mask, config, 16)
            plan(bp, h0, steps)
            print(f"ncu-run {dt} {config} blocks={plan.split.blocks} threads={plan.split.threads_per_block}")


NCU_METRICS = ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
               "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
               "smsp__sass_inst_executed_op_shared_ld.sum")


def reduce_stage_loads(sp, batch: int):
    """(requests, wavefronts, ideal) of one step's reduce stage: lane b < batch of each row reads its tpr partials."""
    from sparsekit.rnn_layout import wavefronts
    req = wf = ideal = 0
    for blk in range(sp.blocks):
        for w in range(sp.warps_per_block):
            for k in range(sp.tpr):
                addr = []
                for lane32 in range(32):
                    tid = w * 32 + lane32
                    r_local, lane = divmod(tid, sp.tpr)
                    on = lane < batch and blk * sp.rows_per_block + r_local < sp.rows
                    addr.append(((r_local * sp.tpr + k) * batch + lane) * 4 if on else -1)
                if max(addr) < 0:
                    continue
                f, p = wavefronts(addr, 4)
                req, wf, ideal = req + 1, wf + f, ideal + p
    return req, wf, ideal


def ncu_compare(csv_path, steps=8):
    """Nsight Compute's shared-load counters of ``--ncu`` beside rnn_layout.bank_conflicts' prediction.

    Prediction = (operate stage from the analyzer + reduce stage) x steps; the
    kernels are listed in ``ncu_runs`` order.
    """
    import csv

    from sparsekit.rnn_layout import bank_conflicts, split
    measured, threads, header = {}, {}, None
    with open(csv_path) as f:
        for row in csv.reader(f):
            if row and row[0] == "ID":
                header = row
            elif header and len(row) == len(header):
                d = dict(zip(header, row))
                measured.setdefault(int(d["ID"]), {})[d["Metric Name"]] = int(d["Metric Value"].replace(",", ""))
                threads[int(d["ID"])] = int(d["Block Size"].strip("()").split(",")[0])
    records, i = [], 0
    for dt in ("float32", "float16"):
        u, mask, bp, h0 = problem(1152, 0.1, 4, steps, np.dtype(dt), seed=11)
        for config, (scheme, sync, aware) in CONFIGS.items():
            tpr = 16
            lay = layout_for(u, mask, tpr, aware)
            sp = split(1152, tpr, threads[i] // tpr)        # the launch configuration ncu saw
            rep = bank_conflicts(lay, batch=4, scheme=scheme, rows_per_block=sp.rows_per_block,
                                 itemsize=np.dtype(dt).itemsize)
            r_req, r_wf, r_ideal = reduce_stage_loads(sp, 4)
            m = measured.get(i, {})
            i += 1
            records.append({
                "dtype": dt, "config": config, "operate_penalty_analyzer": rep.penalty,
                "ld_instructions_pred": (rep.requests + r_req) * steps, "ld_instructions_ncu": m.get(NCU_METRICS[2]),
                "conflicts_pred": (rep.wavefronts - rep.ideal + r_wf - r_ideal) * steps,
                "conflicts_ncu": m.get(NCU_METRICS[0]),
                "wavefronts_pred": (rep.wavefronts + r_wf) * steps, "wavefronts_ncu": m.get(NCU_METRICS[1])})
    _table(records, list(records[0]))
    return records


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--parts", default="check,time")
    ap.add_argument("--sanitize", action="store_true")
    ap.add_argument("--sanitize-only", metavar="OPTION", help="with --sanitize: only variants with this option")
    ap.add_argument("--ncu", action="store_true")
    ap.add_argument("--ncu-compare", metavar="CSV", help="compare an ncu --csv log of --ncu with the analyzer (CPU)")
    ap.add_argument("--merge", nargs=4, metavar=("LAUNCH_BOUNDS_JSON", "RUN", "DATE", "COMMIT"),
                    help="store a launch_bounds part's output in the recorded results as sweeps.RUN (CPU)")
    args = ap.parse_args(argv)
    if args.merge:
        merge_launch_bounds(*args.merge)
        return
    if args.ncu_compare:
        ncu_compare(args.ncu_compare)
        return
    if args.sanitize:
        sanitize(args.sanitize_only)
        return
    if args.ncu:
        ncu_runs()
        return
    from sparsekit.device import info
    print(datetime.now(timezone.utc).isoformat(timespec="seconds"), info())
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    if args.parts != "capacity":
        preflight()
    for part in args.parts.split(","):
        t0 = time.time()
        {"check": check, "time": time_table, "sweep": sweep, "lstm": lstm_table, "explore": explore,
         "capacity": capacity, "final": final, "ablate": ablate, "ds2": ds2, "rest": rest,
         "launch_bounds": launch_bounds, "exchange": exchange}[part](args.out)
        print(f"[{part} took {time.time() - t0:.0f} s]")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
