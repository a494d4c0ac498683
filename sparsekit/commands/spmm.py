"""``sparsekit bench spmm``: time SpMM on your own sparse matrix (or a suite problem).

    sparsekit bench spmm --matrix layer.smtx --n 256
    sparsekit bench spmm --matrix layer.mtx --n 128 --repeat 10
    sparsekit bench spmm --problem 11 --sparsity 0.95
    sparsekit bench spmm --matrix layer.mtx --n 16 --dtype bfloat16

The matrix is read by :func:`sparsekit.io.read_matrix` (``.smtx`` patterns get
seeded N(0, 1) values; ``.mtx`` values are kept, as float32); ``B`` is an
N(0, 1) ``K x n`` float32 matrix with the same seed. On the CPU it times
``scipy.sparse``, dense BLAS and our kernels (``sparsekit/cpu/spmm.py``: rowwise serial
and parallel, the tiled kernel after a grid search over tile sizes); on a GPU
also the lesson kernels (``sparsekit/gpu/spmm_lessons.py``), ``sparsekit/gpu/spmm.py`` and
cuSPARSE/cuBLAS through PyTorch. Every row says whether the result is correct
(within the float32 accumulation bound against a float64 product).

``--dtype float16`` or ``bfloat16`` rounds the matrix's values and ``B`` to that dtype and times the GPU only (the
CPU kernels take float32): ``spmm_csr``'s default (its route, from ``sparsekit.gpu.spmm.auto_route``), the
TiledBitmap kernel and the TiledCSL row kernel (each up to N = 64; past it the row says why it did not run),
against dense cuBLAS and cuSPARSE CSR in the dtype through PyTorch (a dtype PyTorch refuses: the reason). A row
gives the device time, the speedup over dense, the weight's bytes in the provider's format and their share of the
measured copy bandwidth, and whether the result is within float32 sums plus one rounding to the dtype of the
float32 product of the same 16-bit operands. It needs a CUDA GPU, and for bfloat16 PyTorch with CUDA (``B`` stays
on the device as a ``torch.bfloat16`` tensor: Numba has no bfloat16 arrays).
"""
from __future__ import annotations

import sys

from sparsekit.cli_types import check_host_memory, declare_host_memory, integer, repeat, seed, side, sparsity

#: The values of ``--dtype``: float32, or one of :data:`sparsekit.bench.spmm.HALF_DTYPES` (spelled here: parsing
#: imports no NumPy).
DTYPES = ("float32", "float16", "bfloat16")


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
    p.add_argument("--dtype", choices=DTYPES, default="float32",
                   help="dtype of A's values and B (float16, bfloat16: the GPU kernels that take it, float32 sums; "
                        "the CPU kernels take float32) (default: %(default)s)")
    p.add_argument("--cpu-only", action="store_true", help="skip the GPU kernels even when a GPU is present")
    declare_host_memory(p, _suite_host_bytes, "problem", "n", "sparsity", "dtype")
    p.set_defaults(func=cmd_bench_spmm)


def _suite_host_bytes(args) -> int | None:
    """The host memory of a ``--problem``; None for a ``--matrix``, whose shape is known once the file is read
    (:func:`_load` checks it then, before anything dense is made)."""
    from sparsekit.bench.spmm import host_bytes
    from sparsekit.models import SPMM_SUITE

    if args.problem is None:
        return None
    p = {p.number: p for p in SPMM_SUITE}[args.problem]
    return host_bytes(p.m, p.k, p.n if args.n is None else args.n, round((1 - args.sparsity) * p.m * p.k),
                      args.dtype)


