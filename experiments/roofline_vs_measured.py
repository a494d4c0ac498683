"""Predicted (speed of light) vs measured speedup over dense: measured on the GPU, or from a recorded run.

The Sparsity Roofline (Section 3.4) says the predicted speedup equals the
measured one exactly when the sparse and the dense kernel reach the same
fraction of their speed of light. This module checks that on real kernels:

* **measure** (GPU): for each problem of :func:`problems` (the 20-problem DL
  SpMM suite at 90 % and layers of the model zoo at 50-95 %, float32 and
  float16) it times, with :func:`sparsekit.timing.measure` (CUDA events behind a
  spin kernel, L2 flushed; PyTorch's work queues on the same default stream, so
  the same events bracket it):

  ====================================  ===========================================
  ``USpMM config=auto (ours)``          ``sparsekit.gpu.uspmm.uspmm(ell, b, config="auto")``
  ``USpMM listing1 (ours)``             ``sparsekit.gpu.uspmm.uspmm(ell, b)`` (paper's (1, 8))
  ``CSR warp/row (ours)``               ``sparsekit.gpu.spmm.spmm_csr(csr, b)``
  ``CSR staged (ours)``                 ``sparsekit.gpu.spmm.spmm_csr(csr, b, **gpu.spmm.staged_tunables(csr, n))``
  ``cuSPARSE CSR (torch)``              ``torch.matmul(w.to_sparse_csr(), b)``
  ``dense cuBLAS (torch)``              ``w @ b`` (float32: TF32 off; float16: tensor cores)
  ``2:4 cuSPARSELt (torch)``            float16 only: ``torch.mm(to_sparse_semi_structured(w24), b)``
                                        with ``_FORCE_CUTLASS = False`` (else ``torch._cslt_sparse_mm``)
  ====================================  ===========================================

  All sparse providers of a problem multiply the same uniform-pruned weight
  (a uniform mask is also a valid unstructured one); 2:4 prunes the same dense
  weight to 2:4 (50 %). Every result is checked against a float64 product. One
  CSV row per (problem, provider) holds the raw device times, the format's
  nonzeros and index width, so the comparison can be recomputed anywhere.
* **compare** (anywhere): each sparse row's speed of light from
  :mod:`sparsekit.roofline` (ELL for USpMM, CSR for both CSR kernels, 2:4 with
  its hardware metadata, dense for cuBLAS; the datasheet peaks of the measured
  device) against its dense row: predicted and measured speedup, and each
  kernel's % of speed of light.

Usage::

    python -m experiments.roofline_vs_measured --measure --out DIR [--quick] [--budget-s 150]
    python -m experiments.roofline_vs_measured [FILE]     # a recorded CSV, or the older results/uspmm.md

``--measure`` writes ``DIR/roofline_measured.csv``, ``DIR/roofline_vs_measured.md``
and ``DIR/predicted_vs_measured.png``. Registered in ``sparsekit reproduce`` as
``roofline_validation``: it measures on a GPU (quick mode: three problems) and
reads the recorded run (``results/roofline_measured.csv``, else
``results/uspmm.md``) on the simulator or without a GPU.
"""
from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from sparsekit import roofline
from sparsekit.experiment import Context, Experiment, Section, Table, markdown_table, save_figure

RESULTS = Path(__file__).parent / "results"
#: The recorded fresh measurement (CSV of :func:`measure_all`), when one has been committed.
MEASURED = RESULTS / "roofline_measured.csv"
#: The older recorded table: uspmm.md's "The tiled kernel against cuSPARSE and cuBLAS" (``bench_uspmm.py --table``,
#: H100).
RECORDED = RESULTS / "uspmm.md"

HEADER = "| m | k | n | sparsity | dtype | provider | median_us |"
SPARSE_KIND = {"tiled": "ell", "cuSPARSE CSR (torch)": "csr"}

DENSE = "dense cuBLAS (torch)"
#: provider -> format the roofline prices it as.
PROVIDER_FORMAT = {"USpMM config=auto (ours)": "ell", "USpMM listing1 (ours)": "ell",
                   "CSR warp/row (ours)": "csr", "CSR staged (ours)": "csr", "cuSPARSE CSR (torch)": "csr",
                   "2:4 cuSPARSELt (torch)": "2:4", DENSE: "dense"}
OURS = ("USpMM config=auto (ours)", "USpMM listing1 (ours)", "CSR warp/row (ours)", "CSR staged (ours)")
CSV_FIELDS = ("device", "date", "problem", "m", "k", "n", "dtype", "sparsity", "provider", "format", "nnz",
              "index_bytes_per_nnz", "median_us", "p10_us", "p90_us", "late", "correct", "max_rel_err", "note",
              "error")


