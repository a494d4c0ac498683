"""SpMM baselines on the GPU: ``C = A @ B`` with ``A`` in CSR, COO or blocked-ELL.

Equal :func:`sparsekit.reference.spmm.spmm_csr`, :func:`sparsekit.reference.spmm.spmm_coo` and
:func:`sparsekit.reference.spmm.spmm_blocked_ell` within float32 accumulation (same
names, same arguments, plus tunables). They are the baselines of the USpMM
figures and the teaching track's examples of load balance:

``spmm_csr(csr, b, swizzle=False)``
    one warp per row (lanes across the columns of ``B``, so loads of ``B`` and
    stores of ``C`` are coalesced); a long row keeps its warp busy while short
    rows' warps idle. ``swizzle=True`` launches the rows in order of
    decreasing length (Sputnik's row swizzle: ``row = perm[warp]``), so the
    warps of one block, and blocks launched together, get similar work.
``spmm_csr(csr, b, warps_per_row=S, vector=V)``
    for long rows (large K): ``S`` warps share a row and each takes a part of
    its nonzeros; the block stages a chunk of ``32 * S`` (column, value) pairs
    per row in shared memory with one coalesced load (Sputnik keeps the sparse
    row in shared memory; GE-SpMM calls it coalesced row caching), every warp
    multiplies its 32 of them, loading ``V`` consecutive columns of ``B`` per
    lane with one vector load (``sparsekit/gpu/vector_loads.py``), and the ``S`` partial
    sums meet in shared memory in a fixed order (deterministic).
    :func:`staged_tunables` picks ``S`` and ``V`` for a problem; on the H100
    it beats cuSPARSE on all 20 suite problems (``experiments/results/teaching.md``).
``spmm_coo(coo, b)``, ``spmm_blocked_ell(bell, b)``
    by default (``config="auto"``) ``spmm_csr``'s automatic choice on the
    same stored entries as CSR (:func:`as_csr`, built once per prepared
    matrix): deterministic, and the staged kernel's balance and vector loads.
``spmm_coo(coo, b, config=None)``
    one thread per (stored entry, column of ``B``), adding into ``C`` with
    float32 atomics: perfectly balanced, but the order of the additions (and
    so the last bits of the result) changes from run to run.
``spmm_blocked_ell(bell, b, config=None)``
    one thread per element of ``C``; it walks the ``Kb`` block slots of its
    block row, the same count for every row (blocked-uniform sparsity).

``b`` is ``K x N`` C-ordered (row-major), of ``A``'s dtype, float32 or float16;
other layouts are refused, nothing is copied or cast. ``C`` is ``M x N``,
C-ordered, ``b``'s dtype and array kind. Accumulation is float32.
"""
from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32, int32

from sparsekit.gpu.inline import inlined
from sparsekit.gpu.launch import check_int32
from sparsekit.gpu.mma import round_bf16, widen_bf16
from sparsekit.gpu.spmm_bitmap import MAX_N as BITMAP_MAX_N
from sparsekit.gpu.spmm_bitmap import prepare as prepare_bitmap
from sparsekit.gpu.spmm_bitmap import spmm_bitmap
from sparsekit.gpu.spmm_tiled import MAX_N as TILED_MAX_N
from sparsekit.gpu.uspmm import prepare as prepare_ell
from sparsekit.gpu.uspmm import uspmm
from sparsekit.gpu.spmm_tiled import prepare as prepare_tiled
from sparsekit.gpu.spmm_tiled import spmm_tiled
from sparsekit.gpu.vector_loads import aligned, load2, load4
from sparsekit.arrays import DeviceMatrix, cdiv, flat_view, operand, output, result
from sparsekit.balance import row_swizzle
from sparsekit.checks import BFLOAT16, check_int
from sparsekit.formats import COO, CSR, ELL, BlockedELL, TiledBitmap, TiledCSL

__all__ = ["DeviceSparse", "prepare", "spmm_csr", "auto_route", "staged_tunables", "spmm_coo", "spmm_blocked_ell",
           "as_csr"]

