"""CSR SpMM benchmarks: our CPU kernels and GPU lessons against scipy.sparse, BLAS, cuSPARSE and cuBLAS.

``sparsekit bench spmm`` runs them on a user's matrix or a suite problem; the teaching experiment and
``experiments/bench_teaching.py`` build their sweeps on them. Each returns one record per configuration (times
with spread, ``correct``).

Problems: :data:`sparsekit.models.SPMM_SUITE` (the course slides' Table 1), ``A`` = magnitude-pruned N(0, 1)
weights (:func:`sparsekit.prune.magnitude`, fixed seed), ``B`` = N(0, 1) activations, float32. CPU times are
wall clock (median of ``repeat`` after a warm-up call, threads = ``numba.get_num_threads()``); GPU times are
device times from :func:`sparsekit.timing.measure` (L2 flushed).

In float16 and bfloat16 (:func:`half_problem`: the same matrix and ``B`` rounded to the dtype) only the GPU kernels
that take the dtype run (:func:`bench_gpu_half`): ``spmm_csr``'s default route, the TiledBitmap and the TiledCSL
row kernels, against dense cuBLAS and cuSPARSE CSR in the dtype through PyTorch; each record also gives the
weight's bytes in the provider's format and their share of the copy bandwidth, and ``correct`` is
:class:`HalfCheck`'s (float32 sums of the 16-bit operands in any order, one rounding to the dtype).
"""
from __future__ import annotations

import os
import time
from typing import Callable, NamedTuple

import numpy as np

from sparsekit.arrays import cuda_torch, half_b_on_device

def suite_matrix(m: int, k: int, n: int, sparsity: float, *, seed: int = 0):
    """``(csr, b, dense_a)``: magnitude-pruned N(0,1) ``m x k`` float32 weights and an N(0,1) ``k x n`` B."""
    from sparsekit.formats import CSR
    from sparsekit.prune import magnitude

    rng = np.random.default_rng([seed, m, k, n, int(round(sparsity * 1000))])
    w = rng.standard_normal((m, k)).astype(np.float32)
    mask = magnitude(w, sparsity)
    a = np.where(mask, w, np.float32(0))
    b = rng.standard_normal((k, n)).astype(np.float32)
    return CSR.from_dense(a, mask), b, a



def host_bytes(m: int, k: int, n: int, nnz: int, dtype: str = "float32") -> int:
    """About the most host memory a benchmark of an ``m x k`` CSR matrix with ``nnz`` entries times a ``k x n`` B
    holds at once (:func:`suite_matrix` or a read matrix, then :func:`bench_cpu_matrix` or
    :func:`bench_gpu_problem`), for refusing a problem that cannot fit: per element of the dense A 32 bytes (its
    float64 draw, float32 copy, mask, and the float64 ``|A|`` of :class:`Checker`), of B 24 (float32 and the
    float64 copies of the check), of C 48 (the float64 product, bound and temporaries of the check and each
    result), per stored entry 40 (the CSR, its coordinates and scipy copy). tracemalloc measured 50-80 % of it
    at toy sizes, each operand dominant in turn.

    float16 and bfloat16 (:func:`half_problem`, then :func:`bench_gpu_half`; no CPU kernel runs): per element of A
    28 (the draw and pruning of :func:`suite_matrix`; later the 16-bit copy, its float32 widening and ``|A|`` of
    :class:`HalfCheck` take less), of B 16 (float32, 16-bit, widened and ``|B|``), of C 24 (the float32 product,
    bound and temporaries of the check and each result), per stored entry 132 (the CSR in float32 and in the
    dtype, the TiledBitmap and TiledCSL the kernels read, and the temporaries of ``TiledBitmap.from_csr``, about
    112). tracemalloc measured 60-80 % of it at toy sizes from 0 to 90 % sparsity, each operand dominant in turn."""
    if dtype in HALF_DTYPES:
        return 28 * m * k + 16 * k * n + 24 * m * n + 132 * nnz
    return 32 * m * k + 24 * k * n + 48 * m * n + 40 * nnz


