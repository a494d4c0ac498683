"""Every persistent RNN kernel compiles offline for sm_80 and sm_90; the post-LTO PTX proves the claims.

* wide loads: one ``ld.shared.v4.f32`` (float32) or one 8-byte ``ld.shared.u64``
  (float16) per weight pair, i.e. 4 batch samples per shared load (Section 4.1);
* the weights stay in registers: no ``.local`` stack frame after LTO;
* Lamport polls with ``ld.volatile.global.u32`` and has no grid barrier; the
  barrier kernels call the grid synchronisation.
"""
from __future__ import annotations

import functools
import re
from collections import Counter

import numpy as np
import pytest
from numba import types

from sparsekit.gpu.persistent_rnn import _kernel
from sparsekit import offline

NPT, TPR, BATCH, WORDS = 6, 8, 4, 8
_F = {np.dtype(np.float32): types.float32, np.dtype(np.float16): types.float16}


def _signature(sync: str, dtype: np.dtype, index16: bool = False):
    val = _F[dtype]
    a1, a2, a3 = (lambda t: types.Array(t, 1, "C")), (lambda t: types.Array(t, 2, "C")), (lambda t: types.Array(t, 3, "C"))
    head = (a2(val), a2(types.uint32 if index16 else types.int16), a3(val), a1(val), a1(types.uint32), a3(val),
            a3(val), a2(val), a1(types.int64))
    return head + (a1(types.int32), a2(val)) + (types.int64,) * 5   # status, h_in


def _lto_ptx(sync, scheme, dtype, cc, pipeline=False, cell="rnn", npt=NPT):
    kernel = _kernel(sync, scheme, np.dtype(dtype), npt, TPR, BATCH, "tanh", WORDS, pipeline, cell)
    return offline.lto_ptx(kernel, _signature(sync, np.dtype(dtype)), cc)


CASES = [("barrier", "naive", np.float32), ("barrier", "naive", np.float16),
         ("barrier", "wide", np.float32), ("barrier", "wide", np.float16),
         ("lamport", "wide", np.float32), ("lamport", "wide", np.float16)]


@pytest.mark.filterwarnings("ignore:Not adding")
@pytest.mark.parametrize("cc", [(8, 0), (9, 0)])
@pytest.mark.parametrize("sync, scheme, dtype", CASES)
def test_kernel_compiles_and_ptx_shows_the_design(sync, scheme, dtype, cc):
    ptx = _lto_ptx(sync, scheme, dtype, cc)
    assert f".target sm_{cc[0]}{cc[1]}" in ptx
    assert ".local" not in ptx                                   # pairs and accumulators in registers
    v4 = len(re.findall(r"ld\.shared\.v4\.f32", ptx))
    u64 = len(re.findall(r"ld\.shared\.u64", ptx))
    if scheme == "wide":
        assert (v4, u64) == ((NPT, 0) if dtype == np.float32 else (0, NPT))   # one wide load per pair
    else:
        assert v4 == 0 and u64 == 0
        assert len(re.findall(r"ld\.shared\.(f32|u16|b16)", ptx)) >= NPT * BATCH   # a scalar load per sample
    assert ("cudaCGSynchronize" in ptx) == (sync == "barrier")
    if sync == "lamport":
        assert "ld.volatile.global.u32" in ptx


@pytest.mark.filterwarnings("ignore:Not adding")
def test_lamport_pipeline_compiles():
    ptx = _lto_ptx("lamport", "wide", np.float16, (9, 0), pipeline=True)
    assert ".local" not in ptx and "ld.volatile.global.u32" in ptx


@pytest.mark.filterwarnings("ignore:Not adding")
@pytest.mark.parametrize("sync", ["barrier", "lamport"])
def test_lstm_compiles_with_one_wide_load_per_pair_and_gate(sync):
    ptx = _lto_ptx(sync, "wide", np.float16, (9, 0), cell="lstm")
    assert ".local" not in ptx
    assert len(re.findall(r"ld\.shared\.u64", ptx)) == 4 * NPT


@pytest.mark.filterwarnings("ignore:Not adding")
@pytest.mark.parametrize("sync, cell", [("barrier", "rnn"), ("lamport", "rnn"), ("lamport", "lstm")])
def test_layout_without_pairs_compiles(sync, cell):
    """An all-zero weight (npt = 0): the GPU compiler refuses local arrays of length 0, which the simulator
    accepts (found on the H100: tests/test_persistent_rnn.py's empty-weight examples failed there only)."""
    ptx = _lto_ptx(sync, "wide", np.float32, (9, 0), cell=cell, npt=0)
    assert ".target sm_90" in ptx and ".local" not in ptx


