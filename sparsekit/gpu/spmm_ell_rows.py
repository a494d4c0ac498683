"""A linear layer ``Y = X W^T`` on padded ELL rows, for the batch sizes of LLM decoding, and the weight
densified for wider ``X``.

Equals ``sparsekit/reference/spmm_ell_rows.py``, which defines the storage: ``values`` and ``indices`` (``M x W``,
row-major, ``W`` a multiple of 8), the column ``K`` marking padding. Four bytes a stored weight, the same
bytes as :class:`~sparsekit.formats.TiledCSL`'s words, but as two arrays, so a PyTorch layer can train the
values in place (:class:`sparsekit.torch.SparseLinear`) and the kernel reads the one copy that exists.

* :func:`spmm_ell_rows_linear`: the row kernel of ``sparsekit/gpu/spmm_tiled.py`` on this storage. One warp a row;
  each lane reads 8 values and their 8 columns at a time (two 16-byte loads, ``unroll`` pairs in flight),
  multiplies each by its row of ``X^T`` (rows padded to 8 halves, read in 16-byte loads) into float32
  accumulators (:func:`sparsekit.gpu.spmm_tiled.row_accumulator`); a warp sum gives column ``r`` of ``Y``. Padding
  entries are skipped. At ``N = 1`` each block copies ``x`` to shared memory and a few blocks an SM loop
  over the rows (:func:`_shared_kernel`): a warp's 32 entries touch about 28 distinct 128-byte lines of
  ``x``, one L1 wavefront each, which held the L1 kernel to about a third of the memory's bandwidth; from
  shared memory a gather costs its bank conflicts (4096^2 at 80 %: 11.3 -> 7.1 us on the H200), which
  :func:`gather_order` lowers by reordering each row's entries once (the layer's and uspmm's rows; the
  order is ``sparsekit/reference/spmm_ell_rows.py``'s): 8.5x fewer conflicts at 14336x4096 80 %, the same
  time at N = 1 (its warps wait on their global loads) and 0-10 % less at N = 8 (``uspmm_decode.md``). From
  ``N = 2``, ``X^T`` is staged in global memory (rows padded to 8 halves) and read through L1
  (:func:`_kernel`). ``x_in_shared=True`` copies the staged ``X^T`` into each block's shared memory in 16-byte
  loads instead: N = 8 at 80 % 13.6 against 15.4 us at 4096^2 but 37.6 against 35.8 at 14336x4096 (the same
  at 4096x14336), so it is not the default.
* :func:`densify_ell_rows`: ``W`` dense (one warp a row: zero the row in 16-byte stores, then write its
  entries), so wide products (prefill) run on dense tensor-core GEMM.
"""
from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32, int32, uint16, uint32

from sparsekit.gpu.inline import inlined
from sparsekit.gpu.launch import SHARED_LIMIT, SHARED_OPTIN, Buffers, DynamicShared, launch, opt_in
from sparsekit.gpu.spmm_tiled import (ROW_UNROLL, ROW_WARPS, accumulators, row_accumulator, row_store, stage_transposed,
                                      uint16_bits)
from sparsekit.gpu.sync_primitives import warp_barrier
from sparsekit.gpu.vector_loads import aligned, load4, store4
from sparsekit.reference.spmm_ell_rows import MAX_COLUMNS, ROW_MULTIPLE, check_columns, check_rows
from sparsekit.arrays import cdiv, flat_view, operand, output, result
from sparsekit.checks import BFLOAT16, HALF_DTYPES

__all__ = ["spmm_ell_rows_linear", "densify_ell_rows", "gather_order", "bank_balanced", "read_rows", "MAX_N",
           "ROW_MULTIPLE", "MAX_COLUMNS"]

