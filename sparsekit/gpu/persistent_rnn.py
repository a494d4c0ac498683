"""Sparse persistent RNN ("Sparse Persistent RNNs", Zhu, Pool et al.): one launch for all timesteps.

Computes every state of ``h_t = g(U h_{t-1} + b'_t)`` (Eq. 2) for a batch and
equals :func:`sparsekit.reference.persistent_rnn.rnn_forward` (float32 accumulation
here, float64 there; the state is stored in the weights' dtype after every
step in both). ``U`` comes as an :class:`sparsekit.rnn_layout.RNNLayout`: the
``<index, value>`` rows padded to ``kpad`` slots, ``tpr`` threads per row.
:func:`lstm_forward` runs the LSTM of the paper's Appendix B the same way and
equals :func:`sparsekit.reference.persistent_rnn.lstm_forward`: a thread holds ``npt``
pairs of each of its hidden unit's four gate rows (i, f, g, o), and the thread
that owns (unit, sample) keeps the cell state ``c`` in a register across
steps (and stores it to ``c`` of the result each step, so a relaunch can
resume from there).

Each thread keeps its ``npt = kpad / tpr`` pairs in registers for the whole
launch (Section 3.3) and runs the paper's four stages every step:

* load: the block copies ``h_{t-1}`` (all ``H x B`` values) from global into
  shared memory, 32-bit words, each thread's words loaded back to back into
  registers first (``chunk`` words at a time with ``chunk > 0``, which large
  layers need to fit in registers); ``b'_t`` is loaded at the start of the
  step so its latency hides behind the exchange;
* operate: ``acc += value[i] * activation_in_shm[index[i]]`` over its pairs,
  for all ``B`` batch samples;
* reduce: the ``tpr`` partial sums of a row go through shared memory; one
  thread per (row, sample) adds ``b'_t``, applies ``g`` and writes ``h_t``;
* synchronize: ``sync="barrier"``: a grid-wide barrier, ``grid_sync="atomic"``
  (default) an inlined one (block barrier, one thread arrives on a counter and
  waits for the round, block barrier) or ``grid_sync="cg"``
  (``cg.this_grid().sync()``, a call into cudadevrt whose call ABI pushed the
  kernels to 255 registers and a stack); ``sync="lamport"``: none (Section 4.2): every output
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
``ld.relaxed.gpu.global.u32`` (default, ``load="relaxed"``) or
``ld.volatile.global.u32`` (``sparsekit/gpu/sync_primitives.py``) on 32-bit words (one
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
``H * B * itemsize`` (rounded to 16 bytes; twice with ``double_buffer``) plus
``threads * B * 4`` bytes of partial sums. Above 48 KB (Numba's default
limit) the launcher sets ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``
on the compiled kernel (docs/numba_notes.md), up to the device's opt-in maximum
(227 KB on the H100). ``index16=True`` keeps the column indices packed two
per register (the paper's future work), unpacked by a ``bfe`` inside the
loop.

What the step time is made of (H100, layer 1792, float16, batch 4; clock64
traces, ``trace=True``, which itself adds about 0.9 us per step): the
exchange, not the math. Lamport (2.48 us traced, 1.60-1.62 untraced with
launch bounds): 1.03 us until the 16 words of ``h_{t-1}`` each thread loads
are in registers (thread 0 needs one poll round on average), 0.27 us copying
them to shared memory and the block barrier, 0.38 us operate, 0.41 us reduce
and write. Launched on an exchange buffer that already holds every step (no
block waits for another) it still takes 1.56 us/step: the waiting costs
0.05 us, the loads' round trip and the block's own stages the rest. Grid
barrier, wide loads: 16 scalar loads and stores of h per thread after the
barrier made the wide kernels slower than the naive one (4.30 against 3.60
us/step); ``vector=True`` (4 of each) gives 2.45 (bank-aware 2.35)
(``experiments/results/persistent_rnn.md``).

One more Lamport option (correct and sanitizer-clean on the H100;
``experiments/results/persistent_rnn.md``):

* ``fold_h0=True``: the kernel writes h0 into slot 0 (a run is the preset and
  the kernel): the fixed cost per launch falls from 9.1-9.7 to 7.3-7.5 us,
  the step stays (1.600-1.603 against 1.609-1.613 us/step at 1792); part of
  Table 1's Lamport row.

The issue-first poll (``experiments/results/persistent_rnn.md``): the load
stage's time was mostly the code of ``poll="batch"``: ptxas computes each
load's address behind that word's pending check (~18 instructions per
load, ~290 before a thread's 16th load leaves, in the SASS).

* ``poll="issue"``: all of a thread's loads of h are issued at once from one
  pointer at constant offsets, then checked (float16: a has-zero-half test
  OR-ed over the words); pending words are reloaded the same way. The block's
  own path (no waiting) falls from 1.57 to 1.20 us/step at 1792, but issued
  right after the block's own write, most first loads reach L2 before the
  other blocks' writes and need another round trip: ``issue_delay`` cycles
  of spinning first (300 on the H100) avoid that: 1.375 us/step at 1792 and
  1.362 at 1152 (Table 1's Lamport row; the library default stays
  ``"batch"``: the delay is tuned in clock cycles of one device).
* ``preset="vector"``: measured, not adopted as the default (saves ~0.01
  us/step); part of Table 1's Lamport row.

Under the CUDA simulator only a single block can run a persistent kernel
(the simulator runs blocks one after another), so the launcher requires
``rows_per_block >= H`` there.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache, lru_cache
from types import SimpleNamespace

import numpy as np
from numba import config, cuda, float32, int32, typeof, uint16, uint32

from sparsekit.gpu.inline import inlined
from sparsekit.gpu.sync_primitives import clock64, ld_relaxed_u32, ld_volatile_u32, ld_x4_f32, unpack16
from sparsekit.gpu.vector_loads import store4
from sparsekit.arrays import cdiv, operand, output, result
from sparsekit.checks import check_int
from sparsekit.device import allow_dynamic_shared
from sparsekit.rnn_layout import RNNLayout, check_layout, split, thread_packed_indices

__all__ = ["SCHEMES", "SYNCS", "ACTIVATIONS", "CELLS", "POLLS", "GRID_SYNCS", "LOADS", "REDUCES", "SHARED_LIMIT",
           "TRACE_PHASES", "PersistentRNN", "rnn_forward", "lstm_forward", "step_stride", "shared_bytes",
           "max_hidden", "shared_limit", "PRESETS"]

SCHEMES = ("naive", "wide")
SYNCS = ("barrier", "lamport")
ACTIVATIONS = ("tanh", "relu")
CELLS = ("rnn", "lstm")
#: Dynamic shared memory a Numba launch may use without the opt-in attribute (bytes).
SHARED_LIMIT = 48 * 1024
#: Static shared memory of the kernels (Lamport's abort flag, aligned), out of the same per-block limit.
_STATIC_SHARED = 16
#: float16 results in [-2**-25, 0] round to -0.0; they are written as +0.0 (Lamport's sentinel).
_ZERO_BAND = {np.dtype(np.float32): 0.0, np.dtype(np.float16): 2.0 ** -25}
#: What the trace of a step records (``trace=True``), clock64 at: step start, h_{t-1} in registers,
#: after the block barrier (h in shared memory), after the operate stage, after the reduce stage and the
#: write of h_t, and (barrier kernels) after the grid barrier; Lamport kernels store thread 0's poll
#: rounds of the step in the last slot instead.
TRACE_PHASES = ("start", "loaded", "shared", "operated", "written", "synced_or_polls")
#: the -0.0 bit patterns of one 32-bit word
_NEG0_F32 = 0x80000000
_NEG0_F16 = 0x8000


# ---------------------------------------------------------------------------
# 16-byte loads of h's words that a spin loop cannot hoist (vector=True)
# ---------------------------------------------------------------------------

def _spin_load(name: str, instruction: str, width: int):
    """An intrinsic ``name(array, i)``: word ``i`` (``width=1``) or words ``i .. i + 3`` as a 4-tuple
    (``width=4``; ``i`` a multiple of 4, the array 16-byte aligned) of a 1-D uint32 global array, one
    ``instruction``, side-effecting with a memory clobber like gpu/sync_primitives' loads, so a spin loop
    cannot hoist it."""
    if config.ENABLE_CUDASIM:
        from sparsekit.gpu.sync_primitives import spin_yield

        def load(array, i):
            spin_yield()                                 # (a spin's poll: the word's writer may run first)
            return array[i] if width == 1 else (array[i], array[i + 1], array[i + 2], array[i + 3])
        load.__name__ = name
        return load

    from llvmlite import ir
    from numba import types
    from numba.core.errors import TypingError
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    def typer(typingctx, array, index):
        if not (isinstance(array, types.Array) and array.ndim == 1 and array.dtype == types.uint32):
            raise TypingError(f"{name}: expected a 1-D uint32 array, got {array}")
        if not isinstance(index, types.Integer):
            raise TypingError(f"{name}: expected an integer index, got {index}")
        ret = types.uint32 if width == 1 else types.UniTuple(types.uint32, 4)

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, value=args[0])
            i = context.cast(builder, args[1], sig.args[1], types.intp)
            ptr = cgutils.get_item_pointer(context, builder, sig.args[0], ary, [i], wraparound=False)
            i32 = ir.IntType(32)
            if width == 1:
                asm = ir.InlineAsm(ir.FunctionType(i32, [ptr.type]), f"{instruction} $0, [$1];",
                                   "=r,l,~{memory}", side_effect=True)
                return builder.call(asm, [ptr])
            fnty = ir.FunctionType(ir.LiteralStructType([i32] * 4), [ptr.type])
            asm = ir.InlineAsm(fnty, f"{instruction} {{$0, $1, $2, $3}}, [$4];", "=r,=r,=r,=r,l,~{memory}",
                               side_effect=True)
            words = builder.call(asm, [ptr])
            return context.make_tuple(builder, ret, [builder.extract_value(words, k) for k in range(4)])

        return ret(array, index), codegen

    typer.__name__ = typer.__qualname__ = name
    return intrinsic(typer)


#: the loads of h's words per ``load`` kind: (one word, a 16-byte group). "cg" is a weak load cached in L2 only
#: (``ld.global.cg``), enough for Lamport's protocol: every word is written once, and a word read before its
#: write still holds the -0.0 preset, so it is read again.
_H_LOADS = {"volatile": (ld_volatile_u32, _spin_load("_ld_volatile_v4", "ld.volatile.global.v4.u32", 4)),
            "relaxed": (ld_relaxed_u32, _spin_load("_ld_relaxed_v4", "ld.relaxed.gpu.global.v4.u32", 4)),
            "cg": (_spin_load("_ld_cg_u32", "ld.global.cg.u32", 1), _spin_load("_ld_cg_v4", "ld.global.cg.v4.u32", 4))}


# ---------------------------------------------------------------------------
# kernels: one per (sync, scheme, dtype, npt, tpr, batch, activation), built once
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class _Constants:
    """The compile-time constants of one kernel, derived once from :func:`_kernel`'s arguments (:meth:`derive`).

    Numba freezes a kernel's closure variables of plain types (int, bool, float, tuple, NumPy scalars) as
    constants but cannot read a dataclass's attributes inside a jitted function: each phase factory below
    unpacks the constants it needs into local names at its top (the name each field becomes is given after
    it). ``npt``, ``tpr``, ``batch`` size register arrays and unrolled loops, so they must be constants;
    ``words`` (the 32-bit words of ``h`` each thread moves per step, ``ceil(stride * itemsize / 4 / threads)``)
    sizes the registers that hold them.
    """
    barrier: bool               #: the grid barrier's kernel (``sync="barrier"``), else Lamport's
    npt: int                    #: NPT: pairs a thread holds of each gate row
    tpr: int                    #: TPR: threads per row
    batch: int                  #: B: batch samples
    threads: int                #: NT: the block size if fixed at compile time (else 0)
    wide: bool                  #: WIDE: ``scheme="wide"``
    tanh: bool                  #: TANH: ``activation="tanh"`` (else relu)
    f16: bool                   #: F16: float16 weights and states (else float32)
    itemsize: int               #: ITEM: bytes per element of h
    nb_dtype: object            #: the Numba type of the weights and states
    lstm: bool                  #: LSTM: ``cell="lstm"``
    gates: int                  #: G: gate rows per hidden unit (LSTM: i, f, g, o)
    index16: bool               #: IDX16: indices packed two per register
    index_words: int            #: NJ: index registers per gate row
    idx_dtype: object           #: the Numba type of an index register
    load: str                   #: the load of h's words, a key of ``_H_LOADS``
    group_words: int            #: VEC: words of h per load / store instruction
    chunked: bool               #: CHUNKED: a thread moves its words of h a chunk at a time
    chunk_words: int            #: CHW: words of h a thread holds in registers at once
    lead_poll: bool             #: LEAD: ``poll="lead"``
    issue_poll: bool            #: ISSUE: ``poll="issue"``
    issue_delay: int            #: DELAY: clock cycles before the loads of ``poll="issue"``
    pending_word: np.uint32     #: PENDING: a 32-bit word of Lamport's -0.0 preset
    zero_band: np.float32       #: ZERO_BAND: results in [-ZERO_BAND, 0] are written as +0.0
    pipeline: bool              #: PIPELINE: the Lamport kernel's software pipeline
    fold_h0: bool               #: FOLD: the Lamport kernel writes h0 into exchange slot 0
    h_buffers: int              #: NBUF: shared buffers of h
    cg_sync: bool               #: CG_SYNC: the grid barrier is ``cg.this_grid().sync()``
    warp_reduce: bool           #: WARP_REDUCE: the shared reduce stage needs only a warp barrier
    shfl: bool                  #: SHFL: the reduce stage's warp shuffles
    sample_parts: int           #: S: parts the shuffle reduce-scatter splits the samples in
    log_sample_parts: int       #: LOG_S: log2 of S
    part_samples: int           #: NS: samples per part
    outputs: int                #: NBO: (row, sample) outputs a thread owns
    weight_regs: int            #: NW: value registers
    acc_regs: int               #: NACC: accumulators
    index_regs: int             #: NWJ: index registers
    bias_regs: int              #: NBP: registers of b'_t
    trace: bool                 #: TRACE: thread 0 records clock64 at the stage boundaries

    @classmethod
    def derive(cls, sync, scheme, dtype, npt, tpr, batch, activation, words, pipeline, cell, poll, double_buffer,
               index16, trace, grid_sync, load, chunk, reduce, threads, vector, fold_h0, issue_delay) -> _Constants:
        """The constants of one set of :func:`_kernel`'s arguments."""
        lstm = cell == "lstm"
        gates = 4 if lstm else 1
        index_words = (npt + 1) // 2 if index16 else npt
        chunked = 0 < chunk < words
        h_buffers = 2 if double_buffer and sync == "lamport" else 1
        # a row's tpr threads sit in one warp; the reduce stage needs only a warp barrier where no other
        # warp can overwrite h meanwhile: behind the inline grid barrier (two block barriers), or with two h
        # buffers. Not behind cg's grid sync: racecheck does not see it order shared memory (an H100 racecheck
        # of those kernels reported the hazard), so those kernels keep the block barrier here.
        # (The simulator has no syncwarp: it runs the block barrier, which every thread reaches there too.)
        cg_sync = grid_sync == "cg"
        warp_reduce = (tpr <= 32 and ((sync == "barrier" and not cg_sync) or h_buffers == 2)
                       and not config.ENABLE_CUDASIM)
        shfl = reduce == "shfl" and tpr <= 32 and not config.ENABLE_CUDASIM
        # shuffle reduce-scatter: the row's lanes split the B samples in S parts (B a power of two), NS each
        sample_parts = min(batch, tpr) if shfl and batch & (batch - 1) == 0 else 1
        part_samples = batch // sample_parts
        # (row, sample) outputs owned per thread: shared: lanes b, b + tpr, ...; shfl: NS consecutive samples
        outputs = part_samples if shfl else (batch + tpr - 1) // tpr
        f16 = dtype == np.dtype(np.float16)
        return cls(
            barrier=sync == "barrier", npt=npt, tpr=tpr, batch=batch, threads=threads, wide=scheme == "wide",
            tanh=activation == "tanh", f16=f16, itemsize=dtype.itemsize, nb_dtype=typeof(np.zeros(1, dtype)).dtype,
            lstm=lstm, gates=gates, index16=index16, index_words=index_words, idx_dtype=uint32 if index16 else int32,
            load=load, group_words=4 if vector else 1, chunked=chunked, chunk_words=chunk if chunked else words,
            lead_poll=poll == "lead", issue_poll=poll == "issue", issue_delay=issue_delay,
            pending_word=uint32(_NEG0_F16 | (_NEG0_F16 << 16)) if f16 else uint32(_NEG0_F32),
            zero_band=float32(_ZERO_BAND[dtype]), pipeline=pipeline, fold_h0=fold_h0, h_buffers=h_buffers,
            cg_sync=cg_sync, warp_reduce=warp_reduce, shfl=shfl, sample_parts=sample_parts,
            log_sample_parts=sample_parts.bit_length() - 1, part_samples=part_samples, outputs=outputs,
            # register array sizes (constants); a layout without pairs (an all-zero weight) still gets arrays of
            # one element: the GPU compiler refuses a local array of length 0 (the simulator takes it)
            weight_regs=gates * max(npt, 1), acc_regs=gates * batch, index_regs=gates * max(index_words, 1),
            bias_regs=outputs * gates, trace=trace)