def spmm_bound(a64: np.ndarray, b64: np.ndarray, c64: np.ndarray) -> np.ndarray:
    """float32 accumulation bound of ``tests/spmm_close.py``: (k+1) u |A||B| + u |C| (u = 2^-24)."""
    u = 2.0 ** -24
    return (a64.shape[1] + 1) * u * (np.abs(a64) @ np.abs(b64)) + u * np.abs(c64)


class Checker:
    """``checker(got)``: is ``got`` within :func:`spmm_bound` of the float64 ``a @ b``? (computed once)"""

    def __init__(self, a: np.ndarray, b: np.ndarray):
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        self.c64 = a64 @ b64
        self.bound = spmm_bound(a64, b64, self.c64)

    def __call__(self, got) -> bool:
        return bool((np.abs(np.asarray(got, dtype=np.float64) - self.c64) <= self.bound).all())



def wall_time(fn, repeat: int = 7) -> tuple[float, float, float]:
    """Median, 10th and 90th percentile wall-clock seconds of ``fn()`` after one warm-up call."""
    fn()
    t = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return float(np.median(t)), float(np.percentile(t, 10)), float(np.percentile(t, 90))


def tune_tiles(csr, b, *, parallel: bool = True, tiles=None, repeat: int = 3):
    """The autotuner: exhaustive grid search of ``spmm_csr_tiled`` over (tile_n, tile_k) in TILES^2.

    Returns ``(best (tile_n, tile_k), records)``; a record per pair with its median time.
    """
    from sparsekit.cpu.spmm import TILES, spmm_csr_tiled

    tiles = TILES if tiles is None else tiles
    recs = []
    for tn in tiles:
        for tk in tiles:
            med, _, _ = wall_time(lambda: spmm_csr_tiled(csr, b, tile_n=tn, tile_k=tk, parallel=parallel), repeat)
            recs.append({"tile_n": tn, "tile_k": tk, "ms": med * 1e3})
    best = min(recs, key=lambda r: r["ms"])
    return (best["tile_n"], best["tile_k"]), recs



def bench_cpu_matrix(csr, b: np.ndarray, a: np.ndarray, *, repeat: int = 5, tune: bool = True) -> dict:
    """One matrix: scipy.sparse, dense BLAS, our rowwise (serial/parallel) and tuned tiled kernel (ms)."""
    import numba

    from sparsekit.cpu.spmm import spmm_csr, spmm_csr_tiled

    sp = csr.to_scipy()
    t = {"scipy": wall_time(lambda: sp @ b, repeat)[0],
         "dense BLAS": wall_time(lambda: a @ b, repeat)[0],
         "rowwise": wall_time(lambda: spmm_csr(csr, b), repeat)[0],
         "rowwise parallel": wall_time(lambda: spmm_csr(csr, b, parallel=True), repeat)[0]}
    (tn, tk), _ = tune_tiles(csr, b, repeat=2) if tune else ((64, 64), [])
    t[f"tiled {tn}x{tk} parallel"] = wall_time(
        lambda: spmm_csr_tiled(csr, b, tile_n=tn, tile_k=tk, parallel=True), repeat)[0]
    ours = {name: v for name, v in t.items() if name not in ("scipy", "dense BLAS")}
    best = min(ours, key=ours.get)
    check = Checker(a, b)
    ok = all(check(x) for x in (spmm_csr(csr, b, parallel=True),
                               spmm_csr_tiled(csr, b, tile_n=tn, tile_k=tk, parallel=True)))
    return {"scipy_ms": t["scipy"] * 1e3, "dense_blas_ms": t["dense BLAS"] * 1e3,
            "rowwise_ms": t["rowwise"] * 1e3, "rowwise_par_ms": t["rowwise parallel"] * 1e3,
            "tiled_par_ms": t[f"tiled {tn}x{tk} parallel"] * 1e3, "best_ours": best,
            "speedup_vs_scipy": t["scipy"] / ours[best], "speedup_vs_dense": t["dense BLAS"] / ours[best],
            "threads": numba.get_num_threads(), "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
            "correct": ok}