#: Chunks (8 entries: 32 bytes of values and columns) a lane has in flight: the bytes of the TiledCSL row
#: kernel's ``ROW_UNROLL`` 16-byte loads.
UNROLL = ROW_UNROLL // 2
#: The widest ``X`` the row kernel takes (beyond about 16 rows dense GEMM on the densified weight is faster).
MAX_N = 64
_INDEX_DTYPES = (np.dtype(np.int16), np.dtype(np.uint16))
_VALUE_DTYPES = (*HALF_DTYPES, np.dtype(np.uint16))
#: Warps a block of :func:`_shared_kernel`, and at most its blocks an SM (each block copies ``x^T`` once). At
#: ``N = 1`` four blocks of 16 warps took 0.90-0.93x the time of two on 14336x4096 at 50-90 % (H200, bfloat16) and
#: the same elsewhere; blocks of 4, 8 or 32 warps were no faster anywhere (experiments/results/uspmm_decode.md).
#: Since each warp issues its first row's loads before the copy the kernel takes 48-53 registers, so two of those
#: blocks are resident at once: a grid of two an SM measured the same, registers capped for three 0.7-0.9x.
SHARED_WARPS, SHARED_BLOCKS_PER_SM = 16, 4
#: 16-byte loads of ``x`` a thread has in flight while a block of :func:`_shared_kernel` copies it (``wide``): with
#: 512 threads, four cover ``K = 16384`` in one round.
COPY_LOADS = 4
#: Warps (rows) a block of :func:`_densify_in_shared` (fewer where K's rows do not fit).
DENSIFY_WARPS = 4
#: Shared memory an SM has for blocks (H100, H200: 228 KB).
SHARED_PER_SM = 228 * 1024


@functools.cache
def _row_loads(unroll: int):
    """``load(values, indices, base, chunk, stop, vbuf, ibuf)``: a lane's chunks ``chunk, chunk + 32, ...``
    (``unroll`` of them, 8 entries each) of the row whose words start at ``base``, two 16-byte loads a chunk into
    ``vbuf``/``ibuf``; chunks past ``stop`` are padding (column 65535, skipped)."""
    @inlined
    def load(values, indices, base, chunk, stop, vbuf, ibuf):
        for u in range(unroll):
            at = chunk + 32 * u
            if at < stop:
                v = load4(values, base + at * 4)
                i = load4(indices, base + at * 4)
                for q in range(4):
                    vbuf[4 * u + q] = v[q]
                    ibuf[4 * u + q] = i[q]
            else:
                for q in range(4):
                    vbuf[4 * u + q] = uint32(0)
                    ibuf[4 * u + q] = uint32(0xFFFFFFFF)   # columns 65535 >= K: skipped
    return load


