"""Which device is active, what it can hold, and how fast it is on paper and measured.

* :func:`info` -> :class:`DeviceInfo`: backend (``"gpu"``, ``"simulator"`` or
  ``"none"``), name, compute capability, SM count, shared memory and register
  limits, L2 size, memory clock and bus width. Unknown fields are ``None``.
* :data:`PEAKS` -> :class:`Peak` per known GPU (``"V100"``, ``"A100"``,
  ``"H100"``, ``"H200"``, each the SXM part): peak FLOP/s on CUDA cores and
  tensor cores (dense and 2:4 sparse), fp64, memory bandwidth, and the source
  of every number. :func:`peaks_for` finds the entry for a device name such as
  ``"NVIDIA H100 80GB HBM3"``.
* :func:`measured_bandwidth` times a large device-to-device copy (bytes read
  plus bytes written over device time); :func:`measured_peaks` is the table
  entry with that measured bandwidth in place of the datasheet's, which is what
  the roofline's speed of light should use (DESIGN.md, "Measuring on a GPU").

Units: FLOP/s and bytes/s (SI: 1 TB/s = 1e12 B/s), never TFLOP/s or GB/s, so
numbers can be divided without conversion; :meth:`Peak.describe` prints them
in TFLOP/s and GB/s.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from types import MappingProxyType

from sparsekit.numba_compat import kernel_function

__all__ = ["DeviceInfo", "Peak", "PEAKS", "info", "peaks_for", "allow_dynamic_shared", "require_cluster"]


def simulator_active() -> bool:
    """True when ``NUMBA_ENABLE_CUDASIM=1`` (read by Numba once per process)."""
    from numba.cuda.core import config
    return bool(getattr(config, "ENABLE_CUDASIM", os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"))


@dataclass(frozen=True)
class DeviceInfo:
    """Facts about the active CUDA device (``None`` where unknown or not applicable)."""

    backend: str                                 # "gpu", "simulator" or "none"
    name: str
    cc: tuple[int, int] | None = None            # compute capability
    sm_count: int | None = None
    warp_size: int | None = None
    max_threads_per_block: int | None = None
    max_threads_per_sm: int | None = None
    shared_per_block: int | None = None          # bytes, without opt-in (48 KB)
    shared_per_sm: int | None = None             # bytes
    shared_optin_per_block: int | None = None    # bytes, the opt-in maximum per block
    registers_per_block: int | None = None       # 32-bit registers
    registers_per_sm: int | None = None
    l2_bytes: int | None = None
    clock_khz: int | None = None                 # SM clock (rated)
    memory_clock_khz: int | None = None
    memory_bus_bits: int | None = None
    total_memory_bytes: int | None = None

    @property
    def theoretical_bandwidth(self) -> float | None:
        """2 (DDR) x memory clock x bus width, in bytes/s; ``None`` if the driver does not say."""
        if not self.memory_clock_khz or not self.memory_bus_bits:
            return None
        return 2.0 * self.memory_clock_khz * 1e3 * self.memory_bus_bits / 8

    def describe(self) -> str:
        """Multi-line human-readable summary (``sparsekit info`` prints it)."""
        lines = [f"backend: {self.backend}", f"device: {self.name}"]
        for f in fields(self)[2:]:
            v = getattr(self, f.name)
            if v is not None:
                lines.append(f"{f.name}: {v}")
        return "\n".join(lines)


_ATTRIBUTES = {
    "sm_count": "MULTIPROCESSOR_COUNT",
    "warp_size": "WARP_SIZE",
    "max_threads_per_block": "MAX_THREADS_PER_BLOCK",
    "max_threads_per_sm": "MAX_THREADS_PER_MULTIPROCESSOR",
    "shared_per_block": "MAX_SHARED_MEMORY_PER_BLOCK",
    "shared_per_sm": "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    "shared_optin_per_block": "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "registers_per_block": "MAX_REGISTERS_PER_BLOCK",
    "registers_per_sm": "MAX_REGISTERS_PER_MULTIPROCESSOR",
    "l2_bytes": "L2_CACHE_SIZE",
    "clock_khz": "CLOCK_RATE",
    "memory_clock_khz": "MEMORY_CLOCK_RATE",
    "memory_bus_bits": "GLOBAL_MEMORY_BUS_WIDTH",
}


# device id -> its DeviceInfo (a device's attributes do not change while the process runs; asking the driver
# for them took 27-44 us on the H100 machine, paid by every ``config="auto"`` call: experiments/results/uspmm.md).
_INFO: dict = {}


def info() -> DeviceInfo:
    """Describe the active backend and device (the GPU's attributes come from the driver, once per device)."""
    if simulator_active():
        return DeviceInfo(backend="simulator", name="CUDA simulator (NUMBA_ENABLE_CUDASIM=1)")
    from numba import cuda
    if not _INFO:                                      # (once a device is described the driver works: asking
        try:                                           # again, with NVVM's check, cost more than the rest)
            available = cuda.is_available()
        except Exception:  # no driver library at all
            available = False
        if not available:
            return DeviceInfo(backend="none", name="no CUDA device")
    dev = cuda.get_current_device()
    if dev.id not in _INFO:
        _INFO[dev.id] = _describe(dev)
    return _INFO[dev.id]


def _describe(dev) -> DeviceInfo:
    """:func:`info` of a Numba device, from the driver."""
    from numba import cuda
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    values = {}
    for key, attr in _ATTRIBUTES.items():
        try:
            values[key] = int(getattr(dev, attr))
        except Exception:  # attribute unknown to this driver
            values[key] = None
    try:
        values["total_memory_bytes"] = int(cuda.current_context().get_memory_info().total)
    except Exception:
        values["total_memory_bytes"] = None
    return DeviceInfo(backend="gpu", name=name, cc=tuple(dev.compute_capability), **values)


@dataclass(frozen=True)
class Peak:
    """Peak rates of one GPU, each in FLOP/s (bandwidth in bytes/s); ``None`` = not supported.

    ``fp16`` is half precision on CUDA cores (no tensor cores); ``fp16_tensor``
    dense tensor-core fp16 with fp32 accumulation, ``fp16_tensor_sparse`` the
    same with 2:4 structured sparsity (counted as the datasheets count it: the
    dense-equivalent FLOPs, twice the dense rate); ``tf32_tensor`` dense.
    ``source`` maps each field name to where its number comes from.
    """

    name: str
    fp32: float | None
    fp16: float | None
    fp16_tensor: float | None
    fp16_tensor_sparse: float | None
    tf32_tensor: float | None
    fp64: float | None
    bandwidth: float | None
    source: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))

    RATES = ("fp32", "fp16", "fp16_tensor", "fp16_tensor_sparse", "tf32_tensor", "fp64")

    def describe(self) -> str:
        """One line per number, in TFLOP/s and GB/s, with its source."""
        out = [f"peaks for {self.name}:"]
        for r in self.RATES:
            v = getattr(self, r)
            val = "n/a" if v is None else f"{v / 1e12:8.1f} TFLOP/s"
            out.append(f"  {r:<19} {val:>16}   [{self.source.get(r, '')}]")
        bw = "n/a" if self.bandwidth is None else f"{self.bandwidth / 1e9:8.0f} GB/s"
        out.append(f"  {'bandwidth':<19} {bw:>16}   [{self.source.get('bandwidth', '')}]")
        return "\n".join(out)


