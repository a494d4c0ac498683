"""``sparsekit bench uspmm`` and ``sparsekit tune``: time and tune the USpMM kernels.

    sparsekit bench uspmm --m 1024 --k 1024 --n 1024 --sparsity 0.6 --dtype float32 [--tf32-weights]
    sparsekit bench uspmm --m 4096 --k 4096 --n 16 --sparsity 0.8 --dtype bfloat16
    sparsekit tune --m 1024 --k 1024 --n 1024 --sparsity 0.6 --dtype float16
    sparsekit tune --m 1024 --k 1024 --n 16 --sparsity 0.8 --dtype bfloat16

``bench uspmm`` prints one row per provider (our variants, ``config="auto"``,
our CSR baselines, cuSPARSE CSR/COO and dense cuBLAS through PyTorch when
installed): median and p10/p90 device time, TFLOP/s on the stored nonzeros, %
of the roofline speed of light, speedup over cuSPARSE CSR, and whether the
result matched a float64 product; then the configuration ``auto`` and ``heuristic`` chose (for the wgmma
kernel with the precision it ran); a provider that cannot run the problem is n/a with the reason.
``tune`` times every configuration of :func:`sparsekit.tune.space` (``--full``: the full grid) and caches the
winner for ``config="auto"``.
Both need a GPU (timings on the simulator would mean nothing). bfloat16 (``ml_dtypes.bfloat16``) runs on the
decode and TiledBitmap kernels (N <= 64) and the tensor-core kernel only (:mod:`sparsekit.router`; ``tune``
searches those, :func:`sparsekit.tune.space`); both commands keep its B on the device as a PyTorch tensor (Numba
has none of that dtype) and refuse it without PyTorch with CUDA.
"""
from __future__ import annotations

from sparsekit.cli_types import declare_host_memory, repeat, seed, side, sparsity

#: The values of ``--dtype``: A, B and C in one dtype, accumulation in float32.
DTYPES = ("float32", "float16", "bfloat16")


def _problem_args(p, bfloat16: str) -> None:
    """The problem's flags; ``bfloat16``: what ``--dtype bfloat16`` does in this command, for its help."""
    p.add_argument("--m", type=side, required=True, help="rows of the sparse A (out features)")
    p.add_argument("--k", type=side, required=True, help="columns of A, rows of B (in features)")
    p.add_argument("--n", type=side, required=True, help="columns of B (batch x sequence)")
    p.add_argument("--sparsity", type=sparsity, required=True,
                   help="fraction of zeros of A, uniform per row, in [0, 1)")
    p.add_argument("--dtype", choices=DTYPES, default="float32",
                   help=f"dtype of A, B and C (accumulation is float32; bfloat16: {bfloat16}) (default: %(default)s)")
    p.add_argument("--seed", type=seed, default=0, help="random seed of A and B (default: %(default)s)")


def add_bench(bench_subparsers) -> None:
    p = bench_subparsers.add_parser("uspmm", help="USpMM variants vs cuSPARSE, cuBLAS and the roofline",
                                    description=__doc__.split("\n\n")[0])
    _problem_args(p, "the decode kernel up to N = 64 and the tensor-core kernel")
    p.add_argument("--repeat", type=repeat, default=30, help="timed repeats per provider (default: %(default)s)")
    p.add_argument("--tf32-weights", action="store_true",
                   help="round A's values to TF32 numbers, as float16 or bfloat16 weights cast to float32 are: the "
                        "tensor-core kernels then leave out one of their three products (float32 only)")
    declare_host_memory(p, _bench_host_bytes, "m", "k", "n", "sparsity", "dtype")
    p.set_defaults(func=cmd_bench)


def add_commands(subparsers) -> None:
    p = subparsers.add_parser("tune", help="autotune USpMM for one problem and cache the winner",
                              description=__doc__.split("\n\n")[0])
    _problem_args(p, "the decode, TiledBitmap and tensor-core kernels; needs PyTorch with CUDA")
    p.add_argument("--order", choices=("C", "F"), default="C",
                   help="memory order of B: C (row-major) or F (Eq. 2, PyTorch Linear) (default: %(default)s)")
    p.add_argument("--repeat", type=repeat, default=20, help="timed repeats per configuration (default: %(default)s)")
    p.add_argument("--full", action="store_true", help="search the full grid of tunables, not the default dozen")
    declare_host_memory(p, _tune_host_bytes, "m", "k", "n", "sparsity", "dtype")
    p.set_defaults(func=cmd_tune)


