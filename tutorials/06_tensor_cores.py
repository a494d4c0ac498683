"""Tutorial 6: reaching tensor cores from Numba, and what densifying sparse tiles costs.

What you will learn
-------------------
1. the fragment layout of ``mma.sync.m16n8k16``: which elements of ``A``
   (16x16), ``B`` (16x8) and ``C`` (16x8) each of the warp's 32 lanes holds
   (the table of ``sparsekit/gpu/mma.py``, :func:`sparsekit.reference.mma.fragment_coords`);
2. one warp-level MMA through ``sparsekit/gpu/mma.py``'s intrinsic
   :func:`sparsekit.gpu.mma.mma_m16n8k16_f16_f32` against NumPy. Numba has no tensor-core API:
   on a GPU the call is one inline-PTX ``mma.sync`` instruction; on the CUDA
   simulator the warp's lanes swap fragments and compute the same product;
3. why sparse needs densifying: a uniform-sparse ``A`` leaves no all-zero
   16x16 tile to skip, so ``sparsekit/gpu/uspmm_tc.py`` multiplies densified tiles,
   zeros included. It is checked against ``sparsekit/reference/uspmm.py``, the wasted
   multiply-adds are counted per sparsity, and the H100 timings are quoted
   from ``experiments/results/uspmm_tc.md``;
4. float32 on tensor cores that only multiply TF32 (10-bit mantissas): split
   each value into a TF32 big and small part (:func:`sparsekit.reference.mma.tf32_split`) and
   add three products; what the split loses, and why the error bound counts
   the MMAs a product goes through (three for 3xTF32, two with bf16
   corrections: :func:`sparsekit.gpu.uspmm_tc.error_reduction`), with the H100's
   measured errors quoted from ``experiments/results/uspmm_precision.json``.

Without a GPU everything runs on the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``)
at toy size, with small kernel tiles; nothing is timed.

Run it: ``python tutorials/06_tensor_cores.py`` (``--quick`` for toy sizes).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parents[1] / "experiments" / "results" / "uspmm_tc.md"
#: The line of RESULTS just above the quoted table: the float16 timings of the current kernel.
RESULTS_MARKER = "float16, median us (speedup over cuSPARSE CSR in brackets):"
#: The columns of that table the tutorial prints (by the start of their header).
QUOTED_COLUMNS = ("problem", "tc new default", "tc old default", "cuSPARSE", "dense cuBLAS")
#: The H100 record of the float32 paths' errors (``experiments/bench_uspmm_precision.py``) quoted in step 4,
#: and the problem whose rows it prints.
PRECISION_RECORD = RESULTS.parent / "uspmm_precision.json"
PRECISION_PROBLEM = (1024, 1024, 1024, 0.6)
#: Small tiles for the simulator (64 threads; the first float16 tiling of tests/test_uspmm_tc.py).
SIM_TUNABLES = dict(bm=32, bn=16, kc=16, warps_m=2, warps_n=1)


def owner_grid(shape: str, operand: str, rows: int, cols: int) -> np.ndarray:
    """``rows x cols`` array: the lane holding each element of ``operand`` ("a", "b" or "c")."""
    from sparsekit.reference.mma import fragment_coords

    grid = np.full((rows, cols), -1, dtype=int)
    for lane in range(32):
        for reg, coords in fragment_coords(shape, lane).items():
            if reg.startswith(operand):
                for r, c in coords:
                    grid[r, c] = lane
    return grid


def print_grid(title: str, grid: np.ndarray) -> None:
    print(f"  {title} ({grid.shape[0]}x{grid.shape[1]}): lane holding each element")
    for row in grid:
        print("    " + " ".join(f"{v:2d}" for v in row))


def quoted_timings(path: Path = RESULTS) -> list[list[str]]:
    """The rows of the first table after :data:`RESULTS_MARKER` in ``path`` (header first), cells
    stripped; [] if absent."""
    if not path.exists():
        return []
    rows, marked, inside = [], False, False
    for line in path.read_text().splitlines():
        marked = marked or line.startswith(RESULTS_MARKER)
        if marked and line.startswith("|"):
            inside = True
        if inside:
            if not line.startswith("|"):
                break
            if not line.startswith("|---"):
                rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def quoted_errors(path: Path = PRECISION_RECORD) -> list[dict]:
    """The rows of ``path`` (a ``bench_uspmm_precision.py`` record) for :data:`PRECISION_PROBLEM`; [] if absent."""
    import json
    if not path.exists():
        return []
    return [r for r in json.loads(path.read_text())["rows"]
            if (r["m"], r["k"], r["n"], r["sparsity"]) == PRECISION_PROBLEM]


def split_demo(rng, kprime: int) -> dict:
    """Step 4's NumPy part: a row of ``kprime`` float32 products computed from TF32 parts, every product and sum
    exact (float64), so only the split's loss shows; errors in u = 2**-24 of ``sum |a b|``."""
    from sparsekit.reference.mma import tf32_split
    a, b = (rng.standard_normal(kprime).astype(np.float32) for _ in range(2))
    (ab, as_), (bb, bs) = tf32_split(a), tf32_split(b)
    f64 = lambda x: x.astype(np.float64)                    # noqa: E731
    exact, scale = float(f64(a) @ f64(b)), float(np.abs(f64(a)) @ np.abs(f64(b)))
    one = float(f64(ab) @ f64(bb))                          # one TF32 product: what TF32 mode computes
    three = float(f64(as_) @ f64(bb) + f64(ab) @ f64(bs) + f64(ab) @ f64(bb))   # 3xTF32, small terms first
    u = 2.0 ** -24
    return dict(tf32_u=abs(one - exact) / (u * scale), three_u=abs(three - exact) / (u * scale),
                big_rel=float(np.max(np.abs(f64(a) - f64(ab)) / np.abs(f64(a)))),
                rest_rel=float(np.max(np.abs(f64(a) - f64(ab) - f64(as_)) / np.abs(f64(a)))))