def _load(args):
    import numpy as np

    from sparsekit.bench.spmm import host_bytes, suite_matrix
    from sparsekit.io import read_matrix
    from sparsekit.models import SPMM_SUITE

    if args.matrix is not None:
        csr = read_matrix(args.matrix, dtype=np.float32, seed=args.seed)
        n = 256 if args.n is None else args.n
        (m, k), nnz = csr.shape, csr.nnz
        check_host_memory(f"--matrix {args.matrix} ({m}x{k}, nnz {nnz}) --n {n} --dtype {args.dtype}",
                          host_bytes(m, k, n, nnz, args.dtype))
        b = np.random.default_rng(args.seed).standard_normal((csr.shape[1], n)).astype(np.float32)
        return f"{args.matrix} {csr.shape[0]}x{csr.shape[1]} nnz={csr.nnz}", csr, b, csr.to_dense()
    p = {p.number: p for p in SPMM_SUITE}[args.problem]
    n = p.n if args.n is None else args.n
    csr, b, a = suite_matrix(p.m, p.k, n, args.sparsity, seed=args.seed)
    return f"suite problem {p.number} ({p.use_case}) {p.m}x{p.k}, N={n}, sparsity {args.sparsity}", csr, b, a


def _half_refusal(args, backend: str) -> str | None:
    """Why ``--dtype float16``/``bfloat16`` cannot run here (None where it can): only the GPU kernels take it."""
    if args.cpu_only:
        return (f"--dtype {args.dtype} with --cpu-only: the CPU kernels, scipy and BLAS take float32; drop "
                f"--cpu-only to time the GPU kernels in {args.dtype}, or use --dtype float32")
    if backend != "gpu":
        return (f"--dtype {args.dtype} times the GPU kernels only (the CPU kernels take float32) and no CUDA GPU "
                f"was found (the CUDA simulator says nothing about speed)")
    from sparsekit.bench.uspmm import bfloat16_b_on_device
    if args.dtype == "bfloat16" and not bfloat16_b_on_device():
        return ("--dtype bfloat16 needs PyTorch with CUDA: B stays on the device as a torch.bfloat16 tensor (Numba "
                "has no bfloat16 arrays)")
    return None


def cmd_bench_spmm(args) -> int:
    from sparsekit.backend import choose_backend

    backend = "cpu" if args.cpu_only else choose_backend()
    half = args.dtype != "float32"
    if half and (why := _half_refusal(args, backend)):
        print(f"sparsekit bench spmm: error: {why}", file=sys.stderr)
        return 2
    from sparsekit.balance import row_stats
    from sparsekit.bench.spmm import bench_cpu_matrix, bench_gpu_problem, half_problem
    from sparsekit.experiment import markdown_table

    try:
        what, csr, b, a = _load(args)
        if half:
            csr, b = half_problem(csr, b, args.dtype)
    except (ValueError, TypeError, OSError, MemoryError) as err:
        print(f"sparsekit bench spmm: error: {err}", file=sys.stderr)
        return 2
    stats = row_stats(csr)
    print(f"{what}; rows: mean {stats['mean']:.1f} nnz, max {stats['max']}, cv {stats['cv']:.2f}, "
          f"empty {stats['empty_rows']}")
    if half:
        del a                                             # the float32 copy: the check widens the 16-bit one
        return _bench_half(args, csr, b)
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


def _bench_half(args, csr16, b16) -> int:
    """The GPU records of a float16 or bfloat16 problem; exit status 1 where one of our kernels is wrong or failed
    (a baseline off the bound is reported only: :func:`sparsekit.bench.spmm.half_exit_status`)."""
    from sparsekit.bench.spmm import DENSE, bench_gpu_half, half_exit_status
    from sparsekit.experiment import markdown_table
    from sparsekit.timing import measured_bandwidth

    print(f"\nCPU: not timed in {args.dtype} (the CPU kernels, scipy and BLAS take float32).")
    bandwidth = measured_bandwidth()
    recs = bench_gpu_half(csr16, b16, repeat=max(args.repeat, 10), bandwidth=bandwidth)
    print(f"\nGPU ({args.dtype} A and B, device time in us; speedup over {DENSE}; weight_bytes in "
          f"the provider's format; pct_bandwidth: those bytes over the time, of the {bandwidth / 1e12:.2f} TB/s "
          f"copy bandwidth; correct: within float32 sums plus one rounding to {args.dtype} of the float32 "
          f"product of the same {args.dtype} operands, reported for the baselines; reason: why a provider did not run):\n")
    print(markdown_table(recs))
    return half_exit_status(recs)
