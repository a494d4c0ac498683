"""Arrays in and out of every GPU launcher: one conversion, one validation.

A launcher calls :func:`operand` once per array argument, :func:`output` for
each array it allocates, and :func:`result` on the way out::

    a = operand(a, "a", dtypes=FLOAT_DTYPES, ndim=2)
    x = operand(x, "x", dtypes=(a.dev.dtype,), shape=(a.dev.shape[1],))
    y = output((a.dev.shape[0],), a.dev.dtype, like=a)
    _kernel[cdiv(a.dev.shape[0], 128), 128](a.dev, x.dev, y)
    return result(y, like=a)

What goes in, and what comes out:

============================  ===========================  =======================
input                         ``Operand.dev``              ``result(dev, like=.)``
============================  ===========================  =======================
``numpy.ndarray``             ``cuda.to_device`` copy      NumPy array (copied back)
Numba device array            the array itself             the Numba device array
``__cuda_array_interface__``  zero-copy Numba view         the source's own type:
(CuPy, PyTorch CUDA tensors)                               ``cupy.ndarray`` or
                                                           ``torch.Tensor`` on the
                                                           source's device, zero
                                                           copy; any other CAI type
                                                           gets the Numba device
                                                           array
============================  ===========================  =======================

Validation (dtype, rank, shape, contiguity) happens before any copy and never
casts or reorders: a wrong dtype is a ``TypeError``, a wrong rank, shape or
memory order a ``ValueError``, each naming the argument.

bfloat16 (:data:`BFLOAT16`, ``ml_dtypes.bfloat16`` in NumPy, ``torch.bfloat16``) has no Numba type and
PyTorch exports no bfloat16 through ``__cuda_array_interface__``: dtypes are checked as bfloat16, and the
kernel gets the same memory as uint16 bit patterns (:func:`kernel_dtype`); :func:`output` allocates
bfloat16 arrays the same way and :func:`result` gives NumPy bfloat16 arrays and ``torch.bfloat16`` tensors
back.

Streams: kernels are launched on Numba's default stream, the CUDA legacy
default stream, which is ordered after all prior work on blocking streams.
A ``__cuda_array_interface__`` that names the legacy default stream (``1``,
what CuPy exports on its default stream) or no stream therefore needs no
synchronisation and gets none; any other exported stream (a CuPy
non-blocking stream, the per-thread default stream) is synchronised before
the view is returned, as the interface requires. PyTorch exports version 2
of the interface, without a stream: a tensor written on a side stream
(``torch.cuda.stream(s)``) must be synchronised by the caller
(``s.synchronize()``) before it is passed in; tensors made on PyTorch's
default stream need nothing.

Only the current CUDA device is supported: CAI objects must live on it.

Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) NumPy inputs and
simulator device arrays work the same way; CAI objects cannot exist there.

This runs on every launch, so it is kept cheap (bounded caches, all keyed by
layout, never by object):

* dtype sets are normalised once per distinct ``dtypes`` argument, and an
  argument description (dtype, shape, strides and the requirements) that
  passed once is remembered, so a repeated launch pays one dict lookup;
* a CAI object becomes a Numba view by copying the attributes of a template
  array of the same layout and adding a new memory pointer (about half the
  cost of ``cuda.from_cuda_array_interface``);
* PyTorch tensors and CuPy arrays are read through their own attributes
  (pointer, shape, strides, dtype) rather than the ``__cuda_array_interface__``
  dict, which PyTorch builds in Python on every access; the answers, refusals
  and stream rule are the interface's;
* every device array made here gets its Numba kernel type from a per-layout
  cache: Numba would otherwise compute it on the first launch of each new
  array, which costs more than the launch itself;
* ``output`` for a CuPy/PyTorch ``like`` allocates from that library's
  caching allocator, and for any other ``like`` from :class:`BlockPool`, which
  keeps the memory of collected outputs for the next output of the same size
  (``cuMemAlloc`` and the ``cuMemFree`` it brings cost 70-140 us a call on the
  H100 machine, more than the launch).

A sparse matrix that several launches share is checked and copied once:
:class:`DeviceMatrix` keeps the host matrix, its arrays on the device, and
what a kernel derives from them (a row order, chunk pointers, a re-layout),
built on first use. Each GPU module subclasses it with its derived arrays and
builds it in its own ``prepare`` (its rules, its messages) through
:meth:`DeviceMatrix.from_host`.

``experiments/bench_foundation.py`` measures what this adds to a launch;
``experiments/results/foundation.md`` has the H100 numbers (with device
arrays the launcher path is faster than hand-written Numba code that
allocates its output; CuPy/PyTorch inputs cost 9-17 us per argument through
the interface dict, measured before the direct read above).
"""
from __future__ import annotations