def one_mma_kernel():
    """A one-warp kernel ``d = a @ bt.T + c``: ``a`` 16x16 and ``bt`` 8x16 float16, ``c``/``d`` 16x8 float32,
    all flat and row-major. Lane ``(g, t)`` = ``(lane // 4, lane % 4)`` loads its fragments as 32-bit words
    (``A[g, 2t:2t+2]`` and so on, ``bt``'s rows being B's columns) and stores its four accumulators.
    Numba is imported here, after the backend is chosen, into module globals: the simulator swaps a
    kernel's global ``cuda``, not a closure's."""
    global cuda, load_b32, mma_m16n8k16_f16_f32
    from numba import cuda

    from sparsekit.gpu.mma import load_b32, mma_m16n8k16_f16_f32

    @cuda.jit
    def one_mma(a, bt, c, d):
        lane = cuda.threadIdx.x
        g, t = lane // 4, lane % 4
        ar = g * 16 + 2 * t                                 # A[g, 2t] and B[2t, g] = bt[g, 2t]
        cr = g * 8 + 2 * t                                  # C[g, 2t]
        x = mma_m16n8k16_f16_f32(load_b32(a, ar), load_b32(a, ar + 128), load_b32(a, ar + 8),
                                 load_b32(a, ar + 136), load_b32(bt, ar), load_b32(bt, ar + 8),
                                 c[cr], c[cr + 1], c[cr + 64], c[cr + 65])
        d[cr] = x[0]
        d[cr + 1] = x[1]
        d[cr + 64] = x[2]
        d[cr + 65] = x[3]

    return one_mma


