"""``sparsekit.simulator``: the simulator's block manager sleeps until its threads need it and reuses them across
blocks and launches, its shared arrays are keyed by the calling line without a walk of the stack; kernels with
barriers, shared arrays, several blocks and a thread that raises behave as before."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from numba import cuda

from sparsekit.simulator import fast_block_manager, fast_shared_arrays

pytestmark = pytest.mark.simulator("the patch is the simulator's; on a GPU the kernels run for real")


@cuda.jit
def _block_sums(x, out):
    """Each block sums its 64 values through shared memory, halving with a barrier each step."""
    sh = cuda.shared.array(64, np.float64)
    t = cuda.threadIdx.x
    sh[t] = x[cuda.blockIdx.x * 64 + t]
    cuda.syncthreads()
    step = 32
    while step > 0:
        if t < step:
            sh[t] += sh[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        out[cuda.blockIdx.x] = sh[0]


@cuda.jit
def _fails_in_one_thread(out):
    if cuda.threadIdx.x == 5:
        raise ValueError("thread five")
    cuda.syncthreads()
    out[cuda.threadIdx.x] = 1


def _require_installed(install, what: str, reviewed: str) -> None:
    """``install()`` put its replacement in place (skip, saying so, where numba-cuda's ``what`` is not the reviewed
    source ``reviewed``), and a second call keeps it (idempotent)."""
    if not install():
        pytest.skip(f"numba-cuda's {what} is not the reviewed one ({reviewed}): review sparsekit.simulator against it")
    assert install()


def test_block_manager_sleeps_and_barriers_still_hold():
    from numba.cuda.simulator import kernel
    from sparsekit import simulator
    _require_installed(fast_block_manager, "BlockManager.run or BlockThread",
                       "REVIEWED_RUN_SHA256, REVIEWED_BLOCK_THREAD_SHA256")
    assert kernel.BlockManager.run is simulator._run_block
    x = np.arange(3 * 64, dtype=np.float64)
    out = np.zeros(3)
    _block_sums[3, 64](x, out)
    np.testing.assert_array_equal(out, x.reshape(3, 64).sum(axis=1))


def test_an_exception_in_one_thread_still_reaches_the_caller():
    with pytest.raises(ValueError, match="thread five"):
        _fails_in_one_thread[1, 16](np.zeros(16, dtype=np.int64))
    x = np.arange(2 * 64, dtype=np.float64)              # the pooled threads serve the next launch as before
    out = np.zeros(2)
    _block_sums[2, 64](x, out)
    np.testing.assert_array_equal(out, x.reshape(2, 64).sum(axis=1))


@cuda.jit
def _who_runs(idents, lanes):
    """Records which Python thread ran each simulated thread (simulator only: a kernel here is Python) and its lane."""
    flat = cuda.threadIdx.x + 8 * (cuda.threadIdx.y + 4 * cuda.threadIdx.z)
    i = cuda.blockIdx.x * 64 + flat
    idents[i] = threading.get_ident()
    lanes[i] = cuda.laneid
    cuda.syncthreads()


def test_threads_are_pooled_across_blocks_and_launches():
    """A block's simulated threads run on distinct Python threads, which later blocks and launches reuse; a 3-D
    block's lane ids are those of its flattened thread index."""
    for launch in range(2):
        started_before = {thread.ident for thread in threading.enumerate()}
        idents, lanes = np.zeros(3 * 64, dtype=np.int64), np.zeros(3 * 64, dtype=np.int64)
        _who_runs[3, (8, 4, 2)](idents, lanes)
        np.testing.assert_array_equal(lanes, np.tile(np.arange(64) % 32, 3))
        assert all(len(set(block)) == 64 for block in idents.reshape(3, 64))
        if launch:                                         # 64 idle threads after the first: none started
            assert set(idents) <= started_before