def gpu_providers(csr, n: int, *, tune: bool = True):
    """Our GPU CSR kernels for ``B`` of ``n`` columns by name -> ``launch(b_dev)``; with ``tune`` the
    grid-searched variants too."""
    from sparsekit.gpu import spmm as prod
    from sparsekit.gpu import spmm_lessons as les
    from sparsekit.formats import CSR

    d = les.prepare(csr)
    p = prod.prepare(csr, CSR)
    staged = prod.staged_tunables(p, n)
    vec = staged["vector"]
    out = {
        "1 thread_per_row": lambda b: les.thread_per_row(d, b),
        "2 warp_per_row": lambda b: les.warp_per_row(d, b),
        "3 smem_tiled": lambda b: les.smem_tiled(d, b),
        "4 warp_per_row_swizzled": lambda b: les.warp_per_row_swizzled(d, b),
        "3+4 smem_tiled_swizzled": lambda b: les.smem_tiled(d, b, swizzle=True),
        "5 thread_group": lambda b: les.thread_group(d, b),
        "6 balanced_blocks": lambda b: les.balanced_blocks(d, b),
        "gpu.spmm csr swizzle": lambda b: prod.spmm_csr(p, b, swizzle=True),
        "7 row_split": lambda b: les.row_split(d, b),
        "gpu.spmm staged (staged_tunables)": lambda b: prod.spmm_csr(p, b, **staged),
    }
    if tune:
        for nw in (4, 8):
            for rpw in (4, 8):
                for tk in (32,):
                    out[f"smem_tiled_swizzled nw={nw} rpw={rpw} tk={tk}"] = (
                        lambda b, nw=nw, rpw=rpw, tk=tk: les.smem_tiled(d, b, nwarps=nw, rows_per_warp=rpw,
                                                                       tile_k=tk, swizzle=True))
        for g in (4, 8):
            for ks in (1, 4):
                out[f"thread_group groups={g} k_split={ks}"] = (
                    lambda b, g=g, ks=ks: les.thread_group(d, b, groups=g, k_split=ks))
        for rpb in (8, 64):
            out[f"balanced_blocks rows_per_block={rpb}"] = (
                lambda b, rpb=rpb: les.balanced_blocks(d, b, rows_per_block=rpb))
        for cpl in (2, 4):
            out[f"gpu.spmm csr swizzle cpl={cpl}"] = (
                lambda b, cpl=cpl: prod.spmm_csr(p, b, swizzle=True, cols_per_lane=cpl))
        for wpr in (1, 2, 4, 8):
            kw = dict(swizzle=True, warps_per_row=wpr, warps_per_block=max(4, wpr), vector=vec, cols_per_lane=2)
            out[f"gpu.spmm staged wpr={wpr} vec={vec} cpl=2"] = lambda b, kw=kw: prod.spmm_csr(p, b, **kw)
    return out



def device_timer(repeat: int):
    """``timer(launch) -> (median, p10, p90)``: device seconds of ``repeat`` launches after 3 warm-up ones
    (:func:`sparsekit.timing.measure`, L2 flushed)."""
    from sparsekit.timing import measure

    def timer(launch):
        m = measure(launch, repeat=repeat, warmup=3)
        return m.median_s, m.p10_s, m.p90_s
    return timer