import math
import os
import sys
import threading
import weakref
from dataclasses import dataclass, field

import numpy as np
from numba import cuda

from sparsekit.checks import BFLOAT16
from sparsekit.numba_compat import cache_numba_type, numba_type

__all__ = ["Operand", "operand", "memory_order", "output", "result", "cdiv", "DeviceMatrix", "flat_view", "BlockPool",
           "pool", "POOL_KEEP_BYTES", "BFLOAT16", "kernel_dtype", "cuda_torch", "torch_tensor", "half_b_on_device",
           "to_host"]

_UINT16 = np.dtype(np.uint16)


def kernel_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a kernel sees for data of ``dtype``: uint16 bit patterns for bfloat16, else ``dtype``."""
    return _UINT16 if dtype == BFLOAT16 else dtype

_ORDERS = ("C", "F", "CF", None)

# dtypes argument -> frozenset of np.dtype (filled on first use of each argument).
_DTYPE_SETS: dict = {}
# CAI typestr ('<f4') or output dtype spec (np.float32) -> np.dtype.
_TYPESTR: dict = {}
# (dtype, shape, strides, dtypes, ndim, required shape, order) of every argument
# that passed validation: a repeated launch costs one dict lookup. Bounded.
_VALID: dict = {}
_VALID_MAX = 4096
# CAI stream values that need no synchronisation before a legacy-default-stream launch.
_NO_SYNC_STREAMS = (None, 1)


@dataclass(frozen=True, slots=True)
class Operand:
    """One validated array argument of a launcher.

    dev : Numba device array (a simulator array under ``NUMBA_ENABLE_CUDASIM``)
        what the kernel receives.
    kind : ``"numpy"``, ``"numba"`` or ``"cai"``
        what the caller passed; :func:`result` returns the same kind.
    source : object
        the caller's object itself (kept so ``result`` can rebuild its type).
    """

    dev: object
    kind: str
    source: object

    def __repr__(self) -> str:
        return (f"<Operand kind={self.kind} shape={tuple(self.dev.shape)} "
                f"dtype={self.dev.dtype} source={type(self.source).__name__}>")


def _to_device(x: np.ndarray):
    """``cuda.to_device(x)``, bfloat16 as its uint16 bits (Numba cannot copy a dtype it has no type for)."""
    return cuda.to_device(x.view(_UINT16) if x.dtype == BFLOAT16 else x)


@dataclass(frozen=True, eq=False)
class DeviceMatrix:
    """A host sparse matrix checked once, with its arrays on the device.

    host : a :mod:`sparsekit.formats` matrix
        the matrix itself (``shape`` and ``dtype`` pass through).
    arrays : dict
        name -> device copy of the host's array of that name
        (:meth:`from_host` fills it).

    A subclass adds the arrays its kernels derive from these, each a method
    returning :meth:`cached`. Pass the instance to a launcher in place of the
    host matrix to skip the copy and the full check on every call.
    """

    host: object
    arrays: dict
    _cache: dict = field(default_factory=dict)   #: key -> derived device array(s) or facts, see :meth:`cached`

    @property
    def shape(self) -> tuple[int, int]:
        return self.host.shape

    @property
    def dtype(self) -> np.dtype:
        return self.host.dtype

    def cached(self, key, build, *, device: bool = True):
        """``build()`` (a NumPy array, or a tuple of them) copied to the device on the first
        call with ``key``; later calls with ``key`` return the same device array(s). ``device=False``:
        ``build()``'s result kept as it is (a fact about the matrix the launchers need on the host)."""
        try:
            return self._cache[key]
        except KeyError:
            pass
        made = build()
        if device:
            made = tuple(_to_device(x) for x in made) if isinstance(made, tuple) else _to_device(made)
        self._cache[key] = made
        return made

    @classmethod
    def from_host(cls, x, fmt: type, names: tuple[str, ...], *, name: str, dtypes, dtype_rule: str):
        """``x`` itself when it is already a ``cls`` over a ``fmt``; otherwise ``x`` (a ``fmt``)
        checked fully (``validate(full=True)``), its values' dtype checked against ``dtypes``,
        and its arrays ``names`` copied to the device, as a ``cls``.

        Errors name the argument ``name``: a ``TypeError`` for another type, and
        ``TypeError(f"{name}: {dtype_rule}")`` with ``{dtype}`` in ``dtype_rule`` replaced by
        the dtype found, for a dtype outside ``dtypes``; ``validate`` raises its own.
        """
        if isinstance(x, cls) and isinstance(x.host, fmt):
            return x
        if not isinstance(x, fmt):
            raise TypeError(f"{name}: expected a sparsekit.formats.{fmt.__name__} (or a {cls.__name__}), "
                            f"got {type(x).__name__}")
        x.validate(full=True)
        if x.dtype not in dtypes:
            raise TypeError(f"{name}: " + dtype_rule.format(dtype=x.dtype))
        return cls(x, {f: _to_device(np.ascontiguousarray(getattr(x, f))) for f in names})

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.host!r}>"