WARP_SIZE = 32
_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), BFLOAT16)
_HALVES = (np.dtype(np.float16), BFLOAT16)
#: ``config="auto"`` for float16 and bfloat16 up to :data:`BITMAP_MAX_N` columns of ``B``: the TiledCSL row kernel
#: for ``N`` up to this and a density below :data:`ROW_KERNEL_DENSITY`, else the TiledBitmap tensor-core kernel
#: (H200, magnitude-pruned 4096^2, 14336x4096 and 4096x14336: the row kernel 1.08-1.60x dense at N = 8 and
#: 80-90 % against the bitmap kernel's 0.88-1.12x; the bitmap kernel faster at 50-70 % and from N = 16:
#: experiments/results/spmm_unstructured.md).
ROW_KERNEL_MAX_N = 8
ROW_KERNEL_DENSITY = 0.25
#: Past :data:`BITMAP_MAX_N` columns, float16 and bfloat16 run as the rows padded to the longest
#: (:meth:`~sparsekit.formats.ELL.padded_from_csr`) through ``uspmm(config="auto")``, whose routes there are the
#: tensor-core tile kernels (measured on uniform weights: 0.21-0.29x dense at N = 128 on the Llama shapes,
#: experiments/results/uspmm_decode.md), where the CUDA-core staged kernel takes 0.01-0.12x dense at N = 256-1024
#: (spmm_unstructured.md) -- while the padding, which those kernels also read, is at most this share of the
#: stored entries (magnitude pruning of a random 4096^2 weight at 80 %: 9 %).
ELL_MAX_PADDING = 0.25


# ---------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------

@inlined
def _to_float32(x):
    return float32(x)


@inlined
def _unchanged(x):
    return x


def _conversions(bf16: bool):
    """``(widen, narrow)``: an element of ``data``/``b`` to float32, and a float32 sum to what ``c`` stores
    (bfloat16 arrays reach the kernels as their uint16 bits: widened exactly, rounded to nearest even)."""
    return (widen_bf16, round_bf16) if bf16 else (_to_float32, _unchanged)


@functools.cache
def _csr_kernel(cols_per_lane: int, bf16: bool = False):
    """Warp per row. Arrays ``indptr``, ``indices``, ``data``, ``perm`` (launch
    order of the rows), ``b`` (K x N), ``c`` (M x N, out); sizes ``m``, ``n``.
    Grid: (warps over rows, tiles of ``32 * cols_per_lane`` columns). ``bf16``: ``data``, ``b`` and ``c``
    hold bfloat16 bits."""
    nt = WARP_SIZE * cols_per_lane
    widen, narrow = _conversions(bf16)

    @cuda.jit
    def kernel(indptr, indices, data, perm, b, c, m, n):
        w = cuda.grid(1) // WARP_SIZE                   # this warp's place in the launch order
        lane = cuda.threadIdx.x % WARP_SIZE
        col0 = cuda.blockIdx.y * nt
        if w >= m:
            return
        row = perm[w]                                    # identity, or rows by decreasing length
        acc = cuda.local.array(cols_per_lane, float32)
        for j in range(cols_per_lane):
            acc[j] = 0.0
        for p in range(indptr[row], indptr[row + 1]):
            a = widen(data[p])                           # one entry, broadcast to the warp
            brow = indices[p]
            for j in range(cols_per_lane):
                col = col0 + lane + j * WARP_SIZE        # consecutive lanes, consecutive columns
                if col < n:
                    acc[j] += a * widen(b[brow, col])
        for j in range(cols_per_lane):
            col = col0 + lane + j * WARP_SIZE
            if col < n:
                c[row, col] = narrow(acc[j])

    return kernel


@cuda.jit(device=True)
def _load1(arr, i):
    """``(arr[i],)``: the one-element case of :mod:`sparsekit.gpu.vector_loads`."""
    return (arr[i],)


_LOADS = {1: _load1, 2: load2, 4: load4}


