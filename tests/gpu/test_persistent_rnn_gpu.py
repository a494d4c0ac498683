"""Multi-block persistent RNN on a real GPU: what the one-block simulator cannot show.

Grid barrier and Lamport flags across many blocks, several layer sizes, both
dtypes, bitwise-identical repeats, the warp-shuffle reduction (which the
simulator cannot run), the relaunch after forced spin timeouts,
refusal of non-co-resident launches, device-array inputs (no copy back).
compute-sanitizer runs ``experiments/bench_persistent_rnn.py --sanitize``.
"""
from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from sparsekit.gpu import persistent_rnn as gpu_rnn
from sparsekit.reference import persistent_rnn as ref_rnn
from sparsekit import prune
from sparsekit.rnn_layout import balance, bank_aware

pytestmark = pytest.mark.gpu

CONFIGS = {
    "naive": ("naive", "barrier", False),
    "wide": ("wide", "barrier", False),
    "bank_aware": ("wide", "barrier", True),
    "lamport": ("wide", "lamport", True),
}


def _problem(hidden, density, steps, dtype, seed=0, batch=4):
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((hidden, hidden)).astype(np.float32)
    mask = prune.row_balanced(u, 1.0 - density)
    u = np.where(mask, u, 0)
    u = (u / (2 * np.abs(u).sum(axis=1).max())).astype(dtype)   # reference.persistent_rnn.tolerance's premise
    bp = rng.uniform(-1, 1, (steps, batch, hidden)).astype(dtype)
    h0 = rng.uniform(-1, 1, (batch, hidden)).astype(dtype)
    return u, mask, bp, h0


def _plan(u, mask, config, tpr, **kw):
    """Table 1 configuration with options."""
    scheme, sync, aware = CONFIGS[config]
    lay = balance(u, mask, tpr=tpr)
    if aware:
        lay = bank_aware(lay, width=4 * u.dtype.itemsize)
    return gpu_rnn.PersistentRNN(lay, 4, scheme=scheme, sync=sync, **kw)


def _exact_and_repeatable(plan, u, bp, h0, steps):
    """Two runs of ``plan``: within the reference's tolerance and bit for bit the same; the first run's
    states."""
    a = plan(bp, h0, steps)
    b = plan(bp, h0, steps)
    want = ref_rnn.rnn_forward(u, bp, h0, steps)
    assert np.abs(a.astype(np.float64) - want).max() <= ref_rnn.tolerance(u.dtype, plan.layout.kpad)
    assert a.tobytes() == b.tobytes()
    return a


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("hidden, dtype, tpr", [(130, np.float32, 4), (1152, np.float16, 8), (1792, np.float16, 16),
                                               (2500, np.float32, 8)])
def test_multi_block_matches_reference_and_repeats_bitwise(config, hidden, dtype, tpr):
    steps = 40
    u, mask, bp, h0 = _problem(hidden, 0.1, steps, dtype, seed=hidden)
    plan = _plan(u, mask, config, tpr)
    assert plan.split.blocks > 1
    _exact_and_repeatable(plan, u, bp, h0, steps)


def test_lamport_pipeline_matches_reference():
    u, mask, bp, h0 = _problem(1152, 0.1, 32, np.float16, seed=3)
    plan = _plan(u, mask, "lamport", 8, pipeline=True)
    got = plan(bp, h0, 32)
    assert np.abs(got.astype(np.float64) - ref_rnn.rnn_forward(u, bp, h0, 32)).max() <= \
        ref_rnn.tolerance(u.dtype, plan.layout.kpad)


def _stalled_run(plan, bp, h0, steps):
    """A Lamport run whose spins all time out, whatever the timing: started at step 1 on the fresh
    preset (``enqueue(start=1)``), every block waits for an h_1 that no block writes. Returns the
    device arrays the relaunch (``plan._resume``) continues from."""
    d_bp, d_h0 = cuda.to_device(bp), cuda.to_device(h0)
    hs = cuda.device_array((steps,) + h0.shape, dtype=h0.dtype)
    xchg, status = plan.buffers(steps)
    plan.enqueue(d_bp, d_h0, steps, xchg, hs, status, start=1)
    assert int(status.copy_to_host()[0]) != 0                    # the planted stall timed out
    return d_bp, xchg, hs, status