def bench_gpu_problem(csr, b: np.ndarray, a: np.ndarray, *, repeat: int = 20, tune: bool = True,
                      timer=None, providers=None) -> list[dict]:
    """One record per provider (ours, cuSPARSE CSR and dense cuBLAS through PyTorch when present).

    ``timer(launch) -> (median, p10, p90)`` seconds defaults to :func:`device_timer`;
    ``providers`` (name -> ``launch(b_dev)``) defaults to :func:`gpu_providers`.
    """
    from numba import cuda

    timer = device_timer(repeat) if timer is None else timer
    b_dev = cuda.to_device(b)
    check = Checker(a, b)
    recs = []
    for name, fn in (gpu_providers(csr, b.shape[1], tune=tune) if providers is None else providers).items():
        try:
            got = fn(b_dev).copy_to_host()
            med, p10, p90 = timer(lambda: fn(b_dev))
        except Exception as err:   # one failing configuration must not end a one-shot GPU run: record it
            recs.append({"provider": name, "us": float("nan"), "p10_us": float("nan"), "p90_us": float("nan"),
                         "correct": False, "error": f"{type(err).__name__}: {err}"[:200]})
            continue
        recs.append({"provider": name, "us": med * 1e6, "p10_us": p10 * 1e6, "p90_us": p90 * 1e6,
                     "correct": check(got)})
    torch = cuda_torch()
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = False
        tb = torch.as_tensor(b, device="cuda")
        ta = torch.sparse_csr_tensor(torch.as_tensor(csr.indptr.astype(np.int64)),
                                     torch.as_tensor(csr.indices.astype(np.int64)),
                                     torch.as_tensor(csr.data), size=csr.shape).cuda()
        td = torch.as_tensor(a, device="cuda")
        for name, fn in (("cuSPARSE CSR (torch)", lambda: ta @ tb), ("cuBLAS dense (torch)", lambda: td @ tb)):
            got = fn().cpu().numpy()
            med, p10, p90 = timer(fn)
            recs.append({"provider": name, "us": med * 1e6, "p10_us": p10 * 1e6, "p90_us": p90 * 1e6,
                         "correct": check(got)})
    return recs




# ---------------------------------------------------------------------------------------------------------------
# float16 and bfloat16 on the GPU
# ---------------------------------------------------------------------------------------------------------------

#: The 16-bit dtypes: only the GPU kernels that take them run (float32 runs every kernel, CPU and GPU).
HALF_DTYPES = ("float16", "bfloat16")
#: Machine epsilon of each 16-bit dtype (twice its unit roundoff): the bound of a result's one rounding to it.
ROUNDING = {"bfloat16": 2.0 ** -7, "float16": 2.0 ** -10}
DENSE, CUSPARSE = "cuBLAS dense (torch)", "cuSPARSE CSR (torch)"


def error_bound(x32, w32, dname: str):
    """``(ref, bound)``: the float32 product ``ref = x32 @ w32^T`` (``x32``: N x K, ``w32``: M x K, float32 NumPy
    arrays or PyTorch tensors of 16-bit values) and an elementwise bound on ``|Y - ref|`` for a result ``Y`` of
    float32 sums in any order (``2 K u32`` of the absolute product: ``ref``'s own sums and ``Y``'s) rounded once to
    ``dname`` (the tests' bound, ``tests/spmm_close.py``)."""
    k = x32.shape[1]
    ref = x32 @ w32.T
    return ref, 2 * k * 2.0 ** -24 * (abs(x32) @ abs(w32).T) + ROUNDING[dname] * abs(ref) + 1e-6


class HalfCheck:
    """``check(got)``: is ``got`` (``M x N``, a 16-bit ``A @ B``) within :func:`error_bound` of the float32 product
    of the same 16-bit operands ``a16`` (``M x K``) and ``b16`` (``K x N``)? (computed once, as ``(A B)^T``: the
    bound's linear-layer form)"""

    def __init__(self, a16: np.ndarray, b16: np.ndarray):
        self.ref_t, self.bound_t = error_bound(b16.T.astype(np.float32), a16.astype(np.float32), a16.dtype.name)

    def __call__(self, got) -> bool:
        return bool((np.abs(np.asarray(got).T.astype(np.float32) - self.ref_t) <= self.bound_t).all())


def half_problem(csr, b: np.ndarray, dtype: str):
    """``(csr16, b16)``: the matrix's values and ``b`` rounded to ``dtype`` (float16 or bfloat16, to nearest even).
    ``ValueError`` where a value leaves the dtype's range (float16's largest is 65504)."""
    from sparsekit.checks import BFLOAT16
    from sparsekit.formats import CSR

    if dtype not in HALF_DTYPES:
        raise ValueError(f"dtype: must be one of {HALF_DTYPES}, got {dtype!r}")
    npdt = BFLOAT16 if dtype == "bfloat16" else np.dtype(np.float16)
    with np.errstate(over="ignore"):                      # a value past the range is refused just below
        data, b16 = csr.data.astype(npdt), b.astype(npdt)
    for name, x, src in (("the matrix", data, csr.data), ("B", b16, b)):
        if x.size and not np.isfinite(x).all():
            raise ValueError(f"{name} has values past {dtype}'s range (largest |value| "
                             f"{float(np.abs(src).max()):.6g}); scale it, or keep float32")
    return CSR(csr.indptr, csr.indices, data, csr.shape), b16


