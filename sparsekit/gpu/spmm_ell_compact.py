"""The linear layer ``y = x W^T`` at ``N = 1`` (LLM decoding at batch 1) on compact ELL rows: 3.25 bytes a stored
weight where padded ELL rows take 4, for a product bound by the bytes of the weight it reads.

Equals ``sparsekit/reference/spmm_ell_compact.py``, which defines the storage: chunks of 8 slots, each 16 bytes
of 16-bit values, 8 bytes of uint8 offsets and one uint16 base, the chunk's smallest column (``values``,
``offsets``: ``M x 8C``; ``bases``: ``M x C``; unused chunks have base 0xFFFF). A chunk's slots may come in any
order; the conversion puts them in the one that spreads each gather of ``x`` over the shared-memory banks
(:func:`sparsekit.reference.spmm_ell_compact.slot_order`: 1.8-2.0 passes a gather in the bank model against about
3 in ascending order: on the H200, bfloat16, 0.94-1.03x the kernel's time in ascending order at 50-90 %, two
runs apart, ``experiments/results/uspmm_decode.md``).

* :func:`spmm_ell_compact_linear`: the ``N = 1`` kernel of ``sparsekit/gpu/spmm_ell_rows.py``
  (:func:`sparsekit.gpu.spmm_ell_rows._shared_kernel`, its launch and grid) on this storage. Each block copies
  ``x`` to shared memory (:func:`sparsekit.gpu.spmm_ell_rows.x_to_shared`: 16-byte loads where ``K % 8 == 0``
  and ``x`` is 16-byte aligned), each warp's first row's loads issued before the copy; warps take rows ``warp,
  warp + warps, ...``; each lane takes chunks ``lane, lane + 32, ...`` of its row, ``unroll`` in flight, three
  loads a chunk (16 bytes of values, 8 of offsets, 2 of base), and adds ``value * x[base + offset]`` for its
  slots with nonzero value bits into a float32 sum (every slot's gather issued, its sum selected); a warp sum
  and one store give ``y[row]`` (:func:`sparsekit.gpu.spmm_tiled.row_store`).
* :func:`compact_rows`: padded ELL rows of any array kind converted once on the host, by the reference, to
  compact ELL rows of the same kind, each chunk's slots in that order (a layer makes its copy on the device
  instead: :func:`sparsekit.torch.copies.compact_rows`, equal).
"""
from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32, uint16, uint32

from sparsekit.arrays import cdiv, flat_view, operand, output, result, to_host
from sparsekit.gpu.inline import inlined
from sparsekit.gpu.launch import SHARED_LIMIT, DynamicShared, check_int32, launch, opt_in
from sparsekit.gpu.spmm_ell_rows import (_INDEX_DTYPES, _VALUE_DTYPES, SHARED_BLOCKS_PER_SM, SHARED_PER_SM,
                                         SHARED_WARPS, UNROLL, _sm_count, _value_dtype, x_to_shared)
from sparsekit.gpu.mma import widen_bf16, widen_f16
from sparsekit.gpu.spmm_tiled import row_store, uint16_bits
from sparsekit.gpu.vector_loads import aligned, load2, load4
from sparsekit.reference.spmm_ell_compact import CHUNK, MAX_OFFSET, UNUSED_BASE, check_shapes, from_ell_rows

__all__ = ["spmm_ell_compact_linear", "compact_rows", "UNROLL"]



@functools.cache
def _chunk_loads(unroll: int):
    """``load(values, offsets, bases, first, chunk, stop, vbuf, obuf, bbuf)``: a lane's chunks ``chunk, chunk +
    32, ...`` (``unroll`` of them) of the row whose chunks start at ``first``: 16 bytes of values into ``vbuf``
    (4 words a chunk), 8 bytes of offsets into ``obuf`` (2 words), the base into ``bbuf``; chunks past ``stop``
    get base 0xFFFF (skipped, as an unused chunk is)."""
    @inlined
    def load(values, offsets, bases, first, chunk, stop, vbuf, obuf, bbuf):
        for u in range(unroll):
            at = chunk + 32 * u
            if at < stop:
                v = load4(values, (first + at) * 4)
                o = load2(offsets, (first + at) * 2)
                for q in range(4):
                    vbuf[4 * u + q] = v[q]
                for q in range(2):
                    obuf[2 * u + q] = o[q]
                bbuf[u] = uint32(bases[first + at])
            else:
                bbuf[u] = uint32(UNUSED_BASE)
    return load