# -- scalar helpers ------------------------------------------------------------------------------------------------

@cache
def _cell_math(const: _Constants):
    """The cell's scalar math: the activation g (``activation``: tanh or relu), the LSTM's sigmoid, and the
    zero band Lamport's sentinel needs (no result is written as -0.0)."""
    TANH, ZERO_BAND = const.tanh, const.zero_band

    @inlined
    def activate(s):
        return math.tanh(s) if TANH else max(s, float32(0.0))

    @inlined
    def zero_band(y):
        if y <= float32(0.0) and y >= -ZERO_BAND:     # Section 4.2: never write -0.0 (nor what rounds to it)
            y = float32(0.0)
        return y

    @inlined
    def sigmoid(x):
        return float32(1.0) / (float32(1.0) + math.exp(-x))

    return SimpleNamespace(activate=activate, zero_band=zero_band, sigmoid=sigmoid)


# -- set-up: a thread's pairs, cell state and bias in registers ----------------------------------------------------

@cache
def _setup(const: _Constants):
    """Set-up stage: what a thread keeps in registers for the whole launch, and the outputs it owns.

    ``cell="lstm"``: every thread holds ``npt`` pairs of each of the four gate rows of its hidden unit
    (Appendix B). ``index16``: the indices arrive packed two per uint32 (``rnn_layout.thread_packed_indices``)
    and stay packed in registers.
    """
    NPT, TPR, B, G, NJ, idx_dtype = const.npt, const.tpr, const.batch, const.gates, const.index_words, const.idx_dtype
    NBO, LSTM, SHFL, S, LOG_S = const.outputs, const.lstm, const.shfl, const.sample_parts, const.log_sample_parts

    @inlined
    def load_weights(vals, idx, row, hidden, lane, active, w, j):
        """Every thread keeps its npt <index, value> pairs (per gate row) in registers for all steps."""
        for g in range(G):
            for i in range(NPT):
                w[g * NPT + i] = vals[g * hidden + row, lane + i * TPR] if active else 0
            for i in range(NJ):                        # IDX16: word i holds pairs 2i and 2i + 1
                j[g * NJ + i] = idx_dtype(idx[g * hidden + row, lane + i * TPR]) if active else 0

    @inlined
    def load_cell(cs, c0, t_start, row, lane, active, c):
        """LSTM: c_{t_start - 1} of the owned (unit, sample) outputs (c0, or what a previous launch stored)."""
        for q in range(NBO):
            b = owned(lane, q)
            c[q] = float32(0.0)
            if LSTM and active and b < B:
                c[q] = float32(c0[b, row]) if t_start == 0 else float32(cs[t_start - 1, b, row])

    @inlined
    def owned(lane, q):
        """Sample of this thread's ``q``-th (row, sample) output; ``B`` (none) if it owns fewer.

        shared reduce: ``lane + q * tpr``; shfl: after the reduce-scatter, lane
        holds samples ``base .. base + NS - 1`` with base's bits from the lane
        bits of the halving levels (``tpr / 2``, ``tpr / 4``, ...), and the
        first lane of each group of ``tpr / S`` equal lanes writes them.
        """
        if SHFL:
            base = 0
            for lv in range(LOG_S):
                if lane & (TPR >> (lv + 1)):
                    base += B >> (lv + 1)
            return base + q if lane & (TPR // S - 1) == 0 else B
        return lane + q * TPR

    @inlined
    def load_bias(bprime, t, hidden, row, lane, active, bp):
        """b'_t of the (row, sample) outputs this thread owns, loaded before the step needs them."""
        for q in range(NBO):
            b = owned(lane, q)
            if active and b < B:
                for g in range(G):
                    bp[q * G + g] = bprime[t, b, g * hidden + row]   # converted where used: no stall here

    return SimpleNamespace(load_weights=load_weights, load_cell=load_cell, owned=owned, load_bias=load_bias)


# -- load stage: h_{t-1} from the exchange (global) into registers, then shared memory -----------------------------

@cache
def _exchange(const: _Constants):
    """Load stage: a thread's words of ``h_{t-1}`` from the exchange into registers (Lamport: polled until none
    holds -0.0), then into shared memory.

    * ``load``: the load of h's words, ``"volatile"`` (``ld.volatile``, system
      scope), ``"relaxed"`` (``ld.relaxed.gpu``) or ``"cg"`` (a weak
      ``ld.global.cg``, cached in L2 only).
    * ``poll`` (Lamport): ``"batch"`` reissues all still-pending words every
      round; ``"lead"`` waits on one pending word alone between rounds (less
      L2 traffic); ``"issue"`` issues every word's load at the step's start
      with no check (addresses from the thread's first word plus constant
      offsets) and only checks in the first round (``"batch"`` checks each
      word of a preset register copy before its load, and ptxas computes each
      address behind that check: ~18 instructions per load, from the SASS).
    * ``chunk`` (> 0): a thread moves its words of h ``chunk`` at a time (fewer
      registers for large layers, one L2 round trip per chunk; no Lamport
      pipeline then).
    * ``vector`` (wide scheme, no chunks, a whole number of 16-byte groups of
      h): a thread moves its words of h as 16-byte groups,
      ``ld.relaxed.gpu.global.v4.u32`` (or the ``volatile``/``cg`` form) and
      ``st.shared.v4``, a quarter of the load and store instructions; Lamport
      reloads a group while any of its four words is pending.
    """
    B, NT, VEC, CHW, WIDE, F16 = const.batch, const.threads, const.group_words, const.chunk_words, const.wide, const.f16
    LEAD, ISSUE, PENDING = const.lead_poll, const.issue_poll, const.pending_word
    ld_word, ld_group = _H_LOADS[const.load]

    @inlined
    def word(tid, k, nthreads, n_words):
        """Word of h (per step) that is this thread's ``k``-th, or ``n_words`` if it has none.

        Consecutive threads, consecutive words (coalesced); with ``VEC = 4``
        consecutive threads take consecutive 4-word groups, slot ``k`` is word
        ``k % 4`` of the thread's group ``k // 4``.
        """
        m = k // VEC
        e = (tid + m * (NT if NT else nthreads)) * VEC + k % VEC
        return e if e < n_words else n_words

    @inlined
    def load_group(xchg_words, i, pf, k):
        """Words ``i .. i + VEC - 1`` of the exchange buffer into ``pf[k .. k + VEC - 1]``, one instruction."""
        if VEC == 4:
            v0, v1, v2, v3 = ld_group(xchg_words, i)
            pf[k] = v0
            pf[k + 1] = v1
            pf[k + 2] = v2
            pf[k + 3] = v3
        else:
            pf[k] = ld_word(xchg_words, i)

    @inlined
    def issue_loads(xchg_words, base, kb, pf, tid, nthreads, n_words):
        """Load stage, first half: this thread's words ``kb .. kb + CHW - 1`` of h (global, batch-interleaved)
        into registers.

        The loop has a constant trip count, so the loads are issued back to back.
        """
        for k in range(0, CHW, VEC):
            e = word(tid, kb + k, nthreads, n_words)
            if e < n_words:
                load_group(xchg_words, base + e, pf, k)

    @inlined
    def issue_all(xchg_words, base, pf, tid, nthreads, n_words, only_pending):
        """``poll="issue"``: the loads of this thread's words of h (slot at word ``base``), all of them, or with
        ``only_pending`` (a constant) the groups still holding -0.0: addressed from the thread's first word at
        constant offsets (block size compiled in), each behind one 32-bit compare with a constant (``word``'s
        words, without its clamp) unless all of the thread's words exist."""
        step = (NT if NT else nthreads) * VEC
        first = base + tid * VEC
        lim = int32(n_words - tid * VEC)
        if int32((CHW // VEC - 1) * step) < lim:      # all of them exist (most threads): no bounds checks
            for k in range(0, CHW, VEC):
                if not only_pending or group_pending(pf, k):
                    load_group(xchg_words, first + (k // VEC) * step, pf, k)
        else:
            for k in range(0, CHW, VEC):
                if int32((k // VEC) * step) < lim and (not only_pending or group_pending(pf, k)):
                    load_group(xchg_words, first + (k // VEC) * step, pf, k)

    @inlined
    def is_pending(v):
        """A 32-bit word of h still holding Lamport's -0.0 preset (either half for float16)."""
        if F16:
            return (v & uint32(0xFFFF)) == uint32(_NEG0_F16) or (v >> uint32(16)) == uint32(_NEG0_F16)
        return v == uint32(_NEG0_F32)

    @inlined
    def group_pending(pf, k):
        """Whether any word of the group at slot ``k`` still holds Lamport's preset."""
        pending = False
        for m in range(VEC):
            pending = pending or is_pending(pf[k + m])
        return pending

    @inlined
    def any_pending(pf, tid, nthreads, n_words):
        """``poll="issue"``: whether any of this thread's words of h (``issue_all``'s) still holds -0.0.

        float16 with all words present: x = word ^ (-0.0, -0.0) has a zero half iff the word is pending, and
        ``(x - 0x00010001) & ~x & 0x80008000`` is nonzero iff x has a zero half (exact for "any"; the borrow
        out of a zero low half only ever adds to a nonzero result), OR-ed over the words: 4 instructions a word
        instead of 5 and one branch."""
        step = (NT if NT else nthreads) * VEC
        lim = int32(n_words - tid * VEC)
        if F16 and int32((CHW // VEC - 1) * step) < lim:
            bits = uint32(0)
            for k in range(CHW):
                x = pf[k] ^ PENDING
                bits |= (x - uint32(0x00010001)) & ~x & uint32(0x80008000)
            return uint32(bits) != uint32(0)
        pending = False
        for k in range(0, CHW, VEC):
            if int32((k // VEC) * step) < lim and group_pending(pf, k):
                pending = True
        return pending

    @inlined
    def poll(xchg_words, base, kb, pf, tid, nthreads, n_words, spin_limit):
        """Lamport's load stage: reload this thread's words still -0.0 until none is (or spin_limit rounds).

        Each round reissues all pending loads back to back (one L2 round trip
        per round); ``poll="issue"``: the first round's loads were issued
        (unconditionally) at the step's start, so the first round only checks,
        and the later rounds reload the pending words at ``issue_all``'s
        constant offsets. Returns (still pending, rounds).
        """
        if ISSUE:                                      # the first round's loads went out at the step's start
            pending = any_pending(pf, tid, nthreads, n_words)
            polls = 1
            while pending and polls < spin_limit:
                issue_all(xchg_words, base, pf, tid, nthreads, n_words, True)
                pending = any_pending(pf, tid, nthreads, n_words)
                polls += 1
            return pending, polls
        polls = 0
        pending = True
        while pending and polls < spin_limit:
            for k in range(0, CHW, VEC):
                e = word(tid, kb + k, nthreads, n_words)
                if e < n_words and group_pending(pf, k):
                    load_group(xchg_words, base + e, pf, k)
            pending = False
            lead = 0
            for k in range(0, CHW, VEC):
                e = word(tid, kb + k, nthreads, n_words)
                if e < n_words and group_pending(pf, k):
                    pending = True
                    lead = e
            polls += 1
            if LEAD and pending:                         # wait on one pending word alone, then a full round
                while polls < spin_limit and is_pending(ld_word(xchg_words, base + lead)):
                    polls += 1
        return pending, polls

    @inlined
    def store_words(h_words, h_u16, woff, kb, pf, tid, nthreads, n_words, hidden):
        """Load stage, second half: registers to shared memory (buffer at word ``woff``) in the operate layout."""
        if VEC == 4:                                   # wide only: 16-byte stores, as loaded
            for k in range(0, CHW, VEC):
                e = word(tid, kb + k, nthreads, n_words)
                if e < n_words:
                    store4(h_words, woff + e, (pf[k], pf[k + 1], pf[k + 2], pf[k + 3]))
            return
        for k in range(CHW):
            e = word(tid, kb + k, nthreads, n_words)
            if e < n_words:
                v = pf[k]
                if WIDE:                               # interleaved h[j * 4 + b], as in global
                    h_words[woff + e] = v
                elif F16:                              # naive, float16: two elements per word
                    for m in range(2):
                        el = 2 * e + m
                        if el < hidden * B:
                            h_u16[2 * woff + (el % B) * hidden + el // B] = uint16(v >> uint32(16 * m))
                else:                                  # naive, float32: batch-major h[b * H + j]
                    if e < hidden * B:
                        h_words[woff + (e % B) * hidden + e // B] = v

    return SimpleNamespace(issue_loads=issue_loads, issue_all=issue_all, poll=poll, store_words=store_words)


# -- operate stage (Section 3.3) -----------------------------------------------------------------------------------

@cache
def _operate(const: _Constants):
    """The operate stage's device function: ``scheme="wide"`` reads the 4 samples of an index with one vector
    load (Section 4.1), ``"naive"`` one scalar load per sample; ``index16`` unpacks an index where it is used."""
    NPT, B, G, NJ, IDX16, WIDE = const.npt, const.batch, const.gates, const.index_words, const.index16, const.wide

    @inlined
    def operate(h_sh, hoff, hidden, w, j, acc):
        """Operate stage: acc[b] += value[i] * activation_in_shm[index[i]] (Section 3.3)."""
        for q in range(G * B):
            acc[q] = float32(0.0)
        for g in range(G):
            for i in range(NPT):
                pair(h_sh, hoff, hidden, w, j, acc, g, i)

    @inlined
    def pair(h_sh, hoff, hidden, w, j, acc, g, i):
        """acc[g, b] += value[i] * activation_in_shm[index[i]] for the thread's pair i of gate row g."""
        wi = float32(w[g * NPT + i])
        ji = unpack16(j[g * NJ + i // 2], i % 2) if IDX16 else j[g * NPT + i]
        if WIDE:                                       # Section 4.1: one ld.shared.v4 brings 4 samples
            a0, a1, a2, a3 = ld_x4_f32(h_sh, hoff + ji * 4)
            acc[g * B + 0] += wi * a0
            acc[g * B + 1] += wi * a1
            acc[g * B + 2] += wi * a2
            acc[g * B + 3] += wi * a3
        else:                                          # naive: one scalar load per sample
            for b in range(B):
                acc[g * B + b] += wi * float32(h_sh[hoff + b * hidden + ji])

    return operate


# -- reduce stage: the row's partials, b'_t, g, h_t written --------------------------------------------------------

@cache
def _reduce(const: _Constants):
    """The reduce stage's device function.

    ``reduce``: ``"shared"`` sums a row's ``tpr`` partials through shared
    memory behind a barrier, ``"shfl"`` with warp shuffles (a row's threads
    share a warp, ``tpr <= 32``): a reduce-scatter over the batch samples
    (``log2(min(B, tpr))`` halving levels, then butterflies), no shared
    memory and no barrier in the reduce stage; the one block barrier that
    keeps the next step's copy of ``h`` from overwriting what slower warps
    still read is then taken while the next step's loads are in flight
    (single buffer) or not needed (``double_buffer``). The simulator has no
    shuffles: it runs the shared reduction instead.
    """
    TPR, B, G, NS, NBO, LSTM = const.tpr, const.batch, const.gates, const.part_samples, const.outputs, const.lstm
    SHFL, WARP_REDUCE, LOG_S, nb_dtype = const.shfl, const.warp_reduce, const.log_sample_parts, const.nb_dtype
    LOG_TPR = TPR.bit_length() - 1
    owned = _setup(const).owned
    cell_math = _cell_math(const)
    activate, zero_band, sigmoid = cell_math.activate, cell_math.zero_band, cell_math.sigmoid

    @inlined
    def shfl_reduce(acc, lane):
        """The row's tpr partials of every accumulator, summed with warp shuffles (``reduce="shfl"``).

        Levels with offsets tpr/2, tpr/4, ...: the first LOG_S halve the
        samples a lane holds (it keeps one half, sends the other, adds what its
        partner sent), the rest are butterflies; afterwards ``acc[g * B + q]``
        holds gate g of sample ``owned(lane, q)``, summed over the row.
        """
        for lv in range(LOG_S):
            off = TPR >> (lv + 1)
            half = B >> (lv + 1)
            upper = (lane & off) != 0
            for g in range(G):
                for i in range(B // 2):
                    if i < half:
                        lo = acc[g * B + i]
                        hi = acc[g * B + i + half]
                        got = cuda.shfl_xor_sync(0xFFFFFFFF, lo if upper else hi, off)
                        acc[g * B + i] = (hi if upper else lo) + got
        for lv in range(LOG_S, LOG_TPR):
            off = TPR >> (lv + 1)
            for g in range(G):
                for i in range(NS):
                    acc[g * B + i] += cuda.shfl_xor_sync(0xFFFFFFFF, acc[g * B + i], off)

    @inlined
    def partial(red, red_off, acc, r_local, lane, q, g, b):
        """Gate g of output q summed over the row: from the shuffles' registers, or the partials in shared memory."""
        if SHFL:
            return acc[g * B + q]
        s = float32(0.0)
        for k in range(TPR):
            s += red[red_off + (r_local * TPR + k) * G * B + g * B + b]
        return s

    @inlined
    def reduce_and_write(red, red_off, acc, tid, r_local, lane, row, active, t, bp, xchg, stride, hs,
                         hidden, cs, c):
        """Reduce stage: the row's tpr partials (shared memory or shuffles), + b'_t, g, write h_t.

        h_t goes to ``hs`` and to exchange slot ``t + 1``. LSTM: the same
        thread owns (unit, sample) at every step and keeps c_{t-1} in a register
        (``c``), rounded to the dtype as the reference does.
        """
        if SHFL:
            shfl_reduce(acc, lane)
        else:
            for q in range(G * B):
                red[red_off + tid * G * B + q] = acc[q]
            if WARP_REDUCE:
                cuda.syncwarp()
            else:
                cuda.syncthreads()
        for q in range(NBO):
            b = owned(lane, q)
            if active and b < B:
                if LSTM:
                    zi = float32(bp[q * G]) + partial(red, red_off, acc, r_local, lane, q, 0, b)
                    zf = float32(bp[q * G + 1]) + partial(red, red_off, acc, r_local, lane, q, 1, b)
                    zg = float32(bp[q * G + 2]) + partial(red, red_off, acc, r_local, lane, q, 2, b)
                    zo = float32(bp[q * G + 3]) + partial(red, red_off, acc, r_local, lane, q, 3, b)
                    c_new = nb_dtype(sigmoid(zf) * c[q] + sigmoid(zi) * math.tanh(zg))   # stored dtype
                    cs[t, b, row] = c_new
                    c[q] = float32(c_new)
                    y = zero_band(sigmoid(zo) * math.tanh(c[q]))
                else:
                    s = partial(red, red_off, acc, r_local, lane, q, 0, b)
                    y = zero_band(activate(s + float32(bp[q])))
                xchg[(t + 1) * stride + row * B + b] = y
                hs[t, b, row] = y

    return reduce_and_write


# -- the kernels: the stages composed ------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def _kernel(sync: str, scheme: str, dtype: np.dtype, npt: int, tpr: int, batch: int, activation: str,
            words: int, pipeline: bool = False, cell: str = "rnn", poll: str = "batch",
            double_buffer: bool = False, index16: bool = False, trace: bool = False, grid_sync: str = "cg",
            load: str = "volatile", chunk: int = 0, reduce: str = "shared", threads: int = 0,
            vector: bool = False, fold_h0: bool = False, issue_delay: int = 0):
    """Build the ``@cuda.jit`` kernel for one set of compile-time constants.

    The constants are derived once (:class:`_Constants`), the phase factories
    build each stage's device functions (:func:`_cell_math`, :func:`_setup`,
    :func:`_exchange` for the load stage, :func:`_operate`, :func:`_reduce`),
    and the two kernels here (grid barrier, Lamport) run those stages every
    step. Each option is explained where it is used: ``npt``, ``tpr``,
    ``batch``, ``words`` at :class:`_Constants`; ``activation`` at
    :func:`_cell_math`; ``cell``, ``index16`` at :func:`_setup`; ``load``,
    ``poll``, ``chunk``, ``vector`` at :func:`_exchange`; ``scheme`` at
    :func:`_operate`; ``reduce`` at :func:`_reduce`. The kernels' own:

    * ``pipeline`` (Lamport): the loads of the next step's input are issued
      before the operate stage.
    * ``issue_delay`` (``poll="issue"``): clock cycles a thread spins
      (``clock64``) between writing its part of ``h_t`` and issuing the loads
      of ``h_t``, so that fewer of them reach L2 before the other blocks'
      writes (a load that returns -0.0 costs a whole further round trip).
    * ``double_buffer`` (Lamport): ``h`` alternates between two shared
      buffers, so the reduce stage needs only a warp barrier.
    * ``trace``: thread 0 of each block records ``clock64`` at the stage
      boundaries of every step (``TRACE_PHASES``).
    * ``grid_sync`` (barrier kernels): ``"cg"`` is ``cg.this_grid().sync()``,
      ``"atomic"`` an inlined barrier on an arrival counter (``status[1]``).
    * ``threads`` (> 0): the block size every launch uses, a compile-time
      constant (the load stage's word offsets become immediates) and ptxas's
      launch bounds ``(threads, 1)``: it then keeps registers at or below
      64K / threads so that one block fits an SM (spilling if it must: the
      launcher reports ``local_bytes``) instead of refusing the launch.
    * ``fold_h0`` (Lamport): a launch that starts at step 0 writes ``h_in``
      (h0) into exchange slot 0 itself (no separate copy).
    """
    const = _Constants.derive(sync, scheme, dtype, npt, tpr, batch, activation, words, pipeline, cell, poll,
                              double_buffer, index16, trace, grid_sync, load, chunk, reduce, threads, vector,
                              fold_h0, issue_delay)
    TPR, B, ITEM, nb_dtype, idx_dtype = const.tpr, const.batch, const.itemsize, const.nb_dtype, const.idx_dtype
    NW, NWJ, NACC, NBP, NBO = const.weight_regs, const.index_regs, const.acc_regs, const.bias_regs, const.outputs
    CHW, CHUNKED, PENDING, NBUF = const.chunk_words, const.chunked, const.pending_word, const.h_buffers
    PIPELINE, ISSUE, DELAY, FOLD = const.pipeline, const.issue_poll, const.issue_delay, const.fold_h0
    CG_SYNC, SHFL, TRACE, NPH = const.cg_sync, const.shfl, const.trace, len(TRACE_PHASES)
    setup, exchange = _setup(const), _exchange(const)
    load_weights, load_cell, owned, load_bias = setup.load_weights, setup.load_cell, setup.owned, setup.load_bias
    issue_loads, issue_all, store_words = exchange.issue_loads, exchange.issue_all, exchange.store_words
    poll = exchange.poll                               # (the option is spent: the name is the load stage's)
    zero_band = _cell_math(const).zero_band
    operate, reduce_and_write = _operate(const), _reduce(const)

    @inlined
    def stamp(tr, t, phase, value):
        """Trace: thread 0 of the block records ``value`` for (step t, phase)."""
        if TRACE and cuda.threadIdx.x == 0:
            steps = tr.shape[0] // (cuda.gridDim.x * NPH)
            tr[(cuda.blockIdx.x * steps + t) * NPH + phase] = value

    # -- the kernels: set-up, then per step load, operate, reduce and synchronize ----------------------------------

    def barrier_kernel(vals, idx, bprime, xchg, xchg_words, hs, cs, c0, tr, status, h_in,   # arrays
                       hidden, stride, t_start, t_stop, spin_limit):                       # sizes
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
        abort = cuda.shared.array(1, int32)
        red_off = (stride * ITEM + 15) // 16 * 4
        n_words = stride * ITEM // 4
        w = cuda.local.array(NW, nb_dtype)
        j = cuda.local.array(NWJ, idx_dtype)
        acc = cuda.local.array(NACC, float32)
        pf = cuda.local.array(CHW, uint32)
        bp = cuda.local.array(NBP, nb_dtype)
        c = cuda.local.array(NBO, float32)
        load_weights(vals, idx, row, hidden, lane, active, w, j)
        load_cell(cs, c0, t_start, row, lane, active, c)
        if tid == 0:
            abort[0] = 0
        for t in range(t_start, t_stop):
            stamp(tr, t, 0, clock64())
            load_bias(bprime, t, hidden, row, lane, active, bp)
            if CHUNKED:                                  # load: h_{t-1}, CHW words at a time
                for kb in range(0, (n_words + nthreads - 1) // nthreads, CHW):
                    issue_loads(xchg_words, t * n_words, kb, pf, tid, nthreads, n_words)
                    store_words(h_words, h_u16, 0, kb, pf, tid, nthreads, n_words, hidden)
            else:                                        # load: h_{t-1}
                issue_loads(xchg_words, t * n_words, 0, pf, tid, nthreads, n_words)
                store_words(h_words, h_u16, 0, 0, pf, tid, nthreads, n_words, hidden)
            stamp(tr, t, 1, clock64())
            cuda.syncthreads()
            stamp(tr, t, 2, clock64())
            operate(h_sh, 0, hidden, w, j, acc)
            stamp(tr, t, 3, clock64())
            reduce_and_write(red, red_off, acc, tid, r_local, lane, row, active, t, bp, xchg, stride, hs,
                             hidden, cs, c)
            stamp(tr, t, 4, clock64())
            # synchronize: global barrier (Section 3.2)
            if CG_SYNC:
                cuda.cg.this_grid().sync()               # cooperative launch, a call into cudadevrt
                if SHFL:                                 # no barrier in the reduce: order the next store of h
                    cuda.syncthreads()
            else:                                        # inline: arrive on a counter, wait for the round
                cuda.syncthreads()
                if tid == 0:
                    cuda.threadfence()                   # this block's h_t before its arrival
                    arrived = cuda.atomic.add(status, 1, 1)
                    target = (arrived // cuda.gridDim.x + 1) * cuda.gridDim.x
                    polls = 0
                    while cuda.atomic.add(status, 1, 0) < target and polls < spin_limit:
                        polls += 1
                    if polls == spin_limit:
                        abort[0] = 1
                        cuda.atomic.max(status, 0, 1)
                    cuda.threadfence()
                cuda.syncthreads()
                if abort[0] != 0:                        # timed out (blocks not co-resident): give up
                    return
            stamp(tr, t, 5, clock64())

    def lamport_kernel(vals, idx, bprime, xchg, xchg_words, hs, cs, c0, tr, status, h_in,   # arrays
                       hidden, stride, t_start, t_stop, spin_limit):                       # sizes
        tid = cuda.threadIdx.x
        nthreads = cuda.blockDim.x
        r_local = tid // TPR
        lane = tid % TPR
        row = cuda.blockIdx.x * (nthreads // TPR) + r_local
        active = row < hidden
        h_sh = cuda.shared.array(0, nb_dtype)            # NBUF buffers of h, then the partial sums
        h_words = cuda.shared.array(0, uint32)           # the same memory as 32-bit words
        h_u16 = cuda.shared.array(0, uint16)
        red = cuda.shared.array(0, float32)
        abort = cuda.shared.array(1, int32)
        buf_words = (stride * ITEM + 15) // 16 * 4       # one h buffer, in words (16-byte aligned)
        red_off = NBUF * buf_words
        n_words = stride * ITEM // 4
        w = cuda.local.array(NW, nb_dtype)
        j = cuda.local.array(NWJ, idx_dtype)
        acc = cuda.local.array(NACC, float32)
        pf = cuda.local.array(CHW, uint32)                # this thread's words of the next input
        bp = cuda.local.array(NBP, nb_dtype)
        c = cuda.local.array(NBO, float32)
        load_weights(vals, idx, row, hidden, lane, active, w, j)
        load_cell(cs, c0, t_start, row, lane, active, c)
        if tid == 0:
            abort[0] = 0
        if FOLD and t_start == 0:                        # h_in (h0) is this launch's first input, written like an h_t
            for q in range(NBO):
                b = owned(lane, q)
                if active and b < B:
                    xchg[row * B + b] = zero_band(float32(h_in[b, row]))
        if FOLD:                                         # (the block's own part of h_in is not waited for)
            cuda.syncthreads()
        if ISSUE:
            issue_all(xchg_words, t_start * n_words, pf, tid, nthreads, n_words, False)
        elif not CHUNKED:
            issue_loads(xchg_words, t_start * n_words, 0, pf, tid, nthreads, n_words)
        for t in range(t_start, t_stop):
            stamp(tr, t, 0, clock64())
            load_bias(bprime, t, hidden, row, lane, active, bp)   # off the critical path: ready by the reduce
            if ISSUE and t > t_start:                    # every word of h_{t-1}, no checks (after a delay)
                if DELAY > 0:
                    start = clock64()
                    while clock64() - start < DELAY:
                        pass
                issue_all(xchg_words, t * n_words, pf, tid, nthreads, n_words, False)
            # load: poll until none of this thread's words is -0.0 (bounded), copy them to shared memory
            base = t * n_words
            woff = (t % NBUF) * buf_words
            if SHFL and not CHUNKED and not PIPELINE and not ISSUE and t > t_start:
                issue_loads(xchg_words, base, 0, pf, tid, nthreads, n_words)   # in flight over the barrier
            if SHFL and NBUF == 1:                       # every warp's operate(t-1) read h before it is replaced
                cuda.syncthreads()
            if CHUNKED:                                  # CHW words at a time: fewer registers, a round trip each
                pending = False
                polls = 0
                for kb in range(0, (n_words + nthreads - 1) // nthreads, CHW):
                    for k in range(CHW):
                        pf[k] = PENDING
                    pend, rounds = poll(xchg_words, base, kb, pf, tid, nthreads, n_words, spin_limit)
                    pending = pending or pend
                    polls += rounds
                    store_words(h_words, h_u16, woff, kb, pf, tid, nthreads, n_words, hidden)
            else:
                pending, polls = poll(xchg_words, base, 0, pf, tid, nthreads, n_words, spin_limit)
            if pending:
                abort[0] = 1
            stamp(tr, t, 1, clock64())
            if not CHUNKED:
                store_words(h_words, h_u16, woff, 0, pf, tid, nthreads, n_words, hidden)
            cuda.syncthreads()
            stamp(tr, t, 2, clock64())
            if abort[0] != 0:                            # timed out: leave together, host resumes
                if tid == 0:
                    cuda.atomic.max(status, 0, 1)
                return
            if PIPELINE and t + 1 < t_stop:              # software pipeline: issue h_t's loads now
                issue_loads(xchg_words, (t + 1) * n_words, 0, pf, tid, nthreads, n_words)
            elif not CHUNKED and not SHFL and not ISSUE:
                for k in range(CHW):
                    pf[k] = PENDING                      # loaded in the next load stage
            operate(h_sh, woff * 4 // ITEM, hidden, w, j, acc)
            stamp(tr, t, 3, clock64())
            reduce_and_write(red, red_off, acc, tid, r_local, lane, row, active, t, bp, xchg, stride, hs,
                             hidden, cs, c)
            stamp(tr, t, 4, clock64())
            stamp(tr, t, 5, polls)

    body = barrier_kernel if const.barrier else lamport_kernel
    if threads and not config.ENABLE_CUDASIM:                 # the simulator takes no launch bounds
        return cuda.jit(launch_bounds=(threads, 1))(body)
    return cuda.jit(body)


@cuda.jit
def _fill(a, value):
    """Preset a 1-D array (Lamport's -0.0 in every output slot)."""
    i = cuda.grid(1)
    if i < a.size:
        a[i] = value


def _neg0_word(dtype: np.dtype) -> np.uint32:
    """A 32-bit word of -0.0 elements of ``dtype`` (one float32, two float16)."""
    return np.uint32(_NEG0_F32 if dtype.itemsize == 4 else _NEG0_F16 | _NEG0_F16 << 16)


@cuda.jit
def _fill_words(words, value):
    """Preset a 1-D uint32 array with ``value`` in every word, 4 words (one 16-byte store) per thread
    (``preset="vector"``; the array 16-byte aligned, as device allocations are)."""
    i = cuda.grid(1) * 4
    if i + 3 < words.size:
        store4(words, i, (value, value, value, value))
    else:
        for k in range(i, min(i + 4, words.size)):
            words[k] = value


@cuda.jit
def _set_h0(h0, xchg):
    """xchg[0] = h0, batch-interleaved: xchg[j * B + b] = h0[b, j]; -0.0 is written as +0.0 (Lamport's sentinel;
    the sums are the same: an accumulator that starts at +0.0 is not changed by adding -0.0)."""
    i = cuda.grid(1)
    batch, hidden = h0.shape
    if i < batch * hidden:
        xchg[i] = h0[i % batch, i // batch]
        if float32(xchg[i]) == float32(0.0):
            xchg[i] = 0


# ---------------------------------------------------------------------------
# launcher
# ---------------------------------------------------------------------------

def step_stride(hidden: int, batch: int) -> int:
    """Elements of one step's h in the exchange buffer: H * B rounded up to 4 (whole, aligned words)."""
    return cdiv(hidden * batch, 4) * 4


def shared_bytes(hidden: int, batch: int, itemsize: int, threads: int, gates: int = 1, buffers: int = 1,
                 partials: bool = True) -> int:
    """Dynamic shared memory of one block: ``buffers`` copies of h (16-byte aligned) plus the partial sums
    (``partials``: the shared-memory reduce stage)."""
    return (buffers * ((step_stride(hidden, batch) * itemsize + 15) // 16 * 16)
            + (threads * gates * batch * 4 if partials else 0))


def max_hidden(batch: int, itemsize: int, threads: int, limit: int = SHARED_LIMIT, gates: int = 1,
               buffers: int = 1, partials: bool = True) -> int:
    """Largest hidden size whose activations fit ``limit`` bytes of shared memory per block."""
    red = threads * gates * batch * 4 if partials else 0
    return max(0, ((limit - red) // buffers - 16) // (batch * itemsize) // 4 * 4)


def shared_limit() -> int:
    """Dynamic shared memory one block may use here: the device's opt-in maximum (H100: 232448 bytes).

    Launches above :data:`SHARED_LIMIT` set the kernel's
    ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`` first (docs/numba_notes.md).
    The simulator has no such attribute: 48 KB there.
    """
    if config.ENABLE_CUDASIM:
        return SHARED_LIMIT
    return int(cuda.get_current_device().MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)


POLLS = ("batch", "lead", "issue")
GRID_SYNCS = ("cg", "atomic")
LOADS = ("volatile", "relaxed", "cg")
REDUCES = ("shared", "shfl")
#: how a Lamport launch presets its exchange buffer to -0.0: an element per thread, or 16 bytes per thread
PRESETS = ("element", "vector")


@dataclass
class PersistentRNN:
    """A prepared persistent launch: weights on the device, kernel and grid chosen.

    Build once (``PersistentRNN(layout, batch=4, ...)``), call many times with
    ``(b_prime, h0, steps)`` (LSTM: ``(b_prime, h0, steps, c0)``);
    :func:`rnn_forward` and :func:`lstm_forward` do both in one call.
    ``cell="lstm"``: ``layout`` holds the ``(4H, H)`` gate rows (i, f, g, o),
    each thread holds ``npt`` pairs of each of its unit's four rows.
    Tunables (results do not depend on them; the defaults are the fastest
    measured on the H100 for the Lamport kernel, ``experiments/results/persistent_rnn.md``;
    the wide-load barrier kernels are faster with ``vector=True``):

    * ``poll``, ``double_buffer``, ``pipeline`` (Lamport only); ``grid_sync`` (barrier only);
      ``load``; ``chunk``; ``index16`` (indices packed two per register);
    * ``reduce``: ``"shfl"`` for warp shuffles (``tpr <= 32``);
    * ``bound_registers``: the block size compiled in and launch bounds of one block per SM, so
      ptxas keeps the registers that fit (default on);
    * ``vector``: 16-byte loads and stores of h's words (wide scheme);
    * ``fold_h0`` (Lamport): the kernel writes h0 into exchange slot 0 itself, so a
      run is the preset and the kernel, two launches instead of three;
    * ``preset`` (Lamport): ``"element"`` presets the exchange with a store per element,
      ``"vector"`` with a 16-byte store per thread (the same bytes);
    * ``poll="issue"`` (Lamport without chunk and pipeline): a step
      issues all of a thread's loads of h at once, addressed at constant offsets, then checks them
      (``_kernel``); ``issue_delay``: clock cycles to spin before those loads;
    * ``trace=True`` records per-stage clock64 stamps of every block and step in
      ``trace_cycles()`` (for finding where a step's time goes; see ``TRACE_PHASES``).

    ``poll="issue"`` with ``issue_delay=300``, ``fold_h0`` and ``preset="vector"`` is Table 1's Lamport row
    (1.375 us/step at 1792 against 1.60; ``persistent_rnn.md``). ``grid``: blocks launched.
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
    poll: str = "batch"
    double_buffer: bool = False
    index16: bool = False
    trace: bool = False
    grid_sync: str = "atomic"
    load: str = "relaxed"
    chunk: int = 0
    reduce: str = "shared"
    bound_registers: bool = True
    vector: bool = False
    fold_h0: bool = False
    preset: str = "element"
    issue_delay: int = 0

    def __post_init__(self):
        check_layout(self.layout)   # again: its arrays may have changed since it was built, and the kernel trusts them
        self._check_options()
        words = self._size_launch()
        self._build(words)

    def _check_options(self) -> None:
        """Validation: the layout's dtype and shape, each option's kind, and the combinations the kernel has."""
        lay = self.layout
        if lay.dtype not in (np.dtype(np.float32), np.dtype(np.float16)):
            raise TypeError(f"layout: values must be float32 or float16, got {lay.dtype}")
        for name, value, allowed in (("scheme", self.scheme, SCHEMES), ("sync", self.sync, SYNCS),
                                     ("activation", self.activation, ACTIVATIONS), ("cell", self.cell, CELLS),
                                     ("poll", self.poll, POLLS), ("grid_sync", self.grid_sync, GRID_SYNCS),
                                     ("load", self.load, LOADS), ("reduce", self.reduce, REDUCES),
                                     ("preset", self.preset, PRESETS)):
            if value not in allowed:
                raise ValueError(f"{name}: expected one of {allowed}, got {value!r}")
        for name in ("pipeline", "double_buffer", "index16", "trace", "bound_registers", "vector", "fold_h0"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name}: expected a bool, got {type(getattr(self, name)).__name__}")
        self.gates = 4 if self.cell == "lstm" else 1
        rows, hidden = lay.shape
        if rows != self.gates * hidden:
            want = "(4H, H) for an LSTM" if self.gates == 4 else "square (H, H)"
            raise ValueError(f"layout: a recurrent weight is {want}, got shape {lay.shape}")
        if self.cell == "lstm" and self.activation != "tanh":
            raise ValueError(f"activation: an LSTM uses sigmoid and tanh, got activation={self.activation!r}")
        if self.index16 and hidden > 1 << 16:
            raise ValueError(f"index16: 16-bit indices address at most 65536 columns, got hidden={hidden}")
        self.hidden = hidden
        self.batch = check_int(self.batch, "batch", minimum=1)
        if self.scheme == "wide" and self.batch != 4:
            raise ValueError(f"batch: the wide-load scheme loads 4 samples at once and needs batch=4, "
                             f"got {self.batch} (use scheme='naive')")
        if self.sync == "lamport" and self.scheme != "wide":
            raise ValueError(f"scheme: sync='lamport' copies h to shared memory as it arrives, batch-interleaved, "
                             f"and needs scheme='wide' (Table 1 adds it on top of wide loads), got {self.scheme!r}")
        self.spin_limit = check_int(self.spin_limit, "spin_limit", minimum=1, maximum=1 << 22)  # ~4 s of 1 us polls
        self.chunk = check_int(self.chunk, "chunk", minimum=0)
        if self.reduce == "shfl" and lay.tpr > 32:
            raise ValueError(f"reduce: 'shfl' sums a row's threads within one warp and needs tpr <= 32, "
                             f"got tpr={lay.tpr} (use reduce='shared')")
        if self.chunk and self.pipeline:
            raise ValueError("chunk: the Lamport pipeline prefetches all of a thread's words; use chunk=0 with it")
        self.max_relaunch = check_int(self.max_relaunch, "max_relaunch", minimum=0)
        if self.fold_h0 and self.sync != "lamport":
            raise ValueError(f"fold_h0: an option of the Lamport kernel; got sync={self.sync!r}")
        self.issue_delay = check_int(self.issue_delay, "issue_delay", minimum=0, maximum=1 << 20)
        if self.issue_delay and self.poll != "issue":
            raise ValueError(f"issue_delay: a delay before the loads of poll='issue', got poll={self.poll!r}")
        if self.poll == "issue" and (self.sync != "lamport" or self.chunk or self.pipeline):
            raise ValueError(f"poll: 'issue' is an option of the Lamport kernel without chunk and pipeline; "
                             f"got sync={self.sync!r}, chunk={self.chunk}, pipeline={self.pipeline}")

    def _size_launch(self) -> int:
        """Launch sizes: rows per block and grid, shared memory (refused past the device's limit), the exchange's
        step stride; returns the words of h a thread moves per step."""
        lay, hidden = self.layout, self.hidden
        if self.rows_per_block is None:
            self.rows_per_block = self._default_rows_per_block(hidden, lay.tpr)
        self.split = split(hidden, lay.tpr, self.rows_per_block)
        self.buffers_h = 2 if self.double_buffer and self.sync == "lamport" else 1
        threads = self.split.threads_per_block
        self.grid = self.split.blocks                     #: blocks launched
        itemsize = lay.dtype.itemsize
        partials = self.reduce == "shared" or bool(config.ENABLE_CUDASIM)   # the simulator has no shuffles
        self.smem = shared_bytes(hidden, self.batch, itemsize, threads, self.gates, self.buffers_h, partials)
        limit = shared_limit() - _STATIC_SHARED
        if self.smem > limit:
            raise ValueError(
                f"layout: hidden size {hidden} needs {self.smem} bytes of shared memory per block "
                f"({self.buffers_h} x h for batch {self.batch} plus partial sums), over this device's {limit}-byte "
                f"limit; the largest that fits with {threads} threads is "
                f"{max_hidden(self.batch, itemsize, threads, limit, self.gates, self.buffers_h, partials)}")
        if config.ENABLE_CUDASIM and self.split.blocks > 1:
            raise ValueError(f"rows_per_block: the CUDA simulator runs one block at a time, so a persistent "
                             f"launch must be one block (rows_per_block >= {hidden}), got {self.split.blocks} blocks")
        self.stride = step_stride(hidden, self.batch)
        n_words = self.stride * itemsize // 4
        if not self.vector:
            return cdiv(n_words, threads)
        if self.scheme != "wide" or self.chunk or n_words % 4:
            raise ValueError(f"vector: 16-byte groups of h need scheme='wide', chunk=0 and a step of h that is "
                             f"a whole number of 16-byte groups; got scheme={self.scheme!r}, chunk={self.chunk}, "
                             f"{n_words * 4} bytes per step")
        return 4 * cdiv(n_words // 4, threads)

    def _build(self, words: int) -> None:
        """The kernel for these options and the device arrays every launch shares (weights, placeholders)."""
        lay = self.layout
        threads = self.split.threads_per_block
        self.kernel = _kernel(self.sync, self.scheme, lay.dtype, lay.npt, lay.tpr, self.batch,
                              self.activation, words, self.pipeline, self.cell, self.poll,
                              self.buffers_h == 2, self.index16, self.trace, self.grid_sync, self.load,
                              min(self.chunk, words), self.reduce, threads if self.bound_registers else 0,
                              self.vector, self.fold_h0, self.issue_delay)
        self.vals = cuda.to_device(np.ascontiguousarray(lay.values))
        idx = thread_packed_indices(lay) if self.index16 else lay.indices
        self.idx = cuda.to_device(np.ascontiguousarray(idx))
        self._no_cell = (cuda.device_array((1, 1, 1), dtype=lay.dtype), cuda.device_array((1, 1), dtype=lay.dtype))
        self._trace = cuda.device_array(1, dtype=np.int64)
        self._no_h = cuda.device_array((self.batch, self.hidden), dtype=lay.dtype)
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

    def _args(self, bprime, xchg, hs, status, t_start, t_stop, cs, c0, h_in=None):
        """The kernel's arguments; ``h_in`` (``fold_h0``): the ``(B, H)`` state the kernel writes into slot 0."""
        if cs is None:
            cs, c0 = self._no_cell
        return (self.vals, self.idx, bprime, xchg, xchg.view(np.uint32), hs, cs, c0, self._trace, status,
                self._no_h if h_in is None else h_in,
                self.hidden, self.stride, t_start, t_stop, self.spin_limit)

    def trace_cycles(self) -> np.ndarray:
        """The last traced run's stamps, ``(blocks, steps, len(TRACE_PHASES))`` int64 (``trace=True``)."""
        if not self.trace:
            raise ValueError("trace: this plan was built with trace=False")
        return self._trace.copy_to_host().reshape(self.grid, -1, len(TRACE_PHASES))

    def check_coresident(self, args) -> None:
        """Refuse a launch whose blocks cannot all be resident at once (it would deadlock)."""
        if config.ENABLE_CUDASIM:
            return
        argtypes = tuple(typeof(a) for a in args)
        if argtypes in self._checked:
            return
        compiled = self.kernel.compile(argtypes)
        if self.smem > SHARED_LIMIT:
            allow_dynamic_shared(compiled, self.smem)
        self.resources = {"registers": compiled.regs_per_thread, "local_bytes": compiled.local_mem_per_thread,
                          "max_threads_per_block": compiled.max_threads_per_block}
        fit = compiled.max_cooperative_grid_blocks(self.split.threads_per_block, self.smem)
        if self.grid > fit:
            sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
            raise ValueError(
                f"layout: {self.grid} blocks of {self.split.threads_per_block} threads "
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
                self._resume(bp.dev, xchg, hs, status, steps, cs, c0o.dev if c0o else None, h0=h0o.dev)
            elif int(status.copy_to_host()[0]) != 0:
                raise RuntimeError(f"persistent RNN: the grid barrier timed out after spin_limit={self.spin_limit} "
                                   f"polls; blocks are not making progress (not co-resident?)")
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
        """Device scratch for a run of ``steps``: the exchange buffer and the status flags.

        The exchange holds ``h_0..h_T`` (preset by every Lamport launch).
        ``status``: [timeout flag, arrivals (grid barrier)]."""
        xchg = cuda.device_array((steps + 1) * self.stride, dtype=self.layout.dtype)
        if self.trace and self._trace.size != self.grid * steps * len(TRACE_PHASES):
            self._trace = cuda.to_device(np.zeros(self.grid * steps * len(TRACE_PHASES), dtype=np.int64))
        return xchg, cuda.to_device(np.zeros(2, dtype=np.int32))

    def enqueue(self, bprime, h0, steps: int, xchg, hs, status, cs=None, c0=None, *, start: int = 0) -> None:
        """Queue one run on device arrays without synchronising (what a benchmark times).

        Lamport: preset every output slot to -0.0 and copy h0 into slot 0,
        then launch (``fold_h0``: the preset and the launch, the kernel writes
        h0). A spin timeout shows in ``status[0]`` afterwards (``__call__``
        handles it). ``cs``/``c0``: the LSTM's cell states (output) and
        initial cell state. ``start`` (Lamport): the first step the launch
        runs; a fault-injection hook:
        started at 1 on the fresh preset, no block ever writes the h_1 every
        block waits for, so every spin times out whatever the timing (the
        GPU tests of the relaunch use it).
        """
        start = check_int(start, "start", minimum=0, maximum=steps)
        if start and self.sync != "lamport":
            raise ValueError("start: only a Lamport run can start past step 0")
        n = self.hidden * self.batch
        if self.sync == "lamport" and self.preset == "vector":
            words = xchg.view(np.uint32)
            _fill_words[cdiv(words.size, 4 * 256), 256](words, _neg0_word(self.layout.dtype))
        elif self.sync == "lamport":
            _fill[cdiv(xchg.size, 256), 256](xchg, self.layout.dtype.type(-0.0))
        if not self.fold_h0:
            _set_h0[cdiv(n, 256), 256](h0, xchg[:self.stride])
        args = self._args(bprime, xchg, hs, status, start, steps, cs, c0, h0)
        self.check_coresident(args)
        self._launch(args)

    def _launch(self, args) -> None:
        """One launch of the persistent kernel."""
        self.kernel[self.grid, self.split.threads_per_block, 0, self.smem](*args)

    def _resume(self, bprime, xchg, hs, status, steps, cs=None, c0=None, h0=None):
        """After a spin timeout, relaunch from the first step whose outputs are incomplete (``fold_h0``: slot 0
        may be the incomplete one, then the relaunch starts at step 0 and writes ``h0`` there again)."""
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
            first = int(np.argmax(pending))                      # first step with a missing value (>= 1 or fold_h0)
            start = max(first - 1, 0)
            if self.fold_h0 and start == 0 and h0 is None:
                raise ValueError("h0: a fold_h0 run resumed from step 0 writes h0 again; pass h0")
            status.copy_to_device(np.zeros(status.shape, dtype=np.int32))
            args = self._args(bprime, xchg, hs, status, start, steps, cs, c0, h0 if self.fold_h0 else None)
            self._launch(args)


def rnn_forward(layout: RNNLayout, b_prime, h0, steps: int, activation: str = "tanh", *,
                scheme: str = "wide", sync: str = "lamport", rows_per_block: int | None = None,
                spin_limit: int = 1 << 22):
    """Every state of ``h_t = g(U h_{t-1} + b'_t)``, ``(steps, B, H)``, in one persistent launch.

    Equals :func:`sparsekit.reference.persistent_rnn.rnn_forward` called with the same
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
    """Every ``(h_t, c_t)`` of an LSTM in one persistent launch; equals :func:`sparsekit.reference.persistent_rnn.lstm_forward`.

    ``layout``: the ``(4H, H)`` recurrent weight (gate rows i, f, g, o) from
    :func:`sparsekit.rnn_layout.balance` (and optionally ``bank_aware(..., gates=4)``);
    ``b_prime`` ``(T, B, 4H)``; ``h0``, ``c0`` ``(B, H)``. Returns ``(h, c)``.
    """
    batch = np.shape(h0)[0] if len(np.shape(h0)) == 2 else 0
    plan = PersistentRNN(layout, batch, scheme=scheme, sync=sync, rows_per_block=rows_per_block,
                         spin_limit=spin_limit, cell="lstm")
    return plan(b_prime, h0, steps, c0)