@functools.cache
def _csr_split_kernel(rows_per_block: int, warps_per_row: int, cols_per_lane: int, vector: int, unroll: int,
                      bf16: bool = False):
    """Several warps per row, the row's nonzeros staged in shared memory.

    Arrays ``indptr``, ``indices``, ``data``, ``perm`` (launch order of the
    rows), ``b`` (K x N flattened to 1-D, for the vector loads), ``c`` (M x N,
    out); sizes ``m``, ``n``. Block: ``rows_per_block`` rows x
    ``warps_per_row`` warps; grid: (row groups, tiles of ``32 * vector *
    cols_per_lane`` columns). Lane ``l`` owns columns ``tile0 + 32 * vector * j
    + l * vector + v`` (``j < cols_per_lane``, ``v < vector``). ``unroll``
    staged entries are multiplied per step, their loads of ``B`` issued first. ``bf16``: ``data``, ``b``
    and ``c`` hold bfloat16 bits.
    """
    widen, narrow = _conversions(bf16)
    chunk = WARP_SIZE * warps_per_row                   # nonzeros staged per row and step
    width = WARP_SIZE * vector * cols_per_lane          # columns of the block's tile
    nacc = vector * cols_per_lane
    load = _LOADS[vector]

    @cuda.jit
    def kernel(indptr, indices, data, perm, b, c, m, n):
        tid = cuda.threadIdx.x
        warp = tid // WARP_SIZE
        lane = tid % WARP_SIZE
        r = warp // warps_per_row                        # the block's row slot of this warp
        part = warp % warps_per_row                      # which 32 of each staged chunk it takes
        tile0 = cuda.blockIdx.y * width
        s_col = cuda.shared.array((rows_per_block, chunk), int32)
        s_val = cuda.shared.array((rows_per_block, chunk), float32)
        s_sum = cuda.shared.array((rows_per_block, warps_per_row, width), float32)
        slot = cuda.blockIdx.x * rows_per_block + r
        start = end = 0
        if slot < m:
            row = perm[slot]                             # identity, or rows by decreasing length
            start = indptr[row]
            end = indptr[row + 1]
        # Every thread walks the same number of chunks: that of the block's longest row
        # (rows of one block are alike under the swizzle), so the barriers below are uniform.
        longest = 0
        for q in range(rows_per_block):
            s = cuda.blockIdx.x * rows_per_block + q
            if s < m:
                longest = max(longest, indptr[perm[s] + 1] - indptr[perm[s]])
        acc = cuda.local.array(nacc, float32)
        a_u = cuda.local.array(unroll, float32)             # ``unroll`` entries' values and rows of B
        b_u = cuda.local.array((unroll, nacc), float32)
        for x in range(nacc):
            acc[x] = 0.0
            for u in range(unroll):
                b_u[u, x] = 0.0                              # columns past n stay 0 (never stored)
        for p0 in range(0, longest, chunk):
            # Stage: one coalesced load of (column, value) per thread.
            t = part * WARP_SIZE + lane
            if start + p0 + t < end:
                s_col[r, t] = indices[start + p0 + t]
                s_val[r, t] = widen(data[start + p0 + t])
            cuda.syncthreads()
            # Multiply: this warp's 32 staged entries (fewer at the row's end), read from shared
            # memory by every lane at once (broadcast), ``unroll`` at a time: first all their loads
            # of B (independent, so they are in flight together), then the multiply-adds.
            first = part * WARP_SIZE
            stop = min(first + WARP_SIZE, end - start - p0)
            for e0 in range(first, stop, unroll):
                for u in range(unroll):
                    if e0 + u < stop:
                        a_u[u] = s_val[r, e0 + u]
                        off = s_col[r, e0 + u] * n
                        for j in range(cols_per_lane):
                            col = tile0 + j * WARP_SIZE * vector + lane * vector
                            if col < n:                  # n % vector == 0: the whole vector is inside
                                xs = load(b, off + col)
                                for v in range(vector):
                                    b_u[u, j * vector + v] = widen(xs[v])
                for u in range(unroll):
                    if e0 + u < stop:
                        for x in range(nacc):
                            acc[x] += a_u[u] * b_u[u, x]
            cuda.syncthreads()                           # before the next chunk overwrites the stage
        # Reduce: the row's warps add their partial sums in a fixed order.
        for j in range(cols_per_lane):
            for v in range(vector):
                s_sum[r, part, j * WARP_SIZE * vector + lane * vector + v] = acc[j * vector + v]
        cuda.syncthreads()
        for x in range(tid, rows_per_block * width, cuda.blockDim.x):
            rr = x // width
            col = tile0 + x % width
            s = cuda.blockIdx.x * rows_per_block + rr
            if s < m and col < n:
                total = float32(0.0)
                for q in range(warps_per_row):
                    total += s_sum[rr, q, x % width]
                c[perm[s], col] = narrow(total)

    return kernel


