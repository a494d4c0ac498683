"""A uniform-sparse weight on the device for the USpMM kernels: :class:`DeviceELL` (the ELL checked once,
its arrays and the layouts the kernels derive from them, each built on first use and kept), :func:`prepare`
and :func:`rhs`, the check of the dense right-hand side every USpMM launcher shares."""
from __future__ import annotations

import numpy as np

from sparsekit.gpu.spmm_bitmap import prepare as prepare_bitmap
from sparsekit.gpu.spmm_tiled import prepare as prepare_tiled
from sparsekit.arrays import DeviceMatrix, cdiv, memory_order, operand
from sparsekit.checks import BFLOAT16
from sparsekit.formats import ELL, TiledBitmap, TiledCSL

__all__ = ["DeviceELL", "prepare", "rhs", "DTYPES"]

#: Value dtypes of the USpMM kernels (bfloat16: the decode and tensor-core kernels).
DTYPES = (np.dtype(np.float32), np.dtype(np.float16), BFLOAT16)


class DeviceELL(DeviceMatrix):
    """An :class:`~sparsekit.formats.ELL` checked once and copied to the device.

    ``arrays["ellval"]``/``arrays["ellidx"]`` are the paper's flat column-major
    arrays (length ``M*K'``) on the device; :meth:`slot_ptr`, :meth:`row_major` and
    :meth:`dense_t` add what the pipelined, direct and dense-tile kernels read, built on
    first use and kept. Build it with :func:`prepare`; pass it to
    :func:`uspmm` in place of the ELL to skip the copy and the full check on
    every call (what a benchmark or a layer does).
    """

    def slot_ptr(self, kc: int):
        """``M x (ceil(K/kc)+1)`` int32 on the device: row ``r``'s entries with a
        column in chunk ``j`` (``[j*kc, (j+1)*kc)``) are slots
        ``slot_ptr[r, j] .. slot_ptr[r, j+1]-1`` (computed once per ``kc``)."""
        return self.cached(("slot_ptr", kc), lambda: self._slot_ptr(kc))

    def _slot_ptr(self, kc: int) -> np.ndarray:
        m, k = self.shape
        nchunks = cdiv(k, kc)
        chunk = self.host.indices.astype(np.int64) // kc                    # (M, K')
        flat = (np.arange(m)[:, None] * nchunks + chunk).ravel()
        counts = np.bincount(flat, minlength=m * nchunks).reshape(m, nchunks)
        ptr = np.zeros((m, nchunks + 1), dtype=np.int32)
        np.cumsum(counts, axis=1, out=ptr[:, 1:])
        return ptr

    def row_major(self):
        """``values``/``indices`` as C-ordered ``M x K'`` device arrays (for the kernels that read a row's
        entries together); copied once."""
        return self.cached("rows", lambda: (np.ascontiguousarray(self.host.values),
                                            np.ascontiguousarray(self.host.indices)))

    def tiled_rows(self):
        """The rows as a :class:`~sparsekit.formats.TiledCSL` prepared for :mod:`sparsekit.gpu.spmm_tiled`'s row
        kernel (the decode path); built once."""
        return self.cached("tiled_rows", lambda: prepare_tiled(TiledCSL.from_ell(self.host)), device=False)

    def bitmap(self):
        """The weight's entries as a :class:`~sparsekit.formats.TiledBitmap` prepared for :mod:`sparsekit.gpu.spmm_bitmap`
        (tensor cores at N = 8-64); built once."""
        return self.cached("bitmap", lambda: prepare_bitmap(TiledBitmap.from_csr(self.host)), device=False)

    def ell_rows(self):
        """The rows as padded ELL rows ``(values, indices)`` on the device, for :mod:`sparsekit.gpu.spmm_ell_rows`
        (the decode path at N = 1), each row's entries in the order its gathers favour
        (:func:`~sparsekit.reference.spmm_ell_rows.gather_order`, reordered on the device); built once."""
        from numba import cuda

        from sparsekit.gpu.spmm_ell_rows import bank_balanced
        from sparsekit.reference.spmm_ell_rows import ell_rows_from_ell

        def build():                                  # uploaded (bfloat16 as its bits), then reordered there
            values, indices = ell_rows_from_ell(self.host)
            values = values.view(np.uint16) if values.dtype == BFLOAT16 else values
            return bank_balanced(cuda.to_device(values), cuda.to_device(indices), self.shape[1])

        return self.cached("ell_rows", build, device=False)

    def compact_rows(self):
        """The rows as compact ELL rows ``(values, offsets, bases)`` on the device, for
        :mod:`sparsekit.gpu.spmm_ell_compact` (the decode path at N = 1 where rows hold more than
        :data:`sparsekit.router.COMPACT_MIN_DENSITY` of K), each chunk's slots in
        :func:`~sparsekit.reference.spmm_ell_compact.slot_order` (converted on the host); built once."""
        from numba import cuda

        from sparsekit.reference.spmm_ell_compact import from_ell_rows
        from sparsekit.reference.spmm_ell_rows import ell_rows_from_ell

        def build():                                  # bfloat16 values uploaded as their bits
            values, offsets, bases = from_ell_rows(*ell_rows_from_ell(self.host), self.shape[1])
            values = values.view(np.uint16) if values.dtype == BFLOAT16 else values
            return tuple(cuda.to_device(a) for a in (values, offsets, bases))

        return self.cached("compact_rows", build, device=False)

    def dense_t(self):
        """``A^T`` densified: ``K x M`` float32, C-ordered, on the device (for the dense-tile
        kernel, which reads the block's rows of one ``k`` together); built once."""
        def build():
            m, k = self.shape
            at = np.zeros((k, m), dtype=np.float32)
            rows = np.broadcast_to(np.arange(m)[:, None], self.host.indices.shape)
            at[self.host.indices, rows] = self.host.values
            return at
        return self.cached("dense_t", build)


def prepare(ell) -> DeviceELL:
    """Check ``ell`` fully (index range, ascending rows, finite values) and copy it to the device."""
    return DeviceELL.from_host(ell, ELL, ("ellval", "ellidx"), name="ell", dtypes=DTYPES,
                               dtype_rule="values dtype must be float32, float16 or bfloat16 for the GPU "
                                          "kernels, got {dtype}")


def rhs(b, dell: DeviceELL, name: str):
    """``b`` (K x N, A's dtype) as an Operand, plus its memory order ("C" or "F")."""
    op = operand(b, name, dtypes=(dell.dtype,), ndim=2, shape=(dell.shape[1], None), order="CF")
    return op, memory_order(op.dev)
