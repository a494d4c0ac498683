"""The tensor-core USpMM's float32 paths side by side on a compute capability 9.0 GPU: the wgmma kernel's two
precisions, ``"3xtf32"`` (three TF32 products a multiply-add: the float32 contract's own computation) and
``"tf32+bf16"`` (one TF32 product and one bf16 wgmma for both correction terms: a third less tensor-core work, a
bound tighter than 3xTF32's from K' = 124 on, where the default ``"auto"`` runs it; :mod:`sparsekit.gpu.uspmm_wgmma`); and
``"3xtf32"`` on the same problem with A's values rounded to TF32 numbers (as weights from float16 or bfloat16 are),
where the kernels leave the all-zero ``b_big a_small`` term out (:func:`sparsekit.gpu.uspmm_tc.tf32_exact`).

Not an experiment module (no EXPERIMENT): run it as a script on an H100 or H200::

    python -m experiments.bench_uspmm_precision [--out DIR]

For each problem (the float32 targets and a few more), the routed setting (``config="heuristic"``) is run
in both precisions and with a TF32 A; then the mma.sync kernel (:mod:`sparsekit.gpu.uspmm_tc`, float32 lean, the float32 path
of GPUs without wgmma) at its routed settings, general and TF32 A (:data:`TC_PROBLEMS`): median device time
(:func:`sparsekit.timing.measure`, cold L2, best of two rounds of 20), % of the Sparsity Roofline's speed of light,
the largest error in units of u = 2**-24 times ``|A| @ |B|`` (beside the bound :func:`sparsekit.gpu.uspmm_tc.error_reduction`
allows it), and whether two runs agree bit for bit. With PyTorch, dense cuBLAS rows beside them, for accuracy
and tensor-core time to compare against (:data:`DENSE_PROBLEMS`): float32 with TF32 off (the accuracy a float32
user gets from the vendor), one TF32 product (TF32 on), and 3xTF32 on the dense A as three TF32 GEMMs
(``a_big b_big``, then ``a_big b_small`` and ``a_small b_big`` added in place, the same split as ours): the vendor's
time for the
tensor-core work our kernels do on a densified tile (zeros included), so the rows say how far our one-wave time
is from what cuBLAS gets out of the tensor core for the same products. Their bound column is the plain float32
dot product's worst case (dense ``K`` roundings); they do not count in the exit status. One table, printed;
``DIR/uspmm_precision.json`` with ``--out``. The exit status is 1 when a result of ours breaks its bound or a
repeat differs.
"""
from __future__ import annotations

import argparse
import json
import os
from datetime import datetime, timezone

import numpy as np

#: (M, K, N, sparsity): the float32 targets (1024^3 and N = 16384 at 60%) and neighbours
PROBLEMS = [(1024, 1024, 1024, 0.6), (1024, 1024, 1024, 0.9), (768, 768, 1024, 0.6), (1024, 4096, 1024, 0.65),
            (1024, 1024, 16384, 0.6), (4096, 4096, 1024, 0.9)]
U = 2.0 ** -24


#: (problem, setting of :mod:`experiments.bench_uspmm_tc`) for the mma.sync kernel (float32 lean, the routed
#: settings), general A against TF32 A
TC_PROBLEMS = [((1024, 1024, 1024, 0.6), "ROUTED_ONE_WAVE"), ((1024, 4096, 1024, 0.65), "ROUTED_ONE_WAVE"),
               ((1024, 1024, 16384, 0.6), "ROUTED_LARGE")]


#: the float32 targets, with the dense cuBLAS rows (:func:`run_dense`)
DENSE_PROBLEMS = [(1024, 1024, 1024, 0.6), (1024, 1024, 16384, 0.6)]


def measure_row(p, launch, precision: str, *, bound_u=None, **fields) -> dict:
    """One record: ``launch()`` (a float32 USpMM of problem ``p``) twice (bit-identical?), its largest error in u
    against ``bound_u`` (default: our kernels' bound for ``precision``), its median device time and % of the speed
    of light."""
    from sparsekit.arrays import to_host
    from sparsekit.gpu.uspmm_tc import error_reduction, tf32_exact
    from sparsekit.timing import measure
    exact, scale = p.exact()
    first, again = (np.array(to_host(launch())) for _ in range(2))
    err = np.abs(first.astype(np.float64) - exact) - 2 * U * np.abs(exact)   # (beyond the final rounding)
    err_u = float((err / (U * scale + 1e-300)).max())
    if bound_u is None:
        bound_u = error_reduction(p.ell.kprime, np.float32, precision)
    us = min(measure(launch, repeat=20, warmup=2).median_s for _ in range(2)) * 1e6
    return dict(m=p.m, k=p.k, n=p.n, sparsity=p.sparsity, precision=precision, tf32_a=tf32_exact(p.dell), **fields,
                median_us=us, pct_sol=100 * p.sol_s() / (us * 1e-6), err_u=err_u, bound_u=bound_u,
                within_bound=bool(err_u <= bound_u),
                repeat_identical=bool((first.view(np.uint32) == again.view(np.uint32)).all()))


