"""Device time of GPU work, with Python's dispatch cost kept out and reported apart.

:func:`measure` times ``launch()`` (a callable that queues GPU work on the
default stream and returns without synchronising) the way DESIGN.md asks:

1. **Warm-up**: ``warmup`` calls first (JIT compilation, module load, first
   touch), synchronised; they also tell how long the host takes to queue one
   batch.
2. **Per repeat**: an optional **L2 flush** (a kernel writes a buffer of twice
   the L2 size, so inputs are not served from cache), then a **spin kernel** (one
   thread polling ``%globaltimer`` until a set time has passed) that holds the
   stream while the host queues the start event, ``batch`` calls of ``launch``
   and the end event. The events therefore bracket back-to-back device work and
   not Python's ~20-50 us per launch.
3. **Statistics**: seconds per launch (event time / ``batch``) for each repeat;
   median, 10th and 90th percentiles.

The spin lasts twice the host time of one batch measured in the warm-up plus
50 us; should queuing a batch still take longer than the spin (the device may
then have idled between launches and the sample is too long), the repeat is
counted in :attr:`Measurement.late` and the spin is lengthened for the next
repeat. A launch that synchronises (copies to the host, say) defeats the spin:
pass device arrays and keep results on the device.

:func:`dispatch_overhead` gives the host side: median wall-clock seconds per
``launch()`` call, including everything Python does to get the work queued.

Without a GPU (the simulator, or no driver) :func:`measure` raises
``RuntimeError``: simulated time says nothing about a kernel's speed, and a
number that looks like a timing would be misread. :func:`dispatch_overhead`
works anywhere, since host time is host time (under the simulator it includes
running the simulated kernel).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from types import MappingProxyType

import numpy as np

from sparsekit.checks import check_int
from sparsekit.device import Peak, info, peaks_for

__all__ = ["Measurement", "measure", "dispatch_overhead", "summarize", "require_gpu", "measured_bandwidth",
           "measured_peaks"]

# Spin length: 2 x the host time of one batch + this margin (seconds), at most _SPIN_MAX.
_SPIN_MARGIN = 50e-6
_SPIN_MAX = 0.5
# Assumed host time per launch when warmup < 2 leaves nothing to calibrate on.
_DEFAULT_HOST_PER_LAUNCH = 100e-6
# Calls between synchronisations in dispatch_overhead (keeps the launch queue from filling).
_DISPATCH_CHUNK = 32


@dataclass(frozen=True)
class Measurement:
    """Device seconds per launch over ``len(samples)`` repeats of ``batch`` launches."""

    median_s: float
    p10_s: float
    p90_s: float
    samples: tuple[float, ...]
    batch: int
    warmup: int
    flush_l2: bool
    spin_s: float   # the last spin's length (seconds)
    late: int       # repeats whose host queuing outlasted the spin (their sample may include idle time)

    def rate(self, amount: float) -> float:
        """``amount`` per second at the median (bytes -> bytes/s, FLOPs -> FLOP/s)."""
        return amount / self.median_s

    def __str__(self) -> str:
        ms = 1e3
        flush = "L2 flushed" if self.flush_l2 else "L2 warm"
        late = f", {self.late} late" if self.late else ""
        return (f"{self.median_s * ms:.4f} ms (p10 {self.p10_s * ms:.4f}, p90 {self.p90_s * ms:.4f}; "
                f"{len(self.samples)} x {self.batch} launches, {flush}{late})")


def summarize(samples) -> tuple[float, float, float]:
    """(median, 10th percentile, 90th percentile) of a non-empty sequence of numbers."""
    a = np.asarray(samples, dtype=np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"samples: expected a non-empty 1-D sequence, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError("samples: must be finite, found NaN/Inf")
    p10, med, p90 = np.percentile(a, [10, 50, 90])
    return float(med), float(p10), float(p90)


def require_gpu(what: str):
    """Return :func:`sparsekit.device.info` for a real GPU, else raise ``RuntimeError`` naming ``what``."""

    dev = info()
    if dev.backend != "gpu":
        raise RuntimeError(
            f"{what}: needs a CUDA GPU, but the backend is {dev.backend!r} ({dev.name}); "
            f"simulated or host timings say nothing about device speed, so none are returned")
    return dev


_KERNELS = None


def kernels():
    """The spin and L2-flush kernels, built on first use (they need the real CUDA target).

    Returns a namespace with ``spin(ns)`` (one thread; polls ``%globaltimer``,
    the device's nanosecond clock, until ``ns`` have passed, napping with
    ``nanosleep`` between polls), ``flush(buf, value)`` (grid-stride fill of an
    int32 buffer) and ``globaltimer()`` (the device function).
    """
    global _KERNELS
    if _KERNELS is not None:
        return _KERNELS
    from types import SimpleNamespace

    from llvmlite import ir
    from numba import cuda
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def globaltimer(typingctx):
        """Nanoseconds from the device's global timer (PTX ``%globaltimer``)."""
        def codegen(context, builder, signature, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.IntType(64), []),
                               "mov.u64 $0, %globaltimer;", "=l", side_effect=True)
            return builder.call(asm, [])
        return types.int64(), codegen

    @cuda.jit
    def spin(ns):
        t0 = globaltimer()
        while globaltimer() - t0 < ns:
            cuda.nanosleep(1000)

    @cuda.jit
    def flush(buf, value):
        start = cuda.grid(1)
        step = cuda.gridsize(1)
        for i in range(start, buf.size, step):
            buf[i] = value

    _KERNELS = SimpleNamespace(spin=spin, flush=flush, globaltimer=globaltimer)
    return _KERNELS


