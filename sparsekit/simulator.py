"""The CUDA simulator, faster: its block manager sleeps until the simulated threads need it.

numba-cuda's simulator runs each thread of a block as a Python thread, and the main thread polls them
in a loop (who waits at ``syncthreads``, who has an exception, who is still alive) without giving up the
GIL, so it holds the interpreter for whole switch intervals (5 ms) while the threads that do the work
wait for it. :func:`fast_block_manager` replaces the block manager's ``run`` with :func:`_run_block`: the
same threads, barrier rule (released when every live thread waits at it) and error handling, but each
thread tells a condition when it reaches the barrier or ends, and the main thread sleeps on it instead of
polling. No result changes, only the order in which Python runs the threads. Measured on the 2-core test
machine: a poll loop that yields the GIL once per pass (``time.sleep(0)``) took the tensor-core USpMM with a
K split (37 x 40 x 17, 3 splits, float32) from 18.2 s to 5.7-6.2 s, but still spent 3 of 16 s of a
256-thread wgmma case (a pass over every thread's flags and ``is_alive`` per yield), hence the condition.
The threads are pooled, started once and reused by every block and launch (a simulated thread that does
little: 151 -> 46 us; the simulator part of the suite 238 -> 191 s).

A simulated deadlock (threads that never all reach the barrier, a thread spinning on a flag that only a later
block sets: the simulator runs blocks one at a time) raises :class:`SimulatorStall` once no thread of the block
has reached the barrier or ended for :data:`WAIT_TIMEOUT_S`, instead of hanging the process.

The replacement is installed only over the ``run`` and the ``BlockThread`` it was written against
(numba-cuda 0.30.4, by the hash of their sources): another version keeps its own, slower but correct.

:func:`fast_shared_arrays` does the same for ``cuda.shared.array``: the simulator keys a block's shared
arrays by the calling line, which it found with ``traceback.extract_stack`` (every frame of the stack, each
with its source line looked up) on every call of every thread; one frame lookup gives the same key. In the
pipelined USpMM's simulator test the stack walks were half of the time the simulated threads
held the interpreter. It also takes the first allocation of each array under a lock: numba-cuda's lookup (get,
allocate, store) let two threads that arrive together, one switched out in between, make an array each, so part
of the block wrote to an array the rest never read (rare wrong results of the tensor-core kernels under load,
``tests/test_simulator.py`` forces the switch).
"""
from __future__ import annotations

import functools
import sys
import threading
from types import SimpleNamespace

import numpy as np

from sparsekit.numba_compat import install

#: sha256 of ``inspect.getsource`` of numba-cuda 0.30.4's ``numba.cuda.simulator.kernel.BlockManager.run``.
REVIEWED_RUN_SHA256 = "54626c6819f55d514a598517b1467ed1cc2e7c3bf1f3b9814e13ef2a4ba3541f"
#: ... of its ``numba.cuda.simulator.kernel.BlockThread`` (whose ``syncthreads`` and ``run`` are extended).
REVIEWED_BLOCK_THREAD_SHA256 = "31539332ab25b3d00cb2c83f4a2cb7c75acd90b4a17240c6c50333f2559d9a39"
#: ... and of its ``numba.cuda.simulator.kernelapi.FakeCUDAShared.array``.
REVIEWED_SHARED_ARRAY_SHA256 = "46c69699220dd500ba43cd23a5eedb48ea3f2ea602876838c887e592d4055d75"


#: Seconds a block may go without any of its threads reaching the barrier or ending before the wait gives up.
WAIT_TIMEOUT_S = 300.0


class SimulatorStall(RuntimeError):
    """A simulated block made no progress for :data:`WAIT_TIMEOUT_S`: a deadlock or a spin that never ends."""


