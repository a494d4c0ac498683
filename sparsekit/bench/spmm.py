"""CSR SpMM benchmarks: our CPU kernels and GPU lessons against scipy.sparse, BLAS, cuSPARSE and cuBLAS.

``sparsekit bench spmm`` runs them on a user's matrix or a suite problem; the teaching experiment and
``experiments/bench_teaching.py`` build their sweeps on them. Each returns one record per configuration (times
with spread, ``correct``).

Problems: :data:`sparsekit.models.SPMM_SUITE` (the course slides' Table 1), ``A`` = magnitude-pruned N(0, 1)
weights (:func:`sparsekit.prune.magnitude`, fixed seed), ``B`` = N(0, 1) activations, float32. CPU times are
wall clock (median of ``repeat`` after a warm-up call, threads = ``numba.get_num_threads()``); GPU times are
device times from :func:`sparsekit.timing.measure` (L2 flushed).
"""
from __future__ import annotations

import os
import time

import numpy as np

from sparsekit.bench import cuda_torch

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



def host_bytes(m: int, k: int, n: int, nnz: int) -> int:
    """About the most host memory a benchmark of an ``m x k`` CSR matrix with ``nnz`` entries times a ``k x n`` B
    holds at once (:func:`suite_matrix` or a read matrix, then :func:`bench_cpu_matrix` or
    :func:`bench_gpu_problem`), for refusing a problem that cannot fit: per element of the dense A 32 bytes (its
    float64 draw, float32 copy, mask, and the float64 ``|A|`` of :class:`Checker`), of B 24 (float32 and the
    float64 copies of the check), of C 48 (the float64 product, bound and temporaries of the check and each
    result), per stored entry 40 (the CSR, its coordinates and scipy copy). tracemalloc measured 50-80 % of it
    at toy sizes, each operand dominant in turn."""
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

