"""The CUDA simulator, faster: its block manager lets the simulated threads run while it polls them.

numba-cuda's simulator runs each thread of a block as a Python thread, and the main thread polls them
in a loop (who waits at ``syncthreads``, who has an exception, who is still alive) without giving up the
GIL, so it holds the interpreter for whole switch intervals (5 ms) while the threads that do the work
wait for it. :func:`yield_while_polling` replaces the block manager's ``run`` with :func:`_run_block`:
the same threads, barrier rule and error handling, plus ``time.sleep(0)`` (give up the GIL) once per
polling pass. No result changes, only the order in which Python runs the threads. On the 2-core test
machine (session 12): the tensor-core USpMM with a K split (37 x 40 x 17, 3 splits, float32) 18.2 s before,
5.7-6.2 s after; three COO SpMMs (20 x 20 x 40, 256-thread blocks without barriers) 8.0 s either way.
(Yielding once per thread polled instead made the COO case slower, 10.7 s: every yield can wait a switch
interval for the GIL to come back.)

The replacement is installed only over the ``run`` it was written against (numba-cuda 0.30.4, by the
hash of its source): another version keeps its own, slower but correct.

:func:`fast_shared_arrays` does the same for ``cuda.shared.array``: the simulator keys a block's shared
arrays by the calling line, which it found with ``traceback.extract_stack`` (every frame of the stack, each
with its source line looked up) on every call of every thread; one frame lookup gives the same key. In the
pipelined USpMM's simulator test (session 13) the stack walks were half of the time the simulated threads
held the interpreter.
"""
from __future__ import annotations

import hashlib
import inspect
import sys
import time

import numpy as np

#: sha256 of ``inspect.getsource`` of numba-cuda 0.30.4's ``numba.cuda.simulator.kernel.BlockManager.run``.
REVIEWED_RUN_SHA256 = "54626c6819f55d514a598517b1467ed1cc2e7c3bf1f3b9814e13ef2a4ba3541f"
#: ... and of its ``numba.cuda.simulator.kernelapi.FakeCUDAShared.array``.
REVIEWED_SHARED_ARRAY_SHA256 = "46c69699220dd500ba43cd23a5eedb48ea3f2ea602876838c887e592d4055d75"


def _run_block(manager, grid_point, *args):
    """Run one block of ``manager`` (a simulator ``BlockManager``): start a thread per thread index, then
    poll, releasing the barrier when every live thread waits at it and raising the first exception seen
    (after telling every thread to abort), until all threads have finished."""
    from numba.cuda.simulator.kernel import BlockThread
    threads = []
    for thread_idx in np.ndindex(*manager._block_dim):
        thread = BlockThread(lambda: manager._f(*args), manager, grid_point, thread_idx, manager._debug)
        thread.start()
        threads.append(thread)
    live = set(threads)
    while live:
        time.sleep(0)                                   # the one change: let the simulated threads run
        waiting = set()
        for thread in live:
            if thread.syncthreads_blocked:
                waiting.add(thread)
            elif thread.exception:
                for other in threads:
                    other.abort = True
                    other.syncthreads_blocked = False
                    other.syncthreads_event.set()
                raise thread.exception[0].with_traceback(thread.exception[1])
        if waiting == live:                             # all at the barrier: release it
            for thread in waiting:
                thread.syncthreads_blocked = False
                thread.syncthreads_event.set()
        live = {thread for thread in live if thread.is_alive()}
    for thread in threads:                              # exceptions set just before a thread finished
        if thread.exception:
            raise thread.exception[0].with_traceback(thread.exception[1])


def yield_while_polling() -> bool:
    """Under the CUDA simulator, install :func:`_run_block` as the block manager's ``run`` (idempotent).
    Returns whether it is installed: False without the simulator, or where numba-cuda's ``run`` is not the
    reviewed one (:data:`REVIEWED_RUN_SHA256`)."""
    from numba import config
    if not config.ENABLE_CUDASIM:
        return False
    from numba.cuda.simulator import kernel
    if kernel.BlockManager.run is _run_block:
        return True
    if hashlib.sha256(inspect.getsource(kernel.BlockManager.run).encode()).hexdigest() != REVIEWED_RUN_SHA256:
        return False
    kernel.BlockManager.run = _run_block
    return True


def _shared_array(shared, shape, dtype, alignment=None):
    """``cuda.shared.array`` in the simulator (``FakeCUDAShared.array``): dynamic shared memory for ``shape``
    0, else one array per calling line, shared by the block's threads, keyed by the caller's (file name, line
    number) as the original keys it, from the caller's frame instead of a walk of the whole stack."""
    from numba.cuda.simulator import kernelapi
    if alignment is not None:
        raise RuntimeError("Array alignment is not supported in cudasim")
    if isinstance(dtype, kernelapi.types.Type):
        dtype = kernelapi.numpy_support.as_dtype(dtype)
    if shape == 0:
        count = shared._dynshared_size // dtype.itemsize
        return np.frombuffer(shared._dynshared.data, dtype=dtype, count=count)
    frame = sys._getframe(1)
    caller = (frame.f_code.co_filename, frame.f_lineno)
    res = shared._allocations.get(caller)
    if res is None:
        res = np.empty(shape, dtype)
        shared._allocations[caller] = res
    return res


def fast_shared_arrays() -> bool:
    """Under the CUDA simulator, install :func:`_shared_array` as ``FakeCUDAShared.array`` (idempotent).
    Returns whether it is installed: False without the simulator, or where numba-cuda's is not the reviewed
    one (:data:`REVIEWED_SHARED_ARRAY_SHA256`)."""
    from numba import config
    if not config.ENABLE_CUDASIM:
        return False
    from numba.cuda.simulator import kernelapi
    if kernelapi.FakeCUDAShared.array is _shared_array:
        return True
    source = inspect.getsource(kernelapi.FakeCUDAShared.array)
    if hashlib.sha256(source.encode()).hexdigest() != REVIEWED_SHARED_ARRAY_SHA256:
        return False
    kernelapi.FakeCUDAShared.array = _shared_array
    return True