def main(quick: bool = False) -> dict:
    from sparsekit.gpu import uspmm_tc as tc
    from sparsekit.reference import uspmm as ru
    from sparsekit.reference.mma import fragment_coords
    from sparsekit.formats import ELL
    from sparsekit.prune import uniform

    on_gpu = os.environ.get("NUMBA_ENABLE_CUDASIM") != "1"
    rng = np.random.default_rng(0)
    out = {}

    # Step 1. The fragment layout: lane l has g = l // 4, t = l % 4 (sparsekit/gpu/mma.py's table).
    print("Step 1: mma.sync.m16n8k16 fragments (g = lane // 4, t = lane % 4)")
    for lane in (0, 5):
        regs = fragment_coords("m16n8k16", lane)
        print(f"  lane {lane:2d}: " + "; ".join(f"{name} {coords}" for name, coords in regs.items()))
    grids = {op: owner_grid("m16n8k16", op, r, c) for op, r, c in (("a", 16, 16), ("b", 16, 8), ("c", 16, 8))}
    for op, title in (("a", "A"), ("b", "B"), ("c", "C/D")):
        assert (grids[op] >= 0).all()                       # every element has an owner lane
        print_grid(title, grids[op])
    print("  each lane holds 8 halves of A (32 x 8 = 256 = 16 x 16), 4 of B and 4 floats of C (32 x 4 = 16 x 8)")
    out["layout"] = grids

    # Step 2. One MMA in one warp: D = A @ B + C, each lane loading its fragments from row-major tiles.
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 8)).astype(np.float16)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    d = np.zeros_like(c)
    bt = np.ascontiguousarray(b.T)                          # B's columns as rows: b0, b1 are 32-bit words
    one_mma_kernel()[1, 32](a.ravel(), bt.ravel(), c.ravel(), d.reshape(-1))
    exact = a.astype(np.float64) @ b.astype(np.float64) + c
    err = float(np.abs(d - exact).max())
    scale = float((np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)) + np.abs(c)).max())
    assert err <= 16 * np.finfo(np.float32).eps * scale     # float32 accumulation of 16 exact products
    how = "inline-PTX mma.sync on the GPU" if on_gpu else "sparsekit/gpu/mma.py's simulator fallback"
    print(f"\nStep 2: one warp, D = A(16x16 fp16) @ B(16x8 fp16) + C(fp32) via {how}")
    print(f"  max |D - NumPy float64| = {err:.3g} (|A||B|+|C| up to {scale:.3g})")
    out["mma_error"] = err

    # Step 3. Uniform-sparse A on tensor cores: densify every tile, multiply the zeros too.
    m, k, n = (32, 48, 16) if quick or not on_gpu else (1024, 1024, 1024)
    sparsity = 0.75
    w = rng.standard_normal((m, k)).astype(np.float16)
    ell = ELL.from_dense(w, uniform(w, sparsity))
    x = rng.standard_normal((k, n)).astype(np.float16)
    tunables = {} if on_gpu else SIM_TUNABLES
    got = tc.uspmm(ell, x, **tunables)
    want = ru.uspmm(ell, x)
    err = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max())
    bound = float(np.abs(want.astype(np.float64)).max()) * np.finfo(np.float16).eps
    assert err <= bound, (err, bound)                       # both round the float32 sum once to fp16
    print(f"\nStep 3: gpu.uspmm_tc.uspmm, A {m}x{k} {sparsity:.0%} sparse (K' = {ell.kprime}), B {k}x{n} fp16, "
          f"{'defaults' if on_gpu else SIM_TUNABLES}")
    print(f"  max |tensor-core C - reference C| = {err:.3g} (fp16 rounding of the largest entry: {bound:.3g})")
    if m % 16 == 0 and k % 16 == 0:
        dense = ell.to_dense().reshape(m // 16, 16, k // 16, 16)
        empty = int((dense == 0).all(axis=(1, 3)).sum())
        print(f"  16x16 tiles of A with no nonzero (an MMA could skip them): {empty} of {(m // 16) * (k // 16)}")
    print("  multiply-adds: the densified product does M*K*N, the nonzeros need M*K'*N")
    print("    sparsity   dense MACs   useful MACs   useful share")
    for s in (0.6, 0.75, 0.9, 0.95):
        kp = int(uniform(w, s)[0].sum())                    # K' of sparsekit.prune.uniform at this sparsity
        print(f"    {s:8.0%}   {m * k * n:10d}   {m * kp * n:11d}   {kp / k:12.1%}")
    out["uspmm_tc_error"] = err

    table = quoted_timings()
    print(f"\n  Measured on the H100 (quoted from {RESULTS.relative_to(RESULTS.parents[2])}; "
          "median device time in us, speedup over cuSPARSE in brackets):")
    if table:
        keep = [i for i, head in enumerate(table[0]) if head.startswith(QUOTED_COLUMNS)]
        for row in table:
            print("    " + " | ".join(f"{row[i]:>28s}" if j else f"{row[i]:22s}" for j, i in enumerate(keep)))
        print("  Compare the 1024x1024x1024 rows: from 60% to 95% sparse the tensor-core time falls little")
        print("  (it multiplies the same densified tiles) while the useful work falls ~10x and cuSPARSE's time")
        print("  with it; dense cuBLAS on the same tensor cores stays faster (the results file discusses why).")
    else:
        print("    (table not found in the results file)")
    out["quoted_rows"] = len(table)

    # Step 4. float32 on TF32 tensor cores: three products of split values, and the roundings they go through.
    kprime = 410                                            # K' of 1024 columns at 60%
    demo = split_demo(rng, kprime)
    assert demo["big_rel"] <= 2.0 ** -11 and demo["rest_rel"] <= 2.0 ** -22   # TF32: 11 significant bits
    assert demo["three_u"] <= tc.SPLIT_ERROR_U < demo["tf32_u"]
    print("\nStep 4: float32 from TF32 products (x = big + small, each a TF32 number: reference.mma.tf32_split)")
    print(f"  |x - big| <= {demo['big_rel']:.2g} |x|, |x - big - small| <= {demo['rest_rel']:.2g} |x| (2**-11, 2**-22)")
    print(f"  a row of K' = {kprime} products, every product and sum exact, error in u = 2**-24 of sum |a b|:")
    print(f"    one TF32 product (big x big):            {demo['tf32_u']:8.1f} u")
    print(f"    3xTF32 (small x big + big x small + big x big): {demo['three_u']:.2f} u "
          f"(the split's loss, at most {tc.SPLIT_ERROR_U} u)")
    print("  On the tensor core each MMA also rounds the float32 accumulator once, so the bound counts the MMAs a")
    print("  product goes through (gpu.uspmm_tc.error_reduction): 3xTF32 three, 'tf32+bf16' two (one TF32 MMA, and")
    print("  one bf16 MMA holding both small terms, at twice the rate, but with bf16's rounding of them):")
    crossover = next(kp for kp in range(1, 10 ** 4)
                     if tc.error_reduction(kp, np.float32, "tf32+bf16") <= tc.error_reduction(kp, np.float32))
    for kp in (16, crossover, kprime):
        print(f"    K' = {kp:4d}: 3xtf32 {tc.error_reduction(kp, np.float32):5d} u, "
              f"tf32+bf16 {tc.error_reduction(kp, np.float32, 'tf32+bf16'):5d} u")
    print(f"  From K' = {crossover} on the faster 'tf32+bf16' has the tighter bound, so gpu.uspmm_wgmma's default")
    print("  precision 'auto' takes it there and keeps 3xTF32 below.")
    quoted = quoted_errors()
    if quoted:
        print(f"  Measured on the H100 at {'x'.join(map(str, PRECISION_PROBLEM[:3]))} "
              f"{PRECISION_PROBLEM[3]:.0%} (quoted from {PRECISION_RECORD.relative_to(RESULTS.parents[2])}):")
        for r in quoted:
            name = f"{r['kernel']} {r['precision']}" + (", A's values TF32 numbers" if r["tf32_a"] else "")
            print(f"    {name:40s} {r['median_us']:7.1f} us   largest error {r['err_u']:8.2f} u")
        print("  The wgmma kernel's two-MMA paths err about two thirds as much as its three-MMA 3xTF32: the tensor")
        print("  core truncates its sums, so the error grows with the number of roundings, as the bound counts them.")
    else:
        print("    (record not found)")
    out.update(split=demo, crossover=crossover, quoted_errors=len(quoted))
    return out


if __name__ == "__main__":
    from sparsekit.backend import choose_backend

    choose_backend()      # the simulator when no GPU answers (before numba.cuda is imported)
    main(quick="--quick" in sys.argv)