@functools.cache
def _row_chunks(bf16: bool, unroll: int):
    """The inner loop: ``run(acc, values, offsets, bases, first, lane, stop, k, xs, vbuf, obuf, bbuf, loaded)``
    adds a row's slots (its chunks from ``first``, ``stop`` of them) times ``x`` (``xs``, in shared memory) into
    ``acc[0]``, as :func:`sparsekit.gpu.spmm_ell_rows._row_entries` does for padded ELL rows: chunks ``lane,
    lane + 32, ...``, ``unroll`` in flight. A chunk whose base is not a column (>= K) is skipped; a slot whose
    value bits are 0 (an unused slot: offset 0, value 0) adds nothing. A column is below ``K + 255``, where ``xs``
    holds zeros past ``x``, so every slot reads ``xs`` unconditionally and only its sum is selected: a chunk's 8
    gathers issue back to back (behind a test a slot, as :func:`sparsekit.gpu.spmm_tiled.row_accumulator` has
    them, each waits for the one before); unsigned bases let the compiler drop the negative-index fix-up of
    ``xs[col]``. ``loaded``: the first ``unroll`` chunks are already in the buffers (issued by the caller before
    the copy of ``x``)."""
    widen = widen_bf16 if bf16 else widen_f16
    load = _chunk_loads(unroll)

    @inlined
    def run(acc, values, offsets, bases, first, lane, stop, k, xs, vbuf, obuf, bbuf, loaded):
        chunk = lane
        if not loaded:
            load(values, offsets, bases, first, chunk, stop, vbuf, obuf, bbuf)
        while chunk < stop:
            for u in range(unroll):
                base = bbuf[u]
                if base < k:
                    for h in range(CHUNK):            # slot h: half h % 2 of value word h // 2, byte h % 4 of
                        bits = (vbuf[4 * u + h // 2] >> (16 * (h % 2))) & 0xFFFF      # offset word h // 4
                        col = base + ((obuf[2 * u + h // 4] >> (8 * (h % 4))) & 0xFF)
                        term = widen(bits) * widen(xs[col])
                        if bits != 0:                 # (0 * x[base] may be NaN)
                            acc[0] += term
            chunk += 32 * unroll
            if chunk < stop:
                load(values, offsets, bases, first, chunk, stop, vbuf, obuf, bbuf)

    return run


@functools.cache
def _kernel(bf16: bool, unroll: int, wide: bool):
    """``y = x W^T`` (``N = 1``) with ``x`` in shared memory; the launcher's grid loops over the rows. Arguments:
    ``values`` (the 16-bit values as uint32 words), ``offsets`` (uint8 as uint32 words), ``bases`` (uint16),
    ``x`` (halves), ``x32`` (``x``'s uint32 view where ``wide``, else ``x``), ``y``; sizes ``m``, ``k`` and
    ``chunks`` a row."""
    row_chunks, store = _row_chunks(bf16, unroll), row_store(1, bf16, True)
    load, copy = _chunk_loads(unroll), x_to_shared(1, wide)
    value_words, offset_words = 4 * unroll, 2 * unroll

    @cuda.jit
    def kernel(values, offsets, bases, x, x32, y, m, k, chunks):
        xs = cuda.shared.array(0, uint16)
        xs32 = cuda.shared.array(0, uint32)
        tid = cuda.threadIdx.x
        lane = tid % 32
        warps = cuda.blockDim.x // 32
        vbuf = cuda.local.array(value_words, uint32)
        obuf = cuda.local.array(offset_words, uint32)
        bbuf = cuda.local.array(unroll, uint32)
        row = cuda.blockIdx.x * warps + tid // 32
        if row < m:                                   # the first row's loads in flight while x is copied
            load(values, offsets, bases, row * chunks, lane, chunks, vbuf, obuf, bbuf)
        copy(x, x32, xs, xs32, k)
        for t in range(tid, MAX_OFFSET + 1, cuda.blockDim.x):   # zeros past x: a slot's column < K + 255
            xs[k + t] = uint16(0)
        cuda.syncthreads()
        acc = cuda.local.array(1, float32)
        loaded = True
        while row < m:
            acc[0] = float32(0.0)
            row_chunks(acc, values, offsets, bases, row * chunks, lane, chunks, k, xs, vbuf, obuf, bbuf, loaded)
            store(y, acc, row, m, lane)               # warp sum, one rounding, y[row]
            loaded = False
            row += cuda.gridDim.x * warps

    return kernel


def spmm_ell_compact_linear(values, offsets, bases, k: int, x, *, unroll: int | None = None, stream=0):
    """``y = x @ W^T`` (``1 x M``) for compact ELL rows ``values``/``offsets``/``bases`` of a ``M x k`` weight
    (float16, bfloat16 or its uint16 bits; uint8; uint16 or int16 bits) and ``x`` (``1 x k``, row-major, the
    values' dtype): NumPy arrays, Numba device arrays or CUDA tensors, the result of ``x``'s kind. ``unroll``:
    chunks a lane has in flight (default :data:`UNROLL`). ``stream``: where to launch (a CUDA graph capture
    needs torch's). The structure is not scanned (:func:`sparsekit.reference.spmm_ell_compact.check_compact`
    does); whatever the offsets hold, the kernel reads nothing outside its arrays (a column past ``k`` reads
    a zero)."""
    check_shapes(values, offsets, bases, k)
    vop = operand(values, "values", dtypes=_VALUE_DTYPES, ndim=2, order="C")
    oop = operand(offsets, "offsets", dtypes=(np.dtype(np.uint8),), ndim=2, order="C")
    bop = operand(bases, "bases", dtypes=_INDEX_DTYPES, ndim=2, order="C")
    m, width = vop.dev.shape
    dtype = _value_dtype(vop)
    xop = operand(x, "x", dtypes=(dtype,), ndim=2, order="C")
    if xop.dev.shape != (1, k):
        raise ValueError(f"x: expected shape (1, {k}) to multiply a {m}x{k} weight (this kernel takes N = 1 only), "
                         f"got {xop.dev.shape}")
    check_int32(m * width, "values", "slots", "the kernel indexes them in 32-bit integers")
    y = output((1, m), dtype, like=xop)
    if m == 0:
        return result(y, like=xop)
    xbits = uint16_bits(flat_view(xop.dev))
    bf16 = dtype.name == "bfloat16"
    wide = k % 8 == 0 and aligned(xbits, 8)
    kernel = _kernel(bf16, UNROLL if unroll is None else unroll, wide)
    args = (uint16_bits(flat_view(vop.dev)).view(np.uint32), flat_view(oop.dev).view(np.uint32),
            uint16_bits(flat_view(bop.dev)), xbits, xbits.view(np.uint32) if wide else xbits,
            flat_view(y) if not bf16 else uint16_bits(flat_view(y)), m, k, width // CHUNK)
    nbytes = 2 * (k + MAX_OFFSET + 1)
    if nbytes > SHARED_LIMIT:
        opt_in(kernel, args, nbytes)
    blocks = max(1, min(SHARED_BLOCKS_PER_SM, SHARED_PER_SM // (nbytes + 1024))) * _sm_count()
    launch(DynamicShared(kernel, nbytes), min(cdiv(m, SHARED_WARPS), blocks), 32 * SHARED_WARPS, args,
           "compact ELL rows, N=1", stream=stream)
    return result(y, like=xop)


def compact_rows(values, indices, k: int):
    """Padded ELL rows ``values``/``indices`` (``sparsekit.reference.spmm_ell_rows``: NumPy arrays, Numba device
    arrays or tensors, e.g. :class:`sparsekit.torch.SparseLinear`'s) as compact ELL rows ``(values, offsets,
    bases)`` of the same kind, converted on the host by
    :func:`sparsekit.reference.spmm_ell_compact.from_ell_rows` (once a weight; each chunk's slots in
    :func:`~sparsekit.reference.spmm_ell_compact.slot_order`). Tensors come back on the values'
    device, values in their dtype, offsets uint8, bases int16 holding the uint16 bits (as a layer's indices)."""
    compact = from_ell_rows(to_host(values), to_host(indices), k)
    if type(values).__module__.partition(".")[0] == "torch":
        import torch

        out_values, offsets, bases = compact
        return (torch.from_numpy(out_values.view(np.int16)).view(values.dtype).to(values.device),
                torch.from_numpy(offsets).to(values.device), torch.from_numpy(bases.view(np.int16)).to(values.device))
    if getattr(values, "__cuda_ndarray__", False):
        return tuple(cuda.to_device(a) for a in compact)
    return compact