def test_spin_timeouts_relaunch_and_finish():
    u, mask, bp, h0 = _problem(1152, 0.1, 16, np.float16, seed=1)
    plan = _plan(u, mask, "lamport", 8, spin_limit=1 << 12, max_relaunch=4)
    d_bp, xchg, hs, status = _stalled_run(plan, bp, h0, 16)
    plan._resume(d_bp, xchg, hs, status, 16)
    assert plan.relaunches == 1                                  # from step 0, then no timeout
    assert np.abs(hs.copy_to_host().astype(np.float64) - ref_rnn.rnn_forward(u, bp, h0, 16)).max() <= \
        ref_rnn.tolerance(u.dtype, plan.layout.kpad)


def test_spin_timeouts_give_up_after_max_relaunch():
    u, mask, bp, h0 = _problem(1152, 0.1, 16, np.float16, seed=1)
    plan = _plan(u, mask, "lamport", 8, spin_limit=1 << 12, max_relaunch=0)
    d_bp, xchg, hs, status = _stalled_run(plan, bp, h0, 16)
    with pytest.raises(RuntimeError, match="spins still timing out after 0 relaunches"):
        plan._resume(d_bp, xchg, hs, status, 16)


def test_start_past_zero_refused_where_it_means_nothing():
    u, mask, bp, h0 = _problem(1152, 0.1, 4, np.float16, seed=1)
    plan = _plan(u, mask, "bank_aware", 8)
    xchg, status = plan.buffers(4)
    with pytest.raises(ValueError, match="start: only a Lamport run"):
        plan.enqueue(cuda.to_device(bp), cuda.to_device(h0), 4, xchg, cuda.device_array((4, 4, 1152), np.float16),
                     status, start=1)


@pytest.mark.parametrize("config", ["bank_aware", "lamport"])
def test_non_coresident_launch_refused(config):
    u, mask, bp, h0 = _problem(4096, 0.01, 2, np.float16, seed=2)
    plan = _plan(u, mask, config, 32, rows_per_block=1)      # 4096 blocks of 32 threads, 33 KB shared each
    with pytest.raises(ValueError, match="cannot all be co-resident"):
        plan(bp, h0, 2)


def test_device_arrays_in_device_array_out():
    u, mask, bp, h0 = _problem(512, 0.1, 8, np.float32, seed=4)
    plan = _plan(u, mask, "lamport", 8)
    got = plan(cuda.to_device(bp), cuda.to_device(h0), 8)
    assert cuda.is_cuda_array(got)
    assert np.abs(got.copy_to_host().astype(np.float64) - ref_rnn.rnn_forward(u, bp, h0, 8)).max() <= \
        ref_rnn.tolerance(u.dtype, plan.layout.kpad)


@pytest.mark.parametrize("reduce", ["shared", "shfl"])
@pytest.mark.parametrize("batch", [1, 3, 8])
def test_naive_other_batches(batch, reduce):
    u, mask, bp, h0 = _problem(777, 0.1, 24, np.float16, seed=batch, batch=batch)
    lay = balance(u, mask, tpr=8)
    plan = gpu_rnn.PersistentRNN(lay, batch, scheme="naive", sync="barrier", reduce=reduce)
    got = plan(bp, h0, 24)
    assert np.abs(got.astype(np.float64) - ref_rnn.rnn_forward(u, bp, h0, 24)).max() <= \
        ref_rnn.tolerance(u.dtype, plan.layout.kpad)


@pytest.mark.parametrize("reduce", ["shared", "shfl"])
@pytest.mark.parametrize("config", ["naive", "lamport"])
def test_lstm_multi_block_matches_reference(config, reduce):
    hidden, steps = 1024, 3
    u4, _, _, _ = _problem(hidden, 0.1, steps, np.float32, seed=9)
    rng = np.random.default_rng(9)
    u = np.concatenate([np.roll(u4, g, axis=1) for g in range(4)]).astype(np.float16)   # (4H, H), rows' |U| <= 1/2
    bp = rng.uniform(-1, 1, (steps, 4, 4 * hidden)).astype(np.float16)
    h0, c0 = (rng.uniform(-1, 1, (4, hidden)).astype(np.float16) for _ in range(2))
    scheme, sync, aware = CONFIGS[config]
    lay = balance(u, tpr=8)
    if aware:
        lay = bank_aware(lay, width=8, gates=4)
    plan = gpu_rnn.PersistentRNN(lay, 4, scheme=scheme, sync=sync, cell="lstm", reduce=reduce)
    assert plan.split.blocks > 1
    h, c = plan(bp, h0, steps, c0)
    want_h, want_c = ref_rnn.lstm_forward(u, bp, h0, c0, steps)
    tol = ref_rnn.lstm_tolerance(u.dtype, lay.kpad, steps)
    assert np.abs(h.astype(np.float64) - want_h).max() <= tol
    assert np.abs(c.astype(np.float64) - want_c).max() <= tol


