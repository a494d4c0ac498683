"""SpMM baselines on the GPU: ``C = A @ B`` with ``A`` in CSR, COO or blocked-ELL.

Equal :func:`reference.spmm.spmm_csr`, :func:`reference.spmm.spmm_coo` and
:func:`reference.spmm.spmm_blocked_ell` within float32 accumulation (same
names, same arguments, plus tunables). They are the baselines of the USpMM
figures and the teaching track's examples of load balance:

``spmm_csr(csr, b, swizzle=False)``
    one warp per row (lanes across the columns of ``B``, so loads of ``B`` and
    stores of ``C`` are coalesced); a long row keeps its warp busy while short
    rows' warps idle. ``swizzle=True`` launches the rows in order of
    decreasing length (Sputnik's row swizzle: ``row = perm[warp]``), so the
    warps of one block, and blocks launched together, get similar work.
``spmm_coo(coo, b)``
    one thread per (stored entry, column of ``B``), adding into ``C`` with
    float32 atomics: perfectly balanced, but the order of the additions (and
    so the last bits of the result) changes from run to run.
``spmm_blocked_ell(bell, b)``
    one thread per element of ``C``; it walks the ``Kb`` block slots of its
    block row, the same count for every row (blocked-uniform sparsity).

``b`` is ``K x N`` C-ordered (row-major), of ``A``'s dtype, float32 or float16;
other layouts are refused, nothing is copied or cast. ``C`` is ``M x N``,
C-ordered, ``b``'s dtype and array kind. Accumulation is float32.
"""
from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32

from sparsekit.arrays import DeviceMatrix, cdiv, operand, output, result
from sparsekit.balance import row_swizzle
from sparsekit.checks import check_int
from sparsekit.formats import COO, CSR, BlockedELL

__all__ = ["DeviceSparse", "prepare", "spmm_csr", "spmm_coo", "spmm_blocked_ell"]

WARP_SIZE = 32
_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


# ---------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------

@functools.cache
def _csr_kernel(cols_per_lane: int):
    """Warp per row. Arrays ``indptr``, ``indices``, ``data``, ``perm`` (launch
    order of the rows), ``b`` (K x N), ``c`` (M x N, out); sizes ``m``, ``n``.
    Grid: (warps over rows, tiles of ``32 * cols_per_lane`` columns)."""
    nt = WARP_SIZE * cols_per_lane

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
            a = float32(data[p])                         # one entry, broadcast to the warp
            brow = indices[p]
            for j in range(cols_per_lane):
                col = col0 + lane + j * WARP_SIZE        # consecutive lanes, consecutive columns
                if col < n:
                    acc[j] += a * float32(b[brow, col])
        for j in range(cols_per_lane):
            col = col0 + lane + j * WARP_SIZE
            if col < n:
                c[row, col] = acc[j]

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


_FIELDS = {CSR: ("indptr", "indices", "data"), COO: ("row", "col", "data"), BlockedELL: ("values", "indices")}


def prepare(a, cls) -> DeviceSparse:
    """Check ``a`` (an instance of ``cls``) fully and copy its arrays to the device."""
    return DeviceSparse.from_host(a, cls, _FIELDS[cls], name="a", dtypes=_DTYPES,
                                  dtype_rule="values dtype must be float32 or float16 for the GPU kernels, "
                                             "got {dtype}")


def _rhs(b, dev: DeviceSparse):
    return operand(b, "b", dtypes=(dev.dtype,), ndim=2, shape=(dev.shape[1], None), order="C")


def spmm_csr(csr, b, *, swizzle: bool = False, cols_per_lane: int = 1, warps_per_block: int = 4):
    """``C = A @ b`` for ``A`` in CSR: warp per row, rows in their order or by
    decreasing length (``swizzle``). Tunables: ``cols_per_lane`` (columns of
    ``B`` per lane: the warp covers ``32 * cols_per_lane``), ``warps_per_block``."""
    dev = prepare(csr, CSR)
    cols_per_lane = check_int(cols_per_lane, "cols_per_lane", minimum=1, maximum=8)
    warps_per_block = check_int(warps_per_block, "warps_per_block", minimum=1, maximum=32)
    bop = _rhs(b, dev)
    m, n = dev.shape[0], bop.dev.shape[1]
    c = output((m, n), dev.dtype, like=bop)
    if m and n:
        perm = dev.swizzle() if swizzle else dev.identity()
        grid = (cdiv(m, warps_per_block), cdiv(n, WARP_SIZE * cols_per_lane))
        _csr_kernel(cols_per_lane)[grid, WARP_SIZE * warps_per_block](
            dev.arrays["indptr"], dev.arrays["indices"], dev.arrays["data"], perm, bop.dev, c, m, n)
    return result(c, like=bop)


def spmm_coo(coo, b):
    """``C = A @ b`` for ``A`` in COO: thread per (entry, column), float32 atomics
    into a zeroed float32 ``C``, then one rounding to ``b``'s dtype. Not
    bit-reproducible (the order of the atomic additions varies)."""
    dev = prepare(coo, COO)
    bop = _rhs(b, dev)
    m, n = dev.shape[0], bop.dev.shape[1]
    c = output((m, n), dev.dtype, like=bop)
    if m and n:
        per_element = (cdiv(n, 32), cdiv(m, 8)), (32, 8)     # (grid, block)
        acc = c if dev.dtype == np.float32 else cuda.device_array((m, n), np.float32)
        _zero_kernel[per_element](acc)
        nnz = dev.host.nnz
        if nnz:
            _coo_kernel[(cdiv(n, 32), cdiv(nnz, 8)), (32, 8)](
                dev.arrays["row"], dev.arrays["col"], dev.arrays["data"], bop.dev, acc, nnz, n)
        if acc is not c:
            _cast_kernel[per_element](acc, c)
    return result(c, like=bop)


def spmm_blocked_ell(bell, b):
    """``C = A @ b`` for ``A`` in blocked-ELL: thread per element of ``C``,
    walking the ``Kb`` block slots of its block row."""
    dev = prepare(bell, BlockedELL)
    bop = _rhs(b, dev)
    m, n = dev.shape[0], bop.dev.shape[1]
    c = output((m, n), dev.dtype, like=bop)
    if m and n:
        _blocked_ell_kernel[(cdiv(n, 32), cdiv(m, 8)), (32, 8)](
            dev.arrays["values"], dev.arrays["indices"], bop.dev, c, m, n, dev.host.block)
    return result(c, like=bop)
