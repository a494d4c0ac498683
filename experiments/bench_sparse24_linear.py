"""2:4 sparse training step at the post's ViT-L MLP shape: dense vs cuSPARSELt GEMMs, our sparsifier's share.

Run on a GPU with PyTorch (cuSPARSELt)::

    python experiments/bench_sparse24_linear.py [--out DIR] [--dump]

The post (../shared/papers/semi-structured-24-training.txt) times the MLP's first
linear layer of ViT-L: ``x`` 13008 x 1024 (tokens x in), ``W`` 4096 x 1024,
fp16. Records (device time, :func:`sparsekit.timing.measure`, L2 flushed):

* dense GEMMs: forward ``x W^T``, ``dx = dy W``, ``dW = dy^T x``;
* 2:4 GEMMs (``torch._cslt_sparse_mm``) for forward and dx, on a cuSPARSELt
  buffer; the **budget** = dense minus sparse time of forward + dx, the time a
  sparsifier may take before the step is slower than dense;
* sparsifiers: ours (:mod:`gpu.sparsify24`), PyTorch's tile kernel in its
  cuSPARSELt layout, and ``_cslt_compress`` of a pruned matrix;
* whole steps: dense fwd+bwd; PyTorch's own (tile kernel -> 2:4 GEMMs);
  ours (:func:`sparsekit.sparse24_training.linear_step`) and the autograd
  function :class:`sparsekit.sparse24_training.Sparse24Linear`.

``--dump`` also saves, for small full-pattern weights, PyTorch's cuSPARSELt
buffers next to the weights (``cslt_layout.npz``), to read the metadata layout.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: The post's shape: tokens, in features, out features.
VITL = (13008, 1024, 4096)


def log(*a):
    print(*a, flush=True)


def _rec(results, name, meas, **extra):
    rec = dict(name=name, median_us=meas.median_s * 1e6, p10_us=meas.p10_s * 1e6, p90_us=meas.p90_s * 1e6, **extra)
    log(f"  {name:60s} {rec['median_us']:9.1f} us (p10 {rec['p10_us']:.1f}, p90 {rec['p90_us']:.1f})")
    results.setdefault("time", []).append(rec)
    return rec["median_us"]


def dump_layout(out_dir) -> dict:
    """PyTorch's cuSPARSELt tile output and _cslt_compress of full-pattern weights, saved with the weights."""
    import torch
    from reference import sparsify24 as ref
    rng = np.random.default_rng(0)
    arrays = {}
    info = {}
    for m, k in [(128, 128), (256, 384), (384, 256)]:
        for trial in range(4):
            w = rng.standard_normal((m, k)).astype(np.float16)
            wp = np.where(ref.sparsify24(w, method="optimal_full").mask, w, np.float16(0))  # 2 per group
            t = torch.from_numpy(wp).cuda()
            packed, meta, packed_t, meta_t, _ = torch._sparse_semi_structured_tile(
                t, algorithm="largest_abs_values_greedy", use_cutlass=False)
            comp = torch._cslt_compress(t)
            key = f"{m}x{k}_{trial}"
            arrays[f"w_{key}"] = wp
            arrays[f"tile_{key}"] = packed.cpu().numpy().view(np.uint16)
            arrays[f"tile_t_{key}"] = packed_t.cpu().numpy().view(np.uint16)
            arrays[f"compress_{key}"] = comp.cpu().numpy().view(np.uint16)
            info[key] = dict(tile_shape=list(packed.shape), meta_shape=list(meta.shape) if meta is not None else None,
                             compress_shape=list(comp.shape),
                             tile_equals_compress=bool(torch.equal(packed.view(-1).view(torch.int16),
                                                                   comp.view(-1).view(torch.int16)))
                             if packed.numel() == comp.numel() else "sizes differ")
    np.savez_compressed(os.path.join(out_dir, "cslt_layout.npz"), **arrays)
    log(f"  layout dump: {info}")
    return info


