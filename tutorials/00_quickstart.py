"""Quick start: prune a weight, store it sparse, multiply on the GPU (or the CUDA simulator), check.

The README shows the lines between the markers; ``tests/test_tutorials.py`` runs this file and checks that
the README shows exactly them. ``quick`` changes nothing here (the example is small already).
"""
from __future__ import annotations


def main(quick: bool = True) -> dict:
    # quickstart-begin
    import ml_dtypes
    import numpy as np

    import sparsekit
    from sparsekit.formats import ELL, TiledCSL
    from sparsekit.prune import uniform

    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 256)).astype(np.float32)           # a layer's weight, out x in
    mask = uniform(w, sparsity=0.8)                                   # every row keeps its 51 largest |w|
    w16 = np.where(mask, w, 0).astype(ml_dtypes.bfloat16)
    x = rng.standard_normal((256, 4)).astype(ml_dtypes.bfloat16)     # 4 tokens, one a column

    y_uniform = sparsekit.spmm(ELL.from_dense(w16, mask), x)         # uniform ELL: USpMM's router
    y_any = sparsekit.spmm(TiledCSL.from_dense(w16, mask), x)        # any pattern: tile-local list

    want = w16.astype(np.float32) @ x.astype(np.float32)
    assert np.allclose(y_uniform.astype(np.float32), want, rtol=2**-7, atol=1e-2)
    assert np.allclose(y_any.astype(np.float32), want, rtol=2**-7, atol=1e-2)
    # quickstart-end
    print(f"{mask.mean():.0%} of the weights kept; both products equal the dense one within bfloat16 rounding")
    return {"kept": float(mask.mean())}


if __name__ == "__main__":
    import os
    import sys
    if os.environ.get("NUMBA_ENABLE_CUDASIM") is None:
        from sparsekit.backend import choose_backend
        if choose_backend() != "gpu":
            os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    main("--quick" in sys.argv)