# ----------------------------------------------------------------------------- problems

@dataclass(frozen=True)
class Shape:
    """One GEMM shape ``C (m x n) = W (m x k) @ B (k x n)`` and the sparsities to measure it at."""

    label: str
    m: int
    k: int
    n: int
    sparsities: tuple


#: Model-zoo layers measured (model, options, layer names): BERT-base and Transformer-big at
#: batch 1 (memory-bound), Transformer-big at 16 x 256 tokens and a ResNet-50 conv at batch 8
#: (im2col; compute-heavier).
ZOO = (("bert-base", {"batch": 1}, ("encoder.0.self.q", "encoder.0.ffn1", "encoder.0.ffn2")),
       ("transformer-big", {"batch": 1}, ("encoder.0.ffn1", "encoder.0.ffn2")),
       ("transformer-big", {"batch": 16}, ("encoder.0.ffn1",)),
       ("resnet50", {"batch": 8}, ("layer3.0.conv2",)))
ZOO_SPARSITIES = (0.5, 0.75, 0.9, 0.95)


def suite_shapes(sparsities=(0.9,), numbers=None) -> list[Shape]:
    """The DL SpMM suite (:data:`sparsekit.models.SPMM_SUITE`), all or the given problem ``numbers``."""
    from sparsekit.models import SPMM_SUITE
    return [Shape(f"suite {p.number} ({p.use_case})", p.m, p.k, p.n, tuple(sparsities)) for p in SPMM_SUITE
            if numbers is None or p.number in numbers]


def zoo_shapes(sparsities=ZOO_SPARSITIES, zoo=ZOO) -> list[Shape]:
    """Layers of :data:`ZOO`, derived by :func:`sparsekit.models.model` (not typed in)."""
    from sparsekit.models import model
    out = []
    for name, options, layers in zoo:
        by_name = {l.name: l for l in model(name, **options)}
        for layer in layers:
            l = by_name[layer]
            out.append(Shape(f"{name} b{options['batch']} {layer}", l.m, l.k, l.n, tuple(sparsities)))
    return out


def problems(quick: bool) -> list[Shape]:
    """Full: the suite at 90 %, then the zoo layers at 50-95 %. Quick: three shapes, two sparsities."""
    if quick:
        return suite_shapes((0.9,), numbers=(9, 11)) + zoo_shapes((0.5, 0.9), zoo=(("bert-base", {"batch": 1},
                                                                                  ("encoder.0.ffn1",)),))
    return suite_shapes() + zoo_shapes()


# ----------------------------------------------------------------------------- measuring

