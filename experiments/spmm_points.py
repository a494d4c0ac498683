"""What the half-precision SpMM benchmarks share: a point timed, guarded and checked, and a fast TiledCSL builder.

- :func:`measured_us` / :func:`timed`: device time of a launch in microseconds (:func:`sparsekit.timing.measure`:
  median of :data:`REPEAT`, L2 flushed before each repeat, host dispatch hidden behind a spin kernel);
- :func:`point`: runs one point, and where it raises prints ``FAIL`` with the reason and returns None, so a run
  goes on past a failure;
- :func:`error_bound` (from :mod:`sparsekit.bench.spmm`, which ``sparsekit bench spmm --dtype`` checks with) and
  :func:`error`: a result against the float32 product of the same 16-bit operands, within the kernels' tests'
  bound (float32 sums in another order, plus one rounding to the dtype);
- :func:`tiled` and :func:`on_device`: a TiledCSL of a mask's entries without a sort, on the device without the
  full scan of ``prepare`` (the tests cover the builder's layout), since formatting a 14336 x 4096 weight
  through the general constructor takes seconds; :func:`bitmap_on_device` the same for a TiledBitmap.

Used by ``experiments/bench_spmm_tiled.py``, ``experiments/bench_spmm_bitmap.py`` and
``experiments/bench_spmm_unstructured.py``.
"""
from __future__ import annotations

import traceback

import ml_dtypes
import numpy as np

from sparsekit.bench.spmm import error_bound
from sparsekit.formats import TiledBitmap, TiledCSL
from sparsekit.timing import measure

#: Timed repeats a point (the median is reported).
REPEAT = 15
DTYPES = {"bfloat16": np.dtype(ml_dtypes.bfloat16), "float16": np.dtype(np.float16)}


def log(*args):
    print(*args, flush=True)


def measured_us(fn) -> tuple[float, float, float]:
    """Median, 10th and 90th percentile device microseconds of ``fn()`` over :data:`REPEAT` repeats."""
    m = measure(fn, repeat=REPEAT, warmup=2)
    return m.median_s * 1e6, m.p10_s * 1e6, m.p90_s * 1e6


def timed(fn) -> float:
    """Median device microseconds of ``fn()``."""
    return measured_us(fn)[0]


def point(label, fn):
    """``fn()``, or None after printing ``FAIL label: reason`` where it raises."""
    try:
        return fn()
    except Exception as err:   # a failed point is reported, the run goes on
        log(f"FAIL {label}: {type(err).__name__}: {str(err)[:300]}")
        traceback.print_exc(limit=3)
        return None


def error(y, ref, bound):
    """Largest |y - ref| and whether every element is within ``bound``."""
    d = (y.float() - ref).abs()
    return d.max().item(), bool((d <= bound).all().item())


def tiled(bits, mask, tile, dtype):
    """TiledCSL of the entries ``mask`` keeps (``bits``: their 16-bit patterns), entries found in tile order by a
    transposed view (no sort), each tile padded to 4 words with sink words."""
    m, k = mask.shape
    tm, tk = tile
    if tm == 1:
        rows, cols = np.nonzero(mask)
        tile_of, local, vals = rows, cols, bits[rows, cols]
        ntiles = m
    else:
        view = (m // tm, tm, k // tk, tk)                     # (tile row, row, tile column, column): walked as
        tr, tc, lr, lc = np.nonzero(mask.reshape(view).transpose(0, 2, 1, 3))   # (tile, local index) in order
        tile_of = tr * (k // tk) + tc
        local = lr * tk + lc
        vals = bits.reshape(view).transpose(0, 2, 1, 3)[tr, tc, lr, lc]
        ntiles = (m // tm) * (k // tk)
    counts = np.bincount(tile_of, minlength=ntiles)
    offsets = np.zeros(ntiles + 1, np.int64)
    np.cumsum(-(-counts // 4) * 4, out=offsets[1:])
    start = np.zeros(ntiles + 1, np.int64)
    np.cumsum(counts, out=start[1:])
    words = np.full(int(offsets[-1]), np.uint32(tm * tk) << np.uint32(16), np.uint32)
    words[offsets[tile_of] + np.arange(tile_of.size) - start[tile_of]] = (
        (local.astype(np.uint32) << np.uint32(16)) | vals.astype(np.uint32))
    return TiledCSL(words, offsets, (m, k), tile, dtype)


def on_device(a):
    """``sparsekit.gpu.spmm_tiled.prepare`` without its full validation scan (:func:`tiled` is the tests' layout)."""
    from numba import cuda

    from sparsekit.gpu import spmm_tiled as gt

    return gt.DeviceTiled(a, cuda.to_device(a.words), cuda.to_device(a.offsets.astype(np.int32)),
                          int(np.diff(a.offsets).max()), cuda.to_device(np.zeros(a.grid[0], np.int32)))


def bitmap_on_device(bits, mask, dtype):
    """The TiledBitmap of the entries ``mask`` keeps (``bits``: their 16-bit patterns), on the device through
    ``upload`` (built here by its constructor, so without the full scan of ``prepare``)."""
    from sparsekit.gpu import spmm_bitmap as gb

    rows, cols = np.nonzero(mask)
    return gb.upload(TiledBitmap.from_coords(rows, cols, bits[rows, cols].view(dtype), mask.shape))
