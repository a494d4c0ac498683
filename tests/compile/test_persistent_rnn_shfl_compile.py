"""``reduce="shfl"``: the warp-shuffle reduction of sparsekit/gpu/persistent_rnn.py, checked without a GPU.

The simulator has no shuffles (docs/numba_notes.md), so there the kernels run the
shared-memory reduction. Here the kernel's own device functions
(``shfl_reduce`` and ``owned``, taken from the built kernel's closure, Python
source as compiled) run for every lane of one row as Python threads, with
``cuda.shfl_xor_sync`` played by a barrier-synchronised exchange: every
(tpr, batch, gates) combination must leave each (row, sample) sum, exactly
(integer-valued partials), on exactly one owning lane. The post-LTO PTX shows
the expected number of ``shfl.sync`` and no shared-memory partial sums.
Multi-block runs on the GPU: tests/gpu/test_persistent_rnn_gpu.py.
"""
from __future__ import annotations

import itertools
import re
import threading

import numpy as np
import pytest
from numba import types

import sparsekit.gpu.persistent_rnn as gpu_rnn
from sparsekit import offline


def _closure(fn, name):
    """The object bound to free variable ``name`` of a device function or kernel."""
    f = getattr(fn, "py_func", fn)
    return dict(zip(f.__code__.co_freevars, (c.cell_contents for c in f.__closure__)))[name]


class _Warp:
    """``cuda.shfl_xor_sync`` for ``n`` lanes running as threads named by their lane."""

    def __init__(self, n):
        self.barrier = threading.Barrier(n)
        self.box = {}

    def shfl_xor_sync(self, mask, value, offset):
        lane = int(threading.current_thread().name)
        self.box[lane] = value
        self.barrier.wait()
        got = self.box[lane ^ offset]
        self.barrier.wait()
        return got


@pytest.mark.parametrize("tpr, batch, cell", list(itertools.product([1, 2, 4, 8, 16, 32], [1, 2, 3, 4, 8],
                                                                     ["rnn", "lstm"])))
def test_shuffle_reduce_scatter_sums_every_output_once(monkeypatch, tpr, batch, cell):
    scheme = "wide" if batch == 4 else "naive"
    kernel = gpu_rnn._kernel("lamport", scheme, np.dtype(np.float32), 2, tpr, batch, "tanh", 4, cell=cell,
                             reduce="shfl")
    write = _closure(kernel, "reduce_and_write")
    shfl_reduce, owned, nbo = (_closure(write, n) for n in ("shfl_reduce", "owned", "NBO"))
    gates = 4 if cell == "lstm" else 1
    partials = np.random.default_rng(tpr * batch).integers(-50, 50, (tpr, gates * batch)).astype(np.float64)
    want = partials.sum(axis=0)
    warp = _Warp(tpr)
    monkeypatch.setattr(gpu_rnn, "cuda", warp)
    held = {}

    def lane_body(lane):
        acc = list(partials[lane])
        shfl_reduce.py_func(acc, lane)
        held[lane] = acc
    threads = [threading.Thread(target=lane_body, args=(lane,), name=str(lane)) for lane in range(tpr)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    monkeypatch.undo()
    owners = {}
    for lane in range(tpr):
        for q in range(nbo):
            b = owned.py_func(lane, q)
            if b < batch:
                owners[b] = owners.get(b, 0) + 1
                assert [held[lane][g * batch + q] for g in range(gates)] == \
                    [want[g * batch + b] for g in range(gates)]
    assert owners == {b: 1 for b in range(batch)}


@pytest.mark.filterwarnings("ignore:Not adding")
@pytest.mark.parametrize("sync, cell, shuffles", [("lamport", "rnn", 4), ("lamport", "lstm", 16),
                                                  ("barrier", "rnn", 4)])
def test_shuffle_reduce_compiles_without_shared_partials(sync, cell, shuffles):
    """tpr 8, batch 4: 2 + 1 halving shuffles and 1 butterfly per gate; the weights stay in registers."""
    opts = {"grid_sync": "atomic"} if sync == "barrier" else {}
    kernel = gpu_rnn._kernel(sync, "wide", np.dtype(np.float16), 6, 8, 4, "tanh", 8, cell=cell, reduce="shfl",
                             **opts)
    a1, a2, a3 = (lambda t: types.Array(t, 1, "C")), (lambda t: types.Array(t, 2, "C")), \
        (lambda t: types.Array(t, 3, "C"))
    f16 = types.float16
    sig = (a2(f16), a2(types.int16), a3(f16), a1(f16), a1(types.uint32), a3(f16), a3(f16), a2(f16),
           a1(types.int64), a1(types.int32), a2(f16)) + (types.int64,) * 5
    ptx = offline.lto_ptx(kernel, sig)
    assert len(re.findall(r"shfl\.sync", ptx)) == shuffles
    assert ".local" not in ptx and "bar.warp.sync" not in ptx