@cuda.jit
def _two_shared_arrays(out):
    """Two shared arrays on two lines: distinct arrays, each shared by the block's threads."""
    a = cuda.shared.array(32, np.int64)
    b = cuda.shared.array(32, np.int64)
    t = cuda.threadIdx.x
    a[t] = t
    b[t] = 100 + t
    cuda.syncthreads()
    out[cuda.blockIdx.x * 32 + t] = a[31 - t] + 1000 * b[(t + 1) % 32]


def test_shared_arrays_are_keyed_by_line_and_shared_by_the_block():
    from numba.cuda.simulator import kernelapi
    from sparsekit import simulator
    _require_installed(fast_shared_arrays, "FakeCUDAShared.array", "REVIEWED_SHARED_ARRAY_SHA256")
    assert kernelapi.FakeCUDAShared.array is simulator._shared_array
    out = np.zeros(2 * 32, dtype=np.int64)
    _two_shared_arrays[2, 32](out)
    t = np.arange(32)
    np.testing.assert_array_equal(out, np.tile(31 - t + 1000 * (100 + (t + 1) % 32), 2))


@cuda.jit
def _one_shared_array(out):
    a = cuda.shared.array(64, np.int64)
    t = cuda.threadIdx.x
    a[t] = t
    cuda.syncthreads()
    out[t] = a[(t + 1) % 64]


def test_threads_arriving_together_share_one_array(monkeypatch):
    """Every thread of the block gets the same shared array even when a thread is switched out between the lookup
    and the store of the first allocation (forced here by an allocation that sleeps): without the lock each early
    thread made an array of its own and read the other threads' slots as garbage."""
    import time
    from sparsekit import simulator
    _require_installed(fast_shared_arrays, "FakeCUDAShared.array", "REVIEWED_SHARED_ARRAY_SHA256")
    real_empty = np.empty

    def slow_empty(*args, **kwargs):
        time.sleep(0.005)                                  # (hands the interpreter to the other threads)
        return real_empty(*args, **kwargs)
    monkeypatch.setattr(simulator.np, "empty", slow_empty)
    out = np.zeros(64, dtype=np.int64)
    _one_shared_array[1, 64](out)
    np.testing.assert_array_equal(out, (np.arange(64) + 1) % 64)


@cuda.jit
def _spins_until_flagged(flag, out):
    """Thread 0 spins until ``flag[0]`` is set (a flag nothing in the launch sets); the others wait at the barrier."""
    if cuda.threadIdx.x == 0:
        while flag[0] == 0:
            pass
    cuda.syncthreads()
    out[cuda.threadIdx.x] = 1


def test_a_stalled_block_raises_instead_of_hanging(monkeypatch):
    from sparsekit import simulator
    _require_installed(fast_block_manager, "BlockManager.run or BlockThread",
                       "REVIEWED_RUN_SHA256, REVIEWED_BLOCK_THREAD_SHA256")
    monkeypatch.setattr(simulator, "WAIT_TIMEOUT_S", 0.5)
    flag = cuda.to_device(np.zeros(1, dtype=np.int64))
    idle = len(simulator._idle)
    with pytest.raises(simulator.SimulatorStall, match=r"block \(0, 0, 0\): no thread reached the barrier or ended "
                                                       r"for 0.5 s \(8 of 8 threads not ended, 7 of them waiting"):
        _spins_until_flagged[1, 8](flag, np.zeros(8, dtype=np.int64))
    flag[0] = 1                                            # let the spinning thread end and rejoin the pool
    deadline = time.monotonic() + 10
    while len(simulator._idle) < idle - min(idle, 8) + 8 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(simulator._idle) == idle - min(idle, 8) + 8   # all 8 threads idle again, the spinner included
    x = np.arange(64, dtype=np.float64)                    # the pool serves the next launch as before
    out = np.zeros(1)
    _block_sums[1, 64](x, out)
    np.testing.assert_array_equal(out, [x.sum()])
