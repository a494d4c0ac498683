"""On-chip weight layout of a sparse persistent RNN ("Sparse Persistent RNNs", Sections 3.3-4.1, Appendix A).

The recurrent weight ``U`` (``H x H``) is kept as ``<index, value>`` pairs,
every row padded with ``<index, 0>`` pairs to the same number of slots
``kpad`` (Section 4: padding keeps all threads equally busy; it "wastes
roughly 20%" for a magnitude-pruned, unbalanced mask and nothing for a
row-balanced one). ``tpr`` threads share a row: thread ``lane`` of row ``r``
holds the slots ``lane, lane + tpr, lane + 2 tpr, ...`` (``npt = kpad / tpr``
pairs) and, at operate step ``i``, reads ``h[index]`` for its slot
``lane + i * tpr`` from shared memory (the paper's ``acc += value[i] *
activation_in_shm[index[i]]``). Rows are laid out ``rows_per_block`` per
thread block, so row ``r``'s thread ``lane`` is thread ``(r % rows_per_block)
* tpr + lane`` of block ``r // rows_per_block``.

What this module provides:

* :func:`balance`: the padded ``<index, value>`` rows (:class:`RNNLayout`) of a
  dense weight and mask, with the padding waste;
* :func:`split`: the split of rows over threads, warps and blocks;
* :func:`bank_aware`: Appendix A's greedy per-row reordering (Algorithm 1);
* :func:`pack_indices16` / :func:`unpack_indices16`: two 16-bit indices per
  32-bit register (the paper's Section 6 future work), and
  :func:`thread_packed_indices`: the same in the order the kernels load them
  (a thread's pairs ``2m`` and ``2m + 1`` in one word);
* :func:`bank_conflicts`: an analyzer replaying each warp's shared-memory
  loads of the operate stage for a layout, batch and load width, reporting
  the wavefronts and the conflict penalty; :func:`wavefronts` is its core for
  one request (hand-made access patterns in the tests).

The shared-memory model (Volta and later, 32 banks of 4 bytes): a warp's
request of ``w``-byte loads per thread is served in ``max(1, 32 w / 128)``
phases (all 32 lanes for ``w <= 4``, half-warps for 8-byte loads,
quarter-warps for 16-byte loads); in each phase a bank serves one distinct
4-byte word per wavefront, and lanes reading the same word are served
together (broadcast). The phase count is the request's *ideal* wavefronts;
the **penalty** is ``wavefronts / ideal - 1``, the extra shared-memory time
due to conflicts (0 = conflict-free, 1.0 = twice as long).

>>> import numpy as np
>>> u = np.array([[0, 2, 0, 3], [1, 0, 0, 0]], dtype=np.float32)
>>> lay = balance(u, tpr=1)
>>> lay
<RNNLayout shape=(2, 4) kpad=2 tpr=1 nnz=3 waste=25.0% dtype=float32 index=int16>
>>> lay.indices.tolist(), lay.values.tolist()
([[1, 3], [0, 0]], [[2.0, 3.0], [1.0, 0.0]])
>>> bool((lay.to_dense() == u).all())
True
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from sparsekit.checks import FLOAT_DTYPES, check_array, check_indices, check_int

__all__ = ["BANKS", "RNNLayout", "check_layout", "Split", "ConflictReport", "balance", "split", "bank_aware",
           "pack_indices16", "unpack_indices16", "thread_packed_indices", "wavefronts", "bank_conflicts"]

#: Shared-memory banks of 4 bytes each (every NVIDIA GPU since Kepler's 4-byte mode).
BANKS = 32
_WORD = 4
_WARP = 32


def _check_tpr(tpr) -> int:
    tpr = check_int(tpr, "tpr", minimum=1, maximum=1024)
    if tpr & (tpr - 1):
        raise ValueError(f"tpr: must be a power of two (so a row's threads tile warps), got {tpr}")
    return tpr


@dataclass(frozen=True)
class RNNLayout:
    """Padded ``<index, value>`` rows in slot order (see the module docstring).

    values : (rows, kpad) float array, zero in padding slots
    indices : (rows, kpad) int16 or int32 column indices (padding slots hold any valid column)
    shape : (rows, cols) of the weight
    tpr : threads per row; ``kpad`` is a multiple of it
    nnz : entries the mask kept (padding excluded)
    bank_aware : whether :func:`bank_aware` produced the slot order
    """

    values: np.ndarray
    indices: np.ndarray
    shape: tuple
    tpr: int
    nnz: int
    bank_aware: bool = False

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Check every rule a kernel relies on (a full scan: indices in range, finite values); called at
        construction and by launchers before the arrays go to the device, as NumPy arrays can change in between.
        Raises ``TypeError``/``ValueError`` naming the field; never modifies anything."""
        if not (isinstance(self.shape, tuple) and len(self.shape) == 2):
            raise ValueError(f"shape: expected a (rows, cols) tuple, got {self.shape!r}")
        rows = check_int(self.shape[0], "shape[0]", minimum=0)
        cols = check_int(self.shape[1], "shape[1]", minimum=0)
        _check_tpr(self.tpr)
        check_array(self.values, "values", ndim=2, dtypes=FLOAT_DTYPES, finite=True)
        check_array(self.indices, "indices", ndim=2, dtypes=(np.int16, np.int32), shape=self.values.shape)
        if self.values.shape[0] != rows:
            raise ValueError(f"values: should have {rows} rows (shape[0]), got {self.values.shape[0]}")
        if self.kpad % self.tpr:
            raise ValueError(f"values: kpad={self.kpad} should be a multiple of tpr={self.tpr}")
        check_indices(self.indices, "indices", cols)
        check_int(self.nnz, "nnz", minimum=0, maximum=self.values.size)

    @property
    def kpad(self) -> int:
        """Slots per row (real pairs plus ``<index, 0>`` padding)."""
        return self.values.shape[1]

    @property
    def npt(self) -> int:
        """Pairs held by each thread (``kpad / tpr``)."""
        return self.kpad // self.tpr

    @property
    def dtype(self) -> np.dtype:
        return self.values.dtype

    @property
    def waste(self) -> float:
        """Fraction of slots holding padding (the paper's "roughly 20%" for unbalanced masks)."""
        slots = self.values.size
        return 1.0 - self.nnz / slots if slots else 0.0

    def to_dense(self) -> np.ndarray:
        """The weight ``U`` (padding adds zeros, so it drops out)."""
        dense = np.zeros(self.shape, dtype=self.values.dtype)
        rows = np.repeat(np.arange(self.shape[0]), self.kpad)
        np.add.at(dense, (rows, self.indices.ravel().astype(np.int64)), self.values.ravel())
        return dense

    def thread_slots(self, lane: int) -> np.ndarray:
        """Slots held by thread ``lane`` of every row: ``lane, lane + tpr, ...``."""
        return np.arange(lane, self.kpad, self.tpr)

    def __repr__(self) -> str:
        return (f"<RNNLayout shape={tuple(self.shape)} kpad={self.kpad} tpr={self.tpr} nnz={self.nnz} "
                f"waste={100 * self.waste:.1f}% dtype={self.values.dtype} index={self.indices.dtype}"
                f"{' bank-aware' if self.bank_aware else ''}>")