_V100_DS = "NVIDIA Tesla V100 datasheet (SXM2), nvidia.com/en-us/data-center/v100"
_VOLTA_WP = "NVIDIA Tesla V100 GPU Architecture whitepaper (2017)"
_A100_DS = "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB), nvidia.com/en-us/data-center/a100"
_AMPERE_WP = "NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020), Table 1"
_H100_DS = "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM), nvidia.com/en-us/data-center/h100"
_HOPPER_WP = "NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022), Table 'H100 SXM5'"
_H200_DS = "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM), nvidia.com/en-us/data-center/h200"
_HALF_SPARSE = "; the datasheet lists the 2:4 sparse rate, dense is half of it"

#: Datasheet peaks of the SXM parts. T = 1e12.
PEAKS: dict[str, Peak] = {
    "V100": Peak(
        name="V100", fp32=15.7e12, fp16=31.4e12, fp16_tensor=125e12, fp16_tensor_sparse=None,
        tf32_tensor=None, fp64=7.8e12, bandwidth=900e9,
        source=MappingProxyType({
            "fp32": _V100_DS, "fp64": _V100_DS, "fp16_tensor": _V100_DS + " (Tensor Performance)",
            "fp16": _VOLTA_WP + ": fp16 on CUDA cores runs at 2x the fp32 rate (15.7 x 2)",
            "fp16_tensor_sparse": "not supported: Volta has no sparse tensor cores",
            "tf32_tensor": "not supported: TF32 arrived with Ampere",
            "bandwidth": _V100_DS + " (HBM2 900 GB/s)"})),
    "A100": Peak(
        name="A100", fp32=19.5e12, fp16=78e12, fp16_tensor=312e12, fp16_tensor_sparse=624e12,
        tf32_tensor=156e12, fp64=9.7e12, bandwidth=2039e9,
        source=MappingProxyType({
            "fp32": _A100_DS, "fp64": _A100_DS, "fp16_tensor": _A100_DS,
            "fp16_tensor_sparse": _A100_DS + " (with sparsity)",
            "tf32_tensor": _A100_DS + " (dense; 312 with sparsity)",
            "fp16": _AMPERE_WP + ": Peak FP16 (non-Tensor) 78 TFLOPS",
            "bandwidth": _A100_DS + " (80GB SXM, HBM2e 2039 GB/s; the 40GB part has 1555)"})),
    "H100": Peak(
        name="H100", fp32=67e12, fp16=133.8e12, fp16_tensor=989.4e12, fp16_tensor_sparse=1978.9e12,
        tf32_tensor=494.7e12, fp64=34e12, bandwidth=3350e9,
        source=MappingProxyType({
            "fp32": _H100_DS, "fp64": _H100_DS,
            "fp16_tensor": _HOPPER_WP + " (dense)",
            "fp16_tensor_sparse": _H100_DS + " (FP16 Tensor Core 1979 with sparsity); "
                                  + _HOPPER_WP + " 1978.9",
            "tf32_tensor": _HOPPER_WP + " (dense)" + _HALF_SPARSE,
            "fp16": _HOPPER_WP + ": Peak FP16 (non-Tensor) 133.8 TFLOPS",
            "bandwidth": _H100_DS + " (HBM3 3.35 TB/s)"})),
    "H200": Peak(
        name="H200", fp32=67e12, fp16=133.8e12, fp16_tensor=989.4e12, fp16_tensor_sparse=1978.9e12,
        tf32_tensor=494.7e12, fp64=34e12, bandwidth=4800e9,
        source=MappingProxyType({
            "fp32": _H200_DS, "fp64": _H200_DS,
            "fp16_tensor": _H200_DS + " (FP16 Tensor Core 1979 with sparsity)" + _HALF_SPARSE,
            "fp16_tensor_sparse": _H200_DS + " (with sparsity)",
            "tf32_tensor": _H200_DS + " (TF32 Tensor Core 989 with sparsity)" + _HALF_SPARSE,
            "fp16": "same GH100 SM and clocks as H100 SXM: " + _HOPPER_WP
                    + " Peak FP16 (non-Tensor) 133.8 TFLOPS",
            "bandwidth": _H200_DS + " (HBM3e 4.8 TB/s)"})),
}