@pytest.mark.parametrize("config, kw", [
    ("naive", {"grid_sync": "atomic", "load": "relaxed"}),
    ("bank_aware", {"grid_sync": "atomic", "load": "relaxed", "index16": True, "chunk": 4}),
    ("lamport", {"load": "relaxed", "index16": True}),
    ("lamport", {"load": "relaxed", "index16": True, "chunk": 4}),
    ("lamport", {"double_buffer": True, "poll": "lead"}),
    ("lamport", {"load": "relaxed", "reduce": "shfl"}),
    ("lamport", {"load": "relaxed", "reduce": "shfl", "double_buffer": True}),
    ("lamport", {"load": "relaxed", "reduce": "shfl", "pipeline": True}),
    ("lamport", {"load": "relaxed", "reduce": "shfl", "chunk": 4, "index16": True}),
    ("lamport", {"load": "relaxed", "bound_registers": False}),
    ("lamport", {"load": "relaxed", "vector": True}),
    ("lamport", {"load": "volatile", "vector": True, "reduce": "shfl", "pipeline": True}),
    ("bank_aware", {"grid_sync": "atomic", "load": "relaxed", "vector": True}),
    ("lamport", {"load": "cg", "vector": True}),
    ("bank_aware", {"grid_sync": "atomic", "load": "cg"}),
    ("naive", {"grid_sync": "atomic", "load": "relaxed", "reduce": "shfl"}),
    ("naive", {"grid_sync": "cg", "reduce": "shfl"}),
    ("bank_aware", {"grid_sync": "atomic", "load": "relaxed", "reduce": "shfl"}),
], ids=lambda x: x if isinstance(x, str) else "-".join(f"{k}={v}" for k, v in x.items()))
@pytest.mark.parametrize("hidden, dtype, tpr", [(1792, np.float16, 16), (1152, np.float32, 8)])
def test_kernel_options_multi_block_match_reference_and_repeat(config, kw, hidden, dtype, tpr):
    """The inline grid barrier, GPU-scope loads, packed indices, chunked loads, double buffer, lead polling,
    the shuffle reduction (with each sync and barrier kind), no launch bounds, 16-byte loads of h, weak L2 loads (cg)."""
    steps = 40
    u, mask, bp, h0 = _problem(hidden, 0.1, steps, dtype, seed=hidden + 1)
    plan = _plan(u, mask, config, tpr, **kw)
    assert plan.split.blocks > 1
    _exact_and_repeatable(plan, u, bp, h0, steps)


@pytest.mark.parametrize("config, kw", [("lamport", {}), ("bank_aware", {"grid_sync": "atomic"})])
def test_layer_past_48kb_of_shared_memory(config, kw):
    """8192 units: 64 KB of h per block, launched through the opt-in attribute; chunked loads keep registers low."""
    steps = 8
    u, mask, bp, h0 = _problem(8192, 0.01, steps, np.float16, seed=8)
    plan = _plan(u, mask, config, 8, load="relaxed", index16=True, chunk=8, **kw)
    assert plan.smem > gpu_rnn.SHARED_LIMIT
    got = plan(bp, h0, steps)
    want = ref_rnn.rnn_forward(u, bp, h0, steps)
    assert np.abs(got.astype(np.float64) - want).max() <= ref_rnn.tolerance(u.dtype, plan.layout.kpad)


