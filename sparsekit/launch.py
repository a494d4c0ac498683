"""Fast launch: record the kernel launches a product makes once, replay them with ``cuLaunchKernel``.

A Numba launch from PyTorch tensors costs 24-68 us of host time (argument typing, dispatch, packing);
``cuLaunchKernel`` on the cached function with pre-packed arguments costs about 5 us. Every kernel of
the library launches through :func:`sparsekit.gpu.launch.launch`, so one mechanism serves them all:

* :func:`record` runs a product once for a given (prepared weight, N, dtype, device) and keeps each
  launch it made: the compiled function, grid, block, dynamic shared memory and the flat, packed
  argument list Numba itself builds (``_Kernel._prepare_args``);
* arguments whose value is the input's or the output's data pointer become slots;
* :meth:`LaunchPlan.__call__` writes the new pointers into those slots and calls ``cuLaunchKernel``
  on torch's current stream: no host sync, no allocation (the output comes from torch's caching
  allocator), so a replay can be captured by ``torch.cuda.graph``.

A plan is verified when recorded: replayed into NaN-filled outputs, on ``-x`` it must give exactly
``-out`` and on ``x`` again ``out`` (work the product does outside :func:`sparsekit.gpu.launch.launch`, a memset
or a copy of ``x``, would show there); otherwise :func:`record` returns None and callers keep the
ordinary path.
"""
from __future__ import annotations

import ctypes
import functools
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

from sparsekit.gpu import launch as launch_contract
from sparsekit.gpu.launch import DynamicShared, launching_on
from sparsekit.numba_compat import kernel_function, pack_arguments

__all__ = ["LaunchPlan", "Launch", "record", "observe", "on_torch_stream"]


@contextmanager
def observe():
    """Collect ``(kernel, grid, block, args)`` of every launch made inside the block (a list)."""
    seen: list = []

    def keep(kernel, grid, block, args):
        seen.append((kernel, grid, block, args))

    launch_contract.OBSERVERS.append(keep)
    try:
        yield seen
    finally:
        launch_contract.OBSERVERS.remove(keep)


def on_torch_stream():
    """A context in which the library's launches go to PyTorch's current stream (:func:`launching_on`), as a
    PyTorch op's must: after the work that made its inputs there (a side stream is not ordered with Numba's
    default stream), and inside a CUDA graph captured there. Nothing to do under the simulator."""
    from numba import cuda
    from numba.cuda import config as cuda_config

    if cuda_config.ENABLE_CUDASIM:
        return nullcontext()
    import torch

    return launching_on(cuda.external_stream(torch.cuda.current_stream().cuda_stream))


def _dims(d) -> tuple[int, int, int]:
    d = (d,) if isinstance(d, int) else tuple(d)
    return tuple(int(v) for v in d) + (1,) * (3 - len(d))


@dataclass
class Launch:
    """One packed launch: the driver function, its dimensions and its argument buffers."""

    function: object
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: int
    values: list                                  # ctypes objects, one per flat kernel parameter
    params: object                                # void*[n]: their addresses (kernelParams)
    slots: dict = field(default_factory=dict)     # "input"/"output" -> indices into values


def _packed(kernel, grid, block, args) -> Launch:
    """The driver-level form of ``kernel[grid, block](*args)`` (a dispatcher or a DynamicShared)."""
    from numba import typeof

    from cuda.bindings import driver

    shared, dispatcher = (kernel.nbytes, kernel.kernel) if isinstance(kernel, DynamicShared) else (0, kernel)
    compiled = dispatcher.compile(tuple(typeof(a) for a in args))
    flat, _ = pack_arguments(compiled, args, 0)
    values = [v if isinstance(v, ctypes._SimpleCData) else ctypes.c_int64(int(v)) for v in flat]
    params = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])
    handle = kernel_function(compiled).handle
    if isinstance(handle, driver.CUkernel):            # a library kernel: its function in this context
        err, handle = driver.cuKernelGetFunction(handle)
        if int(err):
            raise RuntimeError(f"cuKernelGetFunction failed: {err!r}")
    function = handle
    return Launch(function, _dims(grid), _dims(block), int(shared), values, params)


@functools.cache
def _driver_launch():
    """libcuda's ``cuLaunchKernel`` through ctypes (about a microsecond a call; the cuda.bindings wrapper
    costs a few), or None where the library cannot be loaded."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    fn = lib.cuLaunchKernel
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    return fn


class LaunchPlan:
    """Recorded launches of one product at one shape; call with the input and output data pointers."""

    def __init__(self, launches: list[Launch], keep: list):
        self.launches = launches
        self._keep = keep                          # the recording's other device arrays, kept alive
        self._launch = _driver_launch()
        self._calls = [(int(ln.function), *ln.grid, *ln.block, ln.shared, ctypes.addressof(ln.params))
                       for ln in launches]
        self._inputs = [ln.values[i] for ln in launches for i in ln.slots.get("input", ())]
        self._outputs = [ln.values[i] for ln in launches for i in ln.slots.get("output", ())]

    def __call__(self, input_ptr: int, output_ptr: int, stream: int) -> None:
        for slot in self._inputs:
            slot.value = input_ptr
        for slot in self._outputs:
            slot.value = output_ptr
        for fn, gx, gy, gz, bx, by, bz, shared, params in self._calls:
            err = self._launch(fn, gx, gy, gz, bx, by, bz, shared, stream, params, None)
            if err:
                raise RuntimeError(f"cuLaunchKernel failed: CUresult {err}")


def record(product, x, out_like):
    """Run ``out = product(x)`` (torch CUDA tensors) once and return ``(out, plan)``: ``plan(x_ptr, out_ptr,
    stream)`` repeats its launches for another ``x`` and output of the same shape, dtype and layout.

    ``out_like(x)`` allocates an output as the product would (torch's allocator). ``plan`` is None on the
    simulator, when a launch has no pointer of ``x`` or of ``out`` it could substitute consistently, or
    when the verification replay differs from ``out``.
    """
    from numba.cuda import config as cuda_config

    with observe() as seen, on_torch_stream():
        out = product(x)
    if cuda_config.ENABLE_CUDASIM or not seen:
        return out, None
    import torch

    xp, op = x.data_ptr(), out.data_ptr()
    launches = []
    for kernel, grid, block, args in seen:
        ln = _packed(kernel, grid, block, args)
        for i, v in enumerate(ln.values):
            if isinstance(v, ctypes.c_int64) and v.value in (xp, op):
                ln.slots.setdefault("input" if v.value == xp else "output", []).append(i)
        launches.append(ln)
    keep = [a for _, _, _, args in seen for a in args                  # scratch the launches point at, not
            if getattr(a, "__cuda_array_interface__", {"data": (xp,)})["data"][0] not in (xp, op)]  # x or out
    plan = LaunchPlan(launches, keep=keep)
    negated = -x                                       # -x gives exactly -out: a product that read a copy
    for source, want in ((negated, -out), (x, out)):   # of x made outside the launches would not
        check = out_like(x).fill_(float("nan"))        # unwritten outputs stay NaN and differ
        plan(source.data_ptr(), check.data_ptr(), torch.cuda.current_stream().cuda_stream)
        torch.cuda.current_stream().synchronize()
        if not torch.equal(check, want):
            return out, None
    return out, plan