def peaks_for(device_name: str) -> Peak | None:
    """The :data:`PEAKS` entry for a driver's device name, or ``None`` if unknown.

    ``"NVIDIA H100 80GB HBM3"`` -> ``PEAKS["H100"]``; ``"Tesla V100-SXM2-32GB"``
    -> ``PEAKS["V100"]``. H100 PCIe and H100 NVL have fewer SMs or other
    clocks than the SXM part the table describes, so they get ``None``.
    """
    if not isinstance(device_name, str):
        raise TypeError(f"device_name: expected a str, got {type(device_name).__name__}")
    n = device_name.upper()
    if "H200" in n:
        return PEAKS["H200"]
    if "H100" in n:
        return None if ("PCIE" in n or "NVL" in n) else PEAKS["H100"]
    if "A100" in n:
        return PEAKS["A100"]
    if "V100" in n:
        return PEAKS["V100"]
    return None


def allow_dynamic_shared(compiled, nbytes: int) -> None:
    """Let a compiled kernel (a dispatcher's overload) launch with ``nbytes`` of dynamic shared memory.

    Above 48 KB per block a launch fails unless the kernel's
    ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`` was raised first (docs/numba_notes.md); the H100
    allows up to 232448 bytes."""
    from numba import cuda
    from numba.cuda.cudadrv.driver import binding, driver

    attr = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    driver.cuKernelSetAttribute(attr, nbytes, kernel_function(compiled).handle,
                                cuda.get_current_device().id)


def require_cluster(compiled, size: int) -> None:
    """Make every launch of a compiled kernel (a dispatcher's overload) run in 1-D thread-block clusters of
    ``size`` consecutive blocks (sm_90; the grid must be a multiple of ``size``).

    Numba has no cluster launch; this sets the driver attributes ``CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH``
    (and height and depth 1) at run time; ``sparsekit.gpu.cluster.launch`` then launches in clusters and its probe shows
    it. Above 8 blocks (the portable limit; the H100 allows 16) ``NON_PORTABLE_CLUSTER_SIZE_ALLOWED`` is set
    first."""
    from numba import cuda
    from numba.cuda.cudadrv.driver import binding, driver

    attrs = binding.CUfunction_attribute
    handle, dev = kernel_function(compiled).handle, cuda.get_current_device().id
    if size > 8:
        driver.cuKernelSetAttribute(attrs.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1, handle, dev)
    # all three or none: a width with height and depth left 0 makes every launch fail (INVALID_CLUSTER_SIZE)
    for attr, value in ((attrs.CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, size),
                        (attrs.CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT, 1),
                        (attrs.CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH, 1)):
        driver.cuKernelSetAttribute(attr, value, handle, dev)