def check_layout(layout) -> "RNNLayout":
    """``layout`` is an :class:`RNNLayout` whose arrays still pass :meth:`RNNLayout.validate`."""
    if not isinstance(layout, RNNLayout):
        raise TypeError(f"layout: expected a sparsekit.rnn_layout.RNNLayout, got {type(layout).__name__}")
    layout.validate()
    return layout


def balance(u: np.ndarray, mask: np.ndarray | None = None, *, tpr: int = 32,
            index_dtype=np.int16) -> RNNLayout:
    """Pad every row's ``<index, value>`` pairs with ``<0, 0>`` to one length (Section 4).

    ``mask`` (bool, the shape of ``u``) selects the kept entries (default ``u != 0``);
    a kept zero is stored. ``kpad`` is the longest row rounded up to a multiple
    of ``tpr``. Pairs keep ascending column order, padding comes last.
    """
    u = check_array(u, "u", ndim=2, finite=True)
    tpr = _check_tpr(tpr)
    if mask is None:
        mask = u != 0
    mask = check_array(mask, "mask", dtypes=(np.bool_,), shape=u.shape)
    index_dtype = np.dtype(index_dtype)
    if index_dtype not in (np.dtype(np.int16), np.dtype(np.int32)):
        raise TypeError(f"index_dtype: expected int16 or int32, got {index_dtype}")
    rows, cols = u.shape
    if cols - 1 > np.iinfo(index_dtype).max:
        raise ValueError(f"index_dtype: {index_dtype} cannot hold column {cols - 1}; use int32")
    counts = mask.sum(axis=1)
    kmax = int(counts.max()) if rows else 0
    kpad = -(-kmax // tpr) * tpr
    values = np.zeros((rows, kpad), dtype=u.dtype)
    indices = np.zeros((rows, kpad), dtype=index_dtype)
    for r in range(rows):
        cols_r = np.flatnonzero(mask[r])
        values[r, :cols_r.size] = u[r, cols_r]
        indices[r, :cols_r.size] = cols_r
    return RNNLayout(values, indices, (rows, cols), tpr, int(counts.sum()))


@dataclass(frozen=True)
class Split:
    """Rows over threads, warps and blocks (Section 3.3: blocks depend on size and sparsity)."""

    rows: int
    tpr: int                #: threads per row
    rows_per_block: int
    threads_per_block: int  #: rows_per_block * tpr, a multiple of 32
    blocks: int
    warps_per_block: int


def split(rows: int, tpr: int, rows_per_block: int) -> Split:
    """Lay ``rows`` out ``rows_per_block`` per block, ``tpr`` threads each.

    ``rows_per_block * tpr`` must be a multiple of the warp size (32) so that a
    row's threads never straddle two blocks' warps and the bank-aware
    rotation of :func:`bank_aware` holds.
    """
    rows = check_int(rows, "rows", minimum=1)
    tpr = _check_tpr(tpr)
    rows_per_block = check_int(rows_per_block, "rows_per_block", minimum=1)
    threads = rows_per_block * tpr
    if threads % _WARP or threads > 1024:
        raise ValueError(f"rows_per_block * tpr: must be a multiple of 32 and at most 1024, "
                         f"got {rows_per_block} * {tpr} = {threads}")
    return Split(rows, tpr, rows_per_block, threads, -(-rows // rows_per_block), threads // _WARP)


def bank_aware(layout: RNNLayout, *, banks: int = BANKS, width: int = 4, gates: int = 1) -> RNNLayout:
    """Appendix A, Algorithm 1: reorder each row so a warp's loads hit distinct banks.

    Slot ``p`` of row ``r`` is read by warp lane ``(r * tpr + p) % 32`` at the
    same step as slots ``p' = p (mod tpr)`` of the other rows of its warp, so
    the conflict-free order gives slot ``p`` an index in bank
    ``(rot + p) % 32`` with ``rot = (r * tpr) % 32`` (the paper's
    ``Color(0..31)`` initialised to a rotation by the row; with ``tpr = 32``
    every rotation is equivalent). Per pair, in ascending column order:
    take the next free slot of the index's bank; if that bank's slots are used
    up, try the next bank (``index_t++`` in the listing). Padding fills the
    remaining slots with a column in the slot's own bank (0 if the weight has
    fewer columns than that bank). The result is a permutation of each row's
    pairs plus padding: ``to_dense()`` is unchanged.

    ``width`` (bytes per lane of the operate stage's load; default 4, the
    listing as printed) extends the listing to wide loads: a 16-byte load is
    served by quarter-warps (8 lanes), so two indices only conflict when they
    agree modulo 8, and a pair whose bank is full is first moved to the free
    banks ``bank + 8, bank + 16, ...`` that the same 8 lanes cannot collide in,
    before ``index_t++``. With ``width <= 4`` the probe order is the listing's.

    ``gates`` (4 for an LSTM's ``(4H, H)`` weight): row ``r`` belongs to hidden
    unit ``r % H``, whose threads sit at lane offset ``(r % H) * tpr``.

    Deviation from the listing: it tests ``Color(bank) > N``; with 0-based
    slots the bank is full at ``Color(bank) >= N``, which is what this does.
    """
    check_layout(layout)
    banks = check_int(banks, "banks", minimum=1)
    width = check_int(width, "width", minimum=1, maximum=16)
    group = banks if width <= _WORD else (128 // width) * banks // _WARP   # lanes served per phase
    gates = check_int(gates, "gates", minimum=1)
    rows, cols = layout.shape
    if rows % gates:
        raise ValueError(f"gates: the layout's {rows} rows are not {gates} gate blocks")
    units = rows // gates
    n = layout.kpad
    values = np.zeros_like(layout.values)
    indices = np.zeros_like(layout.indices)
    pad = layout.values == 0
    for r in range(rows):
        rot = ((r % units) * layout.tpr) % banks
        used = np.zeros(n, dtype=bool)
        # real pairs first; a stored explicit zero is a real pair too, so only trailing padding is skipped
        real = n - _trailing_padding(pad[r], layout.indices[r])
        color = [(bank - rot) % banks for bank in range(banks)]     # Color(bank): the first slot of that bank
        for k in range(real):
            idx, val = layout.indices[r, k], layout.values[r, k]
            index_t = int(idx)
            bank = index_t % banks                                   # find its bank
            probe = 0
            while color[bank] >= n:                                  # Color(bank) is occupied:
                probe += 1                                           #   use an unfilled Color,
                bank = (index_t + (probe % (banks // group)) * group     # same-phase banks first
                        + probe // (banks // group)) % banks
            values[r, color[bank]] = val                             # Row_aware(Color(bank)) = <index, value>
            indices[r, color[bank]] = idx
            used[color[bank]] = True
            color[bank] += banks                                     # Color(bank)'s next location
        for p in np.flatnonzero(~used):
            want = (rot + p) % banks
            indices[r, p] = want if want < cols else 0
    return replace(layout, values=values, indices=indices, bank_aware=True)


def _trailing_padding(is_zero: np.ndarray, idx: np.ndarray) -> int:
    """Number of trailing ``<0, 0>`` slots :func:`balance` appended to a row."""
    k = 0
    for z, i in zip(is_zero[::-1], idx[::-1]):
        if not (z and i == 0):
            break
        k += 1
    return k


def pack_indices16(indices: np.ndarray) -> np.ndarray:
    """Two 16-bit column indices per 32-bit word along the last axis (Section 6).

    Word ``j`` holds ``indices[..., 2j]`` in its low half and ``indices[..., 2j + 1]``
    in its high half; the last axis must have even length and indices must lie in
    [0, 65535].
    """
    idx = check_array(indices, "indices", dtypes=(np.int16, np.int32, np.int64, np.uint16, np.uint32))
    if idx.shape[-1] % 2:
        raise ValueError(f"indices: last axis must have even length to pack pairs, got {idx.shape[-1]}")
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) > 0xFFFF):
        raise ValueError(f"indices: must lie in [0, 65535] to fit 16 bits, found "
                         f"{int(idx.min()) if int(idx.min()) < 0 else int(idx.max())}")
    wide = idx.astype(np.uint32)
    return wide[..., 0::2] | (wide[..., 1::2] << np.uint32(16))


def unpack_indices16(packed: np.ndarray) -> np.ndarray:
    """Inverse of :func:`pack_indices16` (int32 indices)."""
    packed = check_array(packed, "packed", dtypes=(np.uint32,))
    out = np.empty(packed.shape[:-1] + (2 * packed.shape[-1],), dtype=np.int32)
    out[..., 0::2] = packed & np.uint32(0xFFFF)
    out[..., 1::2] = packed >> np.uint32(16)
    return out


def thread_packed_indices(layout: RNNLayout) -> np.ndarray:
    """The layout's indices packed two per uint32 in the order a thread holds its pairs.

    Thread ``lane`` of a row holds slots ``lane + i * tpr`` (``i < npt``); word
    ``lane + m * tpr`` of the result's row packs its pairs ``i = 2m`` (low
    half) and ``i = 2m + 1`` (high half, 0 when ``npt`` is odd). Shape
    ``(rows, ceil(npt / 2) * tpr)``.

    >>> lay = balance(np.arange(1, 9, dtype=np.float32).reshape(1, 8), tpr=2)
    >>> [hex(w) for w in thread_packed_indices(lay)[0]]
    ['0x20000', '0x30001', '0x60004', '0x70005']
    """
    check_layout(layout)
    rows, tpr, npt = layout.shape[0], layout.tpr, layout.npt
    per_thread = layout.indices.reshape(rows, npt, tpr)                  # [row, i, lane]
    if npt % 2:
        per_thread = np.concatenate([per_thread, np.zeros((rows, 1, tpr), per_thread.dtype)], axis=1)
    pairs = np.moveaxis(per_thread.reshape(rows, -1, 2, tpr), 2, -1)     # [row, m, lane, (2m, 2m + 1)]
    return np.ascontiguousarray(pack_indices16(pairs)[..., 0].reshape(rows, -1))


def wavefronts(byte_addresses, width: int) -> tuple[int, int]:
    """Wavefronts one warp request needs, and its ideal count.

    ``byte_addresses``: the start byte address of each active lane's load (at
    most 32, lane order; inactive lanes left out or given as -1), ``width``:
    bytes per lane (1, 2, 4, 8 or 16), loads aligned to their width.
    """
    width = check_int(width, "width", minimum=1, maximum=16)
    if width not in (1, 2, 4, 8, 16):
        raise ValueError(f"width: must be 1, 2, 4, 8 or 16 bytes, got {width}")
    addr = np.asarray(byte_addresses, dtype=np.int64)
    if addr.size > _WARP:
        raise ValueError(f"byte_addresses: a warp has at most 32 lanes, got {addr.size}")
    if np.any(addr[addr >= 0] % width):
        raise ValueError(f"byte_addresses: must be aligned to width={width}")
    lanes_per_phase = _WARP if width <= _WORD else 128 // width
    phases = _WARP // lanes_per_phase
    total = 0
    for ph in range(phases):
        a = addr[ph * lanes_per_phase:(ph + 1) * lanes_per_phase]
        a = a[a >= 0]
        if a.size == 0:
            continue
        words = np.unique((a[:, None] + np.arange(0, max(width, _WORD), _WORD)[None, :]) // _WORD)
        total += int(np.bincount(words % BANKS, minlength=BANKS).max())
    return total, phases


@dataclass(frozen=True)
class ConflictReport:
    """What :func:`bank_conflicts` found for one layout and load scheme."""

    scheme: str
    requests: int            #: warp-level shared load instructions of the operate stage
    wavefronts: int
    ideal: int
    #: extra wavefronts over the ideal ones, per request
    extra_per_request: float
    #: wavefronts / ideal - 1: extra shared-memory time due to bank conflicts
    penalty: float


def bank_conflicts(layout: RNNLayout, *, batch: int, scheme: str, rows_per_block: int,
                   itemsize: int = 4) -> ConflictReport:
    """Replay the operate stage's shared-memory loads of every warp for one timestep.

    scheme ``"naive"``: ``h`` batch-major in shared memory (``h[b * H + j]``),
    one scalar load per pair and batch sample; ``"wide"``: ``h`` batch-
    interleaved (``h[j * batch + b]``), one ``batch * itemsize``-byte load per
    pair (``ld.shared.v4`` for 4 float32, 8 bytes for 4 float16).
    ``itemsize``: bytes per activation (4 float32, 2 float16).
    """
    check_layout(layout)
    batch = check_int(batch, "batch", minimum=1)
    itemsize = check_int(itemsize, "itemsize", minimum=2, maximum=4)
    if scheme not in ("naive", "wide"):
        raise ValueError(f"scheme: expected 'naive' or 'wide', got {scheme!r}")
    width = batch * itemsize if scheme == "wide" else itemsize
    if scheme == "wide" and width not in (4, 8, 16):
        raise ValueError(f"batch: a wide load of batch * itemsize = {width} bytes is not 4, 8 or 16")
    sp = split(layout.shape[0], layout.tpr, rows_per_block)
    rows, hidden = layout.shape[0], layout.shape[1]
    tpr = layout.tpr
    total = ideal = requests = 0
    # global thread id of (row, lane) -> warps; inactive lanes (rows past the end) are -1
    n_threads = sp.blocks * sp.threads_per_block
    row_of = np.arange(n_threads) // tpr
    lane_of = np.arange(n_threads) % tpr
    active = row_of < rows
    for i in range(layout.npt):
        slot = lane_of + i * tpr
        idx = np.full(n_threads, -1, dtype=np.int64)
        idx[active] = layout.indices[row_of[active], slot[active]]
        for w in range(n_threads // _WARP):
            j = idx[w * _WARP:(w + 1) * _WARP]
            on = j >= 0
            if not on.any():
                continue
            loads = range(batch) if scheme == "naive" else (None,)
            for b in loads:
                if scheme == "naive":
                    addr = np.where(on, (b * hidden + j) * itemsize, -1)
                else:
                    addr = np.where(on, j * width, -1)
                wf, ph = wavefronts(addr, width)
                total += wf
                ideal += ph
                requests += 1
    extra = total - ideal
    return ConflictReport(scheme, requests, total, ideal,
                          extra / requests if requests else 0.0,
                          extra / ideal if ideal else 0.0)