def check_gemms(results) -> bool:
    """Our cuSPARSELt buffers equal _cslt_compress's (full patterns); the 2:4 GEMMs match the dense products.

    Also records how far PyTorch's own tile kernel (cuSPARSELt layout) lands from the dense product
    of its pruned matrix when its buffer feeds _cslt_sparse_mm on this machine.
    """
    import torch
    from sparsekit import sparse24_training as st
    g = torch.Generator(device="cuda").manual_seed(0)
    n, fin, fout = 512, 256, 384
    x = torch.randn(n, fin, device="cuda", dtype=torch.float16, generator=g)
    w = torch.randn(fout, fin, device="cuda", dtype=torch.float16, generator=g)
    dy = torch.randn(n, fout, device="cuda", dtype=torch.float16, generator=g)
    wp, _ = st.pruned_dense(w)
    # bytes: with optimal_full every row group keeps 2 (no filler slot), so they must be compress's
    ours = st.cusparselt_pair(w, method="optimal_full", pack="ours")
    comp = st.cusparselt_pair(w, method="optimal_full", pack="compress")
    same_bytes = all(torch.equal(a.view(torch.int16), b.view(torch.int16)) for a, b in zip(ours, comp))
    y, dx, dw = st.linear_step(x, w, dy)
    y_c, dx_c, _ = st.linear_step(x, w, dy, pack="compress")
    want_y, want_dx = x.double() @ wp.double().t(), dy.double() @ wp.double()
    # fp16 outputs of fp32-accumulated products: a few fp16 ulps of the largest value

    def rel(a, b):
        return ((a.double() - b).abs().max() / b.abs().max()).item()

    xa = x.clone().requires_grad_(True)
    wa = w.clone().requires_grad_(True)
    ya = st.Sparse24Linear.apply(xa, wa, "greedy", "torch")
    ya.backward(dy)
    same = bool(torch.equal(ya, y) and torch.equal(xa.grad, dx) and torch.equal(wa.grad, dw))
    rec = dict(shape=[n, fin, fout], ours_equals_cslt_compress_optimal_full=same_bytes,
               greedy_ours_vs_compress_max_rel_diff=max(rel(y, y_c.double()), rel(dx, dx_c.double())),
               y_shape=list(y.shape),
               dx_shape=list(dx.shape), max_rel_err_y=rel(y, want_y), max_rel_err_dx=rel(dx, want_dx),
               autograd_equals_step=same)
    log(f"  gemm check {rec}")
    try:
        # the tile kernel returns 1-D storage; _cslt_sparse_mm wants it 2-D (as PyTorch's class views it)
        packed = torch._sparse_semi_structured_tile(w, algorithm="largest_abs_values_greedy",
                                                    use_cutlass=False)[0].view(fout, -1)
        rec["torch_tile_cslt_gemm_max_rel_err_vs_pruned"] = rel(
            torch._cslt_sparse_mm(packed, x.t(), transpose_result=True), want_y)
    except RuntimeError as e:
        rec["torch_tile_cslt_gemm_error"] = str(e)
    log(f"  PyTorch's tile kernel -> _cslt_sparse_mm: {rec.get('torch_tile_cslt_gemm_max_rel_err_vs_pruned', rec.get('torch_tile_cslt_gemm_error'))}")
    results["gemm_check"] = rec
    return (same_bytes and rec["max_rel_err_y"] < 2e-3 and rec["max_rel_err_dx"] < 2e-3 and same
            and rec["greedy_ours_vs_compress_max_rel_diff"] < 2e-3
            and list(y.shape) == [n, fout] and list(dx.shape) == [n, fin])