def _torch():
    """PyTorch with a CUDA device, or None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


U32 = 2.0 ** -24   # unit roundoff of float32 accumulation


def close(got, exact: np.ndarray, scale: np.ndarray, dtype, reduction: int, acc_u: float) -> tuple[bool, float]:
    """``got`` within ``reduction * acc_u * |A||B| + 2 u_out |AB|`` of the float64 ``exact``
    (accumulation of ``reduction`` products with unit roundoff ``acc_u``, one rounding to ``dtype``;
    Higham eq. 3.5), and the largest error relative to ``|A||B|``."""
    got = np.asarray(got, dtype=np.float64)
    u_out = np.finfo(dtype).eps / 2
    bound = reduction * acc_u * scale + 2 * u_out * np.abs(exact) + np.finfo(dtype).smallest_subnormal
    err = np.abs(got - exact)
    rel = float(np.max(err / np.maximum(scale, np.finfo(np.float64).tiny))) if err.size else 0.0
    return bool(np.all(err <= bound)), rel


def _to_host(x) -> np.ndarray:
    if hasattr(x, "copy_to_host"):
        return x.copy_to_host()
    if hasattr(x, "detach"):
        return x.detach().float().cpu().numpy()
    return np.asarray(x)


class Operands:
    """Host and device operands of one (shape, sparsity, dtype): the uniform-pruned weight in every
    format our kernels and PyTorch take, B, and the float64 answers."""

    def __init__(self, m: int, k: int, n: int, sparsity: float, dtype, *, seed: int = 0):
        from sparsekit.formats import CSR, ELL
        from sparsekit.prune import uniform

        rng = np.random.default_rng(seed)
        self.dtype = np.dtype(dtype)
        self.w = rng.standard_normal((m, k)).astype(self.dtype)   # never time on zeros
        self.mask = uniform(self.w, sparsity)
        self.ws = np.where(self.mask, self.w, 0).astype(self.dtype)
        self.ell = ELL.from_dense(self.ws, self.mask)
        self.csr = CSR.from_dense(self.ws, self.mask)
        self.b = np.ascontiguousarray(rng.standard_normal((k, n)).astype(self.dtype))
        self._exact = {}

    def exact(self, which: str = "pruned"):
        """(A @ B, |A| @ |B|) in float64 for A = the pruned weight (``"pruned"``), its 2:4 version
        (``"24"``) or the unpruned weight (``"dense"``)."""
        if which not in self._exact:
            a = {"pruned": self.ws, "dense": self.w}.get(which)
            a = self.w24() if a is None else a
            torch = _torch()
            if torch is not None:   # the host would take seconds at the larger shapes
                ta = torch.from_numpy(a.astype(np.float64)).cuda()
                tb = torch.from_numpy(self.b.astype(np.float64)).cuda()
                self._exact[which] = ((ta @ tb).cpu().numpy(), (ta.abs() @ tb.abs()).cpu().numpy())
                del ta, tb
            else:
                a64, b64 = a.astype(np.float64), self.b.astype(np.float64)
                self._exact[which] = (a64 @ b64, np.abs(a64) @ np.abs(b64))
        return self._exact[which]

    def w24(self) -> np.ndarray:
        """The dense weight pruned to 2:4 (groups of 4 along k, as the sparse tensor cores take A)."""
        from sparsekit.prune import n_m
        return np.where(n_m(self.w, 2, 4), self.w, 0).astype(self.dtype)


def our_launches(ops: Operands) -> dict:
    """provider -> (launch, note) for our kernels, operands already on the device (no copies timed).

    Only the launchers' public API is used: ``sparsekit.gpu.uspmm.prepare``/``uspmm`` and
    ``sparsekit.gpu.spmm.prepare``/``spmm_csr``/``staged_tunables`` (the staged CSR row is left out
    when ``staged_tunables`` is absent).
    """
    from numba import cuda

    from sparsekit.gpu import spmm as gs
    from sparsekit.gpu import uspmm as gu
    from sparsekit.formats import CSR

    dell = gu.prepare(ops.ell)
    dcsr = gs.prepare(ops.csr, CSR)
    b = cuda.to_device(ops.b)
    try:   # what config="auto" resolves to, for the record only
        from sparsekit.tune import resolve
        auto = ", ".join(f"{k}={v}" for k, v in resolve("auto", dell, ops.b.shape[1], "C").items())
    except Exception as err:   # noqa: BLE001 - the note is informative, the launch below decides
        auto = f"config not shown ({type(err).__name__})"
    out = {"USpMM config=auto (ours)": (lambda: gu.uspmm(dell, b, config="auto"), auto),
           "USpMM listing1 (ours)": (lambda: gu.uspmm(dell, b), "variant=listing1, nwarp=1, vsize=8, vecsize=1"),
           "CSR warp/row (ours)": (lambda: gs.spmm_csr(dcsr, b), "one warp per row")}
    if hasattr(gs, "staged_tunables"):
        staged = gs.staged_tunables(dcsr, ops.b.shape[1])
        out["CSR staged (ours)"] = (lambda: gs.spmm_csr(dcsr, b, **staged),
                                    ", ".join(f"{k}={v}" for k, v in staged.items()))
    return out


def torch_launches(ops: Operands, torch) -> dict:
    """provider -> (launch, note) for PyTorch's CSR (cuSPARSE) on the same pruned weight."""
    tdt = torch.float16 if ops.dtype == np.float16 else torch.float32
    w = torch.from_numpy(ops.ws).to(device="cuda", dtype=tdt)
    b = torch.from_numpy(ops.b).to(device="cuda", dtype=tdt)
    csr = w.to_sparse_csr()
    return {"cuSPARSE CSR (torch)": (lambda: torch.matmul(csr, b), f"torch {torch.__version__}")}


def dense_launch(ops: Operands, torch):
    torch.backends.cuda.matmul.allow_tf32 = False
    tdt = torch.float16 if ops.dtype == np.float16 else torch.float32
    w = torch.from_numpy(ops.w).to(device="cuda", dtype=tdt)
    b = torch.from_numpy(ops.b).to(device="cuda", dtype=tdt)
    return lambda: w @ b, "tensor cores" if ops.dtype == np.float16 else "TF32 off (CUDA cores)"