def _wait_with_progress(wait, block, what: str, patience: float = 1.0) -> None:
    """Call ``wait(timeout)`` (True once what it waits for happened) until it returns True; raise
    :class:`SimulatorStall` when ``patience`` x :data:`WAIT_TIMEOUT_S` passes with no thread of ``block`` reaching
    the barrier or ending (``block.events`` unchanged), so slow but progressing blocks are never cut short."""
    timeout = patience * WAIT_TIMEOUT_S
    while True:
        seen = block.events
        if wait(timeout):
            return
        if block.events == seen:
            raise SimulatorStall(
                f"simulator: {what} of block {block.index}: no thread reached the barrier or ended for "
                f"{timeout:g} s ({block.live} of {block.size} threads not ended, {block.waiting} of them waiting at "
                f"syncthreads); a deadlock, or a thread spinning on a flag another block sets (the simulator runs "
                f"blocks one at a time)")


#: Started simulated threads that wait for their next block (:func:`_pooled_thread`), shared by every launch.
_idle: list = []
_idle_lock = threading.Lock()


def _give_back(threads) -> None:
    """Put ``threads`` (pooled threads whose block no longer needs them) back among the idle ones."""
    with _idle_lock:
        _idle.extend(threads)


def _take_threads(count: int) -> list:
    """``count`` idle pooled threads, new ones where too few are idle (they start at their first block)."""
    with _idle_lock:
        taken = _idle[len(_idle) - min(count, len(_idle)):]
        del _idle[len(_idle) - len(taken):]
    return taken + [_pooled_thread()() for _ in range(count - len(taken))]


@functools.cache
def _pooled_thread():
    """numba-cuda's ``BlockThread`` (the reviewed one, :data:`REVIEWED_BLOCK_THREAD_SHA256`) made reusable: started
    once, it runs one simulated thread after another (:meth:`assign` gives it the next), and tells its block's
    condition when it waits at the barrier and when its thread ends, so the block manager can sleep until then.
    Starting a Python thread costs about 130 us on the 2-core test machine, as much as a simulated thread that does
    little; waking a started one costs a fraction of that."""
    from numba.cuda.simulator.kernel import BlockThread, Dim3

    class PooledThread(BlockThread):
        def __init__(self):                             # (BlockThread.__init__'s per-thread fields: assign)
            threading.Thread.__init__(self, daemon=True)
            self.syncthreads_event = threading.Event()
            self.job = threading.Event()

        def assign(self, f, manager, block_idx, thread_idx, debug, block, position):
            """Run ``f`` as thread ``thread_idx`` (the block's ``position``-th) of block ``block_idx``: the fields
            BlockThread.__init__ sets, set anew, then wake (or start) the thread."""
            if debug:                                   # (numba-cuda's np.seterr, scoped: the thread runs on)
                def target():
                    with np.errstate(divide="raise"):
                        f()
            else:
                target = f
            self._target, self._args, self._kwargs = target, (), {}   # (what Thread.run calls, then deletes)
            self.syncthreads_event.clear()
            self.syncthreads_blocked = False
            self._manager = manager
            self.blockIdx = Dim3(*block_idx)
            self.threadIdx = Dim3(*thread_idx)
            self.exception = None
            self.abort = False
            self.debug = debug
            dim = Dim3(*manager._block_dim)
            self.thread_id = self.threadIdx.x + dim.x * (self.threadIdx.y + dim.y * self.threadIdx.z)
            self.block, self.position = block, position
            if not self.is_alive():
                self.start()
            self.job.set()

        def syncthreads(self):                          # BlockThread.syncthreads, plus the count and the notify
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads call")
            with self.block.cond:
                self.syncthreads_blocked = True
                self.block.waiting += 1
                self.block.events += 1
                if self.block.waiting == self.block.live:
                    self.block.cond.notify()
            # (the block manager's wait stalls first and releases this one; 4 times its patience: a backstop)
            _wait_with_progress(self.syncthreads_event.wait, self.block, f"syncthreads of thread {self.thread_id}",
                                patience=4.0)
            self.syncthreads_event.clear()
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads clear")

        def run(self):
            while True:
                self.job.wait()
                self.job.clear()
                block = self.block
                try:
                    BlockThread.run(self)               # (stores an exception in self.exception)
                finally:
                    with block.cond:                    # the block's record: the thread's exception, its end
                        block.live -= 1
                        block.events += 1
                        if self.exception is not None:
                            block.errors.append((self.position, self.exception))
                        block.ended.append(self)
                        block.cond.notify()
                        abandoned = block.abandoned
                    if abandoned:                       # its block raised before this thread ended
                        _give_back([self])

    return PooledThread