@functools.cache   # several tests compare against the same build (one compile per worker)
def _lto_ptx_opts(sync, dtype, **opts):
    kernel = _kernel(sync, "wide", np.dtype(dtype), NPT, TPR, BATCH, "tanh", WORDS, **opts)
    return offline.lto_ptx(kernel, _signature(sync, np.dtype(dtype), opts.get("index16", False)))


@pytest.mark.filterwarnings("ignore:Not adding")
def test_atomic_grid_barrier_is_inline():
    """grid_sync='atomic': no call into cudadevrt (whose call ABI costs registers and stack), an atomic counter."""
    ptx = _lto_ptx_opts("barrier", np.float16, grid_sync="atomic")
    assert "cudaCGSynchronize" not in ptx and ".local" not in ptx
    assert re.search(r"atom\.global\.add", ptx) and "membar.gl" in ptx


@pytest.mark.filterwarnings("ignore:Not adding")
@pytest.mark.parametrize("sync", ["barrier", "lamport"])
def test_index16_keeps_indices_packed(sync):
    """index16: one bfe.u32 per pair unpacks an index inside the step loop (not hoisted out of it)."""
    opts = {"index16": True} if sync == "lamport" else {"index16": True, "grid_sync": "atomic"}
    ptx = _lto_ptx_opts(sync, np.float16, **opts)
    assert ".local" not in ptx
    assert len(re.findall(r"bfe\.u32", ptx)) == NPT
    assert len(re.findall(r"ld\.shared\.u64", ptx)) == NPT


@pytest.mark.filterwarnings("ignore:Not adding")
@pytest.mark.parametrize("sync", ["barrier", "lamport"])
def test_relaxed_gpu_scope_loads(sync):
    """load='relaxed': h's words come in with ld.relaxed.gpu (GPU scope), no ld.volatile (system scope) left."""
    opts = {"load": "relaxed"} if sync == "lamport" else {"load": "relaxed", "grid_sync": "atomic"}
    ptx = _lto_ptx_opts(sync, np.float16, **opts)
    assert "ld.relaxed.gpu.global.u32" in ptx and "ld.volatile.global" not in ptx


@pytest.mark.filterwarnings("ignore:Not adding")
@pytest.mark.parametrize("sync", ["barrier", "lamport"])
def test_chunked_load_stage_keeps_fewer_words(sync):
    """chunk=2: the load stage loops over chunks of 2 words; Lamport's poll loop keeps 2 loads per round
    (the barrier kernel's chunk loop may be partly unrolled by LLVM)."""
    opts = {"chunk": 2} if sync == "lamport" else {"chunk": 2, "grid_sync": "atomic"}
    ptx = _lto_ptx_opts(sync, np.float16, **opts)
    assert ".local" not in ptx
    loads = len(re.findall(r"ld\.volatile\.global\.u32", ptx))
    assert loads >= 2 and (sync == "barrier" or loads < WORDS)


@pytest.mark.filterwarnings("ignore:Not adding")
def test_lamport_double_buffer_lead_poll_trace_compile():
    """double_buffer: the reduce stage syncs a warp (bar.warp.sync), one block barrier per step remains."""
    ptx = _lto_ptx_opts("lamport", np.float16, double_buffer=True, poll="lead", trace=True)
    assert ".local" not in ptx and "ld.volatile.global.u32" in ptx
    assert "bar.warp.sync" in ptx and "%clock64" in ptx


@pytest.mark.filterwarnings("ignore:Not adding")
def test_reduce_barrier_is_a_warp_barrier_only_behind_the_inline_grid_barrier():
    """racecheck does not see cg's grid sync order shared memory: those kernels keep the block barrier."""
    assert "bar.warp.sync" not in _lto_ptx_opts("barrier", np.float16, grid_sync="cg")
    assert "bar.warp.sync" in _lto_ptx_opts("barrier", np.float16, grid_sync="atomic")
    assert "bar.warp.sync" not in _lto_ptx_opts("lamport", np.float16)


