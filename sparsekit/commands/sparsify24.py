"""``sparsekit bench sparsify24``: the 2:4 tile sparsifier against PyTorch's, and its masks' quality.

    sparsekit bench sparsify24 --m 4096 --k 1024
    sparsekit bench sparsify24 --m 8192 --k 8192 --check

On a GPU: device time of our kernels (greedy with both tie orders, optimal,
optimal_full, fp32) and of ``torch._sparse_semi_structured_tile`` when PyTorch
is installed, with % of the measured copy bandwidth
(:func:`sparsekit.bench.sparsify24.bench_shape`); ``--check`` first compares
every kernel with the NumPy reference. Everywhere: the share of ``|w|`` each
mask keeps on a random fp16 weight of that shape
(:func:`sparsekit.bench.sparsify24.kept_magnitude`).
"""
from __future__ import annotations

from sparsekit.reference.sparsify24 import ALIGN
from sparsekit.cli_types import MAX_SIDE, declare_host_memory, integer, repeat, seed

#: Rows and columns of the weight: multiples of the sparsifier's alignment up to the shared MAX_SIDE (their
#: product is checked against the host memory: the mask-quality table takes about 192 bytes an element).
_SIDE = integer(minimum=ALIGN, maximum=MAX_SIDE, multiple_of=ALIGN)


def add_bench(bench_subparsers) -> None:
    p = bench_subparsers.add_parser("sparsify24", help="2:4 tile sparsifier: ours vs PyTorch's, greedy vs optimal",
                                    description=__doc__.split("\n\n")[0])
    p.add_argument("--m", type=_SIDE, default=4096, help="rows of the weight, a multiple of 32 (default: %(default)s)")
    p.add_argument("--k", type=_SIDE, default=1024, help="columns, a multiple of 32 (default: %(default)s)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the random weight (default: %(default)s)")
    p.add_argument("--repeat", type=repeat, default=30, help="timed repeats per provider (default: %(default)s)")
    p.add_argument("--check", action="store_true", help="compare every kernel with the reference first (GPU)")
    declare_host_memory(p, _host_bytes, "m", "k")
    p.set_defaults(func=cmd_bench_sparsify24)


def _host_bytes(args) -> int:
    from sparsekit.bench.sparsify24 import host_bytes
    return host_bytes(args.m, args.k)


def cmd_bench_sparsify24(args) -> int:
    import numpy as np

    from sparsekit.bench.sparsify24 import kept_magnitude
    from sparsekit.experiment import markdown_table

    m, k = args.m, args.k
    w = np.random.default_rng(args.seed).standard_normal((m, k)).astype(np.float16)
    print(f"share of sum |w| kept, random normal fp16 {m}x{k} (NumPy reference):")
    print(markdown_table(kept_magnitude(w)))
    from sparsekit.backend import choose_backend

    choose_backend()                                    # (and the numba-cuda replacements: the kernels compile next)
    from sparsekit import timing
    try:
        timing.require_gpu("sparsekit bench sparsify24")
    except RuntimeError as e:
        print(f"no timings: {e}")
        return 0
    from sparsekit.bench import sparsify24 as bench
    ok = True
    if args.check:
        ok = bench.check_reference({})
    bw = timing.measured_bandwidth()
    print(f"copy bandwidth {bw / 1e9:.0f} GB/s")
    print(markdown_table(bench.bench_shape(m, k, bench.OURS, copy_bw=bw, repeat=args.repeat)))
    return 0 if ok else 1
