"""``sparsekit bench spmm``: time SpMM on your own sparse matrix (or a suite problem).

    sparsekit bench spmm --matrix layer.smtx --n 256
    sparsekit bench spmm --matrix layer.mtx --n 128 --repeat 10
    sparsekit bench spmm --problem 11 --sparsity 0.95

The matrix is read by :func:`sparsekit.io.read_matrix` (``.smtx`` patterns get
seeded N(0, 1) values; ``.mtx`` values are kept, as float32); ``B`` is an
N(0, 1) ``K x n`` float32 matrix with the same seed. On the CPU it times
``scipy.sparse``, dense BLAS and our kernels (``sparsekit/cpu/spmm.py``: rowwise serial
and parallel, the tiled kernel after a grid search over tile sizes); on a GPU
also the lesson kernels (``sparsekit/gpu/spmm_lessons.py``), ``sparsekit/gpu/spmm.py`` and
cuSPARSE/cuBLAS through PyTorch. Every row says whether the result is correct
(within the float32 accumulation bound against a float64 product).
"""
from __future__ import annotations

import sys

from sparsekit.cli_types import check_host_memory, declare_host_memory, integer, repeat, seed, side, sparsity


def add_bench(bench_subparsers) -> None:
    p = bench_subparsers.add_parser("spmm", help="SpMM on a .smtx/.mtx matrix or a suite problem: CPU and GPU kernels "
                                                 "against scipy, BLAS, cuSPARSE",
                                    description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--matrix", help="a .smtx (DLMC pattern) or .mtx (Matrix Market) file")
    src.add_argument("--problem", type=integer(minimum=1, maximum=20),
                     help="a problem number 1-20 of the DL SpMM suite (course slides, Table 1)")
    p.add_argument("--n", type=side, default=None,
                   help="columns of B (default: 256 for --matrix, the suite's N for --problem)")
    p.add_argument("--sparsity", type=sparsity, default=0.9,
                   help="fraction pruned by magnitude for --problem (default: %(default)s)")
    p.add_argument("--seed", type=seed, default=0, help="seed for pattern values and B (default: %(default)s)")
    p.add_argument("--repeat", type=repeat, default=5, help="timed repeats per kernel (default: %(default)s)")
    p.add_argument("--cpu-only", action="store_true", help="skip the GPU kernels even when a GPU is present")
    declare_host_memory(p, _suite_host_bytes, "problem", "n", "sparsity")
    p.set_defaults(func=cmd_bench_spmm)


def _suite_host_bytes(args) -> int | None:
    """The host memory of a ``--problem``; None for a ``--matrix``, whose shape is known once the file is read
    (:func:`_load` checks it then, before anything dense is made)."""
    from sparsekit.bench.spmm import host_bytes
    from sparsekit.models import SPMM_SUITE

    if args.problem is None:
        return None
    p = {p.number: p for p in SPMM_SUITE}[args.problem]
    return host_bytes(p.m, p.k, p.n if args.n is None else args.n, round((1 - args.sparsity) * p.m * p.k))


def _load(args):
    import numpy as np

    from sparsekit.bench.spmm import host_bytes, suite_matrix
    from sparsekit.io import read_matrix
    from sparsekit.models import SPMM_SUITE

    if args.matrix is not None:
        csr = read_matrix(args.matrix, dtype=np.float32, seed=args.seed)
        n = 256 if args.n is None else args.n
        (m, k), nnz = csr.shape, csr.nnz
        check_host_memory(f"--matrix {args.matrix} ({m}x{k}, nnz {nnz}) --n {n}", host_bytes(m, k, n, nnz))
        b = np.random.default_rng(args.seed).standard_normal((csr.shape[1], n)).astype(np.float32)
        return f"{args.matrix} {csr.shape[0]}x{csr.shape[1]} nnz={csr.nnz}", csr, b, csr.to_dense()
    p = {p.number: p for p in SPMM_SUITE}[args.problem]
    n = p.n if args.n is None else args.n
    csr, b, a = suite_matrix(p.m, p.k, n, args.sparsity, seed=args.seed)
    return f"suite problem {p.number} ({p.use_case}) {p.m}x{p.k}, N={n}, sparsity {args.sparsity}", csr, b, a


def cmd_bench_spmm(args) -> int:
    from sparsekit.backend import choose_backend

    backend = "cpu" if args.cpu_only else choose_backend()
    from sparsekit.balance import row_stats
    from sparsekit.bench.spmm import bench_cpu_matrix, bench_gpu_problem
    from sparsekit.experiment import markdown_table

    try:
        what, csr, b, a = _load(args)
    except (ValueError, TypeError, OSError, MemoryError) as err:
        print(f"sparsekit bench spmm: error: {err}", file=sys.stderr)
        return 2
    stats = row_stats(csr)
    print(f"{what}; rows: mean {stats['mean']:.1f} nnz, max {stats['max']}, cv {stats['cv']:.2f}, "
          f"empty {stats['empty_rows']}")
    cpu = bench_cpu_matrix(csr, b, a, repeat=args.repeat)
    print("\nCPU (wall clock, ms; threads = %d):\n" % cpu["threads"])
    print(markdown_table([cpu]))
    ok = cpu["correct"]
    if backend == "gpu":
        recs = bench_gpu_problem(csr, b, a, repeat=max(args.repeat, 10))
        print("\nGPU (device time, us):\n")
        print(markdown_table(recs))
        ok = ok and all(r["correct"] for r in recs)
    elif backend == "simulator":
        print("\nGPU: none found (the CUDA simulator says nothing about speed); CPU only.")
    return 0 if ok else 1
