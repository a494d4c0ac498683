"""2:4 tile sparsifier benchmark: our kernels against PyTorch's tile sparsifier, and the share of ``|w|`` each
transposable mask keeps.

``sparsekit bench sparsify24`` runs :func:`kept_magnitude` (NumPy reference, everywhere) and, on a GPU,
:func:`check_reference` and :func:`bench_shape`; ``experiments/sparsify24.py`` (the experiment) and
``experiments/bench_sparsify24.py`` (the GPU checks and sweeps) build on them.

:func:`bench_shape`: one record per provider with median/p10/p90 device time (:func:`sparsekit.timing.measure`,
L2 flushed), GB/s of the bytes the kernel must move (read W, write packed W, packed W^T, both metadata and the tile
masks: 4.375 bytes per fp16 element) and % of the measured copy bandwidth.
"""
from __future__ import annotations

import numpy as np

from sparsekit.reference import sparsify24 as ref

#: Our providers: name -> (dtype, prepare() keywords).
OURS = {
    "ours greedy (index ties)": (np.float16, dict(method="greedy", ties="index")),
    "ours greedy (torch ties)": (np.float16, dict(method="greedy", ties="torch")),
    "ours optimal (186)": (np.float16, dict(method="optimal")),
    "ours optimal_full (90)": (np.float16, dict(method="optimal_full")),
    "ours greedy, 32-thread blocks": (np.float16, dict(method="greedy", row_threads=4)),
    "ours greedy, 64-thread blocks": (np.float16, dict(method="greedy", row_threads=8)),
    "ours greedy, 256-thread blocks": (np.float16, dict(method="greedy", row_threads=32)),
    "ours greedy fp32": (np.float32, dict(method="greedy", ties="index")),
}


def log(*a):
    """Print at once (a GPU run's progress shows while it runs)."""
    print(*a, flush=True)


