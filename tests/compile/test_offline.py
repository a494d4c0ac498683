"""``sparsekit.offline``: post-LTO PTX and ptxas's report without a GPU, and the numbers read from it.

A register-hungry kernel has to show a spill or a stack under tight launch bounds, and none without
them: the report's numbers are the kernel's, not fixed text. The persistent RNN's capacity study reads
its register counts through the same path (``experiments/bench_persistent_rnn.offline_registers``).
"""
from __future__ import annotations

import math
import re

import pytest
from numba import cuda, float32, types
from numba.cuda import compiler

from sparsekit import offline


@cuda.jit
def _saxpy(a, x, y):
    i = cuda.grid(1)
    if i < x.size:
        y[i] = a * x[i] + y[i]


SAXPY_ARGS = (float32, types.float32[::1], types.float32[::1])


@pytest.mark.parametrize("cc", [(8, 0), (9, 0)])
def test_build_gives_post_lto_ptx_and_report(cc):
    built = offline.build(_saxpy, SAXPY_ARGS, cc)
    assert f".target sm_{cc[0]}{cc[1]}" in built.ptx
    assert "fma.rn.f32" in built.ptx
    use = offline.usage(built.report)
    assert 1 <= use.registers <= 32
    assert use.spill_store_bytes == use.spill_load_bytes == use.stack_bytes == 0


@cuda.jit
def _lowering_probe(x, total, h):
    """Goes through numba-cuda's capability-dependent lowerings: float64 atomics (6.0), ``tanh`` (7.5; its
    ``tanh.approx`` form needs fastmath, which ``sparsekit.offline`` builds, like our kernels, do not use)."""
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(total, 0, float(x[i]))
        h[i] = math.tanh(x[i]) * float32(h[i])


LOWERING_ARGS = (types.float32[::1], types.float64[::1], types.float16[::1])


@pytest.mark.parametrize("cc", [(8, 0), (9, 0)])
def test_one_front_end_serves_every_target_from_7_5(cc):
    """:func:`offline.lto_ptx` lowers once at ``SAME_LOWERING_FROM`` for sm_80 and sm_90; the PTX equals that of
    a front end run for ``cc`` itself but for the kernel's mangled name, which carries a counter and a hash of
    the compile flags (should numba-cuda ever lower differently at 8.0 or 9.0, this fails)."""
    assert cc >= offline.SAME_LOWERING_FROM
    own, _ = compiler._compile_pyfunc_with_fixup(_lowering_probe.py_func, LOWERING_ARGS, device=False, abi="numba",
                                                 cc=cc, lto=True)
    own._lto = True
    shared = offline.lto_ptx(_lowering_probe, LOWERING_ARGS, cc)
    assert "atom.global.add.f64" in shared
    assert re.sub(r"_Z\w+", "KERNEL", shared) == re.sub(r"_Z\w+", "KERNEL", own.get_lto_ptx(cc=cc))


def test_build_without_ptx_still_reports():
    built = offline.build(_saxpy, SAXPY_ARGS, want_ptx=False)
    assert built.ptx == "" and offline.usage(built.report).registers >= 1


def test_usage_refuses_a_log_without_ptxas_lines():
    with pytest.raises(ValueError, match="Used"):
        offline.usage("nothing here")


def test_persistent_rnn_capacity_reads_registers_offline():
    from experiments.bench_persistent_rnn import offline_registers
    regs, spilled = offline_registers("lamport", 8, 16, 4, load="relaxed")
    assert 16 <= regs <= 255 and spilled >= 0
