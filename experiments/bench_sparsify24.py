"""2:4 tile sparsifier on a GPU: agreement with PyTorch, sanitizer runs, timings.

Not an experiment module (no EXPERIMENT; ``experiments/sparsify24.py`` is). Run
it as a script on a GPU::

    python -m experiments.bench_sparsify24 --check [--out DIR]   # vs reference and vs PyTorch
    python -m experiments.bench_sparsify24 --time [--out DIR]    # the timing table
    python -m experiments.bench_sparsify24 --sanitize            # each kernel once, small (compute-sanitizer)
    python -m experiments.bench_sparsify24 --time --sweep        # also the launch-configuration variants
    python -m experiments.bench_sparsify24 --profile 4096x4096 --only ...   # one launch each, for ncu

``--check``: every kernel variant equals :func:`sparsekit.reference.sparsify24.sparsify24`
bit for bit at 256x192; at fp16 shapes 128..8192 our ``ties="torch"`` masks,
packed W and packed W^T equal ``torch._sparse_semi_structured_tile(w,
"largest_abs_values_greedy", use_cutlass=True)`` and our metadata equals
PyTorch's in every row group that keeps two values (PyTorch leaves the filler
index of a group keeping fewer uninitialised); then PyTorch's CUTLASS sparse
GEMM consumes our packed W and W^T and matches the dense product (that GEMM
runs on sm_8x only: on the H100 it raises, and the step is reported skipped).

``--time``: :func:`sparsekit.bench.sparsify24.bench_shape` (what ``sparsekit
bench sparsify24`` times) at the timing shapes, one record per provider.
Every provider is compiled first (``compile_all``, timed), then timed. The 2:4
GEMMs and the training step are in ``experiments/bench_sparse24_linear.py``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sparsekit.reference import sparsify24 as ref  # noqa: E402
from sparsekit.bench.sparsify24 import OURS, bench_shape, check_reference, log, random_weight  # noqa: E402

#: The timing shapes (M, K), fp16.
TIME_SHAPES = [(4096, 1024), (4096, 4096), (8192, 8192)]
CHECK_SHAPES = [(128, 128), (256, 1024), (1024, 4096), (4096, 1024), (8192, 8192)]
#: PyTorch's error for its CUTLASS 2:4 GEMM off Ampere (the H100 gives it): a skip, not a failure.
SM8X_ONLY = "Supported only on GPUs with compute capability 8.x"

#: Variants of the fp16 kernels (``--sweep``): without the default launch bounds (``min_blocks=0``;
#: the defaults cap greedy and optimal_full at 64 registers, 8 blocks of 128 a SM), with the arithmetic
#: row-group packer instead of the shared-memory table (both: the kernel of the 2026-11-23
#: H100 run), and both halves' loads issued first (``prefetch``, 80 registers under its launch bound).
TUNING = {
    "ours greedy (index ties), no launch bounds": (np.float16, dict(method="greedy", min_blocks=0)),
    "ours greedy (index ties), arithmetic packer": (np.float16, dict(method="greedy", pack_table=False)),
    "ours greedy (index ties), arithmetic packer, no launch bounds": (
        np.float16, dict(method="greedy", pack_table=False, min_blocks=0)),
    "ours greedy (index ties), prefetch, 64-thread blocks, 12/SM": (
        np.float16, dict(method="greedy", prefetch=True, row_threads=8, min_blocks=12)),
    "ours greedy (torch ties), no launch bounds": (np.float16, dict(method="greedy", ties="torch", min_blocks=0)),
    "ours optimal_full (90), no launch bounds": (np.float16, dict(method="optimal_full", min_blocks=0)),
}


def popcount16(a: np.ndarray) -> np.ndarray:
    """Bits set in each uint16."""
    return np.unpackbits(a.astype(np.uint16).view(np.uint8).reshape(-1, 2), axis=1).sum(axis=1)


# ----------------------------------------------------------------------------- check

def torch_tile_masks(torch, threads_masks, m, k):
    """PyTorch's per-thread (a, b, c, d) 4x4 masks -> our (M/4, K/4) layout."""
    tm = threads_masks.view(torch.int16).reshape(m // 8, k // 8, 4).cpu().numpy().view(np.uint16)
    out = np.empty((m // 4, k // 4), np.uint16)
    out[0::2, 0::2], out[0::2, 1::2] = tm[:, :, 0], tm[:, :, 1]
    out[1::2, 0::2], out[1::2, 1::2] = tm[:, :, 2], tm[:, :, 3]
    return out


def logical_meta(flat_u16: np.ndarray, m: int, k: int) -> np.ndarray:
    """(M, K/4) nibbles from stored metadata (flat 16-bit words)."""
    words = flat_u16[ref.meta_offsets(m, k)].astype(np.int64)
    return ((words[:, :, None] >> (4 * np.arange(4))) & 15).reshape(m, k // 4)


def check_variants(results: dict, providers: dict, shapes=TIME_SHAPES) -> bool:
    """Each provider equals the default launch configuration of its (method, ties, dtype) bit for bit.

    The default configuration equals the reference (``check_reference``, the tests); this carries
    that to the launch-configuration variants at the timing shapes, where the NumPy reference is slow.
    """
    from numba import cuda
    from sparsekit.gpu import sparsify24 as gpu
    rng = np.random.default_rng(2)
    ok_all = True
    for m, k in shapes:
        for name, (dtype, kw) in providers.items():
            if set(kw) <= {"method", "ties"}:      # a default configuration itself
                continue
            base = dict(method=kw["method"], ties=kw.get("ties", "index"))
            w = cuda.to_device(random_weight(rng, (m, k), dtype))
            got, want = gpu.sparsify24(w, **kw), gpu.sparsify24(w, **base)
            ok = all(np.array_equal(getattr(got, f).copy_to_host(), getattr(want, f).copy_to_host())
                     for f in ("tile_masks", "packed", "meta", "packed_t", "meta_t"))
            log(f"  variant {name:55s} {m}x{k}: equal to {base} = {ok}")
            results.setdefault("variants", []).append(dict(provider=name, m=m, k=k, equal=ok))
            ok_all &= ok
    return ok_all


def check_torch(results: dict) -> bool:
    import torch
    from numba import cuda
    from sparsekit.gpu import sparsify24 as gpu
    ok_all = True
    g = torch.Generator(device="cuda").manual_seed(0)
    for m, k in CHECK_SHAPES:
        for data in ("normal", "ties"):
            if data == "normal":
                w = torch.randn(m, k, device="cuda", dtype=torch.float16, generator=g)
            else:
                w = torch.randint(-2, 3, (m, k), device="cuda", generator=g).to(torch.float16)
            packed, meta, packed_t, meta_t, tmasks = torch._sparse_semi_structured_tile(
                w, algorithm="largest_abs_values_greedy", use_cutlass=True)
            wn = cuda.as_cuda_array(w)          # Numba views in, Numba arrays out (no uint16 tensors)
            ours = gpu.sparsify24(wn, ties="torch")
            ours_index = gpu.sparsify24(wn, ties="index")
            torch.cuda.synchronize()
            t_tm = torch_tile_masks(torch, tmasks, m, k)
            o_tm = ours.tile_masks.copy_to_host()
            oi_tm = ours_index.tile_masks.copy_to_host()
            masks_equal = bool(np.array_equal(t_tm, o_tm))
            index_tiles_differ = int(np.count_nonzero(t_tm != oi_tm))
            packed_equal = bool(np.array_equal(packed[:m, :k // 2].cpu().numpy().view(np.uint16),
                                               ours.packed.copy_to_host().view(np.uint16)))
            packed_t_equal = bool(np.array_equal(packed_t[:k, :m // 2].cpu().numpy().view(np.uint16),
                                                 ours.packed_t.copy_to_host().view(np.uint16)))
            # PyTorch's metadata tensor is a permuted view of (K/32, M, 2) storage: undo it to get the bytes
            t_meta = meta.permute(2, 0, 1).contiguous().reshape(-1).cpu().numpy().view(np.uint16)
            t_meta_t = meta_t.permute(2, 0, 1).contiguous().reshape(-1).cpu().numpy().view(np.uint16)
            mask = ref.mask_from_tiles(o_tm)
            two = mask.reshape(m, k // 4, 4).sum(axis=2) == 2
            two_t = mask.T.reshape(k, m // 4, 4).sum(axis=2) == 2
            o_meta = ours.meta.copy_to_host().reshape(-1).view(np.uint16)
            o_meta_t = ours.meta_t.copy_to_host().reshape(-1).view(np.uint16)
            nib_eq = logical_meta(t_meta, m, k)[two] == logical_meta(o_meta, m, k)[two]
            nib_t_eq = logical_meta(t_meta_t, k, m)[two_t] == logical_meta(o_meta_t, k, m)[two_t]
            rec = dict(m=m, k=k, data=data, masks_equal=masks_equal, packed_equal=packed_equal,
                       packed_t_equal=packed_t_equal, meta_equal_where_two_kept=bool(nib_eq.all()),
                       meta_t_equal_where_two_kept=bool(nib_t_eq.all()),
                       groups_with_two=int(two.sum()), groups_total=int(two.size),
                       meta_words_identical=bool(np.array_equal(t_meta, o_meta)),
                       tiles_differing_with_index_ties=index_tiles_differ, tiles=int(t_tm.size),
                       tiles_with_7_or_fewer=int(np.count_nonzero(popcount16(o_tm) < 8)))
            log(f"  torch {m}x{k} {data}: {rec}")
            results.setdefault("torch", []).append(rec)
            ok_all &= masks_equal and packed_equal and packed_t_equal and rec["meta_equal_where_two_kept"] \
                and rec["meta_t_equal_where_two_kept"]
    return ok_all


def check_torch_gemm(results: dict) -> bool:
    """PyTorch's CUTLASS 2:4 GEMM reads our packed W / W^T and metadata."""
    import torch
    from numba import cuda
    from torch.sparse import SparseSemiStructuredTensorCUTLASS as Cutlass
    from sparsekit.gpu import sparsify24 as gpu
    ok_all = True
    g = torch.Generator(device="cuda").manual_seed(1)
    for m, k, n in [(128, 128, 128), (4096, 1024, 512)]:
        w = torch.randn(m, k, device="cuda", dtype=torch.float16, generator=g)
        ours = gpu.sparsify24(cuda.as_cuda_array(w), ties="torch")
        dense = torch.from_numpy(ref.mask_from_tiles(ours.tile_masks.copy_to_host())).cuda() * w

        def tt(a):  # Numba device array -> torch tensor, zero copy
            return torch.as_tensor(a, device="cuda")

        theirs = Cutlass.prune_dense_static_sort(w, algorithm="largest_abs_values_greedy")
        # PyTorch's metadata tensors are (rows, 2, cols/32) views of (cols/32, rows, 2) storage
        ours_sp = Cutlass(w.shape, packed=tt(ours.packed), meta=tt(ours.meta).view(k // 32, m, 2).permute(1, 2, 0),
                          packed_t=tt(ours.packed_t),
                          meta_t=tt(ours.meta_t).view(m // 32, k, 2).permute(1, 2, 0),
                          compressed_swizzled_bitmask=None, requires_grad=False)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16, generator=g)
        c = torch.randn(m, n, device="cuda", dtype=torch.float16, generator=g)
        y_ours, y_theirs, y_dense = torch.mm(ours_sp, b), torch.mm(theirs, b), torch.mm(dense, b)
        yt_ours, yt_theirs = torch.mm(ours_sp.t(), c), torch.mm(theirs.t(), c)
        ref64 = dense.double() @ b.double()
        ref64_t = dense.t().double() @ c.double()
        # fp16 output of an fp32-accumulated product: within a few fp16 ulps of the float64 result
        scale, scale_t = ref64.abs().max().item(), ref64_t.abs().max().item()
        rec = dict(m=m, k=k, n=n,
                   ours_equals_torch_sparse=bool(torch.equal(y_ours, y_theirs)),
                   ours_t_equals_torch_sparse=bool(torch.equal(yt_ours, yt_theirs)),
                   max_err_vs_fp64=(y_ours.double() - ref64).abs().max().item() / scale,
                   max_err_t_vs_fp64=(yt_ours.double() - ref64_t).abs().max().item() / scale_t,
                   dense_max_err_vs_fp64=(y_dense.double() - ref64).abs().max().item() / scale)
        log(f"  gemm {rec}")
        results.setdefault("gemm", []).append(rec)
        ok_all &= rec["ours_equals_torch_sparse"] and rec["ours_t_equals_torch_sparse"] \
            and rec["max_err_vs_fp64"] < 2e-3 and rec["max_err_t_vs_fp64"] < 2e-3
    return ok_all


# ----------------------------------------------------------------------------- time

def compile_all(providers: dict) -> dict:
    """Compile and run each provider once on a small matrix: seconds per provider (JIT + first launch)."""
    from numba import cuda
    from sparsekit.gpu import sparsify24 as gpu
    took = {}
    for name, (dtype, kw) in providers.items():
        t = time.time()
        launch, _ = gpu.prepare(cuda.to_device(np.ones((128, 128), dtype)), **kw)
        launch()
        cuda.synchronize()
        took[name] = time.time() - t
        log(f"  compiled {name}: {took[name]:.1f} s")
    return took


# ----------------------------------------------------------------------------- main

def sanitize_run(shape: tuple[int, int] = (160, 96)) -> int:
    """Each fp16/fp32 variant once at ``shape`` (160x96: rows past one block at every ``row_threads``, a
    partial block of columns), compared with the reference."""
    from sparsekit.gpu import sparsify24 as gpu
    rng = np.random.default_rng(5)
    bad = 0
    for kw, dtype in [(dict(method="greedy", ties="torch"), np.float16),
                      (dict(method="greedy", row_threads=4), np.float16),
                      (dict(method="greedy", prefetch=True), np.float16),
                      (dict(method="greedy", pack_table=False), np.float16),
                      (dict(method="optimal"), np.float16),
                      (dict(method="greedy", ties="torch", prefetch=True, row_threads=8), np.float16),
                      (dict(method="optimal_full"), np.float16),
                      (dict(method="greedy", row_threads=4), np.float32)]:
        w = random_weight(rng, shape, dtype)
        got = gpu.sparsify24(w, **kw)
        want = ref.sparsify24(w, method=kw["method"], ties=kw.get("ties", "index"))
        same = all(np.array_equal(getattr(got, f).view(np.uint8), getattr(want, f).view(np.uint8))
                   for f in ("tile_masks", "packed", "meta", "packed_t", "meta_t"))
        log(f"sanitize {kw} {np.dtype(dtype).name}: equal={same}")
        bad += not same
    # the cuSPARSELt metadata reorder (sparsekit.sparse24_training), 192x128
    from sparsekit.gpu.sparse24_cusparselt import cusparselt_meta
    from sparsekit.reference.sparse24_cusparselt import to_cusparselt
    w = random_weight(rng, (192, 128), np.float16)
    s = ref.sparsify24(w)
    same = np.array_equal(cusparselt_meta(s.meta, 192, 128),
                          to_cusparselt(s.packed, s.meta).reshape(-1).view(np.uint8)[192 * 128:])
    log(f"sanitize cusparselt_meta: equal={same}")
    return int(bad > 0 or not same)


def profile_run(providers: dict, m: int, k: int) -> int:
    """One launch of each provider at m x k (for ``ncu``/``nsys``: no other kernel of ours runs)."""
    from numba import cuda
    from sparsekit.gpu import sparsify24 as gpu
    rng = np.random.default_rng(0)
    for name, (dtype, kw) in providers.items():
        launch, _ = gpu.prepare(cuda.to_device(random_weight(rng, (m, k), dtype)), **kw)
        launch()
        cuda.synchronize()
        log(f"profile: launched {name} at {m}x{k}")
    return 0


def _wait_for(pids) -> None:
    """Block until every process in ``pids`` has exited (so they do not share the GPU with timings)."""
    for pid in pids:
        while True:
            try:
                os.kill(pid, 0)
            except OSError:
                break
            time.sleep(0.5)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="agreement with the reference and PyTorch")
    ap.add_argument("--time", action="store_true", help="the timing table")
    ap.add_argument("--sanitize", action="store_true", help="small run for compute-sanitizer")
    ap.add_argument("--profile", default=None, metavar="MxK",
                    help="launch each selected provider once at this shape, nothing else (for a profiler)")
    ap.add_argument("--out", default=None, help="folder for results.json")
    ap.add_argument("--exclude", nargs="*", default=[],
                    help="leave out our providers whose name contains any of these strings")
    ap.add_argument("--only", nargs="*", default=None,
                    help="keep only our providers with these exact names")
    ap.add_argument("--sweep", action="store_true", help="add the launch-configuration variants (TUNING)")
    ap.add_argument("--no-baselines", action="store_true", help="time only our kernels (no PyTorch)")
    ap.add_argument("--after", type=int, nargs="*", default=[],
                    help="process ids to wait for after compiling, before any other GPU work")
    args = ap.parse_args(argv)
    if args.sanitize:
        return sanitize_run()
    ours = {**OURS, **TUNING} if args.sweep else dict(OURS)
    ours = {k: v for k, v in ours.items() if not any(x in k for x in args.exclude)
            and (args.only is None or k in args.only)}
    if args.profile:
        return profile_run(ours, *map(int, args.profile.split("x")))
    results: dict = {}
    ok = True
    t0 = time.time()
    from sparsekit import device, timing
    info = device.info()
    results["device"] = str(info)
    log(f"device: {info}")
    # compile everything first (CPU work, one 128x128 launch each), while other processes may still
    # be timing on the GPU; then wait for them
    results["compile_s"] = compile_all(ours)
    _wait_for(args.after)
    if args.check:
        log("check: kernels vs reference (256x192)")
        ok &= check_reference(results, ours)
        log(f"  ({time.time() - t0:.0f} s)")
        log("check: launch-configuration variants vs the default configuration at the timing shapes")
        ok &= check_variants(results, ours)
        log(f"  ({time.time() - t0:.0f} s)")
        for step in (() if args.no_baselines else (check_torch, check_torch_gemm)):
            try:
                ok &= step(results)
            except RuntimeError as e:
                if SM8X_ONLY in str(e):   # PyTorch's CUTLASS 2:4 GEMM: Ampere only (seen on the H100)
                    log(f"  {step.__name__} skipped: {e}")
                    results[step.__name__] = f"skipped: {e}"
                else:
                    log(f"  {step.__name__} failed: {type(e).__name__}: {e}")
                    ok = False
            except Exception as e:  # noqa: BLE001 - report and go on to the timings
                log(f"  {step.__name__} failed: {type(e).__name__}: {e}")
                ok = False
            log(f"  ({time.time() - t0:.0f} s)")
    if args.time:
        copy_bw = timing.measured_bandwidth()
        results["copy_bandwidth_GBps"] = copy_bw / 1e9
        log(f"copy bandwidth {copy_bw / 1e9:.0f} GB/s")
        recs = []
        for m, k in TIME_SHAPES:
            recs += bench_shape(m, k, ours, copy_bw=copy_bw, baselines=not args.no_baselines)
            log(f"  ({time.time() - t0:.0f} s)")
        results["time"] = recs
    results["ok"] = bool(ok)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "sparsify24.json"), "w") as f:
            json.dump(results, f, indent=1)
    log(f"ok={ok} ({time.time() - t0:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
