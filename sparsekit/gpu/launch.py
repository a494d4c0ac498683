"""The launch contract of the kernels: one place that launches, opts in to large shared memory, and
turns a block too large for the register file into a clear error.

* :func:`launch` ``kernel[grid, block, stream](*args)`` (``kernel`` a dispatcher or a :class:`DynamicShared`);
  ``CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES`` becomes a ValueError naming the settings. Without a ``stream``, the
  one :func:`launching_on` set (PyTorch's current stream, for :mod:`sparsekit.torch`), else Numba's default.
* :class:`DynamicShared`: a kernel launched with ``nbytes`` of dynamic shared memory.
* :class:`Buffers`: scratch device buffers a recorded launch (:mod:`sparsekit.launch`) may keep the address of.
* :class:`Prepared`: what a weight copied to the device once shares: its host format's shape and dtype.
* :func:`opt_in`: above :data:`SHARED_LIMIT` a launch fails unless the compiled kernel's
  ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`` was raised first (Numba has no option for it);
  up to :data:`SHARED_OPTIN` on the H100 and H200.
* :func:`resident_blocks`: how many blocks of a kernel the GPU holds at once (a grid of that many runs in
  one wave, every SM busy to the end).
* :func:`check_int32`: a size a kernel keeps in 32 bits (for speed) refused past :data:`INT32_MAX` by the
  launcher, before anything is allocated or launched (docs/limits.md lists them).
"""
from __future__ import annotations

import contextvars
from contextlib import contextmanager

import numpy as np
from numba import cuda
from numba.cuda import config as cuda_config

from sparsekit.device import allow_dynamic_shared

__all__ = ["launch", "launching_on", "opt_in", "resident_blocks", "check_int32", "DynamicShared", "Buffers", "Prepared", "SHARED_LIMIT", "SHARED_OPTIN",
           "SMEM_ALIGN", "WARP_SIZE", "INT32_MAX"]

#: Threads a warp.
WARP_SIZE = 32
#: Static shared memory per block that Numba can declare.
SHARED_LIMIT = 48 * 1024
#: Shared memory one block may use on the H100 and H200 (``MAX_SHARED_MEMORY_PER_BLOCK_OPTIN``).
SHARED_OPTIN = 232448
#: Byte alignment of the shared arrays read with vector loads (the simulator takes no alignment).
SMEM_ALIGN = None if cuda_config.ENABLE_CUDASIM else 16

#: The largest count or index a kernel's signed 32-bit arithmetic (or an int32 array) holds.
INT32_MAX = 2**31 - 1

_OPTED_IN: set = set()
_RESIDENT: dict = {}
#: Callbacks ``(kernel, grid, block, args)`` told of every launch (:func:`sparsekit.launch.record`).
OBSERVERS: list = []
#: Where :func:`launch` launches when its caller names no stream (:func:`launching_on`).
_STREAM = contextvars.ContextVar("sparsekit_launch_stream", default=0)


@contextmanager
def launching_on(stream):
    """Launches inside the block that name no stream go to ``stream`` (a Numba stream, e.g.
    ``cuda.external_stream`` of PyTorch's current one): ordered after the work queued there, and captured
    with it by a CUDA graph."""
    token = _STREAM.set(stream)
    try:
        yield
    finally:
        _STREAM.reset(token)


def launch(kernel, grid, block, args, tunables: str, *, stream=0) -> None:
    """``kernel[grid, block, stream](*args)``; a block too large for the register file is a ValueError.
    ``stream`` 0: the one :func:`launching_on` set, if any."""
    if isinstance(stream, int) and stream == 0:
        stream = _STREAM.get()
    try:
        kernel[grid, block, stream](*args)
        for observe in OBSERVERS:
            observe(kernel, grid, block, args)
    except Exception as err:
        if "OUT_OF_RESOURCES" not in str(err):
            raise
        regs = max(kernel.get_regs_per_thread().values())
        raise ValueError(f"{tunables}: a block of {block} threads at {regs} registers per thread does not fit "
                         f"the register file; choose fewer warps or a smaller tile") from None


def check_int32(count: int, name: str, what: str, why: str) -> None:
    """Refuse ``count`` ``what`` past :data:`INT32_MAX`: a ValueError naming ``name``, the limit, the count and
    ``why`` (where the kernel keeps them in 32 bits). Call it before allocating: it reads sizes only."""
    if count > INT32_MAX:
        raise ValueError(f"{name}: at most 2**31 - 1 = {INT32_MAX} {what}, got {count} ({why})")


def opt_in(kernel, args, nbytes: int) -> None:
    """Let the compiled overload of ``kernel`` for ``args`` use ``nbytes`` of dynamic shared memory
    (above :data:`SHARED_LIMIT` a launch fails without this). Once per overload and size."""
    if cuda_config.ENABLE_CUDASIM or nbytes <= SHARED_LIMIT:
        return
    from numba import typeof

    signature = tuple(typeof(a) for a in args)
    key = (id(kernel), signature, nbytes)              # (kernels are cached for the process: ids stay theirs)
    if key not in _OPTED_IN:                           # (compile() takes Numba's compile lock even when cached)
        allow_dynamic_shared(kernel.compile(signature), nbytes)
        _OPTED_IN.add(key)


def resident_blocks(kernel, args, threads: int) -> int | None:
    """Blocks of ``threads`` threads of ``kernel`` (compiled for ``args``) that the GPU holds at once, all SMs
    together (the occupancy calculator's answer for its registers and shared memory); None under the
    simulator. Once per kernel, block size and argument types."""
    if cuda_config.ENABLE_CUDASIM:
        return None
    from numba import typeof

    signature = tuple(typeof(a) for a in args)
    key = (id(kernel), signature, threads)
    if key not in _RESIDENT:
        _RESIDENT[key] = int(kernel.compile(signature).max_cooperative_grid_blocks(threads))
    return _RESIDENT[key]


class DynamicShared:
    """``kernel`` launched with ``nbytes`` of dynamic shared memory, for :func:`launch` (which indexes
    ``kernel[grid, block, stream]`` and asks ``get_regs_per_thread`` on failure)."""

    def __init__(self, kernel, nbytes: int):
        self.kernel, self.nbytes = kernel, nbytes

    def __getitem__(self, config):
        grid, block, stream = config
        return self.kernel[grid, block, stream, self.nbytes]

    def get_regs_per_thread(self):
        return self.kernel.get_regs_per_thread()


class Prepared:
    """A weight on the device (a dataclass with a ``host`` field, its format on the host): the host's shape and
    dtype, which launchers read."""

    @property
    def shape(self):
        return self.host.shape

    @property
    def dtype(self):
        return self.host.dtype


class Buffers:
    """Scratch device buffers, one a (dtype, size), kept as long as their owner: a recorded launch
    (:mod:`sparsekit.launch`) replays with their addresses, so a buffer is never replaced or freed."""

    def __init__(self):
        self.held: dict = {}

    def get(self, dtype, size: int):
        """The buffer of ``size`` (at least 1) elements of ``dtype``, allocated on first use."""
        key = (np.dtype(dtype).name, max(int(size), 1))
        if key not in self.held:
            self.held[key] = cuda.device_array(key[1], dtype=dtype)
        return self.held[key]