@functools.cache
def _row_entries(n: int, bf16: bool, stride: int, unroll: int):
    """The inner loop of both linear kernels: ``run(acc, values, indices, base, lane, stop, k, b, b32, vbuf,
    ibuf, loaded)`` adds a row's entries (its words from ``base``, ``stop`` chunks of 8) times their rows of ``B``
    into ``acc``. Each lane takes chunks ``lane, lane + 32, ...``, ``unroll`` in flight (:func:`_row_loads`),
    then their ``16 unroll`` entries; padding entries (column >= K) are skipped. ``loaded``: the first
    ``unroll`` chunks are already in ``vbuf``/``ibuf`` (issued by the caller before other work)."""
    add = row_accumulator(n, bf16, stride)
    load = _row_loads(unroll)
    nbuf = 4 * unroll

    @inlined
    def run(acc, values, indices, base, lane, stop, k, b, b32, vbuf, ibuf, loaded):
        chunk = lane
        if not loaded:
            load(values, indices, base, chunk, stop, vbuf, ibuf)
        while chunk < stop:
            for h in range(2 * nbuf):                 # entry h: the low (even h) or high half of word h // 2
                col = (ibuf[h // 2] >> (16 * (h % 2))) & 0xFFFF
                if col < k:
                    add(acc, (vbuf[h // 2] >> (16 * (h % 2))) & 0xFFFF, col, b, b32)
            chunk += 32 * unroll
            if chunk < stop:
                load(values, indices, base, chunk, stop, vbuf, ibuf)

    return run


@functools.cache
def _kernel(n: int, bf16: bool, stride: int, unroll: int):
    """``Y = x W^T`` with ``x^T`` staged in global memory (``b``, ``K x stride``), one warp a row."""
    row_entries, store = _row_entries(n, bf16, stride, unroll), row_store(n, bf16, True)
    width, nbuf = accumulators(n, stride), 4 * unroll

    @cuda.jit
    def kernel(values, indices, b, b32, c, m, k, entries):
        lane = cuda.threadIdx.x % 32
        row = cuda.blockIdx.x * ROW_WARPS + cuda.threadIdx.x // 32
        if row >= m:
            return
        acc = cuda.local.array(width, float32)
        for j in range(width):
            acc[j] = float32(0.0)
        vbuf = cuda.local.array(nbuf, uint32)
        ibuf = cuda.local.array(nbuf, uint32)
        row_entries(acc, values, indices, row * (entries // 2), lane, entries // 8, k, b, b32, vbuf, ibuf, False)
        store(c, acc, row, m, lane)

    return kernel


@functools.cache
def x_to_shared(stride: int, wide: bool):
    """``copy(x, x32, xs, xs32, k)``: the block's threads copy ``x^T`` (``K x stride`` halves) to shared memory
    ``xs`` (``xs32``: its uint32 view); call :func:`numba.cuda.syncthreads` before reading it. ``wide``: in 16-byte
    loads through ``x32`` (``x``'s uint32 view; ``K stride % 8 == 0``, 16-byte aligned), :data:`COPY_LOADS` of
    them a thread issued before their stores; else (``N = 1``) a half a load."""
    @inlined
    def copy(x, x32, xs, xs32, k):
        tid = cuda.threadIdx.x
        if wide:
            words, step = k * stride // 2, 4 * cuda.blockDim.x
            buf = cuda.local.array((COPY_LOADS, 4), uint32)
            for first in range(4 * tid, words, COPY_LOADS * step):
                for u in range(COPY_LOADS):           # every load in flight, then the stores
                    if first + u * step < words:
                        got = load4(x32, first + u * step)
                        for q in range(4):
                            buf[u, q] = got[q]
                for u in range(COPY_LOADS):
                    if first + u * step < words:
                        store4(xs32, first + u * step, (buf[u, 0], buf[u, 1], buf[u, 2], buf[u, 3]))
        else:                                         # N = 1: x itself, a half a load
            for t in range(tid, k, cuda.blockDim.x):
                xs[t] = x[t]
    return copy


@functools.cache
def _shared_kernel(n: int, bf16: bool, stride: int, unroll: int, wide: bool = False):
    """``Y = x W^T`` with ``x^T`` in shared memory: the block copies ``x^T`` (``K x stride`` halves, the columns
    past ``N`` zero; for ``N = 1`` that is ``x`` itself; from ``N = 2`` the launcher's staged copy) to shared
    memory, then each warp takes rows ``warp, warp + warps, ...`` of the grid, 8 entries a lane a chunk as
    :func:`_kernel`, reading each entry's row of ``x^T`` from shared memory
    (:func:`sparsekit.gpu.spmm_tiled.row_accumulator` on the shared arrays). Each warp issues its first row's
    loads before the copy, so that their memory latency passes while ``x^T`` is copied.

    ``wide`` (always from ``N = 2``; at ``N = 1`` where ``K % 8 == 0`` and ``x`` is 16-byte aligned): the block
    copies ``x^T`` in 16-byte loads through ``x32`` (its uint32 view), :data:`COPY_LOADS` of them a thread issued
    before their stores, instead of a half a load: the copy is every block's start (1.04-1.15x faster at
    K = 14336 on the H200, 4096x14336 at 50-90 %, N = 1; the same at K = 4096)."""
    if n > 1 and not wide:
        raise ValueError("the shared-memory kernel copies a staged x^T (N > 1) in 16-byte loads only")
    row_entries, store = _row_entries(n, bf16, stride, unroll), row_store(n, bf16, True)
    load, copy = _row_loads(unroll), x_to_shared(stride, wide)
    width, nbuf = accumulators(n, stride), 4 * unroll

    @cuda.jit
    def kernel(values, indices, x, x32, y, m, k, entries):
        xs = cuda.shared.array(0, uint16)
        xs32 = cuda.shared.array(0, uint32)           # the same bytes, for 16-byte reads of a row of x^T
        tid = cuda.threadIdx.x
        lane = tid % 32
        warps = cuda.blockDim.x // 32
        vbuf = cuda.local.array(nbuf, uint32)
        ibuf = cuda.local.array(nbuf, uint32)
        stop = entries // 8
        row = cuda.blockIdx.x * warps + tid // 32
        if row < m:                                   # the first row's loads in flight while x^T is copied
            load(values, indices, row * (entries // 2), lane, stop, vbuf, ibuf)
        copy(x, x32, xs, xs32, k)
        cuda.syncthreads()
        acc = cuda.local.array(width, float32)
        loaded = True
        while row < m:
            for j in range(width):
                acc[j] = float32(0.0)
            row_entries(acc, values, indices, row * (entries // 2), lane, stop, k, xs, xs32, vbuf, ibuf, loaded)
            store(y, acc, row, m, lane)
            loaded = False
            row += cuda.gridDim.x * warps

    return kernel


@cuda.jit
def _gather_order_kernel(cols, m, width, k, by_bank, order):
    """Row ``r`` (one thread a row) of :func:`sparsekit.reference.spmm_ell_rows.gather_order`, the same steps in
    the same order: a counting sort of the row's entries by bank (stable: ``by_bank``), then the groups, full
    ones first, each taking one entry of every bank left (the most-left banks where the group is smaller),
    padding, then second entries of the fullest banks; ``order[r, position] = entry``."""
    r = cuda.grid(1)
    if r >= m:
        return
    counts = cuda.local.array(33, int32)
    first = cuda.local.array(33, int32)
    used = cuda.local.array(33, int32)
    left = cuda.local.array(32, int32)
    take = cuda.local.array(32, int32)
    rank = cuda.local.array(32, int32)
    extra = cuda.local.array(32, int32)
    base = r * width
    for b in range(33):
        counts[b] = 0
    for j in range(width):
        c = int32(cols[base + j])
        counts[32 if c >= k else (c >> 1) & 31] += 1
    at = 0
    for b in range(33):
        first[b], used[b] = at, 0
        at += counts[b]
    for j in range(width):                            # by bank, positions ascending within a bank
        c = int32(cols[base + j])
        b = 32 if c >= k else (c >> 1) & 31
        by_bank[base + first[b] + used[b]] = j
        used[b] += 1
    for b in range(33):
        used[b] = 0
    rounds, last = width // (32 * ROW_MULTIPLE), width % (32 * ROW_MULTIPLE) // ROW_MULTIPLE
    for g in range(ROW_MULTIPLE * (rounds + (1 if last else 0))):
        s, p = g // ROW_MULTIPLE, g % ROW_MULTIPLE
        size = 32 if s < rounds else last
        for b in range(32):
            left[b] = counts[b] - used[b]
            take[b] = 1 if left[b] > 0 else 0
        if size < 32:                                 # the most-left banks (ties: the lower bank)
            for b in range(32):
                rank[b] = 0
                for a in range(32):
                    if left[a] > left[b] or (left[a] == left[b] and a < b):
                        rank[b] += 1
            for b in range(32):
                if rank[b] >= size:
                    take[b] = 0
        need = size
        for b in range(32):
            need -= take[b]
        pads = min(need, counts[32] - used[32])
        need -= pads
        while need > 0:                               # second entries of the fullest banks
            for b in range(32):
                rank[b] = 0
                for a in range(32):
                    more_a, more_b = left[a] - take[a], left[b] - take[b]
                    if more_a > more_b or (more_a == more_b and a < b):
                        rank[b] += 1
                extra[b] = 1 if rank[b] < need and left[b] - take[b] > 0 else 0
            for b in range(32):
                take[b] += extra[b]
                need -= extra[b]
        slot = 0
        for b in range(33):
            n = take[b] if b < 32 else pads
            for j in range(n):
                order[base + s * 32 * ROW_MULTIPLE + slot * ROW_MULTIPLE + p] = by_bank[base + first[b] + used[b] + j]
                slot += 1
            used[b] += n


@cuda.jit
def _permute_rows(values, indices, order, out_values, out_indices, width, total):
    """``out[r, j] = in[r, order[r, j]]`` for both 16-bit arrays (flat, rows of ``width``), a thread an entry."""
    t = cuda.grid(1)
    if t < total:
        at = t - t % width + order[t]
        out_values[t] = values[at]
        out_indices[t] = indices[at]


def _order(ibits, m: int, width: int, k: int, like):
    """The ``M x W`` int32 device order of :func:`_gather_order_kernel` for the flat 16-bit columns ``ibits``."""
    order = output((m, width), np.int32, like=like)
    if m and width:
        by_bank = output((m, width), np.int32, like=like)
        launch(_gather_order_kernel, cdiv(m, 128), 128, (ibits, m, width, k, flat_view(by_bank), flat_view(order)),
               "gather order")
    return order


def gather_order(indices, k: int):
    """:func:`sparsekit.reference.spmm_ell_rows.gather_order` on the device: for padded ELL rows' ``indices``
    (``M x W``, int16 or uint16, row-major), the ``M x W`` int32 order of each row's entries that spreads the
    ``N = 1`` kernel's gathers over the shared-memory banks, as the kind of array ``indices`` is (a torch
    tensor stays on its device); one thread a row."""
    check_columns(k)
    iop = operand(indices, "indices", dtypes=_INDEX_DTYPES, ndim=2, order="C")
    m, width = iop.dev.shape
    if width % ROW_MULTIPLE:
        raise ValueError(f"indices: rows must be padded to a multiple of {ROW_MULTIPLE} entries, got {width}")
    return result(_order(uint16_bits(flat_view(iop.dev)), m, width, k, iop), like=iop)


def bank_balanced(values, indices, k: int):
    """:func:`sparsekit.reference.spmm_ell_rows.bank_balanced` on the device: the same padded ELL rows, each
    row's entries in :func:`gather_order`, as new arrays of the kind given (values and indices keep their
    dtypes)."""
    vop, iop, vbits, ibits = _rows(values, indices, k)
    m, width = vop.dev.shape
    out_values = output((m, width), _value_dtype(vop), like=vop)
    out_indices = output((m, width), iop.dev.dtype, like=iop)
    if m and width:
        order = _order(ibits, m, width, k, vop)
        launch(_permute_rows, cdiv(m * width, 256), 256,
               (vbits, ibits, flat_view(order), uint16_bits(flat_view(out_values)), uint16_bits(flat_view(out_indices)),
                width, m * width), "permute rows")
    return result(out_values, like=vop), result(out_indices, like=iop)


@functools.cache
def _densify(wide: bool):
    """Row ``r`` of ``w`` (``M x K``, 16-bit bits) from its padded ELL row, one warp a row: zero the row
    (``wide``: 16-byte stores through ``w32``, ``w``'s uint32 view, when ``K % 8 == 0``), then write its
    entries."""
    @cuda.jit
    def kernel(values, indices, w, w32, m, k, entries):
        lane = cuda.threadIdx.x % 32
        row = cuda.blockIdx.x * ROW_WARPS + cuda.threadIdx.x // 32
        if row < m:
            if wide:
                zero = uint32(0)
                for chunk in range(lane, k // 8, 32):
                    store4(w32, row * (k // 2) + chunk * 4, (zero, zero, zero, zero))
            else:
                for col in range(lane, k, 32):
                    w[row * k + col] = uint16(0)
        warp_barrier()                                # the zeros before the entries (an entry may be any lane's)
        if row < m:
            for j in range(lane, entries, 32):
                col = indices[row * entries + j]
                if col < k:
                    w[row * k + col] = values[row * entries + j]

    return kernel


@functools.cache
def _sm_count() -> int:
    from sparsekit.device import info

    return info().sm_count or 1


@functools.cache
def _densify_in_shared(warps: int):
    """Rows of ``w`` (``M x K``, ``K % 8 == 0``) built in shared memory, one warp a row: zero the warp's row
    there, write its entries (8 at a time from two 16-byte loads), then copy the row out in 16-byte stores:
    every byte of ``w`` written once, whole lines."""
    @cuda.jit
    def kernel(values, indices, w32, m, k, entries):
        rows = cuda.shared.array(0, uint16)
        rows32 = cuda.shared.array(0, uint32)
        lane = cuda.threadIdx.x % 32
        warp = cuda.threadIdx.x // 32
        row = cuda.blockIdx.x * warps + warp
        mine = warp * (k // 2)                        # the warp's row in rows32 (k // 2 words)
        zero = uint32(0)
        if row < m:
            for chunk in range(lane, k // 8, 32):
                store4(rows32, mine + chunk * 4, (zero, zero, zero, zero))
        warp_barrier()                                # the zeros before the entries (an entry may be any lane's)
        if row < m:
            base = row * (entries // 2)
            for chunk in range(lane, entries // 8, 32):
                v = load4(values, base + chunk * 4)
                i = load4(indices, base + chunk * 4)
                for h in range(8):
                    col = (i[h // 2] >> (16 * (h % 2))) & 0xFFFF
                    if col < k:
                        rows[2 * mine + col] = uint16((v[h // 2] >> (16 * (h % 2))) & 0xFFFF)
        warp_barrier()                                # the entries before the copy (a row is its warp's)
        if row < m:
            out = row * (k // 2)
            for chunk in range(lane, k // 8, 32):
                store4(w32, out + chunk * 4, load4(rows32, mine + chunk * 4))

    return kernel


def _value_dtype(vop) -> np.dtype:
    """The values' dtype (a bfloat16 operand reaches the kernel as its uint16 bits)."""
    return BFLOAT16 if vop.dev.dtype == np.uint16 else np.dtype(vop.dev.dtype)


def _rows(values, indices, k):
    """The checked operands: values (float16, bfloat16, or uint16 holding bfloat16's bits, as a device copy
    of bfloat16 data is), indices (int16/uint16 bits), and their flat 16-bit views."""
    check_rows(values, indices, k)
    vop = operand(values, "values", dtypes=_VALUE_DTYPES, ndim=2, order="C")
    iop = operand(indices, "indices", dtypes=_INDEX_DTYPES, ndim=2, order="C")
    return vop, iop, uint16_bits(flat_view(vop.dev)), uint16_bits(flat_view(iop.dev))


def spmm_ell_rows_linear(values, indices, k: int, x, *, buffers: Buffers | None = None, unroll: int | None = None,
                         x_in_shared: bool | None = None):
    """``Y = x @ W^T`` (``N x M``, row-major) for padded ELL rows ``values``/``indices`` of a ``M x k`` weight
    and a row-major ``x`` (``N x k``, ``N <= 64``, the values' dtype). ``x_in_shared`` (default: at
    ``N = 1``): :func:`_shared_kernel`, else :func:`_kernel`; from ``N = 2`` either reads ``x^T`` staged in
    global memory, which ``buffers`` keeps (pass the same one to every call whose launches are recorded)."""
    vop, _, vbits, ibits = _rows(values, indices, k)
    m, entries = vop.dev.shape
    dtype = _value_dtype(vop)
    xop = operand(x, "x", dtypes=(dtype,), ndim=2, order="C")
    n, cols = xop.dev.shape
    if cols != k:
        raise ValueError(f"x: expected shape (N, {k}) to multiply a {m}x{k} weight, got {xop.dev.shape}")
    if not 1 <= n <= MAX_N:
        raise ValueError(f"x: N = {n}; this kernel takes 1 to {MAX_N} (wider products: densify_ell_rows and "
                         f"dense GEMM)")
    y = output((n, m), dtype, like=xop)
    if m == 0:
        return result(y, like=xop)
    xbits = uint16_bits(flat_view(xop.dev))
    bf16 = dtype.name == "bfloat16"
    yflat = flat_view(y) if not bf16 else uint16_bits(flat_view(y))
    stride = 8 * cdiv(n, 8) if n > 1 else 1
    nbytes = 2 * k * stride
    if x_in_shared is None:
        x_in_shared = n == 1
    if x_in_shared and nbytes > SHARED_OPTIN - 1024:
        raise ValueError(f"x_in_shared: x^T ({nbytes} bytes) does not fit a block's shared memory")
    if n > 1:
        xt = (buffers or Buffers()).get(np.uint16, k * stride)  # x (N x K) staged as B = x^T, rows 16-byte aligned
        launch(stage_transposed, cdiv(k * stride, 256), 256, (xbits, xt, n, k, stride), "stage x^T")
        xbits = xt
    if x_in_shared:
        wide = n > 1 or (k % 8 == 0 and aligned(xbits, 8))
        kernel = _shared_kernel(n, bf16, stride, UNROLL if unroll is None else unroll, wide)
        args = (vbits.view(np.uint32), ibits.view(np.uint32), xbits, xbits.view(np.uint32) if wide else xbits, yflat,
                m, k, entries)
        nbytes = max(nbytes, 16)
        if nbytes > SHARED_LIMIT:
            opt_in(kernel, args, nbytes)
        blocks = max(1, min(SHARED_BLOCKS_PER_SM, SHARED_PER_SM // (nbytes + 1024))) * _sm_count()
        launch(DynamicShared(kernel, nbytes), min(cdiv(m, SHARED_WARPS), blocks), 32 * SHARED_WARPS, args,
               f"N={n}, x^T in shared memory")
        return result(y, like=xop)
    kernel = _kernel(n, bf16, stride, UNROLL if unroll is None else unroll)
    b32 = xbits.view(np.uint32) if xbits.size % 2 == 0 else xbits
    args = (vbits.view(np.uint32), ibits.view(np.uint32), xbits, b32, yflat, m, k, entries)
    launch(kernel, cdiv(m, ROW_WARPS), 32 * ROW_WARPS, args, f"N={n}")
    return result(y, like=xop)


@functools.cache
def _read_kernel(unroll: int):
    """The loads of :func:`_shared_kernel` alone: each warp takes rows ``warp, warp + warps, ...`` of the grid,
    each lane its chunks by :func:`_row_loads` (``unroll`` in flight), and folds the words it read into one XOR
    (``out``, one word a thread)."""
    load, nbuf = _row_loads(unroll), 4 * unroll

    @cuda.jit
    def kernel(values, indices, out, m, entries):
        tid = cuda.threadIdx.x
        lane, warps = tid % 32, cuda.blockDim.x // 32
        vbuf = cuda.local.array(nbuf, uint32)
        ibuf = cuda.local.array(nbuf, uint32)
        stop = entries // 8
        acc = uint32(0)
        row = cuda.blockIdx.x * warps + tid // 32
        while row < m:
            chunk = lane
            while chunk < stop:
                load(values, indices, row * (entries // 2), chunk, stop, vbuf, ibuf)
                for u in range(unroll):
                    if chunk + 32 * u < stop:                 # the chunks read, not the padding filled in
                        for q in range(4):
                            acc ^= vbuf[4 * u + q] ^ ibuf[4 * u + q]
                chunk += 32 * unroll
            row += cuda.gridDim.x * warps
        out[cuda.blockIdx.x * cuda.blockDim.x + tid] = acc

    return kernel


def read_rows(values, indices, k: int, *, stream=0):
    """Read padded ELL rows as the ``N = 1`` product does (its grid, warps, loads), without the product: the
    memory floor its time is measured against (``experiments/bench_sparse_linear.py --floor``). Returns one
    uint32 a thread, of the kind ``values`` is; their XOR is
    :func:`sparsekit.reference.spmm_ell_rows.read_rows`. ``stream``: where to launch (a CUDA graph capture
    needs torch's)."""
    vop, _, vbits, ibits = _rows(values, indices, k)
    m, entries = vop.dev.shape
    blocks = max(1, min(cdiv(m, SHARED_WARPS), SHARED_BLOCKS_PER_SM * _sm_count()))
    out = output((blocks * 32 * SHARED_WARPS,), np.dtype(np.uint32), like=vop)
    launch(_read_kernel(UNROLL), blocks, 32 * SHARED_WARPS,
           (vbits.view(np.uint32), ibits.view(np.uint32), out, m, entries), "read rows", stream=stream)
    return result(out, like=vop)


def densify_ell_rows(values, indices, k: int, *, out=None, in_shared: bool | None = None):
    """``W`` (``M x k``, row-major, the values' dtype) from padded ELL rows; into ``out`` when given (a
    C-contiguous ``M x k`` array of that dtype, e.g. a torch tensor), else a new array of ``values``' kind.
    ``in_shared`` (default: when ``k % 8 == 0`` and a row fits shared memory): rows built in shared memory
    and written once (:func:`_densify_in_shared`), else zeroed in place, then written (:func:`_densify`)."""
    vop, _, vbits, ibits = _rows(values, indices, k)
    m, entries = vop.dev.shape
    dtype = _value_dtype(vop)
    if out is None:
        w = output((m, k), dtype, like=vop)
        like = vop
    else:
        like = operand(out, "out", dtypes=(dtype,), shape=(m, k), order="C")
        w = like.dev
    if not (m and k):
        return result(w, like=like)
    wbits = uint16_bits(flat_view(w))
    wide = k % 8 == 0
    warps = min(DENSIFY_WARPS, (SHARED_OPTIN - 1024) // (2 * k))
    if in_shared is None:
        in_shared = wide and warps >= 1
    if in_shared:
        if not wide or warps < 1:
            raise ValueError(f"in_shared: a row of {k} columns needs K % 8 == 0 and at most "
                             f"{(SHARED_OPTIN - 1024) // 2} columns")
        kernel = _densify_in_shared(warps)
        args = (vbits.view(np.uint32), ibits.view(np.uint32), wbits.view(np.uint32), m, k, entries)
        nbytes = 2 * k * warps
        if nbytes > SHARED_LIMIT:
            opt_in(kernel, args, nbytes)
        launch(DynamicShared(kernel, nbytes), cdiv(m, warps), 32 * warps, args, "densify in shared memory")
    else:
        launch(_densify(wide), cdiv(m, ROW_WARPS), 32 * ROW_WARPS,
               (vbits, ibits, wbits, wbits.view(np.uint32) if wide else wbits, m, k, entries), "densify")
    return result(w, like=like)
