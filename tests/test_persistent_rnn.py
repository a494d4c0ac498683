"""sparsekit/gpu/persistent_rnn.py equals sparsekit/reference/persistent_rnn.py (simulator: one block; GPU: tests/gpu/).

The simulator runs blocks one after another, so a persistent kernel can only
be simulated as a single block; its multi-block synchronisation (grid barrier,
Lamport flags across blocks) is tested on the GPU.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparsekit.gpu import persistent_rnn as gpu_rnn
from sparsekit.reference import persistent_rnn as ref_rnn
from sparsekit.rnn_layout import RNNLayout, balance, bank_aware
from tests import strategies as sks

# The float16 poll's zero-half test (``(x - 0x00010001) & ~x & 0x80008000``) wraps uint32 on purpose; the GPU wraps
# silently, NumPy's scalars (the simulator) warn.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in scalar subtract:RuntimeWarning")

#: The four rows of the paper's Table 1: (scheme, sync, bank-aware layout).
CONFIGS = {
    "naive": ("naive", "barrier", False),
    "wide": ("wide", "barrier", False),
    "bank_aware": ("wide", "barrier", True),
    "lamport": ("wide", "lamport", True),
}

tolerance = ref_rnn.tolerance


def _scaled(dense: np.ndarray, dtype) -> np.ndarray:
    """Scale so each row's |U| sum is <= 1/2 (what reference.persistent_rnn.tolerance assumes)."""
    rowsum = np.abs(dense.astype(np.float64)).sum(axis=1).max()
    return (dense / (2 * rowsum) if rowsum > 0 else dense).astype(dtype)