@cuda.jit
def _coo_kernel(row, col, data, b, c32, nnz, n):
    """Thread per (entry, column): ``c32[row, :] += data * b[col, :]`` with atomics.
    Arrays ``row``, ``col``, ``data``, ``b`` (K x N), ``c32`` (M x N float32,
    zeroed, out); sizes ``nnz``, ``n``. Grid: (columns, entries)."""
    j, e = cuda.grid(2)
    if e < nnz and j < n:
        cuda.atomic.add(c32, (row[e], j), float32(data[e]) * float32(b[col[e], j]))


@cuda.jit
def _cast_kernel(src, dst):
    """``dst = src`` rounded to ``dst``'s dtype (2-D, thread per element)."""
    j, i = cuda.grid(2)
    if i < dst.shape[0] and j < dst.shape[1]:
        dst[i, j] = src[i, j]


@cuda.jit
def _zero_kernel(c):
    """``c = 0`` (2-D, thread per element)."""
    j, i = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1]:
        c[i, j] = 0.0


@cuda.jit
def _blocked_ell_kernel(values, indices, b, c, m, n, bs):
    """Thread per element of ``C``. Arrays ``values`` (M/bs, Kb, bs, bs),
    ``indices`` (M/bs, Kb) block columns, ``b`` (K x N), ``c`` (M x N, out);
    sizes ``m``, ``n``, ``bs``. Grid: (columns, rows)."""
    col, row = cuda.grid(2)
    if row >= m or col >= n:
        return
    r, i = row // bs, row % bs                           # block row, row inside the block
    acc = float32(0.0)
    for s in range(indices.shape[1]):                    # the Kb slots, the same in every block row
        k0 = indices[r, s] * bs
        for jj in range(bs):
            acc += float32(values[r, s, i, jj]) * float32(b[k0 + jj, col])
    c[row, col] = acc


# ---------------------------------------------------------------------------
# Launchers
# ---------------------------------------------------------------------------

class DeviceSparse(DeviceMatrix):
    """A CSR, COO or BlockedELL checked once (``validate(full=True)``) with its
    arrays on the device (``arrays``: name -> device array). Pass it in place of
    the host matrix to skip the copy and the check on every call."""

    def swizzle(self):
        """CSR rows by decreasing length (stable, :func:`sparsekit.balance.row_swizzle`),
        on the device; computed once."""
        return self.cached("swizzle", lambda: row_swizzle(self.host))

    def identity(self):
        """CSR rows in their own order, on the device; computed once."""
        return self.cached("identity", lambda: np.arange(self.shape[0], dtype=np.int32))

    def tiled_rows(self):
        """The CSR's rows as a :class:`~sparsekit.formats.TiledCSL` prepared for the row kernel of
        :mod:`sparsekit.gpu.spmm_tiled` (half precision at decode widths); built once."""
        return self.cached("tiled_rows", lambda: prepare_tiled(TiledCSL.from_csr(
            self.host, tile=TiledCSL.row_tile(self.shape[1]))), device=False)

    def bitmap(self):
        """The CSR as a :class:`~sparsekit.formats.TiledBitmap` prepared for :mod:`sparsekit.gpu.spmm_bitmap`
        (half precision up to 64 columns of ``B``); built once."""
        return self.cached("bitmap", lambda: prepare_bitmap(TiledBitmap.from_csr(self.host)), device=False)

    def padded_ell(self):
        """The CSR's rows padded to the longest (:meth:`~sparsekit.formats.ELL.padded_from_csr`) and prepared for
        :func:`sparsekit.gpu.uspmm.uspmm` (half precision past 64 columns of ``B``); built once."""
        return self.cached("padded_ell", lambda: prepare_ell(ELL.padded_from_csr(self.host)), device=False)

    def padding(self) -> float:
        """The share of :meth:`padded_ell`'s entries that are padding, from the row lengths alone; computed once."""
        def share():
            m = self.shape[0]
            width = int(np.diff(self.host.indptr.astype(np.int64)).max()) if m else 0
            return 1.0 - self.host.nnz / (m * width) if m * width else 0.0
        return self.cached("padding", share, device=False)


_FIELDS = {CSR: ("indptr", "indices", "data"), COO: ("row", "col", "data"), BlockedELL: ("values", "indices")}


