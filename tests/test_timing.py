"""sparsekit.timing without a GPU: statistics, argument errors, the no-GPU refusal, host timing."""
from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparsekit.timing import Measurement, dispatch_overhead, measure, summarize


def test_summarize_known_values():
    assert summarize(range(1, 11)) == pytest.approx((5.5, 1.9, 9.1))  # linear interpolation
    assert summarize([3.0]) == (3.0, 3.0, 3.0)


@given(st.lists(st.floats(0, 1e3, allow_nan=False), min_size=1, max_size=50))
def test_summarize_orders_its_answers(xs):
    med, p10, p90 = summarize(xs)
    assert min(xs) <= p10 <= med <= p90 <= max(xs)
    assert med == pytest.approx(float(np.median(xs)))


@pytest.mark.parametrize("bad, err", [([], ValueError), ([1.0, float("nan")], ValueError),
                                      ([[1.0]], ValueError)])
def test_summarize_rejects(bad, err):
    with pytest.raises(err, match="^samples:"):
        summarize(bad)


@pytest.mark.parametrize("kwargs, err, msg", [
    (dict(repeat=0), ValueError, "^repeat: must be >= 1"),
    (dict(repeat=2.5), TypeError, "^repeat: expected an integer"),
    (dict(warmup=-1), ValueError, "^warmup: must be >= 0"),
    (dict(batch=0), ValueError, "^batch: must be >= 1"),
    (dict(flush_l2=1), TypeError, "^flush_l2: expected a bool"),
])
def test_measure_argument_errors(kwargs, err, msg):
    with pytest.raises(err, match=msg):
        measure(lambda: None, **kwargs)


def test_launch_must_be_callable():
    with pytest.raises(TypeError, match="^launch: expected a callable"):
        measure(42)
    with pytest.raises(TypeError, match="^launch: expected a callable"):
        dispatch_overhead("kernel")


@pytest.mark.simulator("the no-GPU refusal; tests/gpu/test_timing_gpu.py times on the GPU")
def test_measure_refuses_without_a_gpu():
    calls = []
    with pytest.raises(RuntimeError, match=r"^measure: needs a CUDA GPU, but the backend is"):
        measure(lambda: calls.append(1))
    assert calls == [], "nothing runs before the refusal"


def test_dispatch_overhead_is_host_time_per_call():
    calls = []

    def launch():
        calls.append(1)
        time.sleep(1e-3)

    t = dispatch_overhead(launch, repeat=20, warmup=3)
    assert len(calls) == 23
    assert 0.9e-3 <= t < 0.1


def test_measurement_rate_and_str():
    m = Measurement(median_s=2e-3, p10_s=1e-3, p90_s=3e-3, samples=(1e-3, 2e-3, 3e-3), batch=4,
                    warmup=3, flush_l2=True, spin_s=1e-4, late=0)
    assert m.rate(4e9) == pytest.approx(2e12)
    assert str(m) == "2.0000 ms (p10 1.0000, p90 3.0000; 3 x 4 launches, L2 flushed)"
