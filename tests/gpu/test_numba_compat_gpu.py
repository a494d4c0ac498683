"""sparsekit.numba_compat on a real GPU: each guarded accessor returns what Numba's own launch uses, the cluster
launch through Numba's argument packing runs a kernel in clusters, and the suite's install_all() installed the
lowering replacement."""
from __future__ import annotations

import numpy as np
import pytest
from numba import cuda, typeof

from sparsekit import numba_compat, numba_patches

pytestmark = pytest.mark.gpu


@cuda.jit
def _scale(x, out, factor):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = factor * x[i]


def _compiled(x, out):
    return _scale.compile((typeof(x), typeof(out), typeof(np.float32(2.0))))


def test_the_driver_function_and_the_packed_arguments_are_numba_s_own():
    x = cuda.to_device(np.arange(64, dtype=np.float32))
    out = cuda.device_array_like(x)
    compiled = _compiled(x, out)
    function = numba_compat.kernel_function(compiled)
    assert function.handle is not None and function.kernel is not None
    params, writebacks = numba_compat.pack_arguments(compiled, (x, out, np.float32(2.0)),
                                                     numba_compat.core_stream(0))
    assert params and not writebacks          # device arrays: nothing to copy back
    _scale[1, 64](x, out, np.float32(2.0))
    np.testing.assert_array_equal(out.copy_to_host(), 2 * np.arange(64, dtype=np.float32))


def test_a_device_array_s_cached_type_is_its_numba_type():
    dev = cuda.device_array((3, 4), dtype=np.float32)
    assert numba_compat.numba_type(dev) == typeof(dev)
    other = cuda.device_array((3, 4), dtype=np.float32)
    numba_compat.cache_numba_type(other, numba_compat.numba_type(dev))
    assert other._numba_type_ == typeof(other)


@pytest.mark.parametrize("mode", ["clusters", "blocks"])
def test_the_cluster_launch_through_numba_s_packing(mode):
    """gpu.cluster.launch's cuda.core path (Numba's argument packing, stream and driver function through the
    guarded accessors): where the driver takes the mode, every block sees its cluster rank, size and id."""
    if cuda.get_current_device().compute_capability < (9, 0):
        pytest.skip("thread-block clusters need compute capability 9.0")
    from sparsekit.gpu.cluster import _expected, cluster_probe
    try:
        got = cluster_probe(8, 2, mode)
    except Exception as err:                  # a launch form this driver refuses (launch_mode tries the next)
        pytest.skip(f"{mode}: the driver refused this launch form: {type(err).__name__}: {err}"[:300])
    np.testing.assert_array_equal(got, _expected(8, 2))


def test_the_suite_installed_the_lowering_replacement():
    """tests/conftest.py's install_all() on the GPU path: the lowering replacement is in place for every GPU test."""
    if numba_patches.enabled():
        assert numba_patches.installed() == {"fast_lowering": True}
    else:
        assert numba_patches.installed() == {"fast_lowering": False}