def prepare(a, cls) -> DeviceSparse:
    """Check ``a`` (an instance of ``cls``) fully and copy its arrays to the device (bfloat16 too: the COO and
    blocked-ELL kernels refuse it at launch, their ``config="auto"`` runs it as CSR).
    A CSR has at most 2**31 - 1 rows: the kernels' launch orders (:meth:`DeviceSparse.identity`,
    :meth:`DeviceSparse.swizzle`) are int32 row numbers."""
    host = getattr(a, "host", a)
    if cls is CSR and isinstance(host, CSR):
        check_int32(host.shape[0], "a.shape[0]", "rows", "the CSR kernels' launch orders are int32 row numbers")
    return DeviceSparse.from_host(a, cls, _FIELDS[cls], name="a", dtypes=_DTYPES,
                                  dtype_rule="values dtype must be float32, float16 or bfloat16 (CSR) for the GPU "
                                             "kernels, got {dtype}")


def _rhs(b, dev: DeviceSparse):
    return operand(b, "b", dtypes=(dev.dtype,), ndim=2, shape=(dev.shape[1], None), order="C")


#: The warp-per-row kernel's tunables (what ``config=None`` runs, and what explicit tunables start from).
PLAIN = dict(swizzle=False, cols_per_lane=1, warps_per_block=4, warps_per_row=1, vector=1, unroll=4)


def spmm_csr(csr, b, *, config="auto", **tunables):
    """``C = A @ b`` for ``A`` in CSR.

    ``config="auto"`` (the default, when no tunable is given): :func:`staged_tunables` for the matrix and
    ``N`` (on the H200 within 10 % of the best configuration on each of the DL SpMM suite's 20 problems
    and 1.8x cuSPARSE; on the H100 2.0-7.9x faster than the plain kernel on magnitude-pruned ResNet-50 and
    Transformer layers: experiments/results/teaching.md); float16 and bfloat16 with ``N <= 64``: the row kernel of
    :mod:`sparsekit.gpu.spmm_tiled` on the rows as TiledCSL where ``N <= 8`` and under a quarter of the entries are
    kept, else :mod:`sparsekit.gpu.spmm_bitmap` on the matrix as TiledBitmap (:data:`ROW_KERNEL_DENSITY`); wider,
    the rows padded to ELL through :func:`sparsekit.gpu.uspmm.uspmm` (tensor cores) where the padding is at most
    :data:`ELL_MAX_PADDING` of the entries (:func:`auto_route`). ``config=None`` or any explicit tunable: :data:`PLAIN`
    updated by the tunables given. float32, float16 and bfloat16 (its bits widened exactly, float32
    sums, one rounding to nearest even at the store) in every kernel.

    Plain kernel: warp per row, rows in their order or by
    decreasing length (``swizzle``). Tunables: ``cols_per_lane`` (columns of
    ``B`` per lane: the warp covers ``32 * cols_per_lane``), ``warps_per_block``.

    ``warps_per_row > 1`` or ``vector > 1`` selects the staged kernel:
    ``warps_per_row`` warps share each row (``warps_per_block`` must be a
    multiple of it; the block holds ``warps_per_block / warps_per_row`` rows),
    and each lane loads ``vector`` consecutive columns of ``B`` (1, 2 or 4) in
    one instruction, for ``vector * cols_per_lane`` columns per lane. A vector
    load needs ``N`` divisible by ``vector`` and ``b``'s first element aligned
    to ``vector * itemsize`` bytes; otherwise ``ValueError``. ``unroll``: staged
    entries whose loads of ``B`` are issued together (1 to 16).
    """
    dev = prepare(csr, CSR)
    unknown = set(tunables) - set(PLAIN)
    if unknown:
        raise TypeError(f"spmm_csr: unknown tunable(s) {sorted(unknown)}; known: {sorted(PLAIN)}")
    if config not in ("auto", None):
        raise ValueError(f"config: must be 'auto' or None, got {config!r}")
    shape = np.shape(b)
    if config == "auto" and not tunables and len(shape) == 2:
        route = auto_route(dev, shape[1])
        if route == "rows":
            return spmm_tiled(dev.tiled_rows(), b)
        if route == "bitmap":
            return spmm_bitmap(dev.bitmap(), b)
        if route == "ell":
            _rhs(b, dev)                          # B row-major, as every spmm_csr kernel takes it (the same refusal)
            return uspmm(dev.padded_ell(), b, config="auto")
    bop = _rhs(b, dev)
    chosen = dict(PLAIN, **tunables)
    if config == "auto" and not tunables:
        chosen.update(staged_tunables(dev, bop.dev.shape[1]))
        if not aligned(bop.dev, chosen["vector"]):                # (an offset view of B: scalar loads)
            chosen["vector"] = 1
    return _spmm_csr(dev, bop, **chosen)


