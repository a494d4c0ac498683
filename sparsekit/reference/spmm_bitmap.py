"""Reference SpMM of a :class:`~sparsekit.formats.TiledBitmap` weight: ``C = A @ B`` in half precision.

The executable specification of ``sparsekit/gpu/spmm_bitmap.py``: the same arithmetic as the TiledCSL
reference (products and sums in float32, as the tensor cores accumulate them, one rounding to the dtype at
the end), for the weight that the bitmaps and values describe.

>>> import numpy as np
>>> from sparsekit.formats import TiledBitmap
>>> a = TiledBitmap.from_dense(np.array([[1., 0., 2.], [0., 3., 0.]], dtype=np.float16))
>>> spmm_bitmap(a, np.ones((3, 2), dtype=np.float16))
array([[3., 3.],
       [3., 3.]], dtype=float16)
"""
from __future__ import annotations

from sparsekit.reference.spmm_tiled import spmm_tiled as spmm_bitmap, spmm_tiled_linear as spmm_bitmap_linear

__all__ = ["spmm_bitmap", "spmm_bitmap_linear"]