def _run_block(manager, grid_point, *args):
    """Run one block of ``manager`` (a simulator ``BlockManager``): give a pooled thread each thread index, then
    sleep on the block's condition until every live thread waits at the barrier (release it), a thread raised (tell
    every thread to abort, raise the first exception in thread order) or all threads have ended; a block that
    stalls (:func:`_wait_with_progress`) is aborted the same way and raises :class:`SimulatorStall`. A thread is idle
    again once its block no longer needs it: when the block ends, or, after an exception, when the thread ends."""
    indices = list(np.ndindex(*manager._block_dim))
    block = SimpleNamespace(cond=threading.Condition(), live=len(indices), waiting=0, errors=[], ended=[],
                            abandoned=False, events=0, index=tuple(grid_point), size=len(indices))
    threads = _take_threads(len(indices))
    for position, (thread, idx) in enumerate(zip(threads, indices)):
        thread.assign(lambda: manager._f(*args), manager, grid_point, idx, manager._debug, block, position)
    stall = None
    with block.cond:
        while block.live and not block.errors:
            try:
                _wait_with_progress(lambda timeout: block.cond.wait_for(
                    lambda: block.errors or block.waiting == block.live, timeout), block, "the block manager's wait")
            except SimulatorStall as err:
                stall = err
                break
            if block.live and not block.errors and block.waiting == block.live:   # all at the barrier: release it
                for thread in threads:
                    if thread.syncthreads_blocked:
                        thread.syncthreads_blocked = False
                        thread.syncthreads_event.set()
                block.waiting = 0
        errors = sorted(block.errors, key=lambda error: error[0])
        if errors or stall:
            block.abandoned = True
            for other in threads:
                other.abort = True
                other.syncthreads_blocked = False
                other.syncthreads_event.set()
        _give_back(block.ended)                     # (every thread, unless one raised)
    if stall:
        raise stall
    if errors:
        exception, traceback = errors[0][1]
        raise exception.with_traceback(traceback)


def fast_block_manager() -> bool:
    """Under the CUDA simulator, install :func:`_run_block` as the block manager's ``run`` (idempotent). Returns
    whether it is installed: False without the simulator, or where numba-cuda's ``run`` or ``BlockThread`` is not
    the reviewed one (:data:`REVIEWED_RUN_SHA256`, :data:`REVIEWED_BLOCK_THREAD_SHA256`)."""
    from numba import config
    if not config.ENABLE_CUDASIM:
        return False
    from numba.cuda.simulator import kernel
    return install(kernel.BlockManager, "run", _run_block, (kernel.BlockManager.run, REVIEWED_RUN_SHA256),
                   (kernel.BlockThread, REVIEWED_BLOCK_THREAD_SHA256))


#: Guards the first allocation of a shared array: numba-cuda's own lookup (get, allocate, store) lets two threads
#: that arrive together, one switched out between the get and the store, each make an array of their own, so the
#: block's threads no longer share it (rare wrong results under load, in any kernel with shared memory).
_SHARED_LOCK = threading.Lock()


def _shared_array(shared, shape, dtype, alignment=None):
    """``cuda.shared.array`` in the simulator (``FakeCUDAShared.array``): dynamic shared memory for ``shape``
    0, else one array per calling line, shared by the block's threads, keyed by the caller's (file name, line
    number) as the original keys it, from the caller's frame instead of a walk of the whole stack; the first
    allocation under a lock, so threads arriving together get the same array."""
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
        with _SHARED_LOCK:                      # (the first threads of a block may arrive together: one array)
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
    return install(kernelapi.FakeCUDAShared, "array", _shared_array,
                   (kernelapi.FakeCUDAShared.array, REVIEWED_SHARED_ARRAY_SHA256))