def auto_route(dev: DeviceSparse, n: int) -> str:
    """The kernel ``spmm_csr(config="auto")`` runs for a prepared CSR and ``N`` columns of ``B``: ``"rows"`` (the
    TiledCSL row kernel: half precision, ``N <= 8``, under :data:`ROW_KERNEL_DENSITY` of the entries kept),
    ``"bitmap"`` (the TiledBitmap tensor-core kernel: half precision, ``N <= 64``), ``"ell"`` (the rows padded to
    ELL through ``uspmm(config="auto")``: half precision past ``N = 64`` with at most :data:`ELL_MAX_PADDING` of
    padding) or ``"staged"`` (the staged CSR kernel with :func:`staged_tunables`)."""
    if dev.dtype in _HALVES and n <= BITMAP_MAX_N:
        m, k = dev.shape
        if n <= min(ROW_KERNEL_MAX_N, TILED_MAX_N) and dev.host.nnz < ROW_KERNEL_DENSITY * m * k:
            return "rows"
        return "bitmap"
    if dev.dtype in _HALVES and dev.host.nnz and dev.padding() <= ELL_MAX_PADDING:
        return "ell"
    return "staged"


def _spmm_csr(dev, bop, *, swizzle, cols_per_lane, warps_per_block, warps_per_row, vector, unroll):
    cols_per_lane = check_int(cols_per_lane, "cols_per_lane", minimum=1, maximum=8)
    warps_per_block = check_int(warps_per_block, "warps_per_block", minimum=1, maximum=32)
    warps_per_row = check_int(warps_per_row, "warps_per_row", minimum=1, maximum=32)
    unroll = check_int(unroll, "unroll", minimum=1, maximum=16)
    if vector not in _LOADS:
        raise ValueError(f"vector: must be one of {tuple(_LOADS)}, got {vector!r}")
    if warps_per_block % warps_per_row:
        raise ValueError(f"warps_per_block: must be a multiple of warps_per_row ({warps_per_row}), "
                         f"got {warps_per_block}")
    m, n = dev.shape[0], bop.dev.shape[1]
    if n % vector:
        raise ValueError(f"vector: the columns of b ({n}) must be divisible by vector ({vector})")
    if not aligned(bop.dev, vector):
        raise ValueError(f"vector: b's first element must be aligned to {vector * bop.dev.dtype.itemsize} bytes")
    c = output((m, n), dev.dtype, like=bop)
    bf16 = dev.dtype == BFLOAT16
    if m and n:
        perm = dev.swizzle() if swizzle else dev.identity()
        csr_arrays = (dev.arrays["indptr"], dev.arrays["indices"], dev.arrays["data"], perm)
        if warps_per_row == 1 and vector == 1:
            grid = (cdiv(m, warps_per_block), cdiv(n, WARP_SIZE * cols_per_lane))
            _csr_kernel(cols_per_lane, bf16)[grid, WARP_SIZE * warps_per_block](*csr_arrays, bop.dev, c, m, n)
        else:
            rows_per_block = warps_per_block // warps_per_row
            grid = (cdiv(m, rows_per_block), cdiv(n, WARP_SIZE * vector * cols_per_lane))
            kernel = _csr_split_kernel(rows_per_block, warps_per_row, cols_per_lane, vector, unroll, bf16)
            b_flat = flat_view(bop.dev)                         # 1-D view for the vector loads
            kernel[grid, WARP_SIZE * warps_per_block](*csr_arrays, b_flat, c, m, n)
    return result(c, like=bop)


#: Warps :func:`staged_tunables` fills a launch to (splitting rows), by vector width.
TARGET_WARPS = {4: 2048, 1: 4096}