def cdiv(a: int, b: int) -> int:
    """Ceiling division ``ceil(a / b)`` for non-negative ``a`` and positive ``b`` (grid sizes)."""
    if b <= 0:
        raise ValueError(f"b: must be a positive divisor, got {b}")
    return -(-a // b)


def _dtype_set(dtypes) -> frozenset:
    try:
        return _DTYPE_SETS[dtypes]
    except KeyError:
        pass
    except TypeError:  # unhashable (a list): normalise without caching
        return _normalise_dtypes(dtypes)
    s = _normalise_dtypes(dtypes)
    _DTYPE_SETS[dtypes] = s
    return s


def _normalise_dtypes(dtypes) -> frozenset:
    if isinstance(dtypes, (str, type, np.dtype)):
        dtypes = (dtypes,)
    return frozenset(np.dtype(d) for d in dtypes)


def _names(dtypes: frozenset) -> str:
    return ", ".join(sorted(d.name for d in dtypes))


def _contiguous(shape, strides, itemsize: int, order: str) -> bool:
    """NumPy's rule: size-1 dimensions may have any stride; an empty array is contiguous."""
    if strides is None:  # CAI: None means C-contiguous
        if order == "C" or 0 in shape:
            return True
        return sum(d != 1 for d in shape) <= 1
    if 0 in shape:
        return True
    expect = itemsize
    pairs = zip(reversed(shape), reversed(strides)) if order == "C" else zip(shape, strides)
    for d, s in pairs:
        if d != 1:
            if s != expect:
                return False
            expect *= d
    return True


def _check(name, dtype, shape, strides, itemsize, dtypes, ndim, want_shape, order) -> None:
    """Validate, answering from the cache of argument descriptions that passed before."""
    key = (dtype, shape, strides, dtypes, ndim, want_shape, order)
    try:
        if key in _VALID:
            return
    except TypeError:  # an unhashable argument (a list): validate every time
        _validate(name, dtype, shape, strides, itemsize, dtypes, ndim, want_shape, order)
        return
    _validate(name, dtype, shape, strides, itemsize, dtypes, ndim, want_shape, order)
    if len(_VALID) >= _VALID_MAX:
        _VALID.clear()
    _VALID[key] = True


def _validate(name, dtype, shape, strides, itemsize, dtypes, ndim, want_shape, order) -> None:
    if order not in _ORDERS:
        raise ValueError(f"order: must be 'C', 'F', 'CF' or None, got {order!r}")
    if dtypes is not None:
        allowed = _dtype_set(dtypes)
        if dtype not in allowed:
            raise TypeError(f"{name}: dtype must be one of ({_names(allowed)}), got {dtype} "
                            f"(nothing is cast; convert it first)")
    if ndim is not None:
        if isinstance(ndim, int):
            ok = len(shape) == ndim
            allowed_nd = (ndim,)
        else:
            allowed_nd = tuple(ndim)
            ok = len(shape) in allowed_nd
        if not ok:
            want = " or ".join(f"{d}-D" for d in allowed_nd)
            raise ValueError(f"{name}: expected a {want} array, got shape {tuple(shape)}")
    if want_shape is not None:
        if len(want_shape) != len(shape) or any(
                s is not None and s != d for s, d in zip(want_shape, shape)):
            want = "(" + ", ".join("*" if s is None else str(s) for s in want_shape) + ")"
            raise ValueError(f"{name}: expected shape {want}, got {tuple(shape)}")
    if order == "CF":
        if not (_contiguous(shape, strides, itemsize, "C") or _contiguous(shape, strides, itemsize, "F")):
            raise ValueError(f"{name}: expected a C- or F-contiguous array (nothing is copied; use "
                             f"numpy.ascontiguousarray first), got a strided view of shape {tuple(shape)}")
    elif order is not None and not _contiguous(shape, strides, itemsize, order):
        fix = "numpy.ascontiguousarray" if order == "C" else "numpy.asfortranarray"
        raise ValueError(f"{name}: expected a {order}-contiguous array, got shape {tuple(shape)} "
                         f"with strides {None if strides is None else tuple(strides)} "
                         f"(nothing is reordered; use {fix} or the equivalent first)")


def memory_order(dev) -> str:
    """``"C"`` where the device array ``dev`` (an :class:`Operand`'s ``dev``) is C-contiguous, else ``"F"`` (an array
    that is both, a single row or column, counts as C)."""
    return "C" if _contiguous(dev.shape, dev.strides, dev.dtype.itemsize, "C") else "F"


def _typestr_dtype(typestr: str) -> np.dtype:
    try:
        return _TYPESTR[typestr]
    except KeyError:
        d = _TYPESTR[typestr] = np.dtype(typestr)
        return d


def operand(x, name: str, *, dtypes, ndim=None, shape=None, order="C") -> Operand:
    """Validate ``x`` and give the kernel a device array for it.

    Parameters
    ----------
    x : numpy.ndarray, Numba device array, or object with ``__cuda_array_interface__``
    name : str
        the argument's name, used in error messages.
    dtypes : dtype, tuple of dtypes, or None
        allowed dtypes (``None``: any). Never cast.
    ndim : int, tuple of int, or None
        allowed rank(s).
    shape : tuple or None
        required shape; ``None`` entries are free dimensions.
    order : "C", "F", "CF" or None
        required memory layout (``"CF"``: either contiguous order, :func:`memory_order` tells which;
        ``None``: any strides).

    Returns
    -------
    Operand
        ``dev`` is a copy on the device for NumPy input (made only after
        validation passes; with ``order=None`` a view that is neither C- nor
        F-contiguous is copied C-contiguous, values unchanged), ``x`` itself for a Numba device array, a zero-copy
        Numba view for a CAI object.

    Raises
    ------
    TypeError
        ``x`` is none of the three kinds, or its dtype is not allowed.
    ValueError
        wrong rank, shape or memory order; ``order`` not in ("C", "F", None).
    """
    if type(x) is np.ndarray or isinstance(x, np.ndarray):
        _check(name, x.dtype, x.shape, x.strides, x.itemsize, dtypes, ndim, shape, order)
        bits = x.view(_UINT16) if x.dtype == BFLOAT16 else x
        if order is None and not (x.flags.c_contiguous or x.flags.f_contiguous):
            # Any layout is allowed and the data is copied anyway: copy a gapped view packed.
            return Operand(_prime(cuda.to_device(np.ascontiguousarray(bits))), "numpy", x)
        return Operand(_prime(cuda.to_device(bits)), "numpy", x)
    if getattr(x, "__cuda_ndarray__", False):  # Numba device array (or simulator array)
        _check(name, x.dtype, x.shape, x.strides, x.dtype.itemsize, dtypes, ndim, shape, order)
        return Operand(x, "numba", x)
    read = _direct_reader(type(x))
    if read is not None:
        ptr, dims, strides, dtype = read(x, name)
        _check(name, dtype, dims, strides, dtype.itemsize, dtypes, ndim, shape, order)
        return Operand(_view(ptr, dims, strides, kernel_dtype(dtype), x), "cai", x)
    desc = getattr(x, "__cuda_array_interface__", None)
    if desc is None:
        raise TypeError(f"{name}: expected a numpy.ndarray, a Numba device array or an object "
                        f"with __cuda_array_interface__ (CuPy, PyTorch CUDA tensor), "
                        f"got {type(x).__module__}.{type(x).__qualname__}")
    if desc.get("mask") is not None:
        raise TypeError(f"{name}: masked __cuda_array_interface__ arrays are not supported")
    dtype = _typestr_dtype(desc["typestr"])
    dims = tuple(desc["shape"])
    strides = desc.get("strides")
    if strides is not None:
        strides = tuple(strides)
    _check(name, dtype, dims, strides, dtype.itemsize, dtypes, ndim, shape, order)
    stream = desc.get("stream")
    if stream not in _NO_SYNC_STREAMS:
        cuda.external_stream(stream).synchronize()
    return Operand(_view(desc["data"][0], dims, strides, dtype, x), "cai", x)


# (shape, strides or None, dtype) -> the attributes of a DeviceNDArray of that
# layout, without its memory. Bounded.
_TEMPLATES: dict = {}


def _view(ptr: int, shape: tuple, strides, dtype: np.dtype, owner, ctx=None):
    """A Numba device array over ``ptr`` that keeps ``owner`` alive (zero copy); ``ctx``: the current
    context when the caller has it already (asking Numba for it again costs several microseconds).

    Equivalent to ``cuda.from_cuda_array_interface`` without a stream, at a
    fraction of its cost: building a ``DeviceNDArray`` computes its layout
    (``dummyarray``) every time, about 10 us; here each layout is computed
    once and its attributes reused, and only the memory pointer is new. A
    zero-size array takes the ordinary path.
    """
    from numba.cuda.cudadrv import devicearray, driver

    key = (shape, strides, dtype)
    tmpl = _TEMPLATES.get(key)
    if tmpl is None:
        if not hasattr(cuda, "from_cuda_array_interface"):
            raise TypeError("__cuda_array_interface__ inputs need a real GPU; the CUDA simulator "
                            "has no device memory to view (pass NumPy arrays there)")
        desc = {"shape": shape, "strides": strides, "typestr": dtype.str, "data": (ptr, False),
                "version": 2}
        dev = cuda.from_cuda_array_interface(desc, owner=owner, sync=False)
        _prime(dev)
        if dev.size:
            if len(_TEMPLATES) >= _VALID_MAX:
                _TEMPLATES.clear()
            _TEMPLATES[key] = {k: v for k, v in vars(dev).items() if k != "gpu_data"}
        return dev
    dev = object.__new__(devicearray.DeviceNDArray)
    vars(dev).update(tmpl)
    ctx = cuda.current_context() if ctx is None else ctx
    dev.gpu_data = driver.MemoryPointer(ctx, driver.binding.CUdeviceptr(ptr), size=tmpl["alloc_size"], owner=owner)
    return dev


# (dtype, shape, strides) -> the Numba type of a device array of that layout.
_NUMBA_TYPES: dict = {}


def _prime(dev):
    """Give a new device array its Numba type from a cache, and return it.

    Numba computes a device array's type (a private cached property of the
    instance, :func:`sparsekit.numba_compat.numba_type`) on its first
    launch, about 30 us; a launcher makes new
    arrays on every call, so it would pay that every call. The type depends
    only on dtype and layout, so it is computed once per layout here.
    """
    key = (dev.dtype, dev.shape, dev.strides)
    t = _NUMBA_TYPES.get(key)
    if t is None:
        if len(_NUMBA_TYPES) >= _VALID_MAX:
            _NUMBA_TYPES.clear()
        t = _NUMBA_TYPES[key] = numba_type(dev)
    else:
        cache_numba_type(dev, t)
    return dev


def flat_view(dev):
    """The 1-D view of a C-contiguous device array that a kernel indexes by element, with its Numba type
    from :func:`_prime`'s cache (a launcher makes this view on every call; computing its type would cost
    more than the rest of the view)."""
    return _prime(dev.reshape(dev.size))


def _c_strides(shape, itemsize):
    out, step = [], itemsize
    for d in reversed(shape):
        out.append(step)
        step *= max(d, 1)
    return tuple(reversed(out))


def _torch_dtype(torch, dtype: np.dtype):
    tdt = _TORCH_DTYPES.get(dtype)
    if tdt is None:
        tdt = _TORCH_DTYPES[dtype] = (torch.bfloat16 if dtype == BFLOAT16
                                      else torch.from_numpy(np.empty(0, dtype)).dtype)
    return tdt


def _torch_empty(torch, shape, dtype, order, src):
    tdt = _torch_dtype(torch, dtype)
    if order == "C":
        t = torch.empty(shape, dtype=tdt, device=src.device)
    else:
        t = torch.empty(shape[::-1], dtype=tdt, device=src.device).permute(*range(len(shape) - 1, -1, -1))
    return t, t.data_ptr()


def _cupy_empty(cupy, shape, dtype, order, src):
    a = cupy.empty(shape, dtype=dtype, order=order)
    return a, a.data.ptr


_TORCH_DTYPES: dict = {}
# Library of a CAI source -> allocator using that library's memory pool.
_ALLOCATORS = {"torch": _torch_empty, "cupy": _cupy_empty}


def output(shape, dtype, *, like: Operand, order: str = "C"):
    """Allocate an uninitialised device array for a launcher's result.

    ``like`` is the operand whose kind :func:`result` will reproduce. The
    return value is always a Numba device array on the current device; for a
    PyTorch or CuPy ``like`` its memory is a ``torch.empty`` / ``cupy.empty``
    array from that library's caching allocator, and :func:`result` hands that
    array back without a copy; for any other ``like`` (NumPy, Numba) it comes
    from the current context's :class:`BlockPool` (on the GPU; the simulator
    allocates as Numba does).
    """
    if order not in ("C", "F"):
        raise ValueError(f"order: must be 'C' or 'F', got {order!r}")
    if not isinstance(like, Operand):
        raise TypeError(f"like: expected an Operand, got {type(like).__name__}")
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    dtype = _dtype_of(dtype)
    if like.kind == "cai":
        lib = type(like.source).__module__.partition(".")[0]
        alloc = _ALLOCATORS.get(lib)
        if alloc is not None:
            obj, ptr = alloc(sys.modules[lib], shape, dtype, order, like.source)
            if ptr:
                return _view(ptr, shape, _strides(shape, dtype, order), kernel_dtype(dtype), obj)
    return _pooled(shape, kernel_dtype(dtype), order)


def _strides(shape: tuple, dtype: np.dtype, order: str):
    """Strides of a contiguous array (None: C order, which ``_view`` takes as such)."""
    return None if order == "C" else _c_strides(shape[::-1], dtype.itemsize)[::-1]


class _Lease:
    """What a pooled output's memory pointer owns: when the output and every view of it are gone, so is the lease,
    and its block goes back to the pool."""

    __slots__ = ("__weakref__",)


class BlockPool:
    """Device memory of collected outputs, kept by size for the next output of that size (what PyTorch's and
    CuPy's caching allocators do for theirs).

    ``allocate(nbytes)`` makes a new block (an object owning device memory, freeing it when collected);
    ``keep_bytes`` caps the memory kept unused (a block given back beyond it is let go). A block is reused in
    launch order: a kernel reading a collected output and the next kernel writing its block run one after the
    other on the default stream, as the launchers' kernels do; an output a kernel on another stream still reads
    must be kept alive until that kernel is done (the same rule as those allocators')."""

    def __init__(self, allocate, keep_bytes: int):
        self._allocate, self._keep = allocate, keep_bytes
        self._free: dict = {}
        self._free_bytes = 0
        self._lock = threading.Lock()          # (a lease can be collected on any thread)

    def take(self, nbytes: int):
        """``(block, lease)``: a kept block of ``nbytes`` or a new one; it comes back when ``lease`` is collected.
        A failed allocation lets the kept blocks go and tries once more (the memory may be held here)."""
        with self._lock:
            kept = self._free.get(nbytes)
            block = kept.pop() if kept else None
            if block is not None:
                self._free_bytes -= nbytes
        if block is None:
            try:
                block = self._allocate(nbytes)
            except Exception:
                self.clear()
                block = self._allocate(nbytes)
        lease = _Lease()
        weakref.finalize(lease, self._give_back, nbytes, block).atexit = False
        return block, lease

    def _give_back(self, nbytes: int, block) -> None:
        with self._lock:
            if self._free_bytes + nbytes <= self._keep:
                self._free.setdefault(nbytes, []).append(block)
                self._free_bytes += nbytes

    def clear(self) -> None:
        """Let every kept block go (their memory is freed as Numba frees)."""
        with self._lock:
            self._free.clear()
            self._free_bytes = 0

    @property
    def kept_bytes(self) -> int:
        """Bytes of the blocks kept unused."""
        return self._free_bytes


#: Unused output memory a context's pool keeps at most.
POOL_KEEP_BYTES = 1 << 30
# id(context) -> (context, its BlockPool)
_POOLS: dict = {}


def pool(ctx=None) -> BlockPool:
    """The :class:`BlockPool` of ``ctx`` (default: the current context), made on first use; GPU only."""
    if ctx is None:
        ctx = cuda.current_context()
    found = _POOLS.get(id(ctx))
    if found is None or found[0] is not ctx:
        found = _POOLS[id(ctx)] = (ctx, BlockPool(ctx.memalloc, POOL_KEEP_BYTES))
    return found[1]


def _pooled(shape: tuple, dtype: np.dtype, order: str):
    """An uninitialised device array from :func:`pool` (the simulator, and empty arrays: Numba's allocation)."""
    nbytes = math.prod(shape) * dtype.itemsize
    if not nbytes or not hasattr(cuda, "from_cuda_array_interface"):
        return _prime(cuda.device_array(shape, dtype, order=order))
    ctx = cuda.current_context()
    block, lease = pool(ctx).take(nbytes)
    return _view(block.device_pointer_value, shape, _strides(shape, dtype, order), dtype, lease, ctx)


def _dtype_of(dtype) -> np.dtype:
    d = _TYPESTR.get(dtype)
    if d is None:
        d = np.dtype(dtype)
        try:
            _TYPESTR[dtype] = d
        except TypeError:  # unhashable dtype spec
            pass
    return d


def _torch_layout(t):
    item = t.element_size()
    return t.data_ptr(), tuple(t.shape), tuple(st * item for st in t.stride())


def _cupy_layout(a):
    return a.data.ptr, a.shape, a.strides


# Library -> (pointer, shape, byte strides) of one of its arrays, read without the CAI dict.
_LAYOUTS = {"torch": _torch_layout, "cupy": _cupy_layout}


def _torch_direct(t, name):
    """(pointer, shape, byte strides, dtype) of a CUDA tensor read from its attributes.

    Same answers and refusals as PyTorch's interface (CUDA tensors only, none that
    require grad, only dtypes NumPy has; no stream is exported), at a fraction of the
    cost of building its dict, and each refusal names the argument.
    """
    if not t.is_cuda:
        raise TypeError(f"{name}: a PyTorch tensor on {t.device} has no GPU memory; move it with .cuda()")
    if t.requires_grad:
        raise TypeError(f"{name}: the tensor requires grad; pass t.detach() (no gradient flows through a kernel)")
    dtype = _NUMPY_OF_TORCH.get(t.dtype)
    if dtype is None:
        raise TypeError(f"{name}: {t.dtype} has no NumPy dtype, so no Numba kernel can take it; "
                        f"convert it first (e.g. t.half() or t.float())")
    return (*_torch_layout(t), dtype)


def _cupy_direct(a, name):
    """(pointer, shape, byte strides, dtype) of a CuPy array; work on CuPy's current stream is
    finished first unless that is the legacy default stream, as its interface's stream rule asks."""
    stream = sys.modules["cupy"].cuda.get_current_stream()
    if stream.ptr != 0:
        stream.synchronize()
    return a.data.ptr, a.shape, a.strides, a.dtype


# NumPy dtypes a tensor may have, by torch dtype (filled on the first tensor).
_NUMPY_OF_TORCH: dict = {}
# Type of a CAI source -> its direct reader, or None for the generic interface path.
_DIRECT: dict = {}


def _direct_reader(kind: type):
    try:
        return _DIRECT[kind]
    except KeyError:
        pass
    lib = kind.__module__.partition(".")[0]
    reader = None
    if lib == "torch" and issubclass(kind, sys.modules["torch"].Tensor):
        torch = sys.modules["torch"]
        if not _NUMPY_OF_TORCH:
            for d in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
                      np.uint8, np.bool_, np.complex64, np.complex128, BFLOAT16):
                _NUMPY_OF_TORCH[_torch_dtype(torch, np.dtype(d))] = np.dtype(d)
        reader = _torch_direct
    elif lib == "cupy" and kind is sys.modules["cupy"].ndarray:
        reader = _cupy_direct
    _DIRECT[kind] = reader
    return reader


