"""``sparsekit roofline``: per-layer speed of light of a model, dense vs a sparsity pattern.

    sparsekit roofline --model resnet50 --pattern 2:4 --device h100 --batch 1
    sparsekit roofline --model swin-tiny --pattern block4 --sparsity 0.9 --dtype float16

prints one row per layer (m, k, n, FLOPs and bytes of the sparse layer, which
roof binds it and on which unit, dense and sparse speed of light in microseconds) and the model's summed
speedup at speed of light (the Sparsity Roofline paper, Equations 1-3).
"""
from __future__ import annotations

import sys

from sparsekit.cli_types import fraction, integer

#: Images or sequences: a layer's n is the batch times its positions, and at 2**15 it stays below 2**31 for
#: every model (EfficientNet-B4 has the most positions an image, 36,100).
_BATCH = integer(minimum=1, maximum=2**15)


def add_commands(subparsers) -> None:
    from sparsekit.models import MODELS
    from sparsekit.roofline import ITEMSIZE

    p = subparsers.add_parser("roofline", help="per-layer speed of light of a model, dense vs sparse",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help=f"model name; one of {', '.join(MODELS)}")
    p.add_argument("--pattern", default="2:4",
                   help="sparsity pattern: unstructured (csr), coo, uniform (ell), blockB (bsr), "
                        "blocked-uniform:B, N:M, dense (default: %(default)s)")
    p.add_argument("--sparsity", type=fraction(closed=True), default=None,
                   help="fraction of zeros for non-N:M patterns, in [0, 1] (N:M fixes it)")
    p.add_argument("--device", default="H100", help="V100, A100, H100, H200 or measured (default: %(default)s)")
    p.add_argument("--batch", type=_BATCH, default=1, help="batch size (default: %(default)s)")
    p.add_argument("--dtype", default="float16", choices=sorted(ITEMSIZE),
                   help="value dtype; float32 means CUDA cores, tf32 tensor cores (default: %(default)s)")
    p.add_argument("--attention", action="store_true",
                   help="also list attention's activation products (kept dense in both sums)")
    p.add_argument("--convention", default="2nnz", choices=("2nnz", "paper"),
                   help="FLOPs per stored value and column: 2 (default) or the paper's 1")
    p.set_defaults(func=cmd_roofline)


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.2f}{prefix}{unit}"
    return f"{value:.0f}{unit}"


def render(result, device_name: str) -> str:
    """The per-layer table and the model sums as text."""
    head = f"{'layer':34s} {'m':>6s} {'k':>6s} {'n':>7s} {'x':>4s} {'FLOPs':>9s} {'bytes':>9s} " \
           f"{'bound':>7s} {'unit':>13s} {'dense us':>9s} {'sparse us':>9s} {'speedup':>7s}"
    lines = [head, "-" * len(head)]
    for l in result.layers:
        c = l.sparse.counts
        lines.append(f"{l.name[:34]:34s} {c.m:6d} {c.k:6d} {c.n:7d} {l.count:4d} {_si(l.sparse.flops, ''):>9s} "
                     f"{_si(l.sparse.bytes, 'B'):>9s} {l.sparse.bound:>7s} {l.sparse.unit:>13s} "
                     f"{l.dense.seconds * 1e6:9.2f} {l.sparse.seconds * 1e6:9.2f} {l.speedup:7.2f}")
    lines += ["-" * len(head),
              f"model on {device_name}: dense {result.dense_s * 1e6:.1f} us, {result.pattern} "
              f"{result.sparse_s * 1e6:.1f} us at speed of light -> speedup {result.speedup:.2f}x "
              f"(features are {100 * result.feature_share('dense'):.0f}% of dense bytes)"]
    return "\n".join(lines)


def cmd_roofline(args) -> int:
    from sparsekit.models import model
    from sparsekit.roofline import model_sol, roof

    try:
        layers = model(args.model, batch=args.batch)
        r = roof(args.device)
        result = model_sol(layers, args.pattern, args.sparsity, dtype=args.dtype, device=r,
                           include_activation_matmuls=args.attention, convention=args.convention)
    except (ValueError, TypeError, RuntimeError) as err:   # RuntimeError: "measured" without a GPU
        print(f"sparsekit roofline: {err}", file=sys.stderr)
        return 2
    print(render(result, r.name))
    return 0