def semi_structured_launch(ops: Operands, torch):
    """``(launch, note)`` for the 2:4 product through cuSPARSELt, or raise with every error seen.

    First ``torch.mm`` on ``to_sparse_semi_structured(w24)`` with
    ``SparseSemiStructuredTensor._FORCE_CUTLASS = False`` (PyTorch's CUTLASS 2:4
    kernels run on sm_8x only); if that refuses, ``torch._cslt_compress`` +
    ``torch._cslt_sparse_mm`` directly, with B zero-padded (outside the timed
    region) to a multiple of 8 columns when it is not one.
    """
    from torch.sparse import SparseSemiStructuredTensor, to_sparse_semi_structured

    w = torch.from_numpy(ops.w24()).to(device="cuda", dtype=torch.float16)
    b = torch.from_numpy(ops.b).to(device="cuda", dtype=torch.float16)
    errors = []
    old = SparseSemiStructuredTensor._FORCE_CUTLASS
    SparseSemiStructuredTensor._FORCE_CUTLASS = False
    try:
        ws = to_sparse_semi_structured(w)
        torch.mm(ws, b)
        torch.cuda.synchronize()
        return (lambda: torch.mm(ws, b)), f"{type(ws).__name__}, torch.mm"
    except Exception as err:   # noqa: BLE001 - recorded, then the direct path is tried
        errors.append(f"to_sparse_semi_structured + torch.mm: {type(err).__name__}: {err}")
    finally:
        SparseSemiStructuredTensor._FORCE_CUTLASS = old
    try:
        n = b.shape[1]
        pad = -n % 8
        bp = torch.nn.functional.pad(b, (0, pad)).contiguous() if pad else b
        packed = torch._cslt_compress(w)
        torch._cslt_sparse_mm(packed, bp)
        torch.cuda.synchronize()
        note = ("torch._cslt_sparse_mm" + (f", B padded {n}->{n + pad} columns" if pad else "")
                + f" (first path refused: {errors[0][:200]})")
        return (lambda: torch._cslt_sparse_mm(packed, bp)), note
    except Exception as err:   # noqa: BLE001
        errors.append(f"torch._cslt_sparse_mm: {type(err).__name__}: {err}")
    raise RuntimeError(" | ".join(errors))


def _record(shape: Shape, dtype, sparsity, provider, fmt, nnz, index_bytes, device, date) -> dict:
    rec = dict.fromkeys(CSV_FIELDS, "")
    rec.update(device=device, date=date, problem=shape.label, m=shape.m, k=shape.k, n=shape.n,
               dtype=np.dtype(dtype).name, sparsity=sparsity, provider=provider, format=fmt, nnz=nnz,
               index_bytes_per_nnz=index_bytes)
    return rec


def _time(rec: dict, launch, check, timer, repeat: int, note: str = "") -> dict:
    """Run once and check, then time; errors go into the record (a provider that cannot run a problem
    says why and the sweep goes on)."""
    try:
        ok, rel = check(_to_host(launch()))
        t = timer(launch, repeat=repeat, warmup=3)
    except Exception as err:   # noqa: BLE001
        rec.update(error=f"{type(err).__name__}: {err}"[:400], note=note)
        return rec
    rec.update(median_us=t.median_s * 1e6, p10_us=t.p10_s * 1e6, p90_us=t.p90_s * 1e6, late=t.late,
               correct=ok, max_rel_err=f"{rel:.2e}", note=note)
    return rec