_FLUSH_BUFFERS: dict = {}


def _flush_buffer(dev):
    """An int32 device buffer of max(2 x L2, 64 MiB), one per device name (kept for reuse)."""
    buf = _FLUSH_BUFFERS.get(dev.name)
    if buf is None:
        from numba import cuda
        nbytes = max(2 * (dev.l2_bytes or 0), 64 << 20)
        buf = _FLUSH_BUFFERS[dev.name] = cuda.device_array(nbytes // 4, dtype=np.int32)
    return buf


def _check_launch(launch) -> None:
    if not callable(launch):
        raise TypeError(f"launch: expected a callable taking no arguments, got {type(launch).__name__}")


def measure(launch, *, repeat: int = 30, warmup: int = 3, flush_l2: bool = True,
            batch: int = 1) -> Measurement:
    """Device seconds per ``launch()`` call: median and spread over ``repeat`` repeats.

    Parameters
    ----------
    launch : callable
        queues GPU work on the default stream; must not synchronise.
    repeat : int >= 1
        timed repeats (one sample each).
    warmup : int >= 0
        untimed calls first (compilation, first touch, host-time calibration).
    flush_l2 : bool
        write a buffer twice the L2 size before every repeat.
    batch : int >= 1
        launches per repeat between the two events; raise it for kernels of a
        few microseconds (event resolution is about 0.5 us). With ``batch > 1``
        only the first launch of a repeat sees a flushed L2.

    Raises
    ------
    RuntimeError
        no GPU (simulator or no driver).
    TypeError, ValueError
        bad arguments.
    """
    _check_launch(launch)
    repeat = check_int(repeat, "repeat", minimum=1)
    warmup = check_int(warmup, "warmup", minimum=0)
    batch = check_int(batch, "batch", minimum=1)
    if not isinstance(flush_l2, bool):
        raise TypeError(f"flush_l2: expected a bool, got {type(flush_l2).__name__}")
    dev = require_gpu("measure")
    from numba import cuda

    from sparsekit.arrays import cdiv

    k = kernels()
    buf = _flush_buffer(dev) if flush_l2 else None
    flush_grid = (min(cdiv(buf.size, 256), 32 * (dev.sm_count or 1)), 256) if flush_l2 else None

    host_batch = batch * _DEFAULT_HOST_PER_LAUNCH
    for w in range(warmup):
        t0 = time.perf_counter()
        for _ in range(batch):
            launch()
        dt = time.perf_counter() - t0
        cuda.synchronize()
        if w == 1:  # the first call may compile: calibrate on the later ones
            host_batch = dt
        elif w > 1:
            host_batch = max(host_batch, dt)
    if flush_l2:  # compile the helpers outside the timed loop
        k.flush[flush_grid](buf, 0)
    k.spin[1, 1](0)
    cuda.synchronize()

    spin_s = min(2.0 * host_batch + _SPIN_MARGIN, _SPIN_MAX)
    start, end = cuda.event(timing=True), cuda.event(timing=True)
    samples, late = [], 0
    for r in range(repeat):
        if flush_l2:
            k.flush[flush_grid](buf, r)
        k.spin[1, 1](int(spin_s * 1e9))
        t0 = time.perf_counter()
        start.record()
        for _ in range(batch):
            launch()
        end.record()
        host = time.perf_counter() - t0
        end.synchronize()
        samples.append(cuda.event_elapsed_time(start, end) * 1e-3 / batch)
        if host > spin_s:
            late += 1
            spin_s = min(2.0 * host + _SPIN_MARGIN, _SPIN_MAX)
    med, p10, p90 = summarize(samples)
    return Measurement(median_s=med, p10_s=p10, p90_s=p90, samples=tuple(samples), batch=batch,
                       warmup=warmup, flush_l2=flush_l2, spin_s=spin_s, late=late)


def dispatch_overhead(launch, *, repeat: int = 200, warmup: int = 10) -> float:
    """Median host seconds per ``launch()`` call (Python dispatch, argument handling, queuing).

    Each call is timed alone with ``time.perf_counter``; on a GPU the device is
    synchronised every 32 calls, outside the timed region, so the launch queue
    never fills and blocks the host. Measure small kernels with it: a kernel
    longer than its dispatch makes the queue, not Python, the bottleneck.
    """
    _check_launch(launch)
    repeat = check_int(repeat, "repeat", minimum=1)
    warmup = check_int(warmup, "warmup", minimum=0)
    from sparsekit.device import info

    sync = None
    if info().backend == "gpu":
        from numba import cuda
        sync = cuda.synchronize
    for _ in range(warmup):
        launch()
    if sync:
        sync()
    times = []
    perf = time.perf_counter
    for i in range(repeat):
        t0 = perf()
        launch()
        times.append(perf() - t0)
        if sync and i % _DISPATCH_CHUNK == _DISPATCH_CHUNK - 1:
            sync()
    if sync:
        sync()
    return summarize(times)[0]


def measured_bandwidth(nbytes: int | None = None, *, repeat: int = 20) -> float:
    """Device memory bandwidth in bytes/s from a large device-to-device copy.

    Copies ``nbytes`` (default: the larger of 1 GiB and 8x the L2 size) with
    ``cuMemcpyDtoDAsync`` and counts ``2 * nbytes`` moved (read plus write)
    over the median device time of :func:`measure`.
    Raises ``RuntimeError`` without a GPU.
    """
    from numba import cuda
    from numba.cuda.cudadrv import driver

    dev_info = require_gpu("measured_bandwidth")
    if nbytes is None:
        nbytes = max(1 << 30, 8 * (dev_info.l2_bytes or 0))
    nbytes = check_int(nbytes, "nbytes", minimum=1 << 20)
    src = cuda.device_array(nbytes, dtype="u1")
    dst = cuda.device_array(nbytes, dtype="u1")
    driver.device_memset(src, 1, nbytes)  # never time on untouched memory
    stream = cuda.default_stream()
    m = measure(lambda: driver.device_to_device(dst, src, nbytes, stream=stream),
                       repeat=repeat, warmup=2, flush_l2=False)
    return 2.0 * nbytes / m.median_s


def measured_peaks(bandwidth: float | None = None) -> Peak:
    """The table's peaks for this GPU with the measured copy bandwidth in place of the datasheet's.

    ``bandwidth`` (bytes/s) skips the measurement when already known. A GPU not in
    :data:`PEAKS` gets ``None`` for every FLOP rate. Raises ``RuntimeError`` without a GPU.
    """
    dev = require_gpu("measured_peaks")
    bw = measured_bandwidth() if bandwidth is None else float(bandwidth)
    table = peaks_for(dev.name)
    src = f"measured on {dev.name}: device-to-device copy, bytes read + written"
    if table is None:
        return Peak(name=dev.name, fp32=None, fp16=None, fp16_tensor=None, fp16_tensor_sparse=None,
                    tf32_tensor=None, fp64=None, bandwidth=bw,
                    source=MappingProxyType({"bandwidth": src}))
    return replace(table, name=dev.name, bandwidth=bw,
                   source=MappingProxyType({**table.source, "bandwidth": src}))