def time_vitl(results) -> None:
    import torch
    from numba import cuda
    from gpu import sparsify24 as gpu
    from sparsekit import sparse24_training as st
    from sparsekit.timing import measure
    n, fin, fout = VITL
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(n, fin, device="cuda", dtype=torch.float16, generator=g)
    w = torch.randn(fout, fin, device="cuda", dtype=torch.float16, generator=g)
    dy = torch.randn(n, fout, device="cuda", dtype=torch.float16, generator=g)
    rep = dict(repeat=20, warmup=3)
    d_fwd = _rec(results, "dense fwd x W^T (cuBLAS)", measure(lambda: x @ w.t(), **rep))
    d_dx = _rec(results, "dense dx = dy W", measure(lambda: dy @ w, **rep))
    d_dw = _rec(results, "dense dW = dy^T x", measure(lambda: dy.t() @ x, **rep))
    wc, wtc = st.cusparselt_pair(w)
    s_fwd = _rec(results, "2:4 fwd (cuSPARSELt)", measure(
        lambda: torch._cslt_sparse_mm(wc, x.t(), transpose_result=True), **rep))
    s_dx = _rec(results, "2:4 dx (cuSPARSELt, W^T)", measure(
        lambda: torch._cslt_sparse_mm(wtc, dy.t(), transpose_result=True), **rep))
    try:   # cuSPARSELt's own algorithm search (PyTorch's default alg_id is 0)
        alg = torch._cslt_sparse_mm_search(wc, x.t())
        results["cslt_search_alg_id_fwd"] = alg
        s_fwd = min(s_fwd, _rec(results, f"2:4 fwd (cuSPARSELt, searched alg_id {alg})", measure(
            lambda: torch._cslt_sparse_mm(wc, x.t(), transpose_result=True, alg_id=alg), **rep)))
        alg_t = torch._cslt_sparse_mm_search(wtc, dy.t())
        s_dx = min(s_dx, _rec(results, f"2:4 dx (cuSPARSELt, searched alg_id {alg_t})", measure(
            lambda: torch._cslt_sparse_mm(wtc, dy.t(), transpose_result=True, alg_id=alg_t), **rep)))
    except (RuntimeError, TypeError, AttributeError) as e:
        log(f"  cuSPARSELt algorithm search unavailable: {type(e).__name__}: {e}")
    results["budget_us"] = dict(fwd=d_fwd - s_fwd, dx=d_dx - s_dx, total=d_fwd + d_dx - s_fwd - s_dx)
    log(f"  budget (dense - sparse, fwd + dx): {results['budget_us']}")
    # sparsifiers at W's shape
    wn = cuda.as_cuda_array(w)
    for name, kw in [("ours greedy (torch ties)", dict(ties="torch")), ("ours greedy (index ties)", {}),
                     ("ours optimal_full", dict(method="optimal_full"))]:
        launch, _ = gpu.prepare(wn, **kw)
        _rec(results, f"sparsify W 4096x1024: {name}", measure(launch, **rep))
    _rec(results, "ours -> cuSPARSELt buffers of W and W^T (sparsify, reorder meta, concatenate)",
         measure(lambda: st.cusparselt_pair(w), **rep))
    _rec(results, "ours -> cuSPARSELt buffers via masks + 2x _cslt_compress", measure(
        lambda: st.cusparselt_pair(w, pack="compress"), **rep))
    _rec(results, "torch tile kernel (cuSPARSELt layout, W and W^T)", measure(
        lambda: torch._sparse_semi_structured_tile(w, algorithm="largest_abs_values_greedy", use_cutlass=False),
        **rep))
    # whole steps
    _rec(results, "step dense: fwd + dx + dW", measure(lambda: (x @ w.t(), dy @ w, dy.t() @ x), **rep))

    def torch_step():   # (its buffers' metadata order is not cuSPARSELt's on sm_90: see check_gemms)
        packed, _, packed_t, _, _ = torch._sparse_semi_structured_tile(
            w, algorithm="largest_abs_values_greedy", use_cutlass=False)
        return (torch._cslt_sparse_mm(packed.view(fout, -1), x.t(), transpose_result=True),
                torch._cslt_sparse_mm(packed_t.view(fin, -1), dy.t(), transpose_result=True), dy.t() @ x)

    try:
        _rec(results, "step 2:4, PyTorch's tile kernel -> cuSPARSELt", measure(torch_step, **rep))
    except RuntimeError as e:
        log(f"  PyTorch's own step failed: {e}")
        results["torch_step_error"] = str(e)
    _rec(results, "step 2:4, ours (sparsify + reorder, 2:4 fwd + dx, dense dW)",
         measure(lambda: st.linear_step(x, w, dy), **rep))
    _rec(results, "step 2:4, ours via 2x _cslt_compress", measure(lambda: st.linear_step(x, w, dy, pack="compress"),
                                                                   **rep))
    xa = x.clone().requires_grad_(True)
    wa = w.clone().requires_grad_(True)

    def autograd_step():
        xa.grad = wa.grad = None
        st.Sparse24Linear.apply(xa, wa, "greedy", "torch").backward(dy)

    _rec(results, "step 2:4, Sparse24Linear autograd (same ops)", measure(autograd_step, **rep))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--dump", action="store_true", help="save PyTorch's cuSPARSELt buffers of small weights")
    args = ap.parse_args(argv)
    from sparsekit import sparse24_training as st
    results: dict = {}
    ok, why = st.available()
    results["available"] = why
    log(f"cuSPARSELt: {ok} ({why})")
    if not ok:
        return 1
    import torch
    results["device"] = torch.cuda.get_device_name()
    t0 = time.time()
    good = True
    if args.dump and args.out:
        os.makedirs(args.out, exist_ok=True)
        try:
            results["layout"] = dump_layout(args.out)
        except Exception as e:  # noqa: BLE001 - record and go on
            log(f"  dump failed: {type(e).__name__}: {e}")
            results["layout"] = f"{type(e).__name__}: {e}"
    for step in (check_gemms, time_vitl):
        try:
            r = step(results)
            good &= r is not False
        except Exception as e:  # noqa: BLE001 - the exact error is the result (sm_90 support)
            log(f"  {step.__name__} failed: {type(e).__name__}: {e}")
            results[step.__name__] = f"{type(e).__name__}: {e}"
            good = False
        log(f"  ({time.time() - t0:.0f} s)")
    results["ok"] = bool(good)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "sparse24_linear.json"), "w") as f:
            json.dump(results, f, indent=1)
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