def measure_shape(shape: Shape, dtype, *, timer=None, repeat: int = 30, device: str = "", date: str = "",
                  torch=None) -> list[dict]:
    """One record per (sparsity, provider) for ``shape`` in ``dtype`` (see the module docstring).

    ``timer`` is :func:`sparsekit.timing.measure` unless given (the tests pass a stand-in,
    since simulated time is no time). ``torch`` is PyTorch or None (its providers then get
    an ``error`` saying so).
    """
    if timer is None:
        from sparsekit.timing import measure as timer
    dtype = np.dtype(dtype)
    acc_torch = np.finfo(dtype).eps / 2   # PyTorch's kernels may accumulate float16 in float16
    no_torch = "PyTorch with CUDA is not available here"
    out = []
    dense_done = False
    for s in shape.sparsities:
        ops = Operands(shape.m, shape.k, shape.n, s, dtype)
        kprime = ops.ell.kprime

        def check(got, *, red=kprime, acc=U32, which="pruned"):
            e, sc = ops.exact(which)
            return close(got, e, sc, dtype, red, acc)

        if not dense_done:
            rec = _record(shape, dtype, "", DENSE, "dense", shape.m * shape.k, 0, device, date)
            if torch is None:
                out.append(dict(rec, error=no_torch))
            else:
                try:
                    launch, note = dense_launch(ops, torch)
                    out.append(_time(rec, launch, lambda got: check(got, red=shape.k, acc=acc_torch, which="dense"),
                                     timer, repeat, note))
                except Exception as err:   # noqa: BLE001
                    out.append(dict(rec, error=f"{type(err).__name__}: {err}"[:400]))
            if dtype == np.float16:
                rec = _record(shape, dtype, 0.5, "2:4 cuSPARSELt (torch)", "2:4", shape.m * (shape.k // 4) * 2,
                              0, device, date)
                if torch is None:
                    out.append(dict(rec, error=no_torch))
                else:
                    try:
                        launch, note = semi_structured_launch(ops, torch)
                        # [:, :n]: the direct cuSPARSELt path returns the padded columns too
                        out.append(_time(rec, launch, lambda got: check(got[:, :shape.n], red=shape.k // 2,
                                                                         acc=acc_torch, which="24"), timer, repeat, note))
                    except Exception as err:   # noqa: BLE001
                        out.append(dict(rec, error=f"{type(err).__name__}: {err}"[:600]))
            dense_done = True
        launches = {}
        try:
            launches.update(our_launches(ops))
        except Exception as err:   # noqa: BLE001 - a launcher changed: say so, go on
            out.append(dict(_record(shape, dtype, s, "ours (setup)", "", ops.ell.nnz, 0, device, date),
                            error=f"{type(err).__name__}: {err}"[:400]))
        for name, (launch, note) in launches.items():
            fmt = PROVIDER_FORMAT[name]
            nnz, isz = (ops.ell.nnz, ops.ell.indices.dtype.itemsize) if fmt == "ell" else \
                (ops.csr.nnz, ops.csr.indices.dtype.itemsize)
            out.append(_time(_record(shape, dtype, s, name, fmt, nnz, isz, device, date), launch, check,
                             timer, repeat, note))
        rec = _record(shape, dtype, s, "cuSPARSE CSR (torch)", "csr", ops.csr.nnz, 4, device, date)
        if torch is None:
            out.append(dict(rec, error=no_torch))
        else:
            try:
                launch, note = torch_launches(ops, torch)["cuSPARSE CSR (torch)"]
            except Exception as err:   # noqa: BLE001
                out.append(dict(rec, error=f"{type(err).__name__}: {err}"[:400]))
            else:
                out.append(_time(rec, launch, lambda got: check(got, red=kprime, acc=acc_torch), timer, repeat, note))
    return out


def measure_all(shapes, dtypes=("float32", "float16"), *, timer=None, repeat: int = 30, budget_s: float | None = None,
                progress=lambda msg: None, torch="auto", on_record=lambda rows: None) -> list[dict]:
    """:func:`measure_shape` over ``shapes`` x ``dtypes``; stops starting new shapes once ``budget_s``
    seconds have passed (the rows so far are kept, and a final row says what was skipped)."""
    from sparsekit.device import info

    dev = info()
    date = f"{datetime.now(timezone.utc):%Y-%m-%d}"
    torch = _torch() if torch == "auto" else torch
    t0 = time.perf_counter()
    rows: list[dict] = []
    todo = [(s, d) for s in shapes for d in dtypes]
    for i, (shape, dtype) in enumerate(todo):
        if budget_s is not None and time.perf_counter() - t0 > budget_s:
            skipped = ", ".join(f"{s.label} {d}" for s, d in todo[i:])
            progress(f"budget of {budget_s:.0f} s spent: skipped {skipped}")
            rows.append(dict(dict.fromkeys(CSV_FIELDS, ""), device=dev.name, date=date, problem="(skipped)",
                             error=f"time budget {budget_s:.0f} s spent before: {skipped}"))
            break
        rows.extend(measure_shape(shape, dtype, timer=timer, repeat=repeat, device=dev.name, date=date, torch=torch))
        progress(f"[{time.perf_counter() - t0:6.1f} s] {shape.label} {dtype}: done")
        on_record(rows)
    return rows


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(CSV_FIELDS))
        w.writeheader()
        w.writerows({k: r.get(k, "") for k in CSV_FIELDS} for r in rows)


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ----------------------------------------------------------------------------- comparing

