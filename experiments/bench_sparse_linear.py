"""Device time of one ``SparseLinear`` call against ``F.linear`` at decode widths, bfloat16, on a GPU::

    python -m experiments.bench_sparse_linear [--pattern uniform|unstructured|2:4] [--widths 1 8 16 64]
    python -m experiments.bench_sparse_linear --routes
    python -m experiments.bench_sparse_linear --orders
    python -m experiments.bench_sparse_linear --floor
    python -m experiments.bench_sparse_linear --compact

Shapes 4096x4096, 14336x4096, 4096x14336; sparsity 50-90 % (2:4: 50 %); N = 1, 8, 16 and 64 (any with
``--widths``), each on the route the layer takes without autograd (:func:`sparsekit.torch.ops.route`: the row
kernel, the TiledBitmap kernel, cuSPARSELt for a 2:4 weight past 32 rows, or dense GEMM on the weight densified
for the call). Each product runs 50
times in a CUDA graph (no host cost) over 4 weights in rotation (so the MLP weights do not stay in L2); the
time is a call's share. Prints ours, dense, the speedup, the bytes the route reads over our time, and cuSPARSE
(``torch.sparse`` CSR of the same pruned weight times ``x^T``; "-" where torch refuses it). Recorded in
``experiments/results/sparse_linear.md``.

``--routes``: one weight a shape (so 4096x4096 stays in L2), bfloat16 80 %, N = 1-64: the route taken, wall us per
call (back to back, drained at the end) of ours and ``nn.Linear``, device us of ours, of the op without
``inference`` (the route before the TiledBitmap: row kernel to N = 16, densify + GEMM beyond) and of
``nn.Linear``; each point checked against the float64 product of the pruned weight.

``--orders``: the row kernel (``sparsekit.gpu.spmm_ell_rows``) on the layers' rows in column order against the
order the layer stores (``gather_order``), at N = 1 (``x`` in shared memory) and N = 8 (``x^T`` through L1, and
copied to shared memory where it fits); same rotation and graphs as the main table.

``--floor``: at N = 1, the layer's call on its rows (``inference_copies`` off), its row kernel replayed from a
recorded plan, and the same grid reading the same rows without the product
(``sparsekit.gpu.spmm_ell_rows.read_rows``): the memory floor of that kernel; microseconds and TB/s of the rows'
bytes.

``--compact``: at N = 1, the row kernel on the layers' padded ELL rows (4 bytes a kept weight) against the compact
ELL row kernel (``sparsekit.gpu.spmm_ell_compact``, 3.25 bytes a slot) on the same weights, converted once; same
rotation and graphs, each product checked; then a decoder layer's seven products summed (:data:`LAYER_PRODUCTS`).
"""
from __future__ import annotations

SHAPES = ((4096, 4096), (14336, 4096), (4096, 14336))
SPARSITIES = (0.5, 0.7, 0.8, 0.9)
WIDTHS = (1, 8, 16, 64)
ROTATION = 4
#: A decoder layer's products of each shape (``sparsekit.torch.decoder``: q, k, v, o; gate, up; down).
LAYER_PRODUCTS = {(4096, 4096): 4, (14336, 4096): 2, (4096, 14336): 1}


def graph_time(step, calls: int = 50) -> float:
    """Microseconds a ``step()`` replayed ``calls`` times from one CUDA graph."""
    from sparsekit.torch.bench import graph_time as seconds

    return seconds(step, calls) * 1e6


def _cusparse(layers, x) -> str:
    """Microseconds of cuSPARSE CSR (through torch.sparse) on the layers' pruned weights, or "-" (also past 64
    rows of ``x``, where it takes 10-100x dense)."""
    import torch

    if x.shape[0] > 64:
        return "-"
    try:
        csrs = [layer.to_dense().weight.detach().to_sparse_csr() for layer in layers]
        xt = x.T.contiguous()
        return f"{graph_time(lambda: [torch.sparse.mm(c, xt) for c in csrs]) / len(csrs):7.1f}"
    except (RuntimeError, NotImplementedError):
        return "-"


def _layer_route(layer, n: int) -> str:
    """The route the layer takes at ``n`` rows of ``x`` without autograd (after a call there)."""
    from sparsekit.torch import ops

    return ops._WEIGHTS[layer.weight_id].route(n, layer.values, layer.indices, layer.in_features,
                                               bool(layer.inference_copies))


