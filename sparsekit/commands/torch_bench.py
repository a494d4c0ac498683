"""``sparsekit bench dispatch`` and ``sparsekit bench e2e``: sparsekit.torch measured on a GPU.

    sparsekit bench dispatch --out results/
    sparsekit bench e2e --dtype bfloat16 --sparsity 0.8 0.9 --mode eager graph --out results/
    sparsekit bench e2e --pattern 2:4 --sparsity 0.5 --mode compile-graph --batch 1 --prefill 512 2048

``dispatch``: device time, wall time and host overhead per call of the custom op against torch.matmul.
``e2e``: a Llama-style decoder stack (hidden 4096, FFN 14336, 32 heads), every linear layer uniform-sparse (or
2:4, or unstructured: ``--pattern``; keeping every copy of its weight that inference reads, or fewer:
``--copies``),
decode tokens/s at batch 1, 8, 32 and prefill at 512 and 2048 tokens, eager, torch.compile and CUDA graphs,
against the dense model; output agreement with the dense model of the pruned weights; weight memory.
Both print a table and write CSV, JSON and a plot to ``--out``. Need a GPU and PyTorch.
"""
from __future__ import annotations

import sys

from sparsekit.cli_types import integer, names, out_folder, record_file, sparsity
from sparsekit.router import INFERENCE_COPIES

_MODES = ["eager", "compile", "graph", "compile-graph"]
#: Decoder layers: each holds 0.49 GB of 16-bit weights, about as much again sparse; at 128 (Llama-3-405B has
#: 126) the dense and sparse models take some 125 GB of a 141 GB GPU.
_LAYERS = integer(minimum=1, maximum=128)
#: Decode batch: the KV cache of 8 layers at the 129 positions decoded holds 17 MB a sequence, 69 GB at 4096.
_BATCH = integer(minimum=1, maximum=4096)
#: Prefill tokens: the causal mask is tokens x tokens (1 GiB at 2**15) beside the KV cache (4.3 GB at 8 layers).
_PREFILL = integer(minimum=1, maximum=2**15)


def add_bench(bench_subparsers) -> None:
    p = bench_subparsers.add_parser("dispatch", help="host overhead per sparsekit.torch op against torch.matmul",
                                    description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=out_folder, default="dispatch-out", help="folder for CSV/JSON/plot (default: %(default)s)")
    p.set_defaults(func=cmd_dispatch)
    p = bench_subparsers.add_parser("e2e", help="sparse Llama-style decoder tokens/s against dense",
                                    description=__doc__.split("\n\n")[0])
    p.add_argument("--dtype", choices=["float16", "bfloat16", "both"], default="bfloat16",
                   help="weight dtype (default: %(default)s)")
    p.add_argument("--sparsity", type=sparsity, nargs="+", default=[0.5, 0.7, 0.8, 0.9],
                   help="sparsities besides dense (default: %(default)s)")
    p.add_argument("--pattern", choices=["uniform", "2:4", "unstructured"], default="uniform",
                   help="how every linear layer is pruned (2:4: 50 %%, --sparsity 0.5; default: %(default)s)")
    p.add_argument("--copies", type=names(INFERENCE_COPIES), default=True, metavar="all|none|NAME[,NAME]",
                   help="the copies of each weight inference may keep (SparseLinear.inference_copies: all, none, or "
                        "names of compact, bitmap, cusparselt; default: all)")
    p.add_argument("--mode", choices=_MODES, nargs="+", default=_MODES, help="execution modes (default: all)")
    p.add_argument("--layers", type=_LAYERS, default=8, help="decoder layers (default: %(default)s)")
    p.add_argument("--batch", type=_BATCH, nargs="*", default=[1, 8, 32], help="decode batches (default: %(default)s)")
    p.add_argument("--prefill", type=_PREFILL, nargs="*", default=[512, 2048], help="prefill lengths (default: %(default)s)")
    p.add_argument("--tp", type=integer(minimum=1, maximum=8), default=1,
                   help="tensor-parallel ranks (run under torchrun --nproc-per-node TP; default: %(default)s)")
    p.add_argument("--out", type=out_folder, default="e2e-out", help="folder for CSV/JSON/plot (default: %(default)s)")
    p.add_argument("--merge", type=record_file, default=None, metavar="JSON",
                   help="an earlier e2e.json: write it with this run's rows replacing its own (the others kept)")
    p.set_defaults(func=cmd_e2e)