def _roof_for(device_name: str):
    """The datasheet roof of the measured device (H100 SXM, ...), by its driver name."""
    from sparsekit.device import peaks_for
    peak = peaks_for(device_name) if device_name else None
    if peak is None:
        raise ValueError(f"device: no datasheet peaks for {device_name!r} in sparsekit.device.PEAKS")
    return roofline.roof(peak)


def sol_of_row(r: dict, roof) -> roofline.SoL:
    """Speed of light of one measured row: its format, nonzeros and index width (exact ``nbytes()``)."""
    m, k, n = int(r["m"]), int(r["k"]), int(r["n"])
    fmt, dtype = r["format"], r["dtype"]
    if fmt == "dense":
        return roofline.speed_of_light("dense", m, k, n, dtype=dtype, device=roof)
    if fmt == "2:4":
        return roofline.speed_of_light("2:4", m, k, n, dtype=dtype, device=roof)
    isz = int(r["index_bytes_per_nnz"])
    index_dtype = {2: np.int16, 4: np.int32, 8: np.int64}[isz]
    return roofline.speed_of_light(fmt, m, k, n, nnz=int(r["nnz"]), dtype=dtype, device=roof, index_dtype=index_dtype)


def _sig(x: float, digits: int = 4) -> float:
    """``x`` rounded to ``digits`` significant digits (tables stay short, small % SoL keep their precision)."""
    return float(f"{x:.{digits}g}")


def compare_measured(rows: list[dict]) -> list[dict]:
    """Predicted vs measured speedup over the dense row of the same shape and dtype, per sparse row."""
    ok = [r for r in rows if r.get("median_us") not in ("", None) and not r.get("error")]
    dense = {(r["problem"], r["dtype"]): r for r in ok if r["provider"] == DENSE}
    out = []
    for r in ok:
        d = dense.get((r["problem"], r["dtype"]))
        if r["provider"] == DENSE or d is None:
            continue
        roof = _roof_for(r["device"])
        c = roofline.compare(sol_of_row(d, roof), sol_of_row(r, roof), float(d["median_us"]) * 1e-6,
                             float(r["median_us"]) * 1e-6)
        out.append({"problem": r["problem"], "m": int(r["m"]), "k": int(r["k"]), "n": int(r["n"]),
                    "dtype": r["dtype"], "sparsity": float(r["sparsity"]), "kernel": r["provider"],
                    "sparse_us": round(float(r["median_us"]), 2), "dense_us": round(float(d["median_us"]), 2),
                    "measured speedup": _sig(c["measured_speedup"]),
                    "predicted speedup": _sig(c["predicted_speedup"]),
                    "dense % SoL": _sig(100 * c["dense_fraction_of_sol"]),
                    "sparse % SoL": _sig(100 * c["sparse_fraction_of_sol"]),
                    "bound (dense/sparse)": f"{c['bound_dense']}/{c['bound_sparse']}",
                    "correct": str(r.get("correct", ""))})   # the same from a fresh run and from the CSV
    return out


BEST_OURS = "best of ours (per problem)"


def best_of_ours(compared: list[dict]) -> list[dict]:
    """Per (problem, dtype, sparsity), the row of our fastest kernel, relabelled :data:`BEST_OURS`."""
    best: dict[tuple, dict] = {}
    for r in compared:
        if r["kernel"] in OURS:
            key = (r["problem"], r["dtype"], r["sparsity"])
            if key not in best or r["measured speedup"] > best[key]["measured speedup"]:
                best[key] = r
    return [dict(r, kernel=BEST_OURS, chosen=r["kernel"]) for r in best.values()]


def summarize(compared: list[dict]) -> list[dict]:
    """Per (kernel, dtype), and for the best of our kernels per problem: geometric means of both
    speedups, median % of SoL, rows faster than dense."""
    out = []
    rows = compared + best_of_ours(compared)
    for kernel in dict.fromkeys(r["kernel"] for r in rows):
        for dtype in ("float32", "float16"):
            rs = [r for r in rows if r["kernel"] == kernel and r["dtype"] == dtype]
            if not rs:
                continue
            gm = lambda key: math.exp(float(np.mean([math.log(r[key]) for r in rs])))   # noqa: E731
            out.append({"kernel": kernel, "dtype": dtype, "rows": len(rs),
                        "geomean measured speedup": round(gm("measured speedup"), 3),
                        "geomean predicted speedup": round(gm("predicted speedup"), 3),
                        "median sparse % SoL": round(float(np.median([r["sparse % SoL"] for r in rs])), 1),
                        "median dense % SoL": round(float(np.median([r["dense % SoL"] for r in rs])), 1),
                        "faster than dense": sum(r["measured speedup"] > 1 for r in rs),
                        "all correct": all(str(r["correct"]) == "True" for r in rs)})
    return out