def _bench_host_bytes(args) -> int:
    from sparsekit.bench.uspmm import host_bytes
    return host_bytes(args.m, args.k, args.n, args.sparsity, args.dtype)


def _tune_host_bytes(args) -> int:
    """About the most host memory ``tune`` holds at once: per element of A 48 bytes (the draw and pruning of
    :func:`sparsekit.tune.make_ell`, then the dense copy and float64 ``|A|`` of the correctness scale), of B its
    own bytes and 16 (the float64 ``|B|``), of C its own and 40 (each result in float64, the first one, their
    difference)."""
    import numpy as np

    import sparsekit.checks  # noqa: F401  (registers bfloat16's name with NumPy, through ml_dtypes)
    itemsize = np.dtype(args.dtype).itemsize
    return 48 * args.m * args.k + (itemsize + 16) * args.k * args.n + (itemsize + 40) * args.m * args.n


def _need_gpu(what: str) -> bool:
    from sparsekit.backend import choose_backend
    if choose_backend() != "gpu":
        print(f"{what}: needs a CUDA GPU (none found); timings on the simulator would mean nothing")
        return False
    return True


def cmd_bench(args) -> int:
    if args.tf32_weights and args.dtype != "float32":
        print(f"--tf32-weights: float32 weights only (the float16 and bfloat16 kernels have no TF32 split), "
              f"got --dtype {args.dtype}")
        return 2
    if not _need_gpu("sparsekit bench uspmm"):
        return 2
    from sparsekit.bench.uspmm import TABLE_KEYS, bench_problem, bfloat16_b_on_device, markdown
    if args.dtype == "bfloat16" and not bfloat16_b_on_device():
        print("sparsekit bench uspmm: --dtype bfloat16 needs PyTorch with CUDA (B stays on the device as a "
              "torch.bfloat16 tensor: Numba has no bfloat16 arrays)")
        return 2
    from sparsekit.device import info
    recs = bench_problem(args.m, args.k, args.n, args.sparsity, args.dtype, repeat=args.repeat, seed=args.seed,
                         tf32_a=args.tf32_weights)
    print(f"device: {info().name}")
    print(markdown(recs, TABLE_KEYS))
    for r in recs:
        if "config" in r:                                 # what "auto" / "heuristic" chose, precision included
            print(f"{r['provider']} ran: {r['config']}")
        if "error" in r:
            print(f"{r['provider']}: n/a, {r['error']}")
    return 0 if all(r.get("correct", True) for r in recs) else 1


def cmd_tune(args) -> int:
    if not _need_gpu("sparsekit tune"):
        return 2
    from sparsekit.bench.uspmm import bfloat16_b_on_device, markdown
    if args.dtype == "bfloat16" and not bfloat16_b_on_device():
        print("sparsekit tune: --dtype bfloat16 needs PyTorch with CUDA (B stays on the device as a "
              "torch.bfloat16 tensor: Numba has no bfloat16 arrays)")
        return 2
    from sparsekit.tune import cache_path, make_ell, tune
    ell = make_ell(args.m, args.k, args.sparsity, args.dtype, seed=args.seed)
    try:
        winner, recs = tune(ell, args.n, order=args.order, full=args.full, repeat=args.repeat, seed=args.seed)
    except ValueError as err:                     # no configuration takes the problem (e.g. bfloat16, F order, N > 64)
        print(f"sparsekit tune: {err}")
        return 2
    recs.sort(key=lambda r: r.get("median_us", float("inf")))             # refused configurations last
    keys = sorted({k for r in recs for k in r}, key=lambda k: (k in ("median_us", "p10_us", "p90_us", "correct"), k))
    print(markdown(recs[:15], keys))
    print(f"winner {winner} cached in {cache_path()}")
    return 0