@pytest.mark.filterwarnings("ignore:Not adding")
@pytest.mark.parametrize("sync, loads", [("barrier", WORDS // 4), ("lamport", 2 * WORDS // 4)])
def test_vector_h_moves_16_byte_groups(sync, loads):
    """vector: h's words come in with ld.relaxed.gpu.global.v4.u32 (Lamport: before the loop and in the poll
    loop) and go to shared memory with st.shared.v4; no scalar load of h is left."""
    opts = {"vector": True, "load": "relaxed", **({"grid_sync": "atomic"} if sync == "barrier" else {})}
    ptx = _lto_ptx_opts(sync, np.float16, **opts)
    assert len(re.findall(r"ld\.relaxed\.gpu\.global\.v4\.u32", ptx)) == loads
    assert "ld.relaxed.gpu.global.u32" not in ptx
    assert len(re.findall(r"st\.shared\.v4", ptx)) == WORDS // 4
    assert ".local" not in ptx


@pytest.mark.filterwarnings("ignore:Not adding")
def test_launch_bounds_reach_ptx():
    """threads: the block size is given to ptxas as launch bounds (one block per SM)."""
    kernel = _kernel("lamport", "wide", np.dtype(np.float16), NPT, TPR, BATCH, "tanh", WORDS, threads=224)
    assert kernel.targetoptions["launch_bounds"] == (224, 1)
    ptx = offline.lto_ptx(kernel, _signature("lamport", np.dtype(np.float16)))   # the kernel's own bounds
    assert ".maxntid 224, 1, 1" in ptx and ".minnctapersm 1" in ptx


@pytest.mark.filterwarnings("ignore:Not adding")
@pytest.mark.parametrize("vector, pattern", [(False, r"ld\.global\.cg\.u32"), (True, r"ld\.global\.cg\.v4\.u32")])
def test_cg_loads_stay_in_the_poll_loop(vector, pattern):
    """load='cg': weak L2-only loads of h, side-effecting asm: issued before the loop and again in the poll loop."""
    ptx = _lto_ptx_opts("lamport", np.float16, load="cg", vector=vector)
    assert len(re.findall(pattern, ptx)) == 2 * WORDS // (4 if vector else 1)
    assert "ld.relaxed" not in ptx and "ld.volatile" not in ptx and ".local" not in ptx


@pytest.mark.filterwarnings("ignore:Not adding")
def test_fold_h0_reads_h0_in_the_kernel():
    """fold_h0: the kernel reads h_in (one more block barrier, taken once before the steps); the step loop is
    the default kernel's."""
    base = _lto_ptx_opts("lamport", np.float16, load="relaxed")
    ptx = _lto_ptx_opts("lamport", np.float16, load="relaxed", fold_h0=True)
    assert len(re.findall(r"bar\.sync", ptx)) == len(re.findall(r"bar\.sync", base)) + 1
    assert len(re.findall(r"ld\.shared\.u64", ptx)) == NPT and ".local" not in ptx


@pytest.mark.filterwarnings("ignore:Not adding")
@pytest.mark.parametrize("dtype, scalar", [(np.float16, "st.global.u16"), (np.float32, "st.global.f32")])
def test_h_t_stored_to_the_exchange_and_the_states(dtype, scalar):
    """A thread's element of h_t is stored twice, into the exchange and into the states; no other global store."""
    stores = Counter(re.findall(r"st\.global\.[\w.]+", _lto_ptx_opts("lamport", dtype, load="relaxed")))
    assert stores == {scalar: 2}


@pytest.mark.filterwarnings("ignore:Not adding")
def test_vector_preset_stores_16_bytes():
    """preset='vector': one st.global.v4.u32 per thread (and the scalar tail)."""
    from sparsekit.gpu.persistent_rnn import _fill_words
    ptx = offline.lto_ptx(_fill_words, (types.Array(types.uint32, 1, "C"), types.uint32))
    assert len(re.findall(r"st\.global\.v4\.u32", ptx)) == 1


@pytest.mark.filterwarnings("ignore:Not adding")
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_poll_issue_loads_first_and_checks_after(dtype):
    """poll='issue': the step's loads of h are issued unconditionally (a branch-free copy for threads whose words
    all exist, one with a compare per word for the rest; before the steps and in the loop: up to 4 x WORDS, LLVM
    merges a few), plus the reloads of the poll rounds (two copies again: up to 2 x WORDS); float16's first check
    ORs ``(x - 0x00010001) & ~x & 0x80008000``."""
    ptx = _lto_ptx_opts("lamport", dtype, load="relaxed", poll="issue", threads=64)
    assert 5 * WORDS <= len(re.findall(r"ld\.relaxed\.gpu\.global\.u32", ptx)) <= 6 * WORDS
    assert ("-2147450880" in ptx or "0x80008000" in ptx or "2147516416" in ptx) == (dtype == np.float16)
    assert ".local" not in ptx


@pytest.mark.filterwarnings("ignore:Not adding")
def test_issue_delay_spins_on_the_clock():
    """issue_delay: the step reads %clock64 at least twice more (the spin's start and its loop; the stamps' reads
    are in the PTX either way, unused ones are dropped by ptxas)."""
    count = (lambda p: p.count("%clock64"))
    base = _lto_ptx_opts("lamport", np.float16, load="relaxed", poll="issue")
    assert count(_lto_ptx_opts("lamport", np.float16, load="relaxed", poll="issue", issue_delay=300)) >= count(base) + 2