# ---- the older recorded table (results/uspmm.md)

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
    """The comparison for the older ``uspmm.md`` table (H100 datasheet peaks)."""
    problems_: dict[tuple, dict[str, float]] = {}
    for r in rows:
        if not r["median_us"]:      # a provider that did not run for this problem
            continue
        key = (int(r["m"]), int(r["k"]), int(r["n"]), float(r["sparsity"]), r["dtype"])
        problems_.setdefault(key, {})[r["provider"]] = float(r["median_us"]) * 1e-6
    out = []
    for (m, k, n, s, dtype), times in problems_.items():
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


def load_recorded(path: Path | None = None) -> tuple[list[dict], str]:
    """(comparison rows in :func:`compare_measured`'s keys, description) of a recorded measurement:
    ``path``, else :data:`MEASURED` when present, else the older :data:`RECORDED`."""
    path = path or (MEASURED if MEASURED.exists() else RECORDED)
    if path.suffix == ".csv":
        rows = read_csv(path)
        dev = next((r["device"] for r in rows if r.get("device")), "?")
        date = next((r["date"] for r in rows if r.get("date")), "?")
        return compare_measured(rows), f"`{path.name}` (measured on {dev}, {date})"
    old = compare_rows(measured_rows(path))
    rows = [{"problem": f"{r['m']}x{r['k']}x{r['n']}", "m": r["m"], "k": r["k"], "n": r["n"], "dtype": r["dtype"],
             "sparsity": r["sparsity"], "kernel": "USpMM tiled (ours)" if r["sparse kernel"] == "tiled"
             else r["sparse kernel"], "measured speedup": r["measured speedup"],
             "predicted speedup": r["predicted speedup"], "dense % SoL": r["dense % SoL"],
             "sparse % SoL": r["sparse % SoL"], "bound (dense/sparse)": r["bound (dense/sparse)"]} for r in old]
    return rows, f"`{path.name}` (its H100 table 'The tiled kernel against cuSPARSE and cuBLAS')"


# ----------------------------------------------------------------------------- report

MARKERS = {"USpMM config=auto (ours)": "o", "USpMM listing1 (ours)": "v", "USpMM tiled (ours)": "o",
           "CSR warp/row (ours)": "^", "CSR staged (ours)": "D", "cuSPARSE CSR (torch)": "s",
           "2:4 cuSPARSELt (torch)": "*"}


