"""``sparsekit bench uspmm-decode``: uniform-sparse half-precision SpMM at LLM decode shapes vs dense cuBLAS.

    sparsekit bench uspmm-decode --quick
    sparsekit bench uspmm-decode --dtype bfloat16 --out results/

Times ``uspmm(config="auto")`` (the kernel the router picks, named in each record) on 4096x4096, 14336x4096 and
4096x14336 weights (``--shapes``) pruned uniformly to 50-90 %, N = 1 to 128, against dense cuBLAS, cuSPARSELt 2:4 and cuSPARSE CSR (PyTorch); prints
the table and the crossover (largest N faster than dense), writes ``uspmm_decode.json`` and a plot to
``--out``. Needs a GPU and PyTorch.
"""
from __future__ import annotations

import sys

from sparsekit.cli_types import matrix_shape, out_folder, record_file, sparsity


def add_bench(bench_subparsers) -> None:
    p = bench_subparsers.add_parser("uspmm-decode", help="uniform-sparse fp16/bf16 SpMM at LLM decode shapes against "
                                                         "dense cuBLAS, cuSPARSELt 2:4 and cuSPARSE",
                                    description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="one shape, three sparsities, N in 1, 8, 16")
    p.add_argument("--dtype", choices=["float16", "bfloat16", "both"], default="both",
                   help="value dtype (default: %(default)s)")
    p.add_argument("--shapes", type=matrix_shape, nargs="+", default=None,
                   help="weights MxK (default: 4096x4096 14336x4096 4096x14336; --quick 4096x4096)")
    p.add_argument("--sparsity", type=sparsity, nargs="+", default=None,
                   help="sparsities to run (default: 0.5 0.6 0.7 0.8 0.9; --quick 0.5 0.8 0.9)")
    p.add_argument("--out", type=out_folder, default="uspmm-decode-out", help="folder for the JSON record and the plot "
                                                              "(default: %(default)s)")
    p.add_argument("--merge", type=record_file, default=None, metavar="JSON",
                   help="an earlier uspmm_decode.json: write it with this run's points replacing its own (the "
                        "others kept), the crossover and plot of the whole")
    p.set_defaults(func=cmd_bench_uspmm_decode)


def cmd_bench_uspmm_decode(args) -> int:
    from pathlib import Path

    from sparsekit.backend import choose_backend

    if choose_backend() != "gpu":
        print("sparsekit bench uspmm-decode: needs a CUDA GPU (timings on the simulator would mean nothing)")
        return 2
    try:
        import torch  # noqa: F401
    except ImportError:
        print("sparsekit bench uspmm-decode: needs PyTorch for the baselines (pip install -e '.[bench]')")
        return 2
    from sparsekit.bench import uspmm_decode as bench
    from sparsekit.experiment import markdown_table, progress_bar, read_record

    old = None
    if args.merge is not None:
        try:
            old = read_record(args.merge, bench.RECORD_KEY, "uspmm-decode")
        except ValueError as err:
            print(f"sparsekit bench uspmm-decode: error: {err}", file=sys.stderr)
            return 2

    shapes, sps, ns = ((bench.QUICK_SHAPES, bench.QUICK_SPARSITIES, bench.QUICK_NS) if args.quick
                       else (bench.SHAPES, bench.SPARSITIES, bench.NS))
    sps = args.sparsity or sps
    shapes = args.shapes or shapes
    dtypes = bench.DTYPES if args.dtype == "both" else [args.dtype]
    records, bandwidth = bench.sweep(shapes, sps, ns, dtypes, progress=progress_bar)
    print(f"copy bandwidth {bandwidth / 1e12:.2f} TB/s\n")
    print(markdown_table(records))
    print("\nLargest N at which the sparse product beats dense:\n")
    print(markdown_table(bench.crossover(records)))
    command = (f"sparsekit bench uspmm-decode{' --quick' if args.quick else ''} --dtype {args.dtype}"
               + (" --shapes " + " ".join(f"{m}x{k}" for m, k in args.shapes) if args.shapes else "")
               + (" --sparsity " + " ".join(map(str, args.sparsity)) if args.sparsity else ""))
    if old is not None:
        records, command = bench.merged_with(old, records, command)
    bench.write_results(records, bandwidth, Path(args.out), command)
    print(f"\nwrote {args.out}/uspmm_decode.json and uspmm_decode.png")
    return 0 if all(r["correct"] for r in records) else 1
