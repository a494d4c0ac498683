"""sparsekit.device without a GPU: the peaks table, name matching, info() on this backend."""
from __future__ import annotations

import dataclasses

import pytest

from sparsekit import device, timing
from sparsekit.device import PEAKS, DeviceInfo, Peak, info, peaks_for


def test_table_has_the_four_gpus():
    assert set(PEAKS) == {"V100", "A100", "H100", "H200"}


@pytest.mark.parametrize("key", sorted(PEAKS))
def test_every_number_has_a_source_and_a_sane_value(key):
    p = PEAKS[key]
    assert p.name == key
    for f in Peak.RATES + ("bandwidth",):
        v = getattr(p, f)
        assert p.source.get(f), f"{key}.{f} has no source"
        assert v is None or v > 0
    assert p.fp32 is not None and p.fp16 is not None and p.fp64 is not None and p.bandwidth is not None
    # CUDA-core fp16 (half2) runs at 2x fp32 on V100/H100/H200 and 4x on A100 (whitepaper: 78 vs 19.5).
    assert p.fp16 / p.fp32 == pytest.approx(4 if key == "A100" else 2, rel=0.01)
    assert p.fp16_tensor > p.fp16
    if p.fp16_tensor_sparse is not None:
        assert p.fp16_tensor_sparse == pytest.approx(2 * p.fp16_tensor, rel=1e-3), "2:4 doubles the dense rate"
    if p.tf32_tensor is not None:
        assert p.tf32_tensor == pytest.approx(p.fp16_tensor / 2, rel=1e-3)


def test_only_volta_lacks_sparse_and_tf32_tensor_cores():
    assert PEAKS["V100"].fp16_tensor_sparse is None and PEAKS["V100"].tf32_tensor is None
    assert all(PEAKS[k].fp16_tensor_sparse and PEAKS[k].tf32_tensor for k in ("A100", "H100", "H200"))


def test_peaks_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        PEAKS["H100"].fp32 = 1.0
    with pytest.raises(TypeError):
        PEAKS["H100"].source["fp32"] = "x"


@pytest.mark.parametrize("name, key", [
    ("NVIDIA H100 80GB HBM3", "H100"),
    ("NVIDIA H100", "H100"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA H200 NVL", "H200"),
    ("NVIDIA A100-SXM4-80GB", "A100"),
    ("NVIDIA A100-SXM4-40GB", "A100"),
    ("Tesla V100-SXM2-32GB", "V100"),
    ("NVIDIA H100 PCIe", None),
    ("NVIDIA H100 NVL", None),
    ("NVIDIA GeForce RTX 4090", None),
    ("CUDA simulator (NUMBA_ENABLE_CUDASIM=1)", None),
])
def test_peaks_for_names(name, key):
    assert peaks_for(name) is (None if key is None else PEAKS[key])


def test_peaks_for_rejects_non_strings():
    with pytest.raises(TypeError, match="^device_name: expected a str"):
        peaks_for(b"NVIDIA H100")


def test_describe_prints_every_rate_with_its_source():
    text = PEAKS["H100"].describe()
    assert "989.4 TFLOP/s" in text and "3350 GB/s" in text and "datasheet" in text
    assert "n/a" in PEAKS["V100"].describe()


def test_info_matches_the_backend():
    d = info()
    assert isinstance(d, DeviceInfo) and d.backend in ("gpu", "simulator", "none")
    assert (d.backend == "simulator") == device.simulator_active()
    assert d.describe().startswith(f"backend: {d.backend}\ndevice: {d.name}")
    if d.backend != "gpu":
        assert d.sm_count is None and d.cc is None
    else:                                               # asked of the driver once per device
        from numba import cuda
        assert info() is d and d == device._describe(cuda.get_current_device())


def test_theoretical_bandwidth():
    d = DeviceInfo(backend="gpu", name="x", memory_clock_khz=2_619_000, memory_bus_bits=5120)
    assert d.theoretical_bandwidth == pytest.approx(2 * 2.619e9 * 640)
    assert DeviceInfo(backend="none", name="x").theoretical_bandwidth is None


@pytest.mark.simulator("the no-GPU error; tests/gpu/test_timing_gpu.py measures the bandwidth and peaks")
def test_measurements_need_a_gpu():
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        timing.measured_bandwidth()
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        timing.measured_peaks(bandwidth=1e12)
