"""sparsekit.timing and sparsekit.device on a real GPU.

The spin kernel doubles as a kernel of known duration: it polls the device's
nanosecond clock until a set time has passed, so measure() must return that
time (plus the few microseconds of a launch), whatever Python costs.
"""
from __future__ import annotations

import pytest

from sparsekit.device import info, peaks_for
from sparsekit.timing import measured_bandwidth, measured_peaks
from sparsekit.timing import dispatch_overhead, kernels, measure

pytestmark = pytest.mark.gpu


@pytest.mark.timing
@pytest.mark.parametrize("ns", [20_000, 200_000])
def test_measure_recovers_a_known_duration(ns):
    spin = kernels().spin
    m = measure(lambda: spin[1, 1](ns), repeat=20)
    # Lower bound exact (the kernel cannot finish early); upper: launch latency and timer granularity.
    assert ns * 1e-9 <= m.median_s <= ns * 1e-9 * 1.05 + 5e-6, m
    assert m.late == 0


@pytest.mark.timing
def test_batch_reports_time_per_launch_without_python_gaps():
    spin = kernels().spin
    m = measure(lambda: spin[1, 1](10_000), repeat=10, batch=20, flush_l2=False)
    # 20 back-to-back 10 us kernels: Python's ~20 us per launch must not show up.
    assert 10e-6 <= m.median_s <= 13e-6, m
    assert m.late == 0 and len(m.samples) == 10


@pytest.mark.timing
def test_dispatch_overhead_of_a_launch_is_microseconds():
    spin = kernels().spin
    t = dispatch_overhead(lambda: spin[1, 1](0), repeat=300)
    assert 1e-6 < t < 500e-6


def test_info_on_the_gpu():
    d = info()
    assert d.backend == "gpu" and d.cc is not None and d.cc >= (7, 0)
    assert d.sm_count > 0 and d.l2_bytes > 0 and d.warp_size == 32
    assert d.shared_optin_per_block >= d.shared_per_block > 0
    assert d.shared_per_sm >= d.shared_optin_per_block


@pytest.mark.timing
def test_measured_bandwidth_is_plausible():
    bw = measured_bandwidth(256 << 20, repeat=10)
    table = peaks_for(info().name)
    if table is not None:
        assert 0.5 * table.bandwidth <= bw <= 1.05 * table.bandwidth, (bw, table.bandwidth)
    else:
        assert bw > 1e10


def test_measured_peaks_replaces_only_the_bandwidth():
    p = measured_peaks(bandwidth=1.5e12)
    table = peaks_for(info().name)
    assert p.bandwidth == 1.5e12 and "measured" in p.source["bandwidth"]
    if table is not None:
        assert p.fp16_tensor == table.fp16_tensor and p.source["fp32"] == table.source["fp32"]
