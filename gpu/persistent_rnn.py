"""Sparse persistent RNN ("Sparse Persistent RNNs", Zhu, Pool et al.): one launch for all timesteps.

Computes every state of ``h_t = g(U h_{t-1} + b'_t)`` (Eq. 2) for a batch and
equals :func:`reference.persistent_rnn.rnn_forward` (float32 accumulation
here, float64 there; the state is stored in the weights' dtype after every
step in both). ``U`` comes as an :class:`sparsekit.rnn_layout.RNNLayout`: the
``<index, value>`` rows padded to ``kpad`` slots, ``tpr`` threads per row.
:func:`lstm_forward` runs the LSTM of the paper's Appendix B the same way and
equals :func:`reference.persistent_rnn.lstm_forward`: a thread holds ``npt``
pairs of each of its hidden unit's four gate rows (i, f, g, o), and the thread
that owns (unit, sample) keeps the cell state ``c`` across steps (stored to
``c`` of the result each step and read back, so a relaunch can resume).

Each thread keeps its ``npt = kpad / tpr`` pairs in registers for the whole
launch (Section 3.3) and runs the paper's four stages every step:

* load: the block copies ``h_{t-1}`` (all ``H x B`` values) from global into
  shared memory, 32-bit words, each thread's words loaded back to back into
  registers first;
* operate: ``acc += value[i] * activation_in_shm[index[i]]`` over its pairs,
  for all ``B`` batch samples;
* reduce: the ``tpr`` partial sums of a row go through shared memory; one
  thread per (row, sample) adds ``b'_t``, applies ``g`` and writes ``h_t``;
* synchronize: ``sync="barrier"``: a grid-wide barrier (``cg.this_grid().sync()``,
  cooperative launch); ``sync="lamport"``: none (Section 4.2): every output
  slot of every step is preset to ``-0.0``, a result that is ``-0.0`` is
  written as ``+0.0``, and the load stage waits until each value it reads is
  no longer ``-0.0``.

Operate-stage loads (Section 4.1): ``scheme="naive"`` keeps ``h`` batch-major
in shared memory (``h[b * H + j]``) and issues one scalar load per pair and
sample; ``scheme="wide"`` keeps it batch-interleaved (``h[j * 4 + b]``) so one
vector load brings the 4 samples (``ld.shared.v4.f32`` for float32, one
8-byte load for float16; batch must be 4). The bank-aware layout
(Appendix A) is a property of the ``RNNLayout`` (``rnn_layout.bank_aware``),
not of the kernel. Table 1's configurations are therefore:

=================  ========  =======  ==================
Table 1            scheme    sync     layout
=================  ========  =======  ==================
Naive              naive     barrier  balance()
Wide memory load   wide      barrier  balance()
Bank-aware layout  wide      barrier  bank_aware(..)
Lamport            wide      lamport  bank_aware(..)
=================  ========  =======  ==================

Lamport details. The exchange buffer ``xchg`` holds ``h_t`` for every step
(``(T + 1) x H x B``, batch-interleaved), so a slot is written once and
``-0.0`` unambiguously means "not yet". Readers poll with
``ld.volatile.global.u32`` (``gpu/sync_primitives.py``) on 32-bit words (one
float32 or two float16, each half checked); every polling round reissues all
of a thread's still-pending words back to back, so a round costs one L2 round
trip, not one per word. Software pipeline (``pipeline=True``): after the load
stage of step ``t`` each thread issues the loads of its words of ``h_t`` (the
next step's input) *before* the operate stage and keeps them in registers;
only words still ``-0.0`` after the operate stage are loaded again. (The
paper double-buffers shared memory for this; here the prefetched words wait
in registers and are stored to the single shared buffer after the barrier
that ends the operate stage, which needs half the shared memory.) It is off
by default: on the H100 all blocks run in near lockstep, the prefetch almost
always sees ``-0.0`` and costs a round trip more than it saves
(``experiments/results/persistent_rnn.md``).

Spins are bounded (``spin_limit`` polls per word): on timeout the block
raises ``status[0]``, all its threads leave together, and the launcher
relaunches from the first step whose outputs are incomplete (the scheme of
Baidu's persistent-rnn), at most ``max_relaunch`` times. A launch can
therefore not hang the GPU even if blocks are not co-resident; the launcher
also refuses such launches beforehand.

Sizes: ``rows_per_block * tpr`` threads per block (a multiple of 32),
``ceil(H / rows_per_block)`` blocks, all co-resident; dynamic shared memory
``H * B * itemsize`` (rounded to 16 bytes) plus ``threads * B * 4`` bytes of
partial sums, at most 48 KB (Numba's default limit; NUMBA_NOTES.md).

Under the CUDA simulator only a single block can run a persistent kernel
(the simulator runs blocks one after another), so the launcher requires
``rows_per_block >= H`` there.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numba import config, cuda, float32, int32, typeof, uint16, uint32

from gpu.sync_primitives import ld_volatile_u32, ld_x4_f32
from sparsekit.arrays import cdiv, operand, output, result
from sparsekit.checks import check_int
from sparsekit.rnn_layout import RNNLayout, split

__all__ = ["SCHEMES", "SYNCS", "ACTIVATIONS", "CELLS", "SHARED_LIMIT", "PersistentRNN", "rnn_forward", "lstm_forward",
           "step_stride", "shared_bytes", "max_hidden"]

SCHEMES = ("naive", "wide")
SYNCS = ("barrier", "lamport")
ACTIVATIONS = ("tanh", "relu")
CELLS = ("rnn", "lstm")
#: Dynamic shared memory a Numba launch may use without the opt-in attribute (bytes).
SHARED_LIMIT = 48 * 1024
#: float16 results in [-2**-25, 0] round to -0.0; they are written as +0.0 (Lamport's sentinel).
_ZERO_BAND = {np.dtype(np.float32): 0.0, np.dtype(np.float16): 2.0 ** -25}
#: the -0.0 bit patterns of one 32-bit word
_NEG0_F32 = 0x80000000
_NEG0_F16 = 0x8000


# ---------------------------------------------------------------------------
# kernels: one per (sync, scheme, dtype, npt, tpr, batch, activation), built once
# ---------------------------------------------------------------------------

@lru_cache(maxsize=None)
def _kernel(sync: str, scheme: str, dtype: np.dtype, npt: int, tpr: int, batch: int, activation: str,
            words: int, pipeline: bool = True, cell: str = "rnn"):
    """Build the ``@cuda.jit`` kernel for one set of compile-time constants.

    ``npt``, ``tpr`` and ``batch`` size register arrays and unrolled loops, so
    they must be constants; ``words`` is the number of 32-bit words of ``h``
    each thread moves per step (``ceil(stride * itemsize / 4 / threads)``);
    ``pipeline`` (Lamport) issues the loads of the next step's input before
    the operate stage; ``cell="lstm"`` gives every thread ``npt`` pairs of
    each of the four gate rows of its hidden unit (Appendix B).
    """
    NPT, TPR, B, PF = npt, tpr, batch, words
    WIDE = scheme == "wide"
    TANH = activation == "tanh"
    F16 = dtype == np.dtype(np.float16)
    PIPELINE = pipeline
    LSTM = cell == "lstm"
    G = 4 if LSTM else 1                               # gate rows per hidden unit (LSTM: i, f, g, o)
    NW, NACC = G * NPT, G * B                          # register array sizes (constants)
    PENDING = uint32(_NEG0_F16 | (_NEG0_F16 << 16)) if dtype == np.dtype(np.float16) else uint32(_NEG0_F32)
    ZERO_BAND = float32(_ZERO_BAND[dtype])
    ITEM = dtype.itemsize
    nb_dtype = typeof(np.zeros(1, dtype)).dtype

    @cuda.jit(device=True, inline=True)
    def activate(s):
        return math.tanh(s) if TANH else max(s, float32(0.0))

    @cuda.jit(device=True, inline=True)
    def zero_band(y):
        if y <= float32(0.0) and y >= -ZERO_BAND:     # Section 4.2: never write -0.0 (nor what rounds to it)
            y = float32(0.0)
        return y

    @cuda.jit(device=True, inline=True)
    def sigmoid(x):
        return float32(1.0) / (float32(1.0) + math.exp(-x))

    @cuda.jit(device=True, inline=True)
    def load_weights(vals, idx, row, hidden, lane, active, w, j):
        """Every thread keeps its npt <index, value> pairs (per gate row) in registers for all steps."""
        for g in range(G):
            for i in range(NPT):
                if active:
                    w[g * NPT + i] = vals[g * hidden + row, lane + i * TPR]
                    j[g * NPT + i] = int32(idx[g * hidden + row, lane + i * TPR])
                else:
                    w[g * NPT + i] = 0
                    j[g * NPT + i] = 0

    @cuda.jit(device=True, inline=True)
    def issue_loads(xchg_words, base, pf, tid, nthreads, n_words):
        """Load stage, first half: this thread's words of h (global, batch-interleaved) into registers.

        The loop has a constant trip count, so the loads are issued back to back.
        """
        for k in range(PF):
            e = tid + k * nthreads
            if e < n_words:
                pf[k] = ld_volatile_u32(xchg_words, base + e)

    @cuda.jit(device=True, inline=True)
    def store_words(h_words, h_u16, pf, tid, nthreads, n_words, hidden):
        """Load stage, second half: registers to shared memory in the operate stage's layout."""
        for k in range(PF):
            e = tid + k * nthreads
            if e < n_words:
                v = pf[k]
                if WIDE:                               # interleaved h[j * 4 + b], as in global
                    h_words[e] = v
                elif F16:                              # naive, float16: two elements per word
                    for m in range(2):
                        el = 2 * e + m
                        if el < hidden * B:
                            h_u16[(el % B) * hidden + el // B] = uint16(v >> uint32(16 * m))
                else:                                  # naive, float32: batch-major h[b * H + j]
                    if e < hidden * B:
                        h_words[(e % B) * hidden + e // B] = v

    @cuda.jit(device=True, inline=True)
    def operate(h_sh, hidden, w, j, acc):
        """Operate stage: acc[b] += value[i] * activation_in_shm[index[i]] (Section 3.3)."""
        for q in range(G * B):
            acc[q] = float32(0.0)
        for g in range(G):
            for i in range(NPT):
                wi = float32(w[g * NPT + i])
                ji = j[g * NPT + i]
                if WIDE:                               # Section 4.1: one ld.shared.v4 brings 4 samples
                    a0, a1, a2, a3 = ld_x4_f32(h_sh, ji * 4)
                    acc[g * B + 0] += wi * a0
                    acc[g * B + 1] += wi * a1
                    acc[g * B + 2] += wi * a2
                    acc[g * B + 3] += wi * a3
                else:                                  # naive: one scalar load per sample
                    for b in range(B):
                        acc[g * B + b] += wi * float32(h_sh[b * hidden + ji])

    @cuda.jit(device=True, inline=True)
    def reduce_and_write(red, red_off, acc, tid, r_local, lane, row, active, t, bprime, xchg, stride, hs,
                         hidden, cs, c0):
        """Reduce stage: the row's tpr partials through shared memory, + b'_t, g, write h_t.

        LSTM: the same thread owns (unit, sample) at every step, so c_{t-1} is
        the value it stored itself (cs[t - 1], or c0), rounded to the dtype as
        the reference does.
        """
        for q in range(G * B):
            red[red_off + tid * G * B + q] = acc[q]
        cuda.syncthreads()
        if active:
            for b in range(lane, B, TPR):
                if LSTM:
                    zi = float32(bprime[t, b, row])
                    zf = float32(bprime[t, b, hidden + row])
                    zg = float32(bprime[t, b, 2 * hidden + row])
                    zo = float32(bprime[t, b, 3 * hidden + row])
                    for k in range(TPR):
                        base = red_off + (r_local * TPR + k) * G * B + b
                        zi += red[base]
                        zf += red[base + B]
                        zg += red[base + 2 * B]
                        zo += red[base + 3 * B]
                    c_prev = float32(c0[b, row]) if t == 0 else float32(cs[t - 1, b, row])
                    cs[t, b, row] = sigmoid(zf) * c_prev + sigmoid(zi) * math.tanh(zg)
                    y = zero_band(sigmoid(zo) * math.tanh(float32(cs[t, b, row])))
                else:
                    s = float32(0.0)
                    for k in range(TPR):
                        s += red[red_off + (r_local * TPR + k) * B + b]
                    y = zero_band(activate(s + float32(bprime[t, b, row])))
                xchg[(t + 1) * stride + row * B + b] = y
                hs[t, b, row] = y

    @cuda.jit(device=True, inline=True)
    def is_pending(v):
        """A 32-bit word of h still holding Lamport's -0.0 preset (either half for float16)."""
        if F16:
            return (v & uint32(0xFFFF)) == uint32(_NEG0_F16) or (v >> uint32(16)) == uint32(_NEG0_F16)
        return v == uint32(_NEG0_F32)

    def barrier_kernel(vals, idx, bprime, xchg, xchg_words, hs, cs, c0,   # arrays
                       hidden, stride, t_start, t_stop):                 # sizes
        tid = cuda.threadIdx.x
        nthreads = cuda.blockDim.x
        r_local = tid // TPR
        lane = tid % TPR
        row = cuda.blockIdx.x * (nthreads // TPR) + r_local
        active = row < hidden
        h_sh = cuda.shared.array(0, nb_dtype)            # h_{t-1}: H * B activations
        h_words = cuda.shared.array(0, uint32)           # the same memory, as words / halves
        h_u16 = cuda.shared.array(0, uint16)
        red = cuda.shared.array(0, float32)              # the same memory, partials after h
        red_off = (stride * ITEM + 15) // 16 * 4
        n_words = stride * ITEM // 4
        w = cuda.local.array(NW, nb_dtype)
        j = cuda.local.array(NW, int32)
        acc = cuda.local.array(NACC, float32)
        pf = cuda.local.array(PF, uint32)
        load_weights(vals, idx, row, hidden, lane, active, w, j)
        grid = cuda.cg.this_grid()
        for t in range(t_start, t_stop):
            issue_loads(xchg_words, t * n_words, pf, tid, nthreads, n_words)   # load: h_{t-1}
            store_words(h_words, h_u16, pf, tid, nthreads, n_words, hidden)
            cuda.syncthreads()
            operate(h_sh, hidden, w, j, acc)
            reduce_and_write(red, red_off, acc, tid, r_local, lane, row, active, t, bprime, xchg, stride, hs,
                             hidden, cs, c0)
            grid.sync()                                   # synchronize: global barrier (Section 3.2)

    def lamport_kernel(vals, idx, bprime, xchg, xchg_words, hs, cs, c0, status,   # arrays
                       hidden, stride, t_start, t_stop, spin_limit):              # sizes
        tid = cuda.threadIdx.x
        nthreads = cuda.blockDim.x
        r_local = tid // TPR
        lane = tid % TPR
        row = cuda.blockIdx.x * (nthreads // TPR) + r_local
        active = row < hidden
        h_sh = cuda.shared.array(0, nb_dtype)
        h_words = cuda.shared.array(0, uint32)           # the same memory as 32-bit words
        h_u16 = cuda.shared.array(0, uint16)
        red = cuda.shared.array(0, float32)
        abort = cuda.shared.array(1, int32)
        red_off = (stride * ITEM + 15) // 16 * 4
        n_words = stride * ITEM // 4
        w = cuda.local.array(NW, nb_dtype)
        j = cuda.local.array(NW, int32)
        acc = cuda.local.array(NACC, float32)
        pf = cuda.local.array(PF, uint32)                # this thread's words of the next input
        load_weights(vals, idx, row, hidden, lane, active, w, j)
        if tid == 0:
            abort[0] = 0
        issue_loads(xchg_words, t_start * n_words, pf, tid, nthreads, n_words)
        for t in range(t_start, t_stop):
            # load: poll until none of this thread's words is -0.0; each round reissues
            # all pending loads back to back (one L2 round trip per round), bounded
            polls = 0
            pending = True
            while pending and polls < spin_limit:
                pending = False
                for k in range(PF):
                    e = tid + k * nthreads
                    if e < n_words and is_pending(pf[k]):
                        pf[k] = ld_volatile_u32(xchg_words, t * n_words + e)
                for k in range(PF):
                    e = tid + k * nthreads
                    if e < n_words and is_pending(pf[k]):
                        pending = True
                polls += 1
            if pending:
                abort[0] = 1
            store_words(h_words, h_u16, pf, tid, nthreads, n_words, hidden)
            cuda.syncthreads()
            if abort[0] != 0:                            # timed out: leave together, host resumes
                if tid == 0:
                    cuda.atomic.max(status, 0, 1)
                return
            if PIPELINE and t + 1 < t_stop:              # software pipeline: issue h_t's loads now
                issue_loads(xchg_words, (t + 1) * n_words, pf, tid, nthreads, n_words)
            else:
                for k in range(PF):
                    pf[k] = PENDING                      # loaded in the next load stage
            operate(h_sh, hidden, w, j, acc)
            reduce_and_write(red, red_off, acc, tid, r_local, lane, row, active, t, bprime, xchg, stride, hs,
                             hidden, cs, c0)

    return cuda.jit(barrier_kernel if sync == "barrier" else lamport_kernel)


@cuda.jit
def _fill(a, value):
    """Preset a 1-D array (Lamport's -0.0 in every output slot)."""
    i = cuda.grid(1)
    if i < a.size:
        a[i] = value


@cuda.jit
def _set_h0(h0, xchg):
    """xchg[0] = h0, batch-interleaved: xchg[j * B + b] = h0[b, j]."""
    i = cuda.grid(1)
    batch, hidden = h0.shape
    if i < batch * hidden:
        xchg[i] = h0[i % batch, i // batch]


# ---------------------------------------------------------------------------
# launcher
# ---------------------------------------------------------------------------

def step_stride(hidden: int, batch: int) -> int:
    """Elements of one step's h in the exchange buffer: H * B rounded up to 4 (whole, aligned words)."""
    return cdiv(hidden * batch, 4) * 4


def shared_bytes(hidden: int, batch: int, itemsize: int, threads: int, gates: int = 1) -> int:
    """Dynamic shared memory of one block: h (16-byte aligned) plus the partial sums (per gate)."""
    return (step_stride(hidden, batch) * itemsize + 15) // 16 * 16 + threads * gates * batch * 4


def max_hidden(batch: int, itemsize: int, threads: int, limit: int = SHARED_LIMIT, gates: int = 1) -> int:
    """Largest hidden size whose activations fit ``limit`` bytes of shared memory per block."""
    return max(0, (limit - threads * gates * batch * 4 - 16) // (batch * itemsize) // 4 * 4)


@dataclass
class PersistentRNN:
    """A prepared persistent launch: weights on the device, kernel and grid chosen.

    Build once (``PersistentRNN(layout, batch=4, ...)``), call many times with
    ``(b_prime, h0, steps)`` (LSTM: ``(b_prime, h0, steps, c0)``);
    :func:`rnn_forward` and :func:`lstm_forward` do both in one call.
    ``cell="lstm"``: ``layout`` holds the ``(4H, H)`` gate rows (i, f, g, o),
    each thread holds ``npt`` pairs of each of its unit's four rows.
    """

    layout: RNNLayout
    batch: int
    scheme: str = "wide"
    sync: str = "lamport"
    activation: str = "tanh"
    rows_per_block: int | None = None
    spin_limit: int = 1 << 22
    max_relaunch: int = 8
    pipeline: bool = False
    cell: str = "rnn"

    def __post_init__(self):
        lay = self.layout
        if not isinstance(lay, RNNLayout):
            raise TypeError(f"layout: expected a sparsekit.rnn_layout.RNNLayout, got {type(lay).__name__}")
        if lay.dtype not in (np.dtype(np.float32), np.dtype(np.float16)):
            raise TypeError(f"layout: values must be float32 or float16, got {lay.dtype}")
        for name, value, allowed in (("scheme", self.scheme, SCHEMES), ("sync", self.sync, SYNCS),
                                     ("activation", self.activation, ACTIVATIONS), ("cell", self.cell, CELLS)):
            if value not in allowed:
                raise ValueError(f"{name}: expected one of {allowed}, got {value!r}")
        self.gates = 4 if self.cell == "lstm" else 1
        rows, hidden = lay.shape
        if rows != self.gates * hidden:
            want = "(4H, H) for an LSTM" if self.gates == 4 else "square (H, H)"
            raise ValueError(f"layout: a recurrent weight is {want}, got shape {lay.shape}")
        if self.cell == "lstm" and self.activation != "tanh":
            raise ValueError(f"activation: an LSTM uses sigmoid and tanh, got activation={self.activation!r}")
        self.hidden = hidden
        self.batch = check_int(self.batch, "batch", minimum=1)
        if self.scheme == "wide" and self.batch != 4:
            raise ValueError(f"batch: the wide-load scheme loads 4 samples at once and needs batch=4, "
                             f"got {self.batch} (use scheme='naive')")
        if self.sync == "lamport" and self.scheme != "wide":
            raise ValueError(f"scheme: sync='lamport' copies h to shared memory as it arrives, batch-interleaved, "
                             f"and needs scheme='wide' (Table 1 adds it on top of wide loads), got {self.scheme!r}")
        self.spin_limit = check_int(self.spin_limit, "spin_limit", minimum=1, maximum=2**31 - 1)
        self.max_relaunch = check_int(self.max_relaunch, "max_relaunch", minimum=0)
        if not isinstance(self.pipeline, bool):
            raise TypeError(f"pipeline: expected a bool, got {type(self.pipeline).__name__}")
        if self.rows_per_block is None:
            self.rows_per_block = self._default_rows_per_block(hidden, lay.tpr)
        self.split = split(hidden, lay.tpr, self.rows_per_block)
        self.smem = shared_bytes(hidden, self.batch, lay.dtype.itemsize, self.split.threads_per_block, self.gates)
        if self.smem > SHARED_LIMIT:
            raise ValueError(
                f"layout: hidden size {hidden} needs {self.smem} bytes of shared memory per block "
                f"(h for batch {self.batch} plus partial sums), over the {SHARED_LIMIT}-byte limit; the largest "
                f"that fits with {self.split.threads_per_block} threads is "
                f"{max_hidden(self.batch, lay.dtype.itemsize, self.split.threads_per_block, gates=self.gates)}")
        if config.ENABLE_CUDASIM and self.split.blocks > 1:
            raise ValueError(f"rows_per_block: the CUDA simulator runs one block at a time, so a persistent "
                             f"launch must be one block (rows_per_block >= {hidden}), got {self.split.blocks} blocks")
        self.stride = step_stride(hidden, self.batch)
        words = cdiv(self.stride * lay.dtype.itemsize // 4, self.split.threads_per_block)
        self.kernel = _kernel(self.sync, self.scheme, lay.dtype, lay.npt, lay.tpr, self.batch,
                              self.activation, words, self.pipeline, self.cell)
        self.vals = cuda.to_device(np.ascontiguousarray(lay.values))
        self.idx = cuda.to_device(np.ascontiguousarray(lay.indices))
        self._no_cell = (cuda.device_array((1, 1, 1), dtype=lay.dtype), cuda.device_array((1, 1), dtype=lay.dtype))
        self._checked = set()
        self.resources = {}          #: registers etc. of the compiled kernel (filled at the first launch)
        self.relaunches = 0          #: relaunches after spin timeouts in the last call

    @staticmethod
    def _default_rows_per_block(hidden: int, tpr: int) -> int:
        """Spread the rows over the SMs: one block per SM, threads a multiple of 32."""
        per_warp = max(1, 32 // tpr)
        if config.ENABLE_CUDASIM:
            rpb = hidden
        else:
            rpb = cdiv(hidden, cuda.get_current_device().MULTIPROCESSOR_COUNT)
        rpb = cdiv(rpb, per_warp) * per_warp
        return max(per_warp, min(rpb, 1024 // tpr // per_warp * per_warp))

    def _args(self, bprime, xchg, hs, status, t_start, t_stop, cs, c0):
        if cs is None:
            cs, c0 = self._no_cell
        head = (self.vals, self.idx, bprime, xchg, xchg.view(np.uint32), hs, cs, c0)
        if self.sync == "barrier":
            return head + (self.hidden, self.stride, t_start, t_stop)
        return head + (status, self.hidden, self.stride, t_start, t_stop, self.spin_limit)

    def check_coresident(self, args) -> None:
        """Refuse a launch whose blocks cannot all be resident at once (it would deadlock)."""
        if config.ENABLE_CUDASIM:
            return
        argtypes = tuple(typeof(a) for a in args)
        if argtypes in self._checked:
            return
        compiled = self.kernel.compile(argtypes)
        self.resources = {"registers": compiled.regs_per_thread, "local_bytes": compiled.local_mem_per_thread,
                          "max_threads_per_block": compiled.max_threads_per_block}
        fit = compiled.max_cooperative_grid_blocks(self.split.threads_per_block, self.smem)
        if self.split.blocks > fit:
            sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
            raise ValueError(
                f"layout: {self.split.blocks} blocks of {self.split.threads_per_block} threads "
                f"({self.smem} B shared, {self.layout.npt * self.gates} pairs per thread, "
                f"{compiled.regs_per_thread} registers per thread) cannot all be co-resident: "
                f"at most {fit} fit ({fit // max(sms, 1)} per SM x {sms} SMs); a persistent launch would "
                f"deadlock. Use more rows per block (larger tpr * rows_per_block) or fewer pairs per thread.")
        self._checked.add(argtypes)

    def __call__(self, b_prime, h0, steps: int, c0=None):
        """Validate, run all ``steps`` in one launch (relaunching after a spin timeout).

        Returns the ``(T, B, H)`` states; for an LSTM ``(h, c)``, both ``(T, B, H)``.
        """
        bp, h0o, c0o, steps = self._operands(b_prime, h0, steps, c0)
        shape = (steps, self.batch, self.hidden)
        hs = output(shape, self.layout.dtype, like=bp)
        cs = output(shape, self.layout.dtype, like=bp) if self.cell == "lstm" else None
        if steps > 0:
            xchg, status = self.buffers(steps)
            self.enqueue(bp.dev, h0o.dev, steps, xchg, hs, status, cs, c0o.dev if c0o else None)
            if self.sync == "lamport":
                self._resume(bp.dev, xchg, hs, status, steps, cs, c0o.dev if c0o else None)
        if self.cell == "lstm":
            return result(hs, like=bp), result(cs, like=bp)
        return result(hs, like=bp)

    def _operands(self, b_prime, h0, steps, c0):
        dt = self.layout.dtype
        steps = check_int(steps, "steps", minimum=0)
        bp = operand(b_prime, "b_prime", dtypes=(dt,), ndim=3)
        width = self.gates * self.hidden
        if bp.dev.shape[1:] != (self.batch, width) or bp.dev.shape[0] < steps:
            raise ValueError(f"b_prime: expected shape (>= {steps}, {self.batch}, {width}), got {bp.dev.shape}")
        h0o = operand(h0, "h0", dtypes=(dt,), shape=(self.batch, self.hidden))
        c0o = None
        if self.cell == "lstm":
            if c0 is None:
                raise ValueError("c0: an LSTM needs the initial cell state c0 of shape (batch, hidden)")
            c0o = operand(c0, "c0", dtypes=(dt,), shape=(self.batch, self.hidden))
        elif c0 is not None:
            raise ValueError("c0: only an LSTM (cell='lstm') takes a cell state")
        for name, x in (("b_prime", b_prime), ("h0", h0), ("c0", c0)):
            if isinstance(x, np.ndarray) and not np.isfinite(x).all():
                raise ValueError(f"{name}: must be finite, found {int((~np.isfinite(x)).sum())} NaN/Inf value(s)")
        return bp, h0o, c0o, steps

    def buffers(self, steps: int):
        """Device scratch for a run of ``steps``: the exchange buffer ``h_0..h_T`` and the status flag."""
        xchg = cuda.device_array((steps + 1) * self.stride, dtype=self.layout.dtype)
        return xchg, cuda.to_device(np.zeros(1, dtype=np.int32))

    def enqueue(self, bprime, h0, steps: int, xchg, hs, status, cs=None, c0=None) -> None:
        """Queue one run on device arrays without synchronising (what a benchmark times).

        Lamport: preset every output slot to -0.0, then launch; a spin
        timeout shows in ``status[0]`` afterwards (``__call__`` handles it).
        ``cs``/``c0``: the LSTM's cell states (output) and initial cell state.
        """
        n = self.hidden * self.batch
        if self.sync == "lamport":
            _fill[cdiv(xchg.size, 256), 256](xchg, self.layout.dtype.type(-0.0))
        _set_h0[cdiv(n, 256), 256](h0, xchg)
        args = self._args(bprime, xchg, hs, status, 0, steps, cs, c0)
        self.check_coresident(args)
        self.kernel[self.split.blocks, self.split.threads_per_block, 0, self.smem](*args)

    def _resume(self, bprime, xchg, hs, status, steps, cs=None, c0=None):
        """After a spin timeout, relaunch from the first step whose outputs are incomplete."""
        self.relaunches = 0
        neg0 = _NEG0_F32 if self.layout.dtype.itemsize == 4 else _NEG0_F16
        while int(status.copy_to_host()[0]) != 0:
            words = xchg.view(np.uint32).copy_to_host().reshape(steps + 1, -1)
            halves = words if self.layout.dtype.itemsize == 4 else np.stack([words & 0xFFFF, words >> 16], -1)
            pending = (halves == neg0).reshape(steps + 1, -1).any(axis=1)
            if not pending.any():                                # finished after all
                return
            if self.relaunches == self.max_relaunch:
                raise RuntimeError(f"persistent RNN: spins still timing out after {self.max_relaunch} relaunches "
                                   f"(spin_limit={self.spin_limit}); blocks are not making progress")
            self.relaunches += 1
            first = int(np.argmax(pending))                      # first step with a missing value (>= 1)
            status.copy_to_device(np.zeros(1, dtype=np.int32))
            args = self._args(bprime, xchg, hs, status, first - 1, steps, cs, c0)
            self.kernel[self.split.blocks, self.split.threads_per_block, 0, self.smem](*args)


def rnn_forward(layout: RNNLayout, b_prime, h0, steps: int, activation: str = "tanh", *,
                scheme: str = "wide", sync: str = "lamport", rows_per_block: int | None = None,
                spin_limit: int = 1 << 22):
    """Every state of ``h_t = g(U h_{t-1} + b'_t)``, ``(steps, B, H)``, in one persistent launch.

    Equals :func:`reference.persistent_rnn.rnn_forward` called with the same
    arguments (``layout`` is accepted there too). ``b_prime`` ``(T, B, H)`` and
    ``h0`` ``(B, H)`` have the layout's dtype (float32 or float16); NumPy
    inputs give a NumPy result, device arrays (Numba, CuPy, PyTorch) a device
    result of the same kind.
    """
    batch = np.shape(h0)[0] if len(np.shape(h0)) == 2 else 0
    plan = PersistentRNN(layout, batch, scheme=scheme, sync=sync, activation=activation,
                         rows_per_block=rows_per_block, spin_limit=spin_limit)
    return plan(b_prime, h0, steps)


def lstm_forward(layout: RNNLayout, b_prime, h0, c0, steps: int, *, scheme: str = "wide",
                 sync: str = "lamport", rows_per_block: int | None = None, spin_limit: int = 1 << 22):
    """Every ``(h_t, c_t)`` of an LSTM in one persistent launch; equals :func:`reference.persistent_rnn.lstm_forward`.

    ``layout``: the ``(4H, H)`` recurrent weight (gate rows i, f, g, o) from
    :func:`sparsekit.rnn_layout.balance` (and optionally ``bank_aware(..., gates=4)``);
    ``b_prime`` ``(T, B, 4H)``; ``h0``, ``c0`` ``(B, H)``. Returns ``(h, c)``.
    """
    batch = np.shape(h0)[0] if len(np.shape(h0)) == 2 else 0
    plan = PersistentRNN(layout, batch, scheme=scheme, sync=sync, rows_per_block=rows_per_block,
                         spin_limit=spin_limit, cell="lstm")
    return plan(b_prime, h0, steps, c0)
