"""Host time of one ``uspmm`` call on a GPU: what the Python launchers cost beside the kernels they launch.

Not an experiment module (no EXPERIMENT): run it as a script on a GPU::

    python -m experiments.bench_uspmm_dispatch [--out DIR] [--calls N]

For each problem (a routed ``config="auto"`` call, and the kernel's setting passed directly), with B as a Numba
device array and, where PyTorch is installed, as a CUDA tensor: the median host time of a call
(:func:`sparsekit.timing.dispatch_overhead`: the device synchronised every 32 calls, outside the timed calls),
beside two floors measured the same way: Numba launching a kernel of the same argument kinds with its arguments
made once, and ``cuda.device_array`` of the output's size; and what a launcher's output costs instead
(:func:`sparsekit.arrays.output` from its pool, each output collected before the next; PyTorch operands' outputs
come from PyTorch's caching allocator). One table, printed; ``DIR/uspmm_dispatch.json``
with ``--out``. The device time of the same calls is ``experiments/bench_uspmm.py``'s business.
"""
from __future__ import annotations

import argparse
import json
import os
from datetime import datetime, timezone

import numpy as np

#: (label, M, K, N, sparsity, dtype): one problem per launcher the routing reaches on an H100
PROBLEMS = [
    ("wgmma (fp32, one wave)", 1024, 1024, 1024, 0.6, "float32"),
    ("tensor cores (fp16)", 1024, 1024, 1024, 0.6, "float16"),
    ("CUDA cores (fp32, 95%)", 1024, 1024, 1024, 0.95, "float32"),
]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="directory for uspmm_dispatch.json")
    parser.add_argument("--calls", type=int, default=500, help="timed calls a row (default 500)")
    args = parser.parse_args(argv)

    from numba import cuda

    from sparsekit.arrays import cuda_torch
    from sparsekit.bench.uspmm import Problem
    from sparsekit.gpu.uspmm import uspmm
    from sparsekit.gpu.uspmm_wgmma import supported
    from sparsekit.arrays import operand, output
    from sparsekit.device import info
    from sparsekit.timing import dispatch_overhead, require_gpu
    from sparsekit.tune import resolve

    require_gpu("bench_uspmm_dispatch")
    torch = cuda_torch()
    rows = []
    print(f"device: {info().name}; host us a call (median of {args.calls})")
    print(f"{'problem':28s} {'B':6s} {'config':8s} {'call':>8s}")
    for label, m, k, n, sparsity, dtype in PROBLEMS:
        p = Problem(m, k, n, sparsity, dtype)
        chosen = resolve("auto", p.dell, n, "C", wgmma=supported())
        kinds = [("numba", p.b)] + ([("torch", torch.from_numpy(p.b_host).cuda())] if torch else [])
        for kind, b in kinds:
            for config_name, call in (("auto", lambda: uspmm(p.dell, b, config="auto")),
                                      ("direct", lambda: uspmm(p.dell, b, **chosen))):
                us = dispatch_overhead(call, repeat=args.calls) * 1e6
                rows.append(dict(problem=label, m=m, k=k, n=n, sparsity=sparsity, dtype=dtype, b=kind,
                                 config=config_name, tunables=chosen, host_us=us))
                print(f"{label:28s} {kind:6s} {config_name:8s} {us:8.1f}", flush=True)
    alloc = dispatch_overhead(lambda: cuda.device_array((1024, 1024), np.float32), repeat=args.calls) * 1e6
    rows.append(dict(floor="cuda.device_array 1024 x 1024 float32", host_us=alloc))
    print(f"{'floor: cuda.device_array 4 MB':44s} {alloc:8.1f}")
    like = operand(kinds[0][1], "b", dtypes=None)
    pooled = dispatch_overhead(lambda: output((1024, 1024), np.float32, like=like), repeat=args.calls) * 1e6
    rows.append(dict(floor="sparsekit.arrays.output 1024 x 1024 float32 (the pool)", host_us=pooled))
    print(f"{'sparsekit.arrays.output 4 MB (the pool)':44s} {pooled:8.1f}")
    launch = _bare_launch_us(args.calls)
    rows.append(dict(floor="Numba launch, arguments made once (the wgmma kernel's kinds)", host_us=launch))
    print(f"{'floor: Numba launch, prepared arguments':44s} {launch:8.1f}")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "uspmm_dispatch.json"), "w") as f:
            json.dump(dict(device=info().name, date=datetime.now(timezone.utc).strftime("%Y-%m-%d"),
                           calls=args.calls, rows=rows), f, indent=1)
    return 0


def _bare_launch_us(calls: int) -> float:
    """Numba's own launch, with arguments made once, of a kernel taking what the wgmma kernel takes (three flat
    arrays, the 2-D output, five integers) and doing nothing."""
    from numba import cuda

    from sparsekit.timing import dispatch_overhead

    @cuda.jit
    def nothing(ev, eo, b, c, m, n, k, w, mp):
        if cuda.grid(1) == m + n + k + w + mp:              # never: M, N, K, w, mp >= 0 and one thread
            c[0, 0] = ev[0] + eo[0] + b[0]

    flat = cuda.device_array(1024, np.float32)
    words = cuda.device_array(1024, np.uint32)
    c = cuda.device_array((1024, 1024), np.float32)
    launch = nothing[1, 1]
    return dispatch_overhead(lambda: launch(flat, words, flat, c, 1024, 1024, 1024, 8, 1024), repeat=calls) * 1e6


if __name__ == "__main__":
    raise SystemExit(main())