def _one_block(hidden: int, tpr: int) -> int:
    """rows_per_block covering all rows with a warp-multiple of threads (simulator: one block)."""
    return -(-hidden * tpr // 32) * 32 // tpr


@st.composite
def problems(draw, *, batch=None):
    dtype = draw(sks.dtypes(allowed=(np.float32, np.float16)))
    hidden = draw(st.integers(1, 20))
    batch = batch if batch is not None else draw(st.integers(1, 4))
    steps = draw(st.integers(1, 3))
    u = _scaled(draw(sks.sparse_dense((hidden, hidden), dtype=np.float32)), dtype)
    bp = draw(sks.dense_arrays((steps, batch, hidden), dtype=np.float32, low=0.0, high=1.0)).astype(dtype)
    h0 = draw(sks.dense_arrays((batch, hidden), dtype=np.float32, low=0.0, high=1.0)).astype(dtype)
    tpr = draw(st.sampled_from([1, 2, 4, 8]))
    activation = draw(st.sampled_from(gpu_rnn.ACTIVATIONS))
    return u, bp, h0, steps, tpr, activation


def _run(u, bp, h0, steps, tpr, activation, config):
    scheme, sync, aware = CONFIGS[config]
    lay = balance(u, tpr=tpr)
    if aware:
        lay = bank_aware(lay, width=4 * u.dtype.itemsize)
    got = gpu_rnn.rnn_forward(lay, bp, h0, steps, activation, scheme=scheme, sync=sync,
                              rows_per_block=_one_block(u.shape[0], tpr))
    return lay, got


@pytest.mark.parametrize("config", list(CONFIGS))
@given(problem=problems(batch=4))
def test_table1_configs_match_reference(config, problem):
    u, bp, h0, steps, tpr, activation = problem
    lay, got = _run(u, bp, h0, steps, tpr, activation, config)
    want = ref_rnn.rnn_forward(u, bp, h0, steps, activation)
    assert got.shape == want.shape == (steps, 4, u.shape[0]) and got.dtype == u.dtype
    err = np.abs(got.astype(np.float64) - want.astype(np.float64)).max()
    assert err <= tolerance(u.dtype, lay.kpad), (config, err)


def _poll_fits(opts: dict) -> dict:
    """``poll="issue"`` leaves out chunk and pipeline (``test_preset_and_poll_bad_configuration``): where options
    drawn with it include one, poll by rounds."""
    if opts.get("poll") == "issue" and any(opts.get(k) for k in ("chunk", "pipeline")):
        opts["poll"] = "batch"
    return opts


@st.composite
def tunables(draw):
    """(sync, options): every PersistentRNN tunable that must leave the result unchanged."""
    sync = draw(st.sampled_from(gpu_rnn.SYNCS))
    opts = {"index16": draw(st.booleans()), "load": draw(st.sampled_from(gpu_rnn.LOADS)),
            "chunk": draw(st.sampled_from([0, 1, 2])), "reduce": draw(st.sampled_from(gpu_rnn.REDUCES)),
            "vector": draw(st.booleans())}
    if sync == "barrier":
        opts["grid_sync"] = draw(st.sampled_from(gpu_rnn.GRID_SYNCS))
    else:
        opts.update(pipeline=draw(st.booleans()) and not opts["chunk"], poll=draw(st.sampled_from(gpu_rnn.POLLS)),
                    double_buffer=draw(st.booleans()))
        _poll_fits(opts)
    return sync, opts


@given(problem=problems(batch=4), tun=tunables())
def test_tunables_match_reference(problem, tun):
    """16-bit packed indices, load kind, chunked load stage, the inline grid barrier, Lamport's pipeline,
    poll pattern, double buffer, reduce kind (the simulator has no
    shuffles: it runs the shared reduction, the shuffles are checked on the GPU and by
    tests/compile/test_persistent_rnn_shfl_compile.py), 16-byte loads and stores of h."""
    u, bp, h0, steps, tpr, activation = problem
    sync, opts = tun
    # vector needs whole 16-byte groups of h and no chunks (test_bad_configuration checks the refusal)
    opts["vector"] = opts["vector"] and not opts["chunk"] and u.shape[0] * 4 * u.dtype.itemsize % 16 == 0
    lay = bank_aware(balance(u, tpr=tpr), width=4 * u.dtype.itemsize)
    plan = gpu_rnn.PersistentRNN(lay, 4, sync=sync, activation=activation,
                                 rows_per_block=_one_block(u.shape[0], tpr), **opts)
    got = plan(bp, h0, steps)
    want = ref_rnn.rnn_forward(u, bp, h0, steps, activation)
    assert np.abs(got.astype(np.float64) - want.astype(np.float64)).max() <= tolerance(u.dtype, lay.kpad)


@pytest.mark.parametrize("sync", gpu_rnn.SYNCS)
def test_trace_records_every_stage_in_order(sync):
    u = _scaled(np.eye(8, dtype=np.float32) + 0.25, np.float32)
    bp, h0 = np.zeros((3, 4, 8), dtype=np.float32), np.ones((4, 8), dtype=np.float32)
    plan = gpu_rnn.PersistentRNN(balance(u, tpr=4), 4, sync=sync, rows_per_block=8, trace=True)
    plan(bp, h0, 3)
    stamps = plan.trace_cycles()
    assert stamps.shape == (1, 3, len(gpu_rnn.TRACE_PHASES))
    clocks = stamps[..., :5] if sync == "lamport" else stamps
    assert (np.diff(clocks, axis=-1) >= 0).all() and (np.diff(stamps[0, :, 0]) > 0).all()
    if sync == "lamport":
        assert (stamps[..., 5] >= 1).all()                  # poll rounds


@given(problem=problems())
def test_naive_any_batch_matches_reference(problem):
    u, bp, h0, steps, tpr, activation = problem
    lay, got = _run(u, bp, h0, steps, tpr, activation, "naive")
    want = ref_rnn.rnn_forward(u, bp, h0, steps, activation)
    assert np.abs(got.astype(np.float64) - want.astype(np.float64)).max() <= tolerance(u.dtype, lay.kpad)


@st.composite
def lstm_problems(draw):
    dtype = draw(sks.dtypes(allowed=(np.float32, np.float16)))
    hidden = draw(st.integers(1, 12))
    steps = draw(st.integers(1, 3))
    u = _scaled(draw(sks.sparse_dense((4 * hidden, hidden), dtype=np.float32)), dtype)
    bp = draw(sks.dense_arrays((steps, 4, 4 * hidden), dtype=np.float32, low=0.0, high=1.0)).astype(dtype)
    h0 = draw(sks.dense_arrays((4, hidden), dtype=np.float32, low=0.0, high=1.0)).astype(dtype)
    c0 = draw(sks.dense_arrays((4, hidden), dtype=np.float32, low=0.0, high=1.0)).astype(dtype)
    tpr = draw(st.sampled_from([1, 2, 4, 8]))
    return u, bp, h0, c0, steps, tpr


@pytest.mark.parametrize("config", list(CONFIGS))
@given(problem=lstm_problems())
def test_lstm_matches_reference(config, problem):
    """Appendix B: each thread holds pairs of its unit's four gate rows; c stays with its thread."""
    u, bp, h0, c0, steps, tpr = problem
    scheme, sync, aware = CONFIGS[config]
    lay = balance(u, tpr=tpr)
    if aware:
        lay = bank_aware(lay, width=4 * u.dtype.itemsize, gates=4)
    h, c = gpu_rnn.lstm_forward(lay, bp, h0, c0, steps, scheme=scheme, sync=sync,
                                rows_per_block=_one_block(u.shape[1], tpr))
    want_h, want_c = ref_rnn.lstm_forward(u, bp, h0, c0, steps)
    tol = ref_rnn.lstm_tolerance(u.dtype, lay.kpad, steps)
    assert h.shape == c.shape == (steps, 4, u.shape[1])
    assert np.abs(h.astype(np.float64) - want_h.astype(np.float64)).max() <= tol
    assert np.abs(c.astype(np.float64) - want_c.astype(np.float64)).max() <= tol


def test_lstm_bad_input():
    u = _scaled(np.ones((8, 2), dtype=np.float32), np.float32)
    lay = balance(u, tpr=4)
    bp, h0 = np.zeros((2, 4, 8), dtype=np.float32), np.zeros((4, 2), dtype=np.float32)
    with pytest.raises(ValueError, match="c0: an LSTM needs the initial cell state"):
        gpu_rnn.PersistentRNN(lay, 4, cell="lstm", rows_per_block=8)(bp, h0, 2)
    with pytest.raises(ValueError, match=r"layout: a recurrent weight is \(4H, H\) for an LSTM"):
        gpu_rnn.PersistentRNN(balance(np.ones((6, 2), dtype=np.float32), tpr=4), 4, cell="lstm", rows_per_block=8)
    with pytest.raises(ValueError, match="activation: an LSTM uses sigmoid and tanh"):
        gpu_rnn.PersistentRNN(lay, 4, cell="lstm", activation="relu", rows_per_block=8)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_lamport_never_writes_negative_zero(dtype):
    """relu of negative sums and float16 values that round to -0 are written as +0.0 (Section 4.2)."""
    hidden, steps = 8, 2
    u = np.full((hidden, hidden), -0.01, dtype=dtype)
    bp = np.full((steps, 4, hidden), -1e-9 if dtype == np.float16 else -1.0, dtype=np.float32).astype(dtype)
    h0 = np.ones((4, hidden), dtype=dtype)
    got = gpu_rnn.rnn_forward(balance(u, tpr=4), bp, h0, steps, "relu", rows_per_block=8)
    assert (got == 0).all() and not np.signbit(got).any()
    got = gpu_rnn.rnn_forward(balance(u, tpr=4), bp, h0, steps, "tanh", rows_per_block=8)
    assert not np.signbit(got[got == 0]).any()


def test_empty_weight_and_zero_steps():
    u = np.zeros((5, 5), dtype=np.float32)
    bp = np.linspace(-1, 1, 3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    h0 = np.ones((4, 5), dtype=np.float32)
    lay = balance(u, tpr=1)
    assert lay.kpad == 0 or lay.nnz == 0
    got = gpu_rnn.rnn_forward(lay, bp, h0, 3, rows_per_block=32)
    np.testing.assert_allclose(got, np.tanh(bp), rtol=0, atol=tolerance(np.float32, lay.kpad))
    assert gpu_rnn.rnn_forward(lay, bp, h0, 0, rows_per_block=32).shape == (0, 4, 5)


# -- bad input: a clear error before any launch ---------------------------------

def _inputs(hidden=8, batch=4, dtype=np.float32):
    u = _scaled(np.eye(hidden, dtype=np.float32) + 0.5, dtype)
    return balance(u, tpr=4), np.zeros((2, batch, hidden), dtype=dtype), np.zeros((batch, hidden), dtype=dtype)


def test_wide_needs_batch_4():
    lay, bp, h0 = _inputs(batch=3)
    with pytest.raises(ValueError, match="batch: the wide-load scheme .* got 3"):
        gpu_rnn.rnn_forward(lay, bp, h0, 2, scheme="wide", sync="barrier", rows_per_block=8)


def test_lamport_needs_wide():
    lay, bp, h0 = _inputs()
    with pytest.raises(ValueError, match="scheme: sync='lamport'"):
        gpu_rnn.rnn_forward(lay, bp, h0, 2, scheme="naive", sync="lamport", rows_per_block=8)


def test_layer_too_large_for_shared_memory():
    hidden = 64
    batch = gpu_rnn.shared_limit() // (hidden * 4) + 1   # h alone is over this backend's limit (simulator or GPU)
    lay = balance(np.eye(hidden, dtype=np.float32), tpr=1)
    with pytest.raises(ValueError, match=r"needs \d+ bytes of shared memory .* the largest that fits"):
        gpu_rnn.PersistentRNN(lay, batch, scheme="naive", sync="barrier", rows_per_block=hidden)


@pytest.mark.simulator("on a GPU several blocks run: tests/gpu/test_persistent_rnn_gpu.py "
                       "test_multi_block_matches_reference_and_repeats_bitwise")
def test_simulator_refuses_several_blocks():
    lay, bp, h0 = _inputs(hidden=16)
    with pytest.raises(ValueError, match="one block at a time"):
        gpu_rnn.rnn_forward(lay, bp, h0, 2, rows_per_block=8)


@pytest.mark.parametrize("field, value, exc, match", [
    ("bp_nan", None, ValueError, "b_prime: must be finite"),
    ("bp_shape", None, ValueError, "b_prime: expected shape"),
    ("h0_shape", None, ValueError, "h0: expected shape"),
    ("dtype", None, TypeError, "b_prime: dtype"),
])
def test_bad_operands(field, value, exc, match):
    lay, bp, h0 = _inputs()
    if field == "bp_nan":
        bp[1, 2, 3] = np.nan
    elif field == "bp_shape":
        bp = np.zeros((2, 4, 7), dtype=np.float32)
    elif field == "h0_shape":
        h0 = np.zeros((4, 9), dtype=np.float32)
    else:
        bp = bp.astype(np.float64)
    with pytest.raises(exc, match=match):
        gpu_rnn.PersistentRNN(lay, 4, rows_per_block=8)(bp, h0, 2)


def test_bad_configuration():
    lay, _, _ = _inputs()
    with pytest.raises(ValueError, match="scheme: expected one of"):
        gpu_rnn.PersistentRNN(lay, 4, scheme="v8", rows_per_block=8)
    with pytest.raises(ValueError, match="activation: expected one of"):
        gpu_rnn.PersistentRNN(lay, 4, activation="gelu", rows_per_block=8)
    with pytest.raises(TypeError, match="layout: expected a sparsekit.rnn_layout.RNNLayout"):
        gpu_rnn.PersistentRNN(lay.to_dense(), 4)
    rect = balance(np.ones((4, 8), dtype=np.float32), tpr=4)
    with pytest.raises(ValueError, match=r"layout: a recurrent weight is square"):
        gpu_rnn.PersistentRNN(rect, 4, rows_per_block=8)
    with pytest.raises(ValueError, match="poll: expected one of"):
        gpu_rnn.PersistentRNN(lay, 4, poll="spin", rows_per_block=8)
    with pytest.raises(ValueError, match="grid_sync: expected one of"):
        gpu_rnn.PersistentRNN(lay, 4, sync="barrier", grid_sync="mpi", rows_per_block=8)
    with pytest.raises(ValueError, match="chunk: the Lamport pipeline prefetches"):
        gpu_rnn.PersistentRNN(lay, 4, chunk=2, pipeline=True, rows_per_block=8)
    with pytest.raises(ValueError, match="reduce: expected one of"):
        gpu_rnn.PersistentRNN(lay, 4, reduce="atomic", rows_per_block=8)
    wide_rows = balance(np.ones((64, 64), dtype=np.float32), tpr=64)
    with pytest.raises(ValueError, match="reduce: 'shfl' sums a row's threads within one warp"):
        gpu_rnn.PersistentRNN(wide_rows, 4, reduce="shfl", rows_per_block=1)
    with pytest.raises(ValueError, match="vector: 16-byte groups of h need scheme='wide', chunk=0"):
        gpu_rnn.PersistentRNN(lay, 4, vector=True, chunk=1, rows_per_block=8)
    with pytest.raises(ValueError, match="vector: 16-byte groups of h need"):
        gpu_rnn.PersistentRNN(lay, 4, scheme="naive", sync="barrier", vector=True, rows_per_block=8)
    with pytest.raises(TypeError, match="double_buffer: expected a bool"):
        gpu_rnn.PersistentRNN(lay, 4, double_buffer=1, rows_per_block=8)
    with pytest.raises(ValueError, match="trace: this plan was built with trace=False"):
        gpu_rnn.PersistentRNN(lay, 4, rows_per_block=8).trace_cycles()


def test_index16_refuses_more_than_65536_columns():
    n = 65537
    lay = RNNLayout(np.zeros((n, 1), np.float32), np.zeros((n, 1), np.int32), (n, n), 1, 0)
    with pytest.raises(ValueError, match="index16: 16-bit indices address at most 65536 columns"):
        gpu_rnn.PersistentRNN(lay, 4, index16=True, rows_per_block=32)


# -- h0 in the exchange; relaunch after a spin timeout ------------------------------------------

@pytest.mark.parametrize("kw", [{}, {"fold_h0": True}])
def test_initial_negative_zero_is_a_value(kw):
    """h0 may hold -0.0, Lamport's "not written yet": it is passed on as +0.0, which gives the same sums."""
    u = _scaled(np.eye(8, dtype=np.float32) + 0.25, np.float16)
    bp = np.linspace(-1, 1, 3 * 4 * 8, dtype=np.float32).reshape(3, 4, 8).astype(np.float16)
    h0 = np.full((4, 8), -0.0, dtype=np.float16)
    h0[1] = 0.5
    lay = balance(u, tpr=4)
    got = gpu_rnn.PersistentRNN(lay, 4, rows_per_block=8, spin_limit=1 << 12, max_relaunch=0, **kw)(bp, h0, 3)
    want = ref_rnn.rnn_forward(u, bp, h0, 3)
    assert np.abs(got.astype(np.float64) - want).max() <= tolerance(u.dtype, lay.kpad)


@pytest.mark.parametrize("kw", [{}, dict(preset="vector")], ids=["plain", "vector-preset"])
def test_planted_stall_times_out_and_the_relaunch_finishes(kw):
    """enqueue(start=1) on a fresh preset: the block waits for an h_1 nobody writes, so its spin times out
    (the fault the GPU tests plant); the relaunch from step 0 then gives the reference's states."""
    from numba import cuda
    u = _scaled(np.eye(8, dtype=np.float32) + 0.25, np.float32)
    bp = np.linspace(-1, 1, 5 * 4 * 8, dtype=np.float32).reshape(5, 4, 8)
    h0 = np.ones((4, 8), dtype=np.float32)
    plan = gpu_rnn.PersistentRNN(balance(u, tpr=4), 4, rows_per_block=8, spin_limit=4, max_relaunch=1, **kw)
    d_bp, hs = cuda.to_device(bp), cuda.device_array((5, 4, 8), dtype=np.float32)
    xchg, status = plan.buffers(5)
    plan.enqueue(d_bp, cuda.to_device(h0), 5, xchg, hs, status, start=1)
    assert int(status.copy_to_host()[0]) != 0
    plan._resume(d_bp, xchg, hs, status, 5)
    assert plan.relaunches == 1
    assert np.abs(hs.copy_to_host().astype(np.float64) - ref_rnn.rnn_forward(u, bp, h0, 5)).max() <= \
        tolerance(u.dtype, plan.layout.kpad)
    with pytest.raises(ValueError, match="start: must be"):
        plan.enqueue(d_bp, cuda.to_device(h0), 5, xchg, hs, status, start=6)


def test_retired_options_are_refused():
    """Copies of the exchange, the Lamport ring, thread-block clusters and column parts were measured slower than
    the default everywhere (experiments/results/persistent_rnn.md, Options measured slower) and retired: a plan
    refuses them by name."""
    lay, _, _ = _inputs()
    for kw in ({"copies": 2}, {"ring": True}, {"cluster": 2}, {"parts": 2}, {"passes": "uniform"}):
        with pytest.raises(TypeError, match=next(iter(kw))):
            gpu_rnn.PersistentRNN(lay, 4, rows_per_block=8, **kw)


# -- h0 written by the kernel (fold_h0) -----------------------------------------------------------

@st.composite
def fold_h0_options(draw):
    """Options that combine with ``fold_h0``."""
    opts = {"index16": draw(st.booleans()), "vector": draw(st.booleans()),
            "reduce": draw(st.sampled_from(gpu_rnn.REDUCES)), "double_buffer": draw(st.booleans()),
            "poll": draw(st.sampled_from(gpu_rnn.POLLS)), "load": draw(st.sampled_from(gpu_rnn.LOADS))}
    return _poll_fits(opts)


@given(problem=problems(batch=4), opts=fold_h0_options())
def test_fold_h0_matches_reference(problem, opts):
    """fold_h0: the kernel's own copy of h0 into exchange slot 0 gives the reference's states."""
    u, bp, h0, steps, tpr, activation = problem
    hidden = u.shape[0]
    # 16-byte groups (vector) need a step of h that is whole groups (test_bad_configuration: refused)
    opts["vector"] = opts["vector"] and hidden * 4 * u.dtype.itemsize % 16 == 0
    lay = bank_aware(balance(u, tpr=tpr), width=4 * u.dtype.itemsize)
    plan = gpu_rnn.PersistentRNN(lay, 4, activation=activation, rows_per_block=_one_block(hidden, tpr),
                                 fold_h0=True, **opts)
    got = plan(bp, h0, steps)
    want = ref_rnn.rnn_forward(u, bp, h0, steps, activation)
    assert np.abs(got.astype(np.float64) - want.astype(np.float64)).max() <= tolerance(u.dtype, lay.kpad)


def test_fold_h0_planted_stall_resumes_with_h0():
    """fold_h0: a planted stall (start=1, slot 0 never written) is resumed from step 0 with h0 written again."""
    from numba import cuda
    u = _scaled(np.eye(8, dtype=np.float32) + 0.25, np.float32)
    bp = np.linspace(-1, 1, 5 * 4 * 8, dtype=np.float32).reshape(5, 4, 8)
    h0 = np.ones((4, 8), dtype=np.float32)
    plan = gpu_rnn.PersistentRNN(balance(u, tpr=4), 4, rows_per_block=8, fold_h0=True, spin_limit=4,
                                 max_relaunch=1)
    got = plan(bp, h0, 5)
    assert np.abs(got.astype(np.float64) - ref_rnn.rnn_forward(u, bp, h0, 5)).max() <= tolerance(u.dtype, 2)
    d_bp, hs = cuda.to_device(bp), cuda.device_array((5, 4, 8), dtype=np.float32)
    xchg, status = plan.buffers(5)
    plan.enqueue(d_bp, cuda.to_device(h0), 5, xchg, hs, status, start=1)
    assert int(status.copy_to_host()[0]) != 0
    with pytest.raises(ValueError, match="h0: a fold_h0 run resumed from step 0"):
        plan._resume(d_bp, xchg, hs, status, 5)
    plan._resume(d_bp, xchg, hs, status, 5, h0=cuda.to_device(h0))
    assert plan.relaunches == 1
    assert hs.copy_to_host().tobytes() == got.tobytes()


def test_fold_h0_bad_configuration():
    lay, _, _ = _inputs()
    with pytest.raises(ValueError, match="fold_h0: an option of the Lamport kernel"):
        gpu_rnn.PersistentRNN(lay, 4, rows_per_block=8, fold_h0=True, sync="barrier")
    with pytest.raises(TypeError, match="fold_h0: expected a bool"):
        gpu_rnn.PersistentRNN(lay, 4, rows_per_block=8, fold_h0=1)


# -- the 16-byte preset, the issue-first poll ------------------------------------------------------

@st.composite
def exchange_options(draw):
    """The options ``preset`` and ``poll="issue"`` with those they combine with."""
    poll = draw(st.sampled_from(gpu_rnn.POLLS))
    rounds = poll != "issue"                           # pipeline only with the polls by rounds
    return {"preset": draw(st.sampled_from(gpu_rnn.PRESETS)), "fold_h0": draw(st.booleans()),
            "index16": draw(st.booleans()), "poll": poll,
            "load": draw(st.sampled_from(gpu_rnn.LOADS)), "double_buffer": draw(st.booleans()),
            "pipeline": rounds and draw(st.booleans()), "vector": draw(st.booleans()),
            "issue_delay": 0 if rounds else draw(st.sampled_from([0, 50]))}


@given(problem=problems(batch=4), opts=exchange_options())
def test_preset_and_issue_poll_match_reference(problem, opts):
    """preset="vector": the same -0.0 bytes; poll="issue": all loads first, then checks (scalar words or
    16-byte groups). Both give the reference's states."""
    u, bp, h0, steps, tpr, activation = problem
    opts["vector"] = opts["vector"] and u.shape[0] * 4 * u.dtype.itemsize % 16 == 0     # whole 16-byte groups
    lay = bank_aware(balance(u, tpr=tpr), width=4 * u.dtype.itemsize)
    plan = gpu_rnn.PersistentRNN(lay, 4, activation=activation, rows_per_block=_one_block(u.shape[0], tpr), **opts)
    got = plan(bp, h0, steps)
    want = ref_rnn.rnn_forward(u, bp, h0, steps, activation)
    assert np.abs(got.astype(np.float64) - want.astype(np.float64)).max() <= tolerance(u.dtype, lay.kpad)


@pytest.mark.parametrize("preset", gpu_rnn.PRESETS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_exchange_holds_every_step(preset, dtype):
    """After a run slot 0 of the exchange holds h0 and slot t + 1 h_t, bit for bit the states, and no -0.0 is
    left (with h0 written by a separate launch or by the kernel)."""
    from numba import cuda
    u = _scaled(np.eye(12, dtype=np.float32) + 0.25, dtype)
    bp = np.linspace(-1, 1, 4 * 4 * 12, dtype=np.float32).reshape(4, 4, 12).astype(dtype)
    h0 = np.linspace(-0.5, 0.5, 4 * 12, dtype=np.float32).reshape(4, 12).astype(dtype)
    lay = balance(u, tpr=4)
    base = gpu_rnn.PersistentRNN(lay, 4, rows_per_block=16)(bp, h0, 4)
    for fold in (False, True):
        plan = gpu_rnn.PersistentRNN(lay, 4, rows_per_block=16, preset=preset, fold_h0=fold)
        d_bp, hs = cuda.to_device(bp), cuda.device_array((4, 4, 12), dtype=dtype)
        xchg, status = plan.buffers(4)
        assert xchg.size == 5 * plan.stride
        plan.enqueue(d_bp, cuda.to_device(h0), 4, xchg, hs, status)
        assert hs.copy_to_host().tobytes() == base.tobytes()
        slots = xchg.copy_to_host().reshape(5, plan.stride)
        assert not (np.signbit(slots) & (slots == 0)).any()
        assert slots[0].tobytes() == h0.T.copy().tobytes()
        assert slots[1:].reshape(4, 12, 4).transpose(0, 2, 1).tobytes() == base.tobytes()


def test_preset_and_poll_bad_configuration():
    lay, _, _ = _inputs()
    with pytest.raises(ValueError, match="preset: expected one of"):
        gpu_rnn.PersistentRNN(lay, 4, rows_per_block=8, preset="memset")
    for kw in ({"sync": "barrier"}, {"chunk": 1}, {"pipeline": True}):
        with pytest.raises(ValueError, match="poll: 'issue' is an option of the Lamport kernel without chunk"):
            gpu_rnn.PersistentRNN(lay, 4, rows_per_block=8, poll="issue", **kw)
    with pytest.raises(ValueError, match="issue_delay: a delay before the loads of poll='issue'"):
        gpu_rnn.PersistentRNN(lay, 4, rows_per_block=8, issue_delay=100)
    with pytest.raises(ValueError, match="issue_delay"):
        gpu_rnn.PersistentRNN(lay, 4, rows_per_block=8, poll="issue", issue_delay=-1)