def _owner_if_whole(dev, src, lib):
    """The object of ``src``'s type that owns exactly ``dev``'s memory and layout, else None."""
    owner = getattr(dev.gpu_data, "_owner", None)
    if type(owner) is not type(src):
        return None
    ptr, shape, strides = _LAYOUTS[lib](owner)
    if (ptr == int(dev.gpu_data.device_pointer) and shape == dev.shape
            and (strides == dev.strides or dev.size == 0) and _same_dtype(owner, dev, lib)):
        return owner
    return None


def _same_dtype(owner, dev, lib):
    if lib == "cupy":
        return owner.dtype == dev.dtype
    torch = sys.modules["torch"]
    return _torch_dtype(torch, dev.dtype) == owner.dtype or (owner.dtype == torch.bfloat16 and dev.dtype == _UINT16)


def _is_bfloat16(x) -> bool:
    """Whether the NumPy array or tensor ``x`` holds bfloat16 (a kernel had its bits as uint16)."""
    d = getattr(x, "dtype", None)
    return d == BFLOAT16 if isinstance(d, np.dtype) else str(d) == "torch.bfloat16"


def result(dev, *, like: Operand):
    """Return ``dev`` as the kind of array ``like``'s caller passed in.

    NumPy -> ``dev.copy_to_host()``; Numba -> ``dev``; CAI from PyTorch or
    CuPy -> the tensor / array of that library that owns ``dev``'s memory when
    ``dev`` came from :func:`output` (no copy, no new object), otherwise a
    zero-copy view (``torch.as_tensor(dev, device=source.device)``,
    ``cupy.asarray(dev)``) that keeps ``dev`` alive. Any other CAI type ->
    ``dev`` itself (a Numba device array, which also exports
    ``__cuda_array_interface__``).
    """
    kind = like.kind
    bits_of_bf16 = dev.dtype == _UINT16 and _is_bfloat16(like.source)
    if kind == "numpy":
        host = dev.copy_to_host()
        return host.view(BFLOAT16) if bits_of_bf16 else host
    if kind == "numba":
        return dev
    src = like.source
    lib = type(src).__module__.partition(".")[0]
    if lib not in _ALLOCATORS:
        return dev
    owner = _owner_if_whole(dev, src, lib)
    if owner is not None:
        return owner
    if lib == "torch":
        t = sys.modules["torch"].as_tensor(dev, device=src.device)
        return t.view(src.dtype) if bits_of_bf16 else t
    return sys.modules["cupy"].asarray(dev)