def staged_tunables(csr, n: int) -> dict:
    """Keyword arguments of :func:`spmm_csr` for the staged kernel, chosen from ``csr``'s (a
    CSR or a :class:`DeviceSparse` of one) rows and
    nonzeros and ``B``'s column count ``n`` (a rule fitted to the H200 sweep of
    ``experiments/bench_teaching.py gpu-sweep``, ``experiments/results/teaching.md``: within 6 % of
    the sweep's best configuration on each of the suite's 20 problems).

    Rows swizzled, ``cols_per_lane = 2``, vector loads of 4 when ``n % 4 == 0``;
    ``warps_per_row`` doubles from 1 (at most 8) while the launch has fewer than
    :data:`TARGET_WARPS` warps (2048 with vector loads, whose lanes each move 4 columns; 4096
    without) and each warp would still get 8 nonzeros of an average row: few long rows get
    split, many short ones do not (a split costs a reduction).
    ``b`` must then be aligned for the vector load (fresh NumPy, Numba, CuPy and
    PyTorch allocations are).
    """
    host = csr.host if isinstance(csr, DeviceSparse) else csr
    if not isinstance(host, CSR):
        raise TypeError(f"csr: expected a sparsekit.formats.CSR (or a DeviceSparse of one), got {type(host).__name__}")
    m = host.shape[0]
    n = check_int(n, "n", minimum=0)
    vector = 4 if n % 4 == 0 else 1
    cols_per_lane = 2
    warps = m * cdiv(n, WARP_SIZE * vector * cols_per_lane)
    mean_row = host.nnz / m if m else 0.0
    warps_per_row = 1
    target = TARGET_WARPS[vector]
    while warps_per_row < 8 and warps * warps_per_row < target and mean_row / (2 * warps_per_row) >= 8:
        warps_per_row *= 2
    return dict(swizzle=True, warps_per_row=warps_per_row, warps_per_block=max(4, warps_per_row),
                vector=vector, cols_per_lane=cols_per_lane)


def _check_config(config):
    """``config`` of :func:`spmm_coo` and :func:`spmm_blocked_ell`: ``"auto"`` or None, else ``ValueError``."""
    if not (config is None or (isinstance(config, str) and config == "auto")):
        raise ValueError(f"config: must be 'auto' or None, got {config!r}")