def _join_group(tp: int) -> bool:
    """Join the NCCL group torchrun set up (one rank a GPU); False with a message outside torchrun."""
    import os

    import torch
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) != tp:
        print(f"sparsekit bench e2e: --tp {tp} runs under torchrun --nproc-per-node {tp} "
              f"(WORLD_SIZE is {os.environ.get('WORLD_SIZE', 'unset')})")
        return False
    if torch.cuda.device_count() < tp:
        print(f"sparsekit bench e2e: --tp {tp} needs {tp} GPUs, this machine has {torch.cuda.device_count()}")
        return False
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl")
    return True


def _ready(name: str) -> bool:
    from sparsekit.backend import choose_backend

    if choose_backend() != "gpu":
        print(f"sparsekit bench {name}: needs a CUDA GPU (timings on the simulator would mean nothing)")
        return False
    try:
        import torch  # noqa: F401
    except ImportError:
        print(f"sparsekit bench {name}: needs PyTorch (pip install -e '.[torch]')")
        return False
    return True


def cmd_dispatch(args) -> int:
    if not _ready("dispatch"):
        return 2
    from sparsekit.experiment import markdown_table
    from sparsekit.torch.bench import dispatch, write

    records = dispatch()
    print(markdown_table(records))
    print(f"\nwrote {', '.join(write(records, args.out, 'dispatch'))} to {args.out}")
    return 0


def cmd_e2e(args) -> int:
    if args.pattern == "2:4" and set(args.sparsity) != {0.5}:
        print(f"sparsekit bench e2e: error: --pattern 2:4 keeps 2 of every 4 weights: --sparsity 0.5, got "
              f"{' '.join(map(str, args.sparsity))}", file=sys.stderr)
        return 2
    if not _ready("e2e"):
        return 2
    from dataclasses import replace

    import torch

    from sparsekit.experiment import markdown_table, merge_records, progress_bar, read_record
    from sparsekit.torch.bench import RECORD_KEY, disagreements, e2e, fine_tune_step, write
    from sparsekit.torch.decoder import LLAMA_8_LAYERS, Decoder
    from sparsekit.torch.nn import sparsify_

    old = None
    if args.merge is not None:
        try:
            old = read_record(args.merge, RECORD_KEY, "e2e")
        except ValueError as err:
            print(f"sparsekit bench e2e: error: {err}", file=sys.stderr)
            return 2

    cfg = replace(LLAMA_8_LAYERS, layers=args.layers)
    dtypes = [torch.float16, torch.bfloat16] if args.dtype == "both" else [getattr(torch, args.dtype)]
    if args.tp > 1 and not _join_group(args.tp):
        return 2
    lead = args.tp == 1 or torch.distributed.get_rank() == 0              # the rank that reports
    records = e2e(cfg, dtypes, [0.0] + list(args.sparsity), args.mode, tuple(args.batch), tuple(args.prefill),
                  tp=args.tp, progress=progress_bar if lead else (lambda it, desc: it), pattern=args.pattern,
                  copies=args.copies)
    if args.tp > 1:
        torch.distributed.destroy_process_group()
        if not lead:
            return 0
    print(markdown_table(records))
    step = fine_tune_step(sparsify_(Decoder(replace(cfg, layers=1), device="cuda"), sparsity=0.8))
    print(f"\nfine-tuning step (1 layer, float32, 80%): updated kept values vs dense masked SGD, "
          f"max relative difference {step['max_relative_difference']:.2e}")
    written = merge_records(old["records"], records, RECORD_KEY) if old is not None else records
    print(f"wrote {', '.join(write(written, args.out, 'e2e'))} to {args.out}"
          + (f" ({len(records)} rows of this run merged into {args.merge}'s {len(old['records'])})" if old else ""))
    bad = disagreements(records)
    for line in bad:
        print(f"sparsekit bench e2e: {line}", file=sys.stderr)
    return 1 if bad else 0