# --- NumPy, Numba and PyTorch arrays for the benchmarks and the tuner ----------------------------------------

def cuda_torch():
    """PyTorch when it is installed and sees a CUDA device (its vendor baselines then run), else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def torch_tensor(x: np.ndarray, torch):
    """The NumPy array ``x`` as a CPU tensor of its dtype and strides, no copy (``torch.from_numpy`` does not know
    ``ml_dtypes.bfloat16``: its bits are viewed as ``torch.bfloat16``)."""
    if x.dtype == BFLOAT16:
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(x)


def half_b_on_device(b16: np.ndarray):
    """``b16`` where the kernels read it without a copy a launch: a PyTorch CUDA tensor when PyTorch sees a GPU
    (bfloat16 has no Numba array), else a Numba device array (float16) or, under the CUDA simulator, the array
    itself (bfloat16: device memory is host memory there)."""
    torch = cuda_torch()
    if torch is not None:
        return torch_tensor(b16, torch).cuda()
    if b16.dtype == np.float16:
        return cuda.to_device(b16)
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return b16
    raise ValueError("b: a bfloat16 B stays on the device as a torch.bfloat16 tensor (Numba has no bfloat16 "
                     "arrays): install PyTorch with CUDA")


def to_host(x):
    """A result on the host as a NumPy array of its dtype: a Numba device array, a PyTorch tensor (bfloat16 as
    ``ml_dtypes.bfloat16``, its bits copied) or an array."""
    if hasattr(x, "copy_to_host"):
        return x.copy_to_host()
    if hasattr(x, "cpu"):                                  # torch tensor (dense result)
        import torch
        host = x.cpu()
        if host.dtype == torch.bfloat16:
            return host.view(torch.int16).numpy().view(BFLOAT16)
        return host.numpy()
    return np.asarray(x)