def run_problem(shape) -> list[dict]:
    """The wgmma kernel at the routed setting: both precisions, and 3xTF32 with A's values rounded to TF32."""
    from sparsekit.bench.uspmm import Problem
    from sparsekit.gpu.uspmm_wgmma import PRECISIONS, uspmm
    from sparsekit import tune
    problems = {tf32_a: Problem(*shape, "float32", seed=5, tf32_a=tf32_a) for tf32_a in (False, True)}
    cfg = {k: v for k, v in tune.resolve("heuristic", problems[False].dell, shape[2], "C", wgmma=True).items()
           if k != "variant"}
    cases = [(precision, problems[False]) for precision in PRECISIONS] + [("3xtf32", problems[True])]
    return [measure_row(p, lambda p=p, precision=precision: uspmm(p.dell, p.b, precision=precision, **cfg),
                        precision, kernel="wgmma", setting=cfg) for precision, p in cases]


def run_tc_problem(shape, setting: str) -> list[dict]:
    """The mma.sync kernel (float32 lean) at ``setting``: general A, then A's values rounded to TF32."""
    from experiments import bench_uspmm_tc
    from sparsekit.bench.uspmm import Problem
    from sparsekit.gpu.uspmm_tc import uspmm
    cfg = dict(getattr(bench_uspmm_tc, setting))
    return [measure_row(p, lambda p=p: uspmm(p.dell, p.b, **cfg), "3xtf32", kernel="mma.sync", setting=setting)
            for p in (Problem(*shape, "float32", seed=5, tf32_a=tf32_a) for tf32_a in (False, True))]


def run_dense(shape) -> list[dict]:
    """Dense cuBLAS through PyTorch on problem ``shape``'s dense A (general float32 values): TF32 off, one TF32
    product, and three TF32 products of the 3xTF32 split (:func:`sparsekit.reference.mma.tf32_split`); empty without PyTorch."""
    from sparsekit.arrays import cuda_torch
    from sparsekit.bench.uspmm import Problem
    from sparsekit.reference.mma import tf32_split
    torch = cuda_torch()
    if torch is None:
        return []
    p = Problem(*shape, "float32", seed=5)
    cuda_tensor = lambda x: torch.from_numpy(np.ascontiguousarray(x)).cuda()     # noqa: E731
    a, b = cuda_tensor(p.dense), cuda_tensor(p.b_host)
    (a_big, a_small), (b_big, b_small) = ((cuda_tensor(part) for part in tf32_split(x)) for x in (p.dense, p.b_host))
    matmul = torch.backends.cuda.matmul

    def product(tf32: bool, *pairs):
        """sum of x @ y over ``pairs`` with TF32 on or off, in place after the first (cuBLAS's beta = 1)."""
        matmul.allow_tf32 = tf32
        out = pairs[0][0] @ pairs[0][1]
        for x, y in pairs[1:]:
            out.addmm_(x, y)
        matmul.allow_tf32 = False
        return out

    plain_u = p.k + 2        # a dense float32 dot product of K terms, and the bound's own slack
    cases = [("fp32, TF32 off", [(a, b)], False), ("1xTF32", [(a, b)], True),
             ("3xTF32 (3 GEMMs)", [(a_big, b_big), (a_big, b_small), (a_small, b_big)], True)]
    return [measure_row(p, lambda pairs=pairs, tf32=tf32: product(tf32, *pairs), name, bound_u=plain_u,
                        kernel="cuBLAS", setting="dense (torch)")
            for name, pairs, tf32 in cases]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="directory for uspmm_precision.json")
    args = parser.parse_args(argv)
    from sparsekit.gpu.uspmm_wgmma import supported
    if not supported():
        raise SystemExit("bench_uspmm_precision: needs a compute capability 9.0 GPU (the wgmma kernel)")
    from sparsekit.device import info
    rows = []
    print(f"device: {info().name}")
    print(f"{'problem':24s} {'kernel':9s} {'precision':16s} {'us':>8s} {'% SoL':>6s} {'err (u)':>8s} {'bound':>6s} "
          "repeat")
    runs = [lambda shape=shape: run_problem(shape) for shape in PROBLEMS]
    runs += [lambda shape=shape, setting=setting: run_tc_problem(shape, setting) for shape, setting in TC_PROBLEMS]
    runs += [lambda shape=shape: run_dense(shape) for shape in DENSE_PROBLEMS]
    for run in runs:
        for r in run():
            rows.append(r)
            label = f"{r['m']}x{r['k']}x{r['n']} {r['sparsity']:.0%}"
            name = r["precision"] + (", TF32 A" if r["tf32_a"] else "")
            print(f"{label:24s} {r['kernel']:9s} {name:16s} {r['median_us']:8.1f} {r['pct_sol']:6.1f} "
                  f"{r['err_u']:8.2f} {r['bound_u']:6d} {r['repeat_identical']}", flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        record = dict(device=info().name, date=datetime.now(timezone.utc).strftime("%Y-%m-%d"),
                      command="python -m experiments.bench_uspmm_precision", rows=rows)
        with open(os.path.join(args.out, "uspmm_precision.json"), "w") as f:
            json.dump(record, f, indent=1)
    ours = [r for r in rows if r["kernel"] != "cuBLAS"]
    return 0 if all(r["within_bound"] and r["repeat_identical"] for r in ours) else 1


if __name__ == "__main__":
    raise SystemExit(main())
