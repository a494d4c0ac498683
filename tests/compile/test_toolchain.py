"""The offline toolchain compiles a plain kernel for both target architectures."""
import pytest
from numba import cuda, float32


@cuda.jit
def _scale(a, out):
    i = cuda.grid(1)
    if i < a.size:
        out[i] = 2.0 * a[i]


@pytest.mark.parametrize("cc", [(8, 0), (9, 0)])
def test_nvvm_compiles_for_target(cc):
    ptx, _ = cuda.compile_ptx(_scale, (float32[:], float32[:]), cc=cc)
    assert f".target sm_{cc[0]}{cc[1]}" in ptx