def _indptr(counts: np.ndarray) -> np.ndarray:
    """CSR row pointers of rows holding ``counts`` entries (int32 where the total fits, else int64)."""
    total = int(counts.sum())
    indptr = np.zeros(len(counts) + 1, np.int32 if total <= np.iinfo(np.int32).max else np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr


def _csr_of(host) -> CSR:
    """The COO or BlockedELL ``host`` as a :class:`~sparsekit.formats.CSR` of the same stored entries, explicit
    zeros included (so ``A @ b`` is the same for every ``b``, non-finite ones too), without a dense copy."""
    m = host.shape[0]
    if isinstance(host, COO):                   # canonical: sorted row-major, no duplicates -- a CSR's order
        return CSR(_indptr(np.bincount(host.row, minlength=m)), host.col, host.data, host.shape)
    bs, (mb, kb) = host.block, host.indices.shape
    # values[r, s, i, j] sits at row r*bs + i, column indices[r, s]*bs + j; in the order (r, i, s, j) each row's
    # columns ascend (the block columns of a block row ascend along s).
    idt = np.int32 if host.shape[1] <= np.iinfo(np.int32).max else np.int64
    cols = host.indices.astype(idt)[:, :, None] * bs + np.arange(bs, dtype=idt)                # (mb, kb, bs)
    cols = np.broadcast_to(cols[:, None], (mb, bs, kb, bs)).reshape(-1)
    data = host.values.transpose(0, 2, 1, 3).reshape(-1)
    return CSR(_indptr(np.full(m, kb * bs)), cols, data, host.shape)


def as_csr(a) -> DeviceSparse:
    """A COO or BlockedELL (or a :class:`DeviceSparse` of one, as :func:`prepare` makes) as a prepared CSR of the
    same stored entries: what ``config="auto"`` of :func:`spmm_coo` and :func:`spmm_blocked_ell` multiplies.
    Built in O(nnz) (no dense copy) and, for a prepared matrix, once: it is kept on it."""
    host = getattr(a, "host", a)
    if not isinstance(host, (COO, BlockedELL)):
        raise TypeError(f"a: expected a sparsekit.formats.COO or BlockedELL (or a DeviceSparse of one), "
                        f"got {type(host).__name__}")
    dev = prepare(a, type(host))
    return dev.cached("csr", lambda: prepare(_csr_of(dev.host), CSR), device=False)


def _as_csr_or_own(a, b, config, cls, launch_own):
    """What :func:`spmm_coo` and :func:`spmm_blocked_ell` share: ``config="auto"`` hands the matrix as CSR to
    :func:`spmm_csr`; ``config=None`` checks ``b``, allocates ``C`` and has ``launch_own(dev, b_dev, c)`` fill it
    (the format's own kernel, float32 or float16: it widens with ``float32(x)``)."""
    _check_config(config)
    dev = prepare(a, cls)
    if config == "auto":
        return spmm_csr(as_csr(dev), b)
    if dev.dtype == BFLOAT16:
        raise TypeError(f"a: {cls.__name__} kernels take float32 or float16 (config=None), got bfloat16; the "
                        f"default config='auto' runs bfloat16 as CSR (spmm_csr)")
    bop = _rhs(b, dev)
    c = output((dev.shape[0], bop.dev.shape[1]), dev.dtype, like=bop)
    if c.size:
        launch_own(dev, bop.dev, c)
    return result(c, like=bop)


def spmm_coo(coo, b, *, config="auto"):
    """``C = A @ b`` for ``A`` in COO.

    ``config="auto"`` (the default): :func:`spmm_csr` with its own ``config="auto"`` on the matrix as CSR
    (:func:`as_csr`: a canonical COO's ``col`` and ``data`` are already a CSR's, only the row pointers are
    counted; built once per prepared matrix). One kernel that sums each element of ``C`` in registers and
    stores it once, where the atomic kernel adds ``nnz * N`` products into memory after a zeroing pass; no
    atomics, so bit-identical from run to run; float32, float16 and bfloat16. On the DL SpMM suite's 20 problems
    (H200, float32) 1.7-7.9x faster than ``config=None`` (``python -m experiments.bench_teaching default-check``,
    experiments/results/teaching.md).

    ``config=None``: thread per (entry, column), float32 atomics into a zeroed float32 ``C``, then one rounding
    to ``b``'s dtype (float32 and float16). Perfectly balanced, but not bit-reproducible (the order of the
    atomic additions varies).
    """
    return _as_csr_or_own(coo, b, config, COO, _launch_coo)


def _launch_coo(dev, b, c):
    """``c = A @ b`` by :func:`_coo_kernel` (after zeroing a float32 accumulator; float16: rounded into ``c``)."""
    m, n = c.shape
    per_element = (cdiv(n, 32), cdiv(m, 8)), (32, 8)     # (grid, block)
    acc = c if dev.dtype == np.float32 else cuda.device_array((m, n), np.float32)
    _zero_kernel[per_element](acc)
    nnz = dev.host.nnz
    if nnz:
        _coo_kernel[(cdiv(n, 32), cdiv(nnz, 8)), (32, 8)](
            dev.arrays["row"], dev.arrays["col"], dev.arrays["data"], b, acc, nnz, n)
    if acc is not c:
        _cast_kernel[per_element](acc, c)


def spmm_blocked_ell(bell, b, *, config="auto"):
    """``C = A @ b`` for ``A`` in blocked-ELL.

    ``config="auto"`` (the default): :func:`spmm_csr` with its own ``config="auto"`` on the matrix as CSR
    (:func:`as_csr`: every stored entry of the kept blocks, explicit zeros included, so the product is the same
    for every ``b``; built once per prepared matrix). The staged CSR kernel splits long rows over warps and has
    each lane load 4 columns of ``B`` per instruction and sum 8 columns in registers, where the
    thread-per-element kernel sums one; float32, float16 and bfloat16. On the DL SpMM suite's 20 shapes
    (blocked-uniform, 4 x 4 blocks; H200, float32) 1.3-4.6x faster than ``config=None`` (``python -m
    experiments.bench_teaching default-check``, experiments/results/teaching.md).

    ``config=None``: thread per element of ``C``, walking the ``Kb`` block slots of its block row (float32 and
    float16).
    """
    return _as_csr_or_own(bell, b, config, BlockedELL, _launch_blocked_ell)


def _launch_blocked_ell(dev, b, c):
    """``c = A @ b`` by :func:`_blocked_ell_kernel`."""
    m, n = c.shape
    _blocked_ell_kernel[(cdiv(n, 32), cdiv(m, 8)), (32, 8)](
        dev.arrays["values"], dev.arrays["indices"], b, c, m, n, dev.host.block)