class HalfProvider(NamedTuple):
    """One provider of :func:`bench_gpu_half`: ``launch()`` -> ``C`` (``M x N``, the dtype), the bytes of the
    weight in its format, what it runs; ``launch`` None where it does not run the problem, with the ``reason``."""

    launch: Callable | None
    nbytes: int | None
    format: str
    reason: str = ""


def _skipped(fmt: str, reason: str) -> HalfProvider:
    return HalfProvider(None, None, fmt, reason)


def our_half_providers(csr16, b_dev) -> dict:
    """Our kernels for the 16-bit ``csr16`` times ``b_dev`` (``K x N`` on the device), by name: ``spmm_csr``'s default
    (``config="auto"``: :func:`sparsekit.gpu.spmm.auto_route` names the route and so the format it reads), the
    TiledBitmap kernel and the TiledCSL row kernel (each up to its ``MAX_N``; the formats built once, shared with
    the default's route)."""
    from sparsekit.formats import CSR, TiledCSL
    from sparsekit.gpu import spmm as gs
    from sparsekit.gpu import spmm_bitmap as gb
    from sparsekit.gpu import spmm_tiled as gt

    dev = gs.prepare(csr16, CSR)
    n = b_dev.shape[1]
    formats = {"rows": ("TiledCSL %dx%d" % TiledCSL.row_tile(dev.shape[1]), dev.tiled_rows),   # name, prepared
               "bitmap": ("TiledBitmap", dev.bitmap), "ell": ("ELL (rows padded)", dev.padded_ell),
               "staged": ("CSR", lambda: dev)}
    route = gs.auto_route(dev, n)
    fmt, prepared = formats[route]
    out = {f"spmm_csr auto (route: {route})": HalfProvider(lambda: gs.spmm_csr(dev, b_dev),
                                                           prepared().host.nbytes().total, fmt)}
    for name, route, kernel, max_n in (("spmm_bitmap", "bitmap", gb.spmm_bitmap, gb.MAX_N),
                                       ("spmm_tiled row kernel", "rows", gt.spmm_tiled, gt.MAX_N)):
        fmt, prepared = formats[route]
        if n > max_n:
            out[name] = _skipped(fmt, f"N = {n} past {kernel.__module__}.MAX_N = {max_n}")
        else:
            out[name] = HalfProvider(lambda kernel=kernel, a=prepared(): kernel(a, b_dev),
                                     prepared().host.nbytes().total, fmt)
    return out


def torch_half_providers(csr16, a16: np.ndarray, b16: np.ndarray, torch, device: str = "cuda") -> dict:
    """Dense cuBLAS and cuSPARSE CSR in the 16-bit dtype through ``torch`` on ``device``: ``A @ B`` of the dense
    ``a16`` (``2 M K`` bytes; PyTorch's own settings: the dense product a model runs, its check saying whether
    its sums stay within the float32 bound) and
    of a ``torch.sparse_csr_tensor`` (int64 indices: values, indices and row pointers counted); a conversion or
    product PyTorch refuses in the dtype gives the reason instead."""
    from sparsekit.arrays import torch_tensor

    tb = torch_tensor(b16, torch).to(device)
    td = torch_tensor(a16, torch).to(device)
    out = {DENSE: HalfProvider(lambda: td @ tb, 2 * a16.size, "dense")}
    try:
        ta = torch.sparse_csr_tensor(torch.as_tensor(csr16.indptr.astype(np.int64)),
                                     torch.as_tensor(csr16.indices.astype(np.int64)),
                                     torch_tensor(csr16.data, torch), size=csr16.shape,
                                     check_invariants=False).to(device)         # (csr16 was checked when made)
        ta @ tb                                       # a product PyTorch refuses in the dtype raises here
    except (RuntimeError, TypeError, NotImplementedError) as err:
        out[CUSPARSE] = _skipped("CSR int64", f"PyTorch refuses: {type(err).__name__}: "
                                              f"{str(err).splitlines()[0][:200]}")
        return out
    nbytes = sum(t.numel() * t.element_size() for t in (ta.values(), ta.col_indices(), ta.crow_indices()))
    out[CUSPARSE] = HalfProvider(lambda: ta @ tb, nbytes, "CSR int64")
    return out


