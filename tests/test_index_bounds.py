"""Sizes past a kernel's 32-bit indices are refused by its launcher, by name, before anything is allocated.

Each kernel that keeps an index in 32 bits for speed (docs/limits.md lists them) must refuse a problem
whose index would pass ``2**31 - 1`` with a ``ValueError`` naming the argument and the limit, instead of
reading or writing wrapped addresses. Nothing here allocates a large array: the huge inputs are small
matrices whose shape says huge, arrays of zero stride (``np.lib.stride_tricks.as_strided``), or a device
array look-alike that owns no memory. Runs on the CUDA simulator in about a second.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

from sparsekit.gpu.launch import INT32_MAX, check_int32
from sparsekit import formats
from tests.test_bad_input import _HugeDeviceArray

HUGE = INT32_MAX + 1


def _zero_strided(length: int, dtype) -> np.ndarray:
    """A 1-D array of ``length`` zeros that holds one element (every element is the same memory)."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape=(length,), strides=(0,))


def _with(fmt, **fields):
    """A copy of the (frozen) format ``fmt`` with ``fields`` replaced, unvalidated: what a launcher sees of a
    matrix too large to build here."""
    out = copy.copy(fmt)
    for name, value in fields.items():
        object.__setattr__(out, name, value)
    return out


@pytest.fixture(scope="module")
def csr():
    w = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    return formats.CSR.from_dense(np.where(np.abs(w) > 0.5, w, 0))


def test_check_int32_takes_the_limit_and_refuses_one_more():
    check_int32(INT32_MAX, "x", "elements", "why")
    with pytest.raises(ValueError, match=r"^x: at most 2\*\*31 - 1 = 2147483647 elements, got 2147483648 \(why\)$"):
        check_int32(HUGE, "x", "elements", "why")


def test_csr_kernels_refuse_rows_past_int32(csr):
    """The launch orders (identity, row swizzle) are int32 row numbers."""
    from sparsekit.gpu import spmm

    huge = _with(csr, shape=(HUGE, csr.shape[1]))
    b = np.ones((csr.shape[1], 4), np.float32)
    for call in (lambda: spmm.prepare(huge, formats.CSR), lambda: spmm.spmm_csr(huge, b)):
        with pytest.raises(ValueError, match=r"a\.shape\[0\]: at most 2\*\*31 - 1 = 2147483647 rows, got 2147483648"):
            call()


def test_lessons_refuse_rows_past_int32(csr):
    from sparsekit.gpu import spmm_lessons

    huge = _with(csr, shape=(HUGE, csr.shape[1]))
    b = np.ones((csr.shape[1], 4), np.float32)
    for call in (lambda: spmm_lessons.prepare(huge), lambda: spmm_lessons.thread_per_row(huge, b)):
        with pytest.raises(ValueError, match=r"csr\.shape\[0\]: at most 2\*\*31 - 1 = 2147483647 rows"):
            call()


def test_tiled_csc_refuses_entries_past_int32(csr):
    """smem_tiled's tile pointers address the entries in int32."""
    from sparsekit.gpu import spmm_lessons

    huge = _with(csr, data=_zero_strided(HUGE, np.float32))
    with pytest.raises(ValueError, match=r"csr\.nnz: at most 2\*\*31 - 1 = 2147483647 stored entries, got 2147483648"):
        spmm_lessons.tile_csc(huge)


def test_tiled_csl_refuses_words_past_int32():
    """Tile offsets are 32-bit word offsets: refused before the full validation scans the words."""
    from sparsekit.gpu import spmm_tiled

    w = np.eye(16, dtype=np.float16)
    tiled = formats.TiledCSL.from_dense(w, tile=(16, 16))
    huge = _with(tiled, words=_zero_strided(HUGE, tiled.words.dtype))
    with pytest.raises(ValueError, match=r"a\.words: at most 2\*\*31 - 1 = 2147483647 words, got 2147483648"):
        spmm_tiled.prepare(huge)


@pytest.mark.parametrize("k, n", [(2**20, 2**11), (2**16, 2**15 + 1)])
def test_warp_split_refuses_b_past_int32_offsets(k, n):
    """variant='warp_split' keeps offsets into b (K x N) in 32 bits; other variants are 64-bit."""
    from sparsekit.gpu import uspmm

    rng = np.random.default_rng(1)
    columns = np.sort(np.stack([rng.choice(k, 4, replace=False) for _ in range(8)]), axis=1)   # 8 rows, K' = 4
    ell = formats.ELL(np.asfortranarray(np.ones((8, 4), np.float32)), np.asfortranarray(columns.astype(np.int32)),
                      (8, k))
    b = _HugeDeviceArray((k, n), np.float32)
    with pytest.raises(ValueError, match=r"^b: at most 2\*\*31 - 1 = 2147483647 elements \(K \* N\) with variant "
                                         r"'warp_split', got \d+ \(it keeps offsets into b in 32 bits\)$"):
        uspmm.uspmm(ell, b, variant="warp_split")
