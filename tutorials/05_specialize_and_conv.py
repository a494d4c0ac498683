"""Tutorial 5: SparseRT's two tricks on the CPU: baked-in nonzeros, and convolution as SpMM.

What you will learn
-------------------
* code specialisation: generate a kernel whose nonzero positions and values
  are constants (:mod:`sparsekit.specialize`), compile it, and find where the
  compile time stops paying for itself;
* a 3x3 convolution with padding 1 as im2col + SpMM (``sparsekit/cpu/conv.py``), and with
  im2col left "virtual" (the filter's nonzeros index the image directly).

Run it: ``python tutorials/05_specialize_and_conv.py`` (``--quick`` for toy sizes).
"""
from __future__ import annotations

import sys

import numpy as np


def main(quick: bool = False) -> dict:
    from sparsekit.cpu import conv as cconv
    from sparsekit.bench.spmm import suite_matrix, wall_time
    from sparsekit.reference import conv as rconv
    from sparsekit import specialize as spz
    from sparsekit.formats import CSR
    from sparsekit.prune import magnitude

    # Step 1. The generated source for a tiny matrix: no index arrays, only constants.
    csr, b, _ = suite_matrix(4, 8, 16, 0.75)
    print("Step 1: generated kernel for a 4x8 matrix\n" + spz.generate_source(csr))

    # Step 2. Compile time vs run time as the matrix grows.
    print("\nStep 2: specialised vs generic CSR (N = 256, 90% sparse)")
    out = {"specialize": []}
    for size in ((16,) if quick else (16, 32, 64)):
        csr, b, _ = suite_matrix(size, size, 256, 0.9)
        rec = spz.compare(csr, b, repeat=5)
        out["specialize"].append(rec)
        print(f"  {size:4d}x{size:<4d} nnz {rec['nnz']:5d}: compile {rec['compile_s']:6.2f} s, "
              f"run {rec['specialized_s'] * 1e6:7.1f} us vs {rec['generic_s'] * 1e6:7.1f} us generic, "
              f"pays after {rec['break_even_calls']:.3g} calls")

    # Step 3. A sparse 3x3 convolution three ways, checked against the direct one.
    size, cin, cout = (7, 8, 8) if quick else (28, 128, 128)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((cin, size, size)).astype(np.float32)
    w = rng.standard_normal((cout, cin * 9)).astype(np.float32)
    mask = magnitude(w, 0.9)
    wcsr = CSR.from_dense(w, mask)
    w4 = np.where(mask, w, np.float32(0)).reshape(cout, cin, 3, 3)
    want = rconv.conv2d_direct(x, w4)
    runs = {"im2col + SpMM": lambda: cconv.conv2d_im2col(wcsr, x),
            "virtual im2col": lambda: cconv.conv2d_virtual(wcsr, x),
            "im2col + dense BLAS": lambda: cconv.conv2d_dense(w4, x)}
    print(f"\nStep 3: 3x3 conv, {cin}->{cout} channels, {size}x{size}, 90% sparse filter")
    out["conv"] = {}
    for name, fn in runs.items():
        assert np.allclose(fn(), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
        out["conv"][name] = t = wall_time(fn, 3)[0]
        print(f"  {name:20s} {t * 1e3:8.3f} ms")
    return out


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