def test_launch_bounds_fit_a_layer_that_did_not():
    """Deep Speech 2's 2560-unit LSTM layer (12%, batch 1, tpr 32: 640 threads x 40 pairs each): without launch
    bounds ptxas used 255 registers and the launch was refused; with them it runs (weights partly spilled)."""
    hidden, steps = 2560, 3
    rng = np.random.default_rng(25)
    u = rng.standard_normal((4 * hidden, hidden)).astype(np.float32)
    mask = prune.row_balanced(u, 0.88)
    u = np.where(mask, u, 0)
    u = (u / (2 * np.abs(u).sum(axis=1).max())).astype(np.float16)
    bp = rng.uniform(-1, 1, (steps, 1, 4 * hidden)).astype(np.float16)
    h0, c0 = (rng.uniform(-1, 1, (1, hidden)).astype(np.float16) for _ in range(2))
    lay = balance(u, mask, tpr=32)
    plan = gpu_rnn.PersistentRNN(lay, 1, scheme="naive", sync="barrier", cell="lstm", reduce="shfl",
                                 grid_sync="atomic", index16=True)
    h, c = plan(bp, h0, steps, c0)
    want_h, want_c = ref_rnn.lstm_forward(u, bp, h0, c0, steps)
    tol = ref_rnn.lstm_tolerance(u.dtype, lay.kpad, steps)
    assert np.abs(h.astype(np.float64) - want_h).max() <= tol
    assert np.abs(c.astype(np.float64) - want_c).max() <= tol
    assert plan.resources["registers"] <= 65536 // plan.split.threads_per_block


# -- h0 written by the kernel; the 16-byte preset, the issue-first poll ---------------------------------

FOLD_H0 = [{"fold_h0": True}, {"fold_h0": True, "reduce": "shfl"}, {"fold_h0": True, "vector": True},
           {"fold_h0": True, "index16": True, "load": "volatile"}, {"fold_h0": True, "double_buffer": True}]


@pytest.mark.parametrize("kw", [{"fold_h0": True}, {"fold_h0": True, "vector": True},
                                {"fold_h0": True, "preset": "vector"}, {"poll": "issue", "fold_h0": True}],
                         ids=lambda x: "-".join(f"{k}={v}" for k, v in x.items()))
def test_options_planted_stall_relaunches_and_finishes(kw):
    """The planted stall (start=1): every block times out; fold_h0 left slot 0 unwritten, so the relaunch
    starts at step 0 and writes h0 itself; one relaunch, then the reference's states."""
    u, mask, bp, h0 = _problem(1152, 0.1, 16, np.float16, seed=1)
    plan = _plan(u, mask, "lamport", 8, spin_limit=1 << 12, max_relaunch=4, load="relaxed", **kw)
    d_bp, xchg, hs, status = _stalled_run(plan, bp, h0, 16)
    plan._resume(d_bp, xchg, hs, status, 16, h0=cuda.to_device(h0))
    assert plan.relaunches == 1
    assert np.abs(hs.copy_to_host().astype(np.float64) - ref_rnn.rnn_forward(u, bp, h0, 16)).max() <= \
        ref_rnn.tolerance(u.dtype, plan.layout.kpad)


EXCHANGE = [{"fold_h0": True, "preset": "vector"}, {"load": "cg"}, {"preset": "vector"}, {"double_buffer": True},
            {"poll": "issue"},
            {"poll": "issue", "fold_h0": True, "preset": "vector"}, {"poll": "issue", "vector": True},
            {"poll": "issue", "double_buffer": True, "load": "cg"},
            {"poll": "issue", "reduce": "shfl", "index16": True}, {"poll": "issue", "bound_registers": False},
            {"poll": "issue", "issue_delay": 400, "fold_h0": True}, {"poll": "issue", "issue_delay": 1000, "load": "cg"}]


# (the fold_h0 options' problems at seed hidden + 5, the preset and poll ones' at hidden + 7)
@pytest.mark.parametrize("kw, seed", [(kw, 5) for kw in FOLD_H0] + [(kw, 7) for kw in EXCHANGE],
                         ids=lambda x: "-".join(f"{k}={v}" for k, v in x.items()) if isinstance(x, dict) else None)
@pytest.mark.parametrize("hidden, dtype, tpr", [(1792, np.float16, 16), (1152, np.float32, 8), (130, np.float16, 4)])
def test_options_match_reference_and_repeat(kw, seed, hidden, dtype, tpr):
    """fold_h0, preset and poll="issue": several layer sizes; an h0 holding -0.0; repeated calls
    bitwise identical."""
    steps = 40
    u, mask, bp, h0 = _problem(hidden, 0.1, steps, dtype, seed=hidden + seed)
    h0[0, :3] = -0.0
    plan = _plan(u, mask, "lamport", tpr, **{"load": "relaxed", **kw})
    assert plan.grid > 1
    _exact_and_repeatable(plan, u, bp, h0, steps)