def half_providers(csr16, b16: np.ndarray) -> dict:
    """:func:`our_half_providers` and, when PyTorch sees a GPU, :func:`torch_half_providers` (else their records
    say PyTorch is missing)."""
    torch = cuda_torch()
    out = our_half_providers(csr16, half_b_on_device(b16))
    if torch is None:
        return out | {DENSE: _skipped("dense", "needs PyTorch with CUDA"),
                      CUSPARSE: _skipped("CSR int64", "needs PyTorch with CUDA")}
    return out | torch_half_providers(csr16, csr16.to_dense(), b16, torch)


def half_exit_status(recs: list[dict]) -> int:
    """The command's exit status for :func:`bench_gpu_half`'s records: 1 where one of our kernels is off the bound or
    failed, else 0. A baseline's ``correct`` is reported, not failed on: cuSPARSE's 16-bit CSR product leaves the
    float32-sum bound on the suite's problems (its own summation, not ours)."""
    return 1 if any(r["correct"] is False for r in recs if r["provider"] not in (DENSE, CUSPARSE)) else 0


def bench_gpu_half(csr16, b16: np.ndarray, *, repeat: int = 20, timer=None, providers=None,
                   bandwidth: float | None = None) -> list[dict]:
    """One record per provider for the 16-bit ``csr16 @ b16`` (:func:`half_problem`): device microseconds (median,
    p10, p90), speedup over dense cuBLAS, the weight's bytes in the provider's format and those bytes over the time
    as a percentage of ``bandwidth`` (default :func:`sparsekit.timing.measured_bandwidth`, the copy bandwidth),
    ``correct`` (:class:`HalfCheck`; None where the provider did not run) and ``reason`` (why it did not run, or
    the error of one that failed: then ``correct`` is False).

    ``timer(launch) -> (median, p10, p90)`` seconds defaults to :func:`device_timer`; ``providers`` (name ->
    :class:`HalfProvider`) to :func:`half_providers`.
    """
    from sparsekit.arrays import to_host
    from sparsekit.timing import measured_bandwidth

    timer = device_timer(repeat) if timer is None else timer
    bandwidth = measured_bandwidth() if bandwidth is None else bandwidth
    providers = half_providers(csr16, b16) if providers is None else providers
    check = HalfCheck(csr16.to_dense(), b16)
    recs = []
    for name, p in providers.items():
        rec = {"provider": name, "format": p.format, "us": float("nan"), "p10_us": float("nan"),
               "p90_us": float("nan"), "speedup_vs_dense": float("nan"), "weight_bytes": p.nbytes,
               "pct_bandwidth": float("nan"), "correct": None, "reason": p.reason}
        recs.append(rec)
        if p.launch is None:
            continue
        try:
            rec["correct"] = check(to_host(p.launch()))
            times = timer(p.launch)
        except Exception as err:   # one failing kernel must not end a one-shot GPU run: record it
            rec.update(correct=False, reason=f"{type(err).__name__}: {err}"[:200])
            continue
        rec.update(us=times[0] * 1e6, p10_us=times[1] * 1e6, p90_us=times[2] * 1e6,
                   pct_bandwidth=100 * p.nbytes / times[0] / bandwidth if times[0] > 0 else float("nan"))
    dense_us = next((r["us"] for r in recs if r["provider"] == DENSE), float("nan"))
    for rec in recs:
        rec["speedup_vs_dense"] = dense_us / rec["us"] if rec["us"] > 0 else float("nan")
    return recs