def bytes_moved(m: int, k: int, itemsize: int) -> int:
    """Bytes the sparsifier must read and write: W, packed W and W^T, both metadata, tile masks."""
    return m * k * itemsize + 2 * (m * k // 2) * itemsize + 2 * (m * k // 16) * 2 + (m * k // 16) * 2


def random_weight(rng, shape, dtype):
    """An N(0, 1) weight of ``shape`` drawn by ``rng``, as ``dtype``."""
    return rng.standard_normal(shape).astype(dtype)


def check_reference(results: dict, providers: dict = OURS) -> bool:
    """Every provider equals :func:`sparsekit.reference.sparsify24.sparsify24` bit for bit at 256x192 (normal values and
    ties) and repeats identically; one record each under ``results["reference"]``."""
    from sparsekit.gpu import sparsify24 as gpu
    rng = np.random.default_rng(0)
    ok_all = True
    for name, (dtype, kw) in providers.items():
        for data in ("normal", "ties"):
            w = random_weight(rng, (256, 192), dtype) if data == "normal" else \
                rng.integers(-2, 3, (256, 192)).astype(dtype)
            got = gpu.sparsify24(w, **kw)
            want = ref.sparsify24(w, method=kw["method"], ties=kw.get("ties", "index"))
            ok = all(np.array_equal(getattr(got, f).view(np.uint8), getattr(want, f).view(np.uint8))
                     for f in ("tile_masks", "packed", "meta", "packed_t", "meta_t"))
            again = gpu.sparsify24(w, **kw)
            det = all(np.array_equal(getattr(got, f), getattr(again, f)) for f in ("packed", "meta", "meta_t"))
            log(f"  reference {name:45s} {data:6s} equal={ok} repeat-identical={det}")
            results.setdefault("reference", []).append(dict(provider=name, data=data, equal=ok, repeat=det))
            ok_all &= ok and det
    return ok_all


def bench_shape(m: int, k: int, providers: dict, *, copy_bw: float, repeat: int = 30,
                baselines: bool = True) -> list[dict]:
    """One record per provider: device time (median, p10, p90), GB/s, % of copy bandwidth.

    ``baselines``: also PyTorch's tile sparsifier (both metadata layouts) and ``to_sparse_semi_structured``.
    """
    from numba import cuda
    from sparsekit.gpu import sparsify24 as gpu
    from sparsekit.timing import measure
    rng = np.random.default_rng(0)
    records = []
    for name, (dtype, kw) in providers.items():
        w = cuda.to_device(random_weight(rng, (m, k), dtype))
        launch, _ = gpu.prepare(w, **kw)
        meas = measure(launch, repeat=repeat, warmup=3, flush_l2=True)
        nbytes = bytes_moved(m, k, np.dtype(dtype).itemsize)
        records.append(_record(name, m, k, np.dtype(dtype).name, meas, nbytes, copy_bw))
    if not baselines:
        return records
    try:
        import torch
    except ImportError:
        log("  torch not installed: no PyTorch baseline")
        return records
    from torch.sparse import to_sparse_semi_structured
    w = torch.randn(m, k, device="cuda", dtype=torch.float16)
    nbytes = bytes_moved(m, k, 2)
    meas = measure(lambda: torch._sparse_semi_structured_tile(w, algorithm="largest_abs_values_greedy",
                                                              use_cutlass=True), repeat=repeat, warmup=3)
    records.append(_record("torch._sparse_semi_structured_tile (CUTLASS meta)", m, k, "float16", meas, nbytes, copy_bw))
    meas = measure(lambda: torch._sparse_semi_structured_tile(w, algorithm="largest_abs_values_greedy",
                                                              use_cutlass=False), repeat=repeat, warmup=3)
    records.append(_record("torch._sparse_semi_structured_tile (cuSPARSELt meta)", m, k, "float16", meas, nbytes,
                           copy_bw))
    try:
        from numba import cuda as ncuda
        tm = gpu.sparsify24(ncuda.as_cuda_array(w)).tile_masks.copy_to_host()
        dense24 = torch.from_numpy(ref.mask_from_tiles(tm)).cuda() * w     # a 2:4 matrix to compress
        meas = measure(lambda: to_sparse_semi_structured(dense24), repeat=repeat, warmup=3)
        records.append(_record("to_sparse_semi_structured (compress only, W only)", m, k, "float16", meas,
                               m * k * 2 + m * k + m * k // 8, copy_bw))
    except Exception as e:  # noqa: BLE001 - a baseline that does not run is reported, not fatal
        log(f"  to_sparse_semi_structured failed: {type(e).__name__}: {e}")
    return records


def _record(name, m, k, dtype, meas, nbytes, copy_bw):
    rec = dict(provider=name, m=m, k=k, dtype=dtype, median_us=meas.median_s * 1e6, p10_us=meas.p10_s * 1e6,
               p90_us=meas.p90_s * 1e6, gbps=nbytes / meas.median_s / 1e9,
               pct_copy_bw=100 * nbytes / meas.median_s / copy_bw)
    log(f"  {name:55s} {m}x{k} {dtype}: {rec['median_us']:8.1f} us (p10 {rec['p10_us']:.1f}, "
        f"p90 {rec['p90_us']:.1f})  {rec['gbps']:7.0f} GB/s  {rec['pct_copy_bw']:5.1f}% of copy")
    return rec


#: Host bytes per weight element at the peak of :func:`kept_magnitude` on a random fp16 weight, the weight and
#: its float64 draw included: float64 copies of ``|w|`` by element and by tile, each mask's bits and per-tile sums
#: (184 measured with tracemalloc at 512 x 1024 and 1024 x 2048).
HOST_BYTES_PER_ELEMENT = 192
#: Host bytes that do not grow with the weight (tables of the reference's optimal masks and small arrays: 198
#: bytes an element measured at 256 x 256).
HOST_BYTES_FIXED = 2**20


def host_bytes(m: int, k: int) -> int:
    """About the most host memory :func:`kept_magnitude` of a random ``m x k`` fp16 weight holds at once (more
    than :func:`bench_shape`'s host weight, 10 bytes an element), for refusing a shape that cannot fit."""
    return HOST_BYTES_PER_ELEMENT * m * k + HOST_BYTES_FIXED


#: The transposable masks compared: (method, tie order) of :func:`sparsekit.reference.sparsify24.tile_masks`.
MASKS = [("greedy", "index"), ("greedy", "torch"), ("optimal", "index"), ("optimal_full", "index")]


def _row_24(a: np.ndarray) -> np.ndarray:
    """Row-wise 2:4 by magnitude (the 2 largest of each group of 4 along a row): bool mask."""
    m, k = a.shape
    g = a.reshape(m, k // 4, 4)
    top = np.argsort(-g, axis=2, kind="stable")[:, :, :2]
    mask = np.zeros_like(g, bool)
    np.put_along_axis(mask, top, True, axis=2)
    return mask.reshape(m, k)


def kept_magnitude(w: np.ndarray) -> list[dict]:
    """One record per mask: share of sum |w| kept, tiles keeping 7, per-tile comparisons."""
    a = np.abs(w.astype(np.float64))
    total = a.sum()
    m, k = w.shape
    a_tiles = a.reshape(m // 4, 4, k // 4, 4).transpose(0, 2, 1, 3).reshape(-1, 16)  # (T, 4r + c)
    per_tile = {}
    recs = []
    for method, ties in MASKS:
        tm = ref.tile_masks(w, method=method, ties=ties)
        mask = ref.mask_from_tiles(tm)
        bits = (tm.ravel().astype(np.int64)[:, None] >> np.arange(16)) & 1
        per_tile[(method, ties)] = (a_tiles * bits).sum(axis=1)
        kept = bits.sum(axis=1)
        recs.append(dict(mask=f"{method} ({ties} ties)" if method == "greedy" else method,
                         kept_share=a[mask].sum() / total, density=float(mask.mean()),
                         tiles_keeping_7=float(np.mean(kept == 7))))
    greedy = per_tile[("greedy", "index")]
    for rec, key in zip(recs, MASKS):
        # float64 sums of the same fp16 values in different orders: compare beyond their rounding
        rec["tiles_more_than_greedy"] = float(np.mean(per_tile[key] > greedy * (1 + 1e-12)))
        rec["tiles_less_than_greedy"] = float(np.mean(per_tile[key] < greedy * (1 - 1e-12)))
        rec["gain_over_greedy_pct"] = 100 * (rec["kept_share"] / recs[0]["kept_share"] - 1)
    row = _row_24(a)
    recs.append(dict(mask="row-wise 2:4 (not transposable)", kept_share=a[row].sum() / total,
                     density=float(row.mean()), tiles_keeping_7=float("nan"),
                     tiles_more_than_greedy=float("nan"), tiles_less_than_greedy=float("nan"),
                     gain_over_greedy_pct=100 * (a[row].sum() / total / recs[0]["kept_share"] - 1)))
    return recs
