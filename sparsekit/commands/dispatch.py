"""``sparsekit bench dispatch-tiled``: host overhead per call of a TiledCSL layer against F.linear.

    sparsekit bench dispatch-tiled [--calls 200] [--json FILE]

Device time, wall time per call back to back from torch tensors, and their difference, for
``sparsekit.torch.tiled.TiledSparseLinear`` and dense ``F.linear`` (4096x4096, 80%, N = 1 and 16, float16
and bfloat16). Device time is :func:`sparsekit.timing.measure`'s median (L2 flushed); wall time is the mean
of calls made back to back from the host, the queue drained at the end; the difference is what the host adds
to each call. Needs a GPU and PyTorch; about 30 s.
"""
from __future__ import annotations

from sparsekit.cli_types import integer

SHAPE = (4096, 4096)
SPARSITY = 0.8
BATCHES = (1, 16)
DTYPES = ("float16", "bfloat16")


def run(calls: int = 200, repeat: int = 30) -> list[dict]:
    """One record per (dtype, N, product): device_us, wall_us, overhead_us."""
    import torch
    import torch.nn.functional as F

    from sparsekit.timing import measure
    from sparsekit.torch.bench import _wall_time
    from sparsekit.torch.tiled import TiledSparseLinear

    records = []
    for dtype_name in DTYPES:
        dtype = getattr(torch, dtype_name)
        torch.manual_seed(0)
        dense = torch.nn.Linear(SHAPE[1], SHAPE[0], bias=False, device="cuda", dtype=dtype)
        layer = TiledSparseLinear.from_linear(dense, SPARSITY)
        w = layer.to_dense().weight
        for n in BATCHES:
            x = torch.randn(n, SHAPE[1], device="cuda", dtype=dtype)
            for name, step in (("TiledSparseLinear", lambda: layer(x)), ("F.linear (dense)", lambda: F.linear(x, w))):
                with torch.no_grad():
                    step()
                    device = measure(step, repeat=repeat).median_s
                    wall = _wall_time(step, calls)
                records.append(dict(dtype=dtype_name, n=n, product=name, device_us=round(device * 1e6, 2),
                                    wall_us=round(wall * 1e6, 2), overhead_us=round((wall - device) * 1e6, 2)))
    return records


def table(records: list[dict]) -> str:
    """The records as an aligned text table."""
    head = f"{'dtype':9} {'N':>3} {'product':18} {'device us':>10} {'wall us':>9} {'overhead us':>12}"
    rows = [f"{r['dtype']:9} {r['n']:>3} {r['product']:18} {r['device_us']:>10.2f} {r['wall_us']:>9.2f} "
            f"{r['overhead_us']:>12.2f}" for r in records]
    return "\n".join([f"{SHAPE[0]}x{SHAPE[1]} weight, {SPARSITY:.0%} uniform sparsity", head, *rows])


def add_bench(bench_subparsers) -> None:
    p = bench_subparsers.add_parser("dispatch-tiled", help="host overhead per TiledSparseLinear call against F.linear",
                                    description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=integer(minimum=1), default=200,
                   help="back-to-back calls timed for the wall time (default: %(default)s)")
    p.add_argument("--json", default=None, help="also write the records to this JSON file")
    p.set_defaults(func=cmd_dispatch_tiled)


def cmd_dispatch_tiled(args) -> int:
    from sparsekit.backend import choose_backend

    if choose_backend() != "gpu":
        print("sparsekit bench dispatch-tiled: needs a CUDA GPU (timings on the simulator would mean nothing)")
        return 1
    try:
        import torch  # noqa: F401
    except ImportError:
        print("sparsekit bench dispatch-tiled: needs PyTorch (pip install -e '.[torch]')")
        return 1
    import json

    records = run(calls=args.calls)
    print(table(records))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
        print(f"wrote {args.json}")
    return 0