def _route_bytes(layer, n: int) -> int:
    """Bytes the layer's route reads at ``n`` rows of ``x`` without autograd, once it ran there: the TiledBitmap's,
    cuSPARSELt's buffer, the compact rows' or the ELL rows' (densify + GEMM reads the rows, then writes and reads the dense weight:
    counted as the rows)."""
    from sparsekit.torch import ops

    kernel = _layer_route(layer, n)
    if kernel == "bitmap":
        return ops.bitmap_bytes(layer.weight_id)
    if kernel == "cusparselt":
        return ops.cusparselt_bytes(layer.weight_id)
    if kernel == "compact":
        return ops.compact_bytes(layer.weight_id)
    return sum(t.numel() * t.element_size() for t in (layer.values, layer.indices))


def routes(calls: int = 200, widths=(1, 8, 16, 32, 64)) -> bool:
    """The ``--routes`` table (module docstring); True when every point is correct."""
    import torch

    from sparsekit.bench.spmm import error_bound
    from sparsekit.torch import SparseLinear, ops
    from sparsekit.torch.bench import graph_time as seconds, wall_time

    def correct(y, x, w) -> bool:          # float32 sums in any order, rounded once to bfloat16
        want, bound = error_bound(x.float(), w.float(), "bfloat16")
        return bool(((y.float() - want).abs() <= bound).all())

    ok = True
    print("shape N route | wall_ours_us wall_nn_us | dev_ours_us dev_before_us dev_nn_us speedup | correct")
    for m, k in SHAPES:
        torch.manual_seed(0)
        layer = SparseLinear.from_dense(torch.nn.Linear(k, m, bias=False, device="cuda", dtype=torch.bfloat16),
                                        sparsity=0.8)
        pruned = layer.to_dense()
        w = pruned.weight.detach()
        op = torch.ops.sparsekit.sparse_linear
        for n in widths:
            x = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            with torch.no_grad():
                good = correct(layer(x), x, w) and correct(layer(x), x, w)        # recorded, then replayed
                steps = (lambda: layer(x), lambda: op(x, layer.values, layer.indices, k, layer.weight_id),
                         lambda: pruned(x))
                dev_ours, dev_before, dev_nn = (seconds(s, calls) * 1e6 for s in steps)
                wall_ours, wall_nn = (wall_time(s, calls) * 1e6 for s in (steps[0], steps[2]))
            ok &= good
            kernel = ops.route(n, layer.values.shape[1], k, True, out_features=m)
            print(f"{m}x{k} {n} {kernel} | {wall_ours:.1f} {wall_nn:.1f} | {dev_ours:.1f} {dev_before:.1f} "
                  f"{dev_nn:.1f} {dev_nn / dev_ours:.2f}x | {good}", flush=True)
    return ok


