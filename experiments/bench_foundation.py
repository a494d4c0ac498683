"""Benchmark of the foundation on a GPU: bandwidth, launch cost, what sparsekit.arrays adds, measure()'s accuracy.

Not an experiment module (no EXPERIMENT): run it as a script on a GPU::

    python -m experiments.bench_foundation [--out DIR] [--quick]
    python -m experiments.bench_foundation --sanitize   # tiny run for compute-sanitizer

What it measures, in order (one table each, printed; also written to
``DIR/foundation.json`` when ``--out`` is given):

1. the device (``sparsekit.device.info``) and its datasheet peaks;
2. copy bandwidth: ``measured_bandwidth`` (cuMemcpyDtoD, 1 GiB) and a Numba
   copy kernel, bytes read + written over median device time, against the
   datasheet;
3. host dispatch per launch (``dispatch_overhead``, median of 2000 calls) of a
   1024-element axpy kernel: Numba given device arrays (the floor), Numba given
   CuPy / PyTorch arrays directly, and the full ``sparsekit.arrays`` launcher
   path (operand x 2 + output + launch + result) for each input kind; "arrays
   adds" = launcher path - (Numba launch with device arrays + a
   ``cuda.device_array`` output allocation), to stay at or below 5 us;
   plus ``operand``, ``output`` and ``result`` alone;
4. ``measure`` against kernels of known duration (the spin kernel, which polls
   the device's ns clock), the floor of every measured time (the 1024-element
   axpy, 4 blocks: what ``measure`` reports for a kernel that does nearly nothing,
   with and without the L2 flush) and, for L2 flushing, a 16 MiB read measured
   with and without the flush.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timezone

import numpy as np
from numba import cuda

N_LAUNCH = 1024          # elements of the tiny kernel used for launch costs
DISPATCH_CALLS = 2000


@cuda.jit
def axpy(a, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


@cuda.jit
def copy(src, dst):
    i = cuda.grid(1)
    if i < dst.size:
        dst[i] = src[i]


@cuda.jit
def read_sum(src, out):
    """Each thread sums a strided slice; one store per thread (reads dominate)."""
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    acc = 0.0
    for i in range(start, src.size, step):
        acc += src[i]
    out[start] = acc


def _table(title, header, rows):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(header)]
    line = "| " + " | ".join(str(h).ljust(w) for h, w in zip(header, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    return "\n".join([f"\n### {title}\n", line, sep, *body])


def bandwidth_section(quick):
    from sparsekit.arrays import cdiv
    from sparsekit.device import info, peaks_for
    from sparsekit.timing import measured_bandwidth
    from sparsekit.timing import measure

    dev = info()
    table = peaks_for(dev.name)
    n = (64 << 20) if quick else (256 << 20)   # float32 elements: 256 MiB or 1 GiB
    src = cuda.to_device(np.random.default_rng(0).standard_normal(n, dtype=np.float32))
    dst = cuda.device_array(n, np.float32)
    grid = cdiv(n, 256)
    m_kernel = measure(lambda: copy[grid, 256](src, dst), repeat=20, flush_l2=False)
    ok = bool(np.array_equal(dst.copy_to_host()[:: 1 << 16], src.copy_to_host()[:: 1 << 16]))
    nbytes = 4 * n
    bw_memcpy = measured_bandwidth(nbytes)
    bw_kernel = 2 * nbytes / m_kernel.median_s
    rows = []
    for what, bw, m in (("cuMemcpyDtoD", bw_memcpy, None), ("Numba copy kernel (1 float/thread)", bw_kernel, m_kernel)):
        frac = f"{bw / table.bandwidth:.0%}" if table else "n/a"
        spread = f"{2 * nbytes / m.p90_s / 1e9:.0f}-{2 * nbytes / m.p10_s / 1e9:.0f}" if m else ""
        rows.append((what, f"{nbytes >> 20} MiB", f"{bw / 1e9:.0f}", spread, frac))
    records = {"bandwidth_memcpy_Bps": bw_memcpy, "bandwidth_kernel_Bps": bw_kernel,
               "kernel_copy_correct": ok, "copy_bytes": nbytes}
    text = _table("Copy bandwidth (bytes read + written / median device time)",
                  ("copy", "size", "GB/s", "p90-p10 GB/s", "of datasheet"), rows)
    return text, records


def dispatch_section():
    from sparsekit.arrays import cdiv, operand, output, result
    from sparsekit.checks import FLOAT_DTYPES
    from sparsekit.timing import dispatch_overhead

    rng = np.random.default_rng(1)
    hx = rng.standard_normal(N_LAUNCH).astype(np.float32)
    hy = rng.standard_normal(N_LAUNCH).astype(np.float32)
    grid = cdiv(N_LAUNCH, 256)
    want = np.float32(2.0) * hx + hy

    def launcher(x, y):
        xo = operand(x, "x", dtypes=FLOAT_DTYPES, ndim=1)
        yo = operand(y, "y", dtypes=(xo.dev.dtype,), shape=xo.dev.shape)
        out = output(xo.dev.shape, xo.dev.dtype, like=xo)
        axpy[grid, 256](2.0, xo.dev, yo.dev, out)
        return result(out, like=xo)

    inputs = {"numba": (cuda.to_device(hx), cuda.to_device(hy))}
    libs = {}
    try:
        import cupy
        libs["cupy"] = cupy
        inputs["cupy"] = (cupy.asarray(hx), cupy.asarray(hy))
    except ImportError:
        print("cupy not installed: skipped", file=sys.stderr)
    try:
        import torch
        if torch.cuda.is_available():
            libs["torch"] = torch
            inputs["torch"] = (torch.from_numpy(hx).cuda(), torch.from_numpy(hy).cuda())
    except ImportError:
        print("torch not installed: skipped", file=sys.stderr)
    inputs["numpy"] = (hx, hy)

    def t(fn):
        return dispatch_overhead(fn, repeat=DISPATCH_CALLS, warmup=50)

    dx, dy = inputs["numba"]
    dout = cuda.device_array(N_LAUNCH, np.float32)
    base_launch = t(lambda: axpy[grid, 256](2.0, dx, dy, dout))
    alloc = t(lambda: cuda.device_array(N_LAUNCH, np.float32))
    floor = base_launch + alloc
    both = t(lambda: axpy[grid, 256](2.0, dx, dy, cuda.device_array(N_LAUNCH, np.float32)))
    rows, records = [], {"numba_launch_device_arrays_s": base_launch, "device_array_alloc_s": alloc}
    rows.append(("numba", "Numba launch, device arrays (floor)", f"{base_launch * 1e6:.1f}", "", ""))
    rows.append(("numba", f"cuda.device_array({N_LAUNCH}) (output alloc)", f"{alloc * 1e6:.1f}", "", ""))
    rows.append(("numba", "launch + cuda.device_array in one call", f"{both * 1e6:.1f}",
                 f"{(both - floor) * 1e6:+.1f}", ""))
    records["launch_with_fresh_output_s"] = both
    for kind, (x, y) in inputs.items():
        out = launcher(x, y)
        host = out if isinstance(out, np.ndarray) else (
            out.copy_to_host() if kind == "numba" else
            libs["cupy"].asnumpy(out) if kind == "cupy" else out.cpu().numpy())
        correct = bool(np.array_equal(host, want))
        op_t = t(lambda: operand(x, "x", dtypes=FLOAT_DTYPES, ndim=1))
        full = t(lambda: launcher(x, y))
        rec = {"operand_s": op_t, "launcher_s": full, "correct": correct}
        if kind == "numpy":
            to_dev = t(lambda: cuda.to_device(x))
            rec["to_device_s"] = to_dev
            rows.append((kind, "cuda.to_device(x) alone", f"{to_dev * 1e6:.1f}", "", ""))
            rows.append((kind, "operand(x) (validation + copy)", f"{op_t * 1e6:.1f}",
                         f"{(op_t - to_dev) * 1e6:+.1f}", correct))
            rows.append((kind, "launcher (2 copies in, 1 out, synchronous)", f"{full * 1e6:.1f}", "", correct))
        else:
            if kind != "numba":
                direct = t(lambda: axpy[grid, 256](2.0, x, y, dout))
                rec["numba_launch_direct_s"] = direct
                rows.append((kind, f"Numba launch given {kind} arrays directly", f"{direct * 1e6:.1f}",
                             f"{(direct - base_launch) * 1e6:+.1f}", ""))
            xo = operand(x, "x", dtypes=FLOAT_DTYPES, ndim=1)
            out_t = t(lambda: output((N_LAUNCH,), np.float32, like=xo))
            made = output((N_LAUNCH,), np.float32, like=xo)
            res_t = t(lambda: result(made, like=xo))
            rec.update(output_s=out_t, result_s=res_t)
            rows.append((kind, "operand(x)", f"{op_t * 1e6:.2f}", "", ""))
            rows.append((kind, "output(like=x)", f"{out_t * 1e6:.2f}", "", ""))
            rows.append((kind, "result(out, like=x)", f"{res_t * 1e6:.2f}", "", ""))
            rows.append((kind, "launcher: 2 operand + output + launch + result", f"{full * 1e6:.1f}",
                         f"{(full - floor) * 1e6:+.1f}", correct))
            rec["arrays_adds_s"] = full - floor
        records[kind] = rec
    text = _table(f"Host dispatch per call, {N_LAUNCH}-element axpy (median of {DISPATCH_CALLS}); "
                  "'adds' = minus the floor (launch + output alloc), or minus to_device for NumPy",
                  ("input", "path", "us", "adds us", "correct"), rows)
    return text, records


def measure_section():
    from sparsekit.timing import kernels, measure

    spin = kernels().spin
    rows, records = [], {}
    for ns, batch in ((5_000, 20), (50_000, 1), (500_000, 1)):
        m = measure(lambda: spin[1, 1](ns), repeat=20, batch=batch)
        records[f"spin_{ns}ns_batch{batch}"] = {"median_s": m.median_s, "p10_s": m.p10_s,
                                               "p90_s": m.p90_s, "late": m.late}
        rows.append((f"spin {ns / 1e3:.0f} us", batch, f"{m.median_s * 1e6:.2f}",
                     f"{m.p10_s * 1e6:.2f}-{m.p90_s * 1e6:.2f}",
                     f"{(m.median_s - ns * 1e-9) * 1e6:+.2f}", m.late))
    x, y, out = (cuda.to_device(np.ones(N_LAUNCH, np.float32)) for _ in range(3))
    for flush in (True, False):   # the floor: no kernel measures less
        m = measure(lambda: axpy[N_LAUNCH // 256, 256](2.0, x, y, out), repeat=50, flush_l2=flush)
        records[f"axpy{N_LAUNCH}_flush{flush}"] = {"median_s": m.median_s, "p10_s": m.p10_s,
                                                   "p90_s": m.p90_s, "late": m.late}
        rows.append((f"axpy {N_LAUNCH} (floor), L2 {'flushed' if flush else 'warm'}", 1,
                     f"{m.median_s * 1e6:.2f}", f"{m.p10_s * 1e6:.2f}-{m.p90_s * 1e6:.2f}", "", m.late))
    n = 4 << 20  # 16 MiB of float32: fits the H100's 50 MB L2
    src = cuda.to_device(np.random.default_rng(2).standard_normal(n, dtype=np.float32))
    out = cuda.device_array(132 * 8 * 256, np.float32)
    for flush in (True, False):
        m = measure(lambda: read_sum[132 * 8, 256](src, out), repeat=30, flush_l2=flush)
        gbps = 4 * n / m.median_s / 1e9
        records[f"read16MiB_flush{flush}"] = {"median_s": m.median_s, "GBps": gbps, "late": m.late}
        rows.append((f"read 16 MiB, L2 {'flushed' if flush else 'warm'}", 1, f"{m.median_s * 1e6:.2f}",
                     f"{m.p10_s * 1e6:.2f}-{m.p90_s * 1e6:.2f}", f"{gbps:.0f} GB/s", m.late))
    text = _table("measure() against known kernels (spin: polls %globaltimer for a set time)",
                  ("kernel", "batch", "median us", "p10-p90 us", "error / rate", "late"), rows)
    return text, records


def sanitize_run():
    """Tiny run of every timing kernel (spin, flush) and the arrays path, for compute-sanitizer."""
    from sparsekit.arrays import operand, output, result
    from sparsekit.timing import kernels, measure

    spin = kernels().spin
    m = measure(lambda: spin[1, 1](1000), repeat=3, warmup=1, flush_l2=True)
    x = operand(np.arange(8, dtype=np.float32), "x", dtypes=np.float32)
    y = output((8,), np.float32, like=x)
    y.copy_to_device(x.dev)
    assert np.array_equal(result(y, like=x), np.arange(8, dtype=np.float32))
    cuda.synchronize()
    print(f"sanitize run done: {m}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="folder for foundation.json")
    ap.add_argument("--quick", action="store_true", help="smaller copy (256 MiB)")
    ap.add_argument("--sanitize", action="store_true", help="tiny run for compute-sanitizer")
    args = ap.parse_args(argv)
    from sparsekit.device import info, peaks_for
    from sparsekit.timing import require_gpu

    require_gpu("bench_foundation")
    if args.sanitize:
        sanitize_run()
        return 0
    dev = info()
    import numba
    import numba_cuda
    header = [f"# bench_foundation: {datetime.now(timezone.utc):%Y-%m-%d}",
              dev.describe(), f"numba {numba.__version__}, numba-cuda {numba_cuda.__version__}, "
              f"numpy {np.__version__}"]
    table = peaks_for(dev.name)
    if table:
        header.append(table.describe())
    report = {"device": dev.__dict__, "when": datetime.now(timezone.utc).isoformat()}
    parts = ["\n".join(header)]
    print(parts[0], flush=True)
    for name, section in (("bandwidth", lambda: bandwidth_section(args.quick)),
                          ("dispatch", dispatch_section), ("measure", measure_section)):
        text, rec = section()
        report[name] = rec
        parts.append(text)
        print(text, flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "foundation.json"), "w") as f:
            json.dump(report, f, indent=1, default=str)
        with open(os.path.join(args.out, "foundation.txt"), "w") as f:
            f.write("\n".join(parts) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