def plot(compared: list[dict], path: Path, title: str) -> str:
    """Left: measured vs predicted speedup (log-log, the diagonal is the paper's claim). Right: % of
    speed of light per kernel (sparse rows; the dense cuBLAS rows as reference)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.6))
    kernels = list(dict.fromkeys(r["kernel"] for r in compared))
    for kernel in kernels:
        for dtype, color in (("float32", "tab:blue"), ("float16", "tab:orange")):
            pts = [(r["predicted speedup"], r["measured speedup"]) for r in compared
                   if r["kernel"] == kernel and r["dtype"] == dtype]
            if pts:
                xs, ys = zip(*pts)
                star = MARKERS.get(kernel) == "*"   # the 2:4 points: larger and outlined, they sit among the CSR ones
                ax.scatter(xs, ys, marker=MARKERS.get(kernel, "x"), color=color, s=90 if star else 22, alpha=0.75,
                           edgecolors="k" if star else "none", linewidths=0.6, label=f"{kernel}, {dtype}")
    vals = [v for r in compared for v in (r["predicted speedup"], r["measured speedup"])] or [1.0]
    lo, hi = min(min(vals) / 1.5, 0.5), max(max(vals) * 1.5, 2.0)
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="measured = predicted")
    ax.axhline(1.0, color="gray", lw=0.6, ls=":")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi),
           xlabel="predicted speedup over dense (speed of light)", ylabel="measured speedup over dense cuBLAS")
    ax.legend(fontsize=6)
    ax.set_title(title, fontsize=9)
    labels, data = [], []
    for kernel in kernels:
        for dtype in ("float32", "float16"):
            v = [r["sparse % SoL"] for r in compared if r["kernel"] == kernel and r["dtype"] == dtype]
            if v:
                labels.append(f"{kernel.replace(' (ours)', '*').replace(' (torch)', '')}, {dtype}")
                data.append(v)
    for dtype in ("float32", "float16"):
        dense = {r["problem"]: r["dense % SoL"] for r in compared if r["dtype"] == dtype}
        if dense:
            labels.append(f"dense cuBLAS, {dtype}")
            data.append(list(dense.values()))
    jitter = np.random.default_rng(0)
    for i, v in enumerate(data):   # a strip plot: one dot per row, the median as a bar
        bx.scatter(v, i + jitter.uniform(-0.2, 0.2, len(v)), s=8, alpha=0.6,
                   color="tab:orange" if "float16" in labels[i] else "tab:blue")
        bx.plot([np.median(v)] * 2, [i - 0.35, i + 0.35], color="k", lw=1.5)
    bx.set_yticks(range(len(labels)), labels)
    bx.set_xscale("log")
    bx.set_xlabel("% of speed of light (median time)")
    bx.tick_params(axis="y", labelsize=6)
    bx.set_title("How far each kernel is from its roof (* = ours)", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, path)


def report_text(compared: list[dict], source: str) -> str:
    summary = summarize(compared) if compared and "sparse_us" in compared[0] else []
    lines = [f"Data: {source}. Speed of light from `sparsekit.roofline` with the device's datasheet peaks "
             "(float32 dense on CUDA cores with TF32 off, float16 dense on tensor cores, CSR/ELL on CUDA cores, "
             "2:4 on sparse tensor cores). The Sparsity Roofline's claim (Section 3.4): predicted = measured "
             "speedup exactly when the sparse and the dense kernel reach the same fraction of their speed of "
             "light; predicted / measured = dense % SoL / sparse % SoL."]
    if summary:
        lines.append("")
        lines.append(markdown_table(summary))
    return "\n".join(lines)


def run(ctx: Context) -> Section:
    """GPU: measure (quick: three shapes); otherwise the recorded run."""
    if ctx.on_gpu:
        rows = measure_all(problems(ctx.quick), progress=lambda m: None, budget_s=None)
        write_csv(rows, ctx.out_dir / "roofline_measured.csv")
        compared = compare_measured(rows)
        source = f"measured now on {rows[0]['device']} ({rows[0]['date']})" if rows else "no rows"
    else:
        compared, source = load_recorded()
    text = report_text(compared, source)
    return Section("Sparsity Roofline against measured kernels", text=text,
                   tables=[Table("Predicted vs measured speedup over dense cuBLAS", compared,
                                 "predicted_vs_measured.csv")],
                   figures=[plot(compared, ctx.out_dir / "predicted_vs_measured.png", "Sparsity Roofline vs "
                                 + ("this GPU" if ctx.on_gpu else "the recorded run"))])


EXPERIMENT = Experiment("roofline_validation", "Sparsity Roofline against measured kernels",
                        "The Sparsity Roofline (Section 3.4): predicted vs measured speedup, USpMM/CSR/cuSPARSE/"
                        "cuBLAS/2:4", run)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("recorded", nargs="?", type=Path, help="recorded CSV or uspmm.md (without --measure)")
    ap.add_argument("--measure", action="store_true", help="measure on this GPU")
    ap.add_argument("--quick", action="store_true", help="three shapes only")
    ap.add_argument("--budget-s", type=float, default=None, help="stop starting new shapes after this many s")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--out", type=Path, default=Path("."))
    args = ap.parse_args(argv)
    if not args.measure:
        compared, source = load_recorded(args.recorded)
        print(report_text(compared, source))
        print()
        print(markdown_table(compared))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    csv_path = args.out / "roofline_measured.csv"
    rows = measure_all(problems(args.quick), repeat=args.repeat, budget_s=args.budget_s,
                       progress=lambda m: print(m, flush=True), on_record=lambda rs: write_csv(rs, csv_path))
    write_csv(rows, csv_path)
    for r in rows:
        if r.get("error"):
            print(f"ERROR {r['problem']} {r['dtype']} {r['sparsity']} {r['provider']}: {r['error']}", flush=True)
    compared = compare_measured(rows)
    source = f"measured on {rows[0]['device']}, {rows[0]['date']}"
    text = report_text(compared, source) + "\n\n" + markdown_table(compared) + "\n"
    (args.out / "roofline_vs_measured.md").write_text(text)
    plot(compared, args.out / "predicted_vs_measured.png", f"Sparsity Roofline vs {rows[0]['device']}")
    print(report_text(compared, source))
    bad = [r for r in compared if str(r["correct"]) != "True"]
    print(f"{len(compared)} sparse rows compared, {len(bad)} not within the error bound", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
