"""``sparsekit.simulator``: the simulator's block manager yields the GIL while polling; kernels with
barriers, several blocks and a thread that raises behave as before."""
from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from sparsekit.simulator import yield_while_polling

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


def test_polling_yields_and_barriers_still_hold():
    from numba.cuda.simulator import kernel
    from sparsekit import simulator
    if not yield_while_polling():
        pytest.skip("numba-cuda's BlockManager.run is not the reviewed one (REVIEWED_RUN_SHA256): "
                    "review sparsekit.simulator against it")
    assert yield_while_polling()                                          # idempotent
    assert kernel.BlockManager.run is simulator._run_block
    x = np.arange(3 * 64, dtype=np.float64)
    out = np.zeros(3)
    _block_sums[3, 64](x, out)
    np.testing.assert_array_equal(out, x.reshape(3, 64).sum(axis=1))


def test_an_exception_in_one_thread_still_reaches_the_caller():
    with pytest.raises(ValueError, match="thread five"):
        _fails_in_one_thread[1, 16](np.zeros(16, dtype=np.int64))