def _dense_points(widths):
    """``(m, k, n, dense, x, dense_us)`` for each shape and width: ROTATION seeded ``nn.Linear`` weights of the shape
    (bfloat16, CUDA), an ``x`` of ``n`` rows and the dense product's microseconds a call."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    for m, k in SHAPES:
        dense = [torch.nn.Linear(k, m, bias=False, device="cuda", dtype=torch.bfloat16) for _ in range(ROTATION)]
        for n in widths:
            x = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            with torch.no_grad():
                yield m, k, n, dense, x, graph_time(lambda: [F.linear(x, d.weight) for d in dense]) / ROTATION


def _plans(products, x):
    """``(replay, outputs)``: each ``(product, rows)`` of ``products`` (``product(x)`` an ``N x rows`` output)
    recorded for ``x`` (:func:`sparsekit.launch.record`); ``replay()`` launches them all again on torch's current
    stream (what a CUDA graph captures)."""
    import torch

    from sparsekit.launch import record

    runs = []
    for product, rows in products:
        out, plan = record(product, x, lambda t: t.new_empty((x.shape[0], rows)))
        if plan is None:
            raise RuntimeError("a product's launches could not be recorded")
        runs.append((plan, out))

    def replay():
        stream = torch.cuda.current_stream().cuda_stream
        for plan, out in runs:
            plan(x.data_ptr(), out.data_ptr(), stream)

    return replay, [out for _, out in runs]


def _row_plans(rows, k: int, x, x_in_shared=None):
    """:func:`_plans` of the row kernel (:func:`sparsekit.gpu.spmm_ell_rows.spmm_ell_rows_linear`) on each
    ``(values, indices)`` of ``rows``, each with its own staged ``x^T`` (kept for the plan's lifetime)."""
    from sparsekit.gpu.launch import Buffers
    from sparsekit.gpu.spmm_ell_rows import spmm_ell_rows_linear

    def product(values, indices, buffers):
        return lambda t: spmm_ell_rows_linear(values, indices, k, t, buffers=buffers, x_in_shared=x_in_shared)

    return _plans([(product(v, i, Buffers()), v.shape[0]) for v, i in rows], x)


def orders(widths=(1, 8)) -> bool:
    """The ``--orders`` table (module docstring); True when every variant's product is right."""
    import torch
    import torch.nn.functional as F

    from sparsekit.torch import SparseLinear

    def column_order(layer):
        order = torch.argsort(layer.indices.long() & 0xFFFF, dim=1, stable=True)
        return layer.values.detach().gather(1, order).contiguous(), layer.indices.gather(1, order).contiguous()

    def stored(layer):
        return layer.values.detach(), layer.indices

    ok = True
    print("shape N sparsity: dense_us | variant us (speedup over dense) ...")
    for m, k, n, dense, x, td in _dense_points(widths):
        places = [None] if n == 1 else [False] + ([True] if 2 * k * 8 <= 227 * 1024 else [])
        for sparsity in SPARSITIES:
            layers = [SparseLinear.from_dense(d, sparsity=sparsity) for d in dense]
            want = F.linear(x.float(), layers[0].to_dense().weight.float())
            cells = []
            for shared in places:
                for name, rows in (("columns", column_order), ("gather_order", stored)):
                    replay, outs = _row_plans(map(rows, layers), k, x, shared)
                    ok &= bool((outs[0].float() - want).abs().max() <= 1e-2 * want.abs().max())
                    t = graph_time(replay) / ROTATION
                    where = "" if shared is None else (" shared" if shared else " L1")
                    cells.append(f"{name}{where} {t:6.2f} ({td / t:.2f}x)")
            print(f"{m}x{k} N={n} {sparsity:.0%}: {td:6.2f} | " + " | ".join(cells), flush=True)
    return ok


def _one_row_points():
    """``(m, k, sparsity, x, dense_us, layers, rows)`` at N = 1 for each shape and sparsity: ROTATION layers pruned
    from :func:`_dense_points`' weights and their rows ``(values, indices)``."""
    from sparsekit.torch import SparseLinear

    for m, k, _, dense, x, td in _dense_points((1,)):
        for sparsity in SPARSITIES:
            layers = [SparseLinear.from_dense(d, sparsity=sparsity) for d in dense]
            yield m, k, sparsity, x, td, layers, [(layer.values.detach(), layer.indices) for layer in layers]


def floor() -> None:
    """The ``--floor`` table (module docstring)."""
    import torch
    from numba import cuda

    from sparsekit.gpu.spmm_ell_rows import read_rows

    def stream():
        return cuda.external_stream(torch.cuda.current_stream().cuda_stream)

    print("shape sparsity MB: dense_us | layer us TB/s | plan us TB/s | read floor us TB/s | plan over floor")
    for m, k, sparsity, x, td, layers, rows in _one_row_points():
        for layer in layers:
            layer.inference_copies = False                 # the row kernel, not the compact rows' copy
        with torch.no_grad():
            nbytes = sum(t.numel() * t.element_size() for t in rows[0])
            replay, _ = _row_plans(rows, k, x)
            times = [graph_time(lambda: [layer(x) for layer in layers]) / ROTATION, graph_time(replay) / ROTATION,
                     graph_time(lambda: [read_rows(v, i, k, stream=stream()) for v, i in rows]) / ROTATION]
        cells = " | ".join(f"{t:6.2f} {nbytes / t / 1e6:4.2f}" for t in times)
        print(f"{m}x{k} {sparsity:.0%} {nbytes / 1e6:6.1f}: {td:6.2f} | {cells} | {times[1] / times[2]:.2f}x",
              flush=True)


def compact() -> bool:
    """The ``--compact`` table (module docstring); True when every product is right."""
    import torch
    import torch.nn.functional as F

    from sparsekit.gpu.spmm_ell_compact import compact_rows, spmm_ell_compact_linear
    from sparsekit.reference.spmm_ell_compact import nbytes

    def product(values, offsets, bases, k):
        return lambda t: spmm_ell_compact_linear(values, offsets, bases, k, t)

    ok, layer_us = True, {}
    print("shape sparsity: rows_us compact_us speedup | rows MB TB/s | compact MB TB/s")
    for m, k, sparsity, x, _, layers, rows in _one_row_points():
        with torch.no_grad():
            compacts = [compact_rows(v, i, k) for v, i in rows]
            wants = [F.linear(x.float(), layer.to_dense().weight.float()) for layer in layers]
            times, right = [], True
            for replay, outs in (_row_plans(rows, k, x), _plans([(product(*c, k), m) for c in compacts], x)):
                right &= all(bool((y.float() - w).abs().max() <= 1e-2 * w.abs().max()) for y, w in zip(outs, wants))
                times.append(graph_time(replay) / ROTATION)
        ok &= right
        sizes = (sum(t.numel() * t.element_size() for t in rows[0]), nbytes(*compacts[0]))
        print(f"{m}x{k} {sparsity:.0%}: {times[0]:6.2f} {times[1]:6.2f} {times[0] / times[1]:.2f}x | "
              + " | ".join(f"{b / 1e6:6.1f} {b / t / 1e6:4.2f}" for b, t in zip(sizes, times))
              + ("" if right else " WRONG"), flush=True)
        for i, t in enumerate(times):
            layer_us[sparsity, i] = layer_us.get((sparsity, i), 0.0) + LAYER_PRODUCTS[m, k] * t
    for sparsity in SPARSITIES:
        rows_us, compact_us = layer_us[sparsity, 0], layer_us[sparsity, 1]
        print(f"a decoder layer's seven products at {sparsity:.0%}: rows {rows_us:6.1f} us, compact {compact_us:6.1f} "
              f"({rows_us / compact_us:.2f}x)")
    return ok


def main(pattern: str = "uniform", widths=WIDTHS) -> bool:
    """The main table (module docstring); True when every point's product is right (float32 sums of the
    pruned weight, to 1 % of the largest output)."""
    import torch
    import torch.nn.functional as F

    from sparsekit.torch import SparseLinear

    ok = True
    print(f"{pattern}: shape sparsity N: ours_us dense_us speedup weight_TB/s cusparse_us route")
    for m, k, n, dense, x, td in _dense_points(widths):
        with torch.no_grad():
            for sparsity in (0.5,) if pattern == "2:4" else SPARSITIES:
                layers = [SparseLinear.from_dense(d, sparsity=sparsity, pattern=pattern) for d in dense]
                ts = graph_time(lambda: [layer(x) for layer in layers]) / ROTATION
                want = F.linear(x.float(), layers[0].to_dense().weight.float())
                right = bool((layers[0](x).float() - want).abs().max() <= 1e-2 * want.abs().max())
                ok &= right
                kernel = _layer_route(layers[0], n)
                print(f"{m}x{k} {sparsity:.0%} N={n}: {ts:7.1f} {td:7.1f} {td / ts:5.2f}x "
                      f"{_route_bytes(layers[0], n) / ts / 1e6:6.2f} {_cusparse(layers, x)} {kernel}"
                      f"{'' if right else ' WRONG'}", flush=True)
    return ok


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pattern", choices=("uniform", "unstructured", "2:4"), default="uniform")
    parser.add_argument("--widths", type=int, nargs="+", default=list(WIDTHS), help="rows of x (N)")
    parser.add_argument("--routes", action="store_true", help="the routes' table (one weight a shape, 80 %%)")
    parser.add_argument("--orders", action="store_true", help="column order against gather_order (N = 1, 8)")
    parser.add_argument("--floor", action="store_true", help="the N = 1 kernel against a read of its rows")
    parser.add_argument("--compact", action="store_true", help="the N = 1 kernel on padded against compact ELL rows")
    args = parser.parse_args()
    if args.routes:
        raise SystemExit(0 if routes() else 1)
    if args.orders:
        raise SystemExit(0 if orders() else 1)
    if args.floor:
        raise SystemExit(floor())
    if args.compact:
        raise SystemExit(0 if compact() else 1)
    raise SystemExit(0 if main(args.pattern, args.widths) else 1)
