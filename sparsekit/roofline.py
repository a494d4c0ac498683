"""The Roofline and Sparsity Roofline cost model: FLOPs, bytes and speed of light.

Mirrors Section 3.2 of "The Sparsity Roofline" (Shinn et al., 2023) for the SpMM
``C (m x n) = A (m x k, sparse) @ B (k x n)``:

* **FLOPs** = ``2 * nnz * n``: one multiply and one add per stored value and
  output column. The paper's Equation 1 counts ``nnz * n`` (one FLOP per
  multiply-add); pass ``convention="paper"`` for that. Block and padded formats
  count every *stored* value (a kernel multiplies the zeros inside a block).
* **bytes** = values + index data + B + C (Equation 1), each read or written
  once at DRAM bandwidth (perfect caching, as in the Roofline model). B is the
  ``k x n`` matrix, i.e. the im2col matrix of a convolution, as Equation 1
  counts it (a depthwise convolution is the exception: its im2col matrix is never
  formed, so its feature map counts once). Index data per format:

  ===============  ==========================================================
  dense            none
  csr              ``nnz + m + 1`` indices (column indices + row pointer;
                   the pointer is at least 32-bit, as in scipy)
  coo              ``2 * nnz`` indices (row and column)
  ell (uniform)    ``m * K'`` column indices, 16- or 32-bit (``ellidx``)
  bsr (block)      ``nnzb + m/br + 1`` indices: one per block + block-row ptr
  blocked-ell      ``(m/b) * Kb`` block-column indices (blocked-uniform)
  N:M              ``log2(M)`` bits per kept value (the paper, Section 5.3),
                   or the 2:4 hardware metadata (``"hw"``), or one byte per
                   kept value (``"uint8"``, :class:`sparsekit.formats.NM`)
  ===============  ==========================================================

* **speed of light** (Equation 2) = ``max(FLOPs / peak FLOP/s, bytes / peak B/s)``;
  a model's is the sum over its layers (Equation 3) and its speedup is
  ``sum(dense SoL) / sum(sparse SoL)``.

Which peak applies (``unit="auto"``): dense GEMM and block formats run on
tensor cores for the dtypes that have them (float16, bfloat16, tf32) and
on CUDA cores otherwise (float32 means TF32 off; pass dtype "tf32" for it); unstructured and uniform formats (CSR, COO, ELL) run
on CUDA cores (as cuSPARSE does, Section 5.1); N:M runs on sparse tensor cores.
The sparse tensor core peak in vendor tables counts dense-equivalent FLOPs
(twice the dense rate for 2:4); the useful rate, on nonzeros, is half of it,
i.e. the dense tensor-core rate. Patterns other than 2:4 are modelled as the
paper's Section 4.2 does: hypothetical hardware with the *same* tensor-core
throughput on the kept values.

Shapes that a block or N:M pattern does not divide are zero-padded up to the
next multiple (the stored values include the padding).

For a benchmark: ``sol = speed_of_light(ell, n=b.shape[1], device="measured")``
(``ell`` any :mod:`sparsekit.formats` matrix, its ``nbytes()`` counted exactly), then
``sol.fraction(measured_seconds)`` is the % of speed of light to report.

>>> r = speed_of_light("dense", 1024, 1024, 1, dtype="float16", device="H100")
>>> r.bound, r.flops, r.bytes == 2 * (1024 * 1024 + 1024 + 1024)
('memory', 2097152, True)
>>> speed_of_light("csr", 4, 8, 2, nnz=5, dtype="float32", device="H100").index_bytes == 4 * (5 + 4 + 1)
True
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

import numpy as np

from sparsekit.checks import check_int

#: Bytes per element of each dtype the model knows. tf32 is stored as float32.
ITEMSIZE = {"float64": 8, "float32": 4, "tf32": 4, "float16": 2, "bfloat16": 2}
#: Dtypes that dense tensor cores accept (A100/H100); float32 means CUDA cores (TF32 off).
TENSOR_DTYPES = ("float16", "bfloat16", "tf32")
#: Bits of 2:4 hardware metadata per kept value: PyTorch's semi-structured layout
#: (torch/sparse/_semi_structured_conversions.py) stores one 16-bit meta word per
#: 16 dense columns for 16-bit dtypes (2 bits per kept value), and per 8
#: columns for float32/tf32, which the hardware runs as 1:2 (4 bits per kept value).
HW_META_BITS = {"float16": 2, "bfloat16": 2, "float32": 4, "tf32": 4}

KINDS = ("dense", "csr", "coo", "ell", "bsr", "blocked-ell", "nm")
_ALIASES = {"unstructured": "csr", "uniform": "ell", "block": "bsr", "blocked-uniform": "blocked-ell",
            "blocked_uniform": "blocked-ell", "blockedell": "blocked-ell", "n:m": "nm"}
UNITS = ("auto", "cuda", "tensor", "sparse-tensor")
CONVENTIONS = ("2nnz", "paper")
NM_INDEX = ("auto", "bits", "hw", "uint8")


def dtype_name(dtype) -> str:
    """Canonical name of ``dtype`` ('float16', 'tf32', ...); raises on unknown ones."""
    if isinstance(dtype, str) and dtype.lower() in ITEMSIZE:
        return dtype.lower()
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    if name not in ITEMSIZE:
        raise ValueError(f"dtype: expected one of {', '.join(ITEMSIZE)}, got {dtype!r}")
    return name


def _index_itemsize(index_dtype) -> int:
    size = np.dtype(index_dtype).itemsize
    if np.dtype(index_dtype).kind not in "iu" or size not in (1, 2, 4, 8):
        raise ValueError(f"index_dtype: expected an integer dtype, got {index_dtype!r}")
    return size


def parse_kind(kind: str) -> tuple[str, dict]:
    """Split a format or pattern name into ``(kind, params)``.

    ``"2:4"`` -> ``("nm", {"nm": (2, 4)})``; ``"block4"``/``"bsr:4"`` ->
    ``("bsr", {"block": 4})``; ``"blocked-uniform:2"`` -> ``("blocked-ell", {"block": 2})``;
    ``"unstructured"`` -> ``("csr", {})``; ``"uniform"`` -> ``("ell", {})``.

    >>> parse_kind("2:8"), parse_kind("block16"), parse_kind("uniform")
    (('nm', {'nm': (2, 8)}), ('bsr', {'block': 16}), ('ell', {}))
    """
    if not isinstance(kind, str):
        raise TypeError(f"kind: expected a format name, got {type(kind).__name__}")
    s = kind.strip().lower()
    if ":" in s and s.split(":")[0].isdigit():
        a, b = s.split(":", 1)
        if not b.isdigit() or int(a) < 1 or int(a) > int(b):
            raise ValueError(f"kind: N:M needs integers 1 <= N <= M, got {kind!r}")
        return "nm", {"nm": (int(a), int(b))}
    params: dict = {}
    head, _, tail = s.partition(":")
    if not tail:
        stripped = head.rstrip("0123456789")
        if stripped != head and stripped in ("block", "bsr", "blocked-uniform", "blocked-ell"):
            head, tail = stripped, head[len(stripped):]
    if tail:
        if not tail.isdigit() or int(tail) < 1:
            raise ValueError(f"kind: block size must be a positive integer, got {kind!r}")
        params["block"] = int(tail)
    head = _ALIASES.get(head, head)
    if head not in KINDS:
        raise ValueError(f"kind: unknown format {kind!r}; known: {', '.join(KINDS)}, "
                         f"aliases {', '.join(_ALIASES)}, 'N:M' and 'blockB'")
    return head, params


# ----------------------------------------------------------------------------- device roofs

@dataclass(frozen=True)
class Roof:
    """The two roofs of one device: peak FLOP/s per (unit, dtype) and DRAM bandwidth.

    ``flops[(unit, dtype)]`` with unit in ``cuda``/``tensor``/``sparse-tensor``; the
    sparse-tensor entry is dense-equivalent (2x tensor) as vendors quote it.
    """

    name: str
    bandwidth: float            #: bytes/s
    flops: dict = field(hash=False)
    source: str = ""

    def peak(self, unit: str, dtype: str) -> float:
        """Peak FLOP/s for ``unit`` and ``dtype``, in FLOPs on the values actually stored."""
        dtype = dtype_name(dtype)
        if unit == "sparse-tensor":
            dense_equiv = self.flops.get(("sparse-tensor", dtype))
            if dense_equiv is None:
                raise ValueError(f"unit: {self.name} has no sparse tensor cores for {dtype}")
            return dense_equiv / 2.0   # useful FLOPs: half the 2:4 dense-equivalent rate
        rate = self.flops.get((unit, dtype))
        if rate is None:
            known = sorted({d for (u, d) in self.flops if u == unit})
            raise ValueError(f"unit: {self.name} has no {unit} peak for {dtype}; it has {', '.join(known)}")
        return rate

    def knee(self, unit: str, dtype: str) -> float:
        """Arithmetic intensity (FLOP/byte) where the roof turns from memory to compute bound."""
        return self.peak(unit, dtype) / self.bandwidth


def roof(device="H100") -> Roof:
    """The :class:`Roof` of ``device``: a name in ``sparsekit.device.PEAKS`` (any case),
    ``"measured"`` (this machine: :func:`sparsekit.timing.measured_peaks`, i.e. the
    table's FLOP/s and the bandwidth of a large device copy; needs a GPU), a
    :class:`Roof`, or a :class:`sparsekit.device.Peak`."""
    if isinstance(device, Roof):
        return device
    from sparsekit import device as dev
    from sparsekit import timing

    if isinstance(device, str):
        if device.lower() == "measured":   # this GPU: table FLOP/s, copy-measured bandwidth
            base = _roof_from_peaks(timing.measured_peaks())
            return replace(base, name=f"{base.name} (measured bandwidth)")
        table = {k.lower(): k for k in dev.PEAKS}
        if device.lower() not in table:
            raise ValueError(f"device: unknown device {device!r}; known: {', '.join(dev.PEAKS)}, measured")
        device = dev.PEAKS[table[device.lower()]]
    return _roof_from_peaks(device)


def _roof_from_peaks(p) -> Roof:
    """Adapt a :class:`sparsekit.device.Peak` to a :class:`Roof`.

    bfloat16 runs at the fp16 rates on the GPUs with sparse tensor cores (A100,
    H100, H200: same datasheet numbers); V100 has no bfloat16. The 2:4 sparse
    tf32 rate is twice the dense one wherever sparse fp16 exists (datasheets).
    """
    if p.bandwidth is None:
        raise ValueError(f"device: {p.name} has no bandwidth in sparsekit.device.PEAKS")
    f = {("cuda", "float64"): p.fp64, ("cuda", "float32"): p.fp32, ("cuda", "float16"): p.fp16,
         ("tensor", "float16"): p.fp16_tensor, ("tensor", "tf32"): p.tf32_tensor,
         ("sparse-tensor", "float16"): p.fp16_tensor_sparse}
    if p.fp16_tensor_sparse is not None:
        f.update({("cuda", "bfloat16"): p.fp16, ("tensor", "bfloat16"): p.fp16_tensor,
                  ("sparse-tensor", "bfloat16"): p.fp16_tensor_sparse})
        if p.tf32_tensor is not None:
            f[("sparse-tensor", "tf32")] = 2.0 * p.tf32_tensor
    flops = {key: float(v) for key, v in f.items() if v is not None}
    source = "; ".join(f"{k}: {v}" for k, v in dict(p.source).items())
    return Roof(name=p.name, bandwidth=float(p.bandwidth), flops=flops, source=source)


# ----------------------------------------------------------------------------- counts

@dataclass(frozen=True)
class Counts:
    """What one (Sp)MM stores, reads and writes, before any device enters."""

    kind: str
    m: int
    k: int
    n: int
    nnz: int            #: stored values (blocks and padding included)
    dtype: str
    value_bytes: int
    index_bytes: int
    b_bytes: int
    c_bytes: int

    @property
    def bytes(self) -> int:
        return self.value_bytes + self.index_bytes + self.b_bytes + self.c_bytes

    @property
    def feature_bytes(self) -> int:
        """Bytes of the input and output features (B and C): what pruning cannot remove."""
        return self.b_bytes + self.c_bytes

    def flops(self, convention: str = "2nnz") -> int:
        if convention not in CONVENTIONS:
            raise ValueError(f"convention: expected one of {', '.join(CONVENTIONS)}, got {convention!r}")
        return (2 if convention == "2nnz" else 1) * self.nnz * self.n


def _nnz_from(density, nnz, total: int, what: str) -> int:
    if (density is None) == (nnz is None):
        raise ValueError(f"{what}: give exactly one of density or nnz, got density={density!r}, nnz={nnz!r}")
    if nnz is not None:
        return check_int(nnz, "nnz", minimum=0, maximum=total)
    if isinstance(density, bool) or not isinstance(density, numbers.Real):
        raise TypeError(f"density: expected a real number in [0, 1], got {type(density).__name__}")
    if not 0.0 <= float(density) <= 1.0:
        raise ValueError(f"density: must lie in [0, 1], got {density!r}")
    return int(round(float(density) * total))


def counts(kind, m: int, k: int, n: int, *, density=None, nnz=None, dtype="float16",
           index_dtype=np.int32, block=None, nm=None, nm_index="auto", b_elements: int | None = None,
           out_dtype=None) -> Counts:
    """Values, index and feature bytes of ``C = A @ B`` with ``A`` in format ``kind``.

    ``density`` (or ``nnz``) is the fraction (number) of nonzeros of ``A``; for
    block formats it is rounded to whole blocks, for ELL to whole ``K'`` per row;
    N:M fixes it at N/M. ``b_elements`` overrides the ``k * n`` elements of B
    that Equation 1 counts (a depthwise convolution reads its feature map once,
    not an im2col matrix; :class:`sparsekit.models.Layer` says how many).
    """
    kind, params = parse_kind(kind)
    block = params.get("block", block)
    nm = params.get("nm", nm)
    m = check_int(m, "m", minimum=1)
    k = check_int(k, "k", minimum=1)
    n = check_int(n, "n", minimum=1)
    b_elements = k * n if b_elements is None else check_int(b_elements, "b_elements", minimum=0)
    dtype = dtype_name(dtype)
    out = dtype_name(out_dtype) if out_dtype is not None else dtype
    vs, isz = ITEMSIZE[dtype], _index_itemsize(index_dtype)
    b_bytes = b_elements * vs
    c_bytes = m * n * ITEMSIZE[out]
    if kind == "dense":
        if (density is not None or nnz is not None) and _nnz_from(density, nnz, m * k, "dense") != m * k:
            raise ValueError(f"density: a dense matrix stores all {m * k} entries; got density={density!r}, "
                             f"nnz={nnz!r} (use a sparse kind)")
        stored, index = m * k, 0
    elif kind in ("csr", "coo"):
        stored = _nnz_from(density, nnz, m * k, kind)
        index = stored * isz + (m + 1) * max(isz, 4) if kind == "csr" else 2 * stored * isz
    elif kind == "ell":
        if nnz is not None:
            total = check_int(nnz, "nnz", minimum=0, maximum=m * k)
            if density is not None or total % m:
                raise ValueError(f"nnz: a uniform (ELL) matrix keeps K' per row, so give density or an "
                                 f"nnz that is a multiple of m={m}; got nnz={nnz}, density={density!r}")
            kprime = total // m
        else:
            kprime = _nnz_from(density, None, k, "ell")
        stored = m * kprime
        index = stored * isz
    elif kind in ("bsr", "blocked-ell"):
        if block is None:
            raise ValueError(f"block: {kind} needs a block size (e.g. kind='{kind}:4'), got None")
        br, bc = (block, block) if isinstance(block, numbers.Integral) else tuple(block)
        br, bc = check_int(br, "block", minimum=1), check_int(bc, "block", minimum=1)
        mb, kb = -(-m // br), -(-k // bc)
        if kind == "bsr":
            nnzb = (check_int(nnz, "nnz", minimum=0) // (br * bc) if nnz is not None
                    else _nnz_from(density, None, mb * kb, kind))
            if nnzb > mb * kb:
                raise ValueError(f"nnz: at most {mb * kb * br * bc} values fit in {mb}x{kb} blocks, got {nnz}")
            index = nnzb * isz + (mb + 1) * max(isz, 4)
        else:
            per_row = (check_int(nnz, "nnz", minimum=0) // (br * bc * mb) if nnz is not None
                       else _nnz_from(density, None, kb, kind))
            if per_row > kb:
                raise ValueError(f"nnz: at most {kb} blocks fit per block row, got {per_row}")
            nnzb = mb * per_row
            index = nnzb * isz
        stored = nnzb * br * bc
    else:  # nm
        if nm is None:
            raise ValueError("nm: N:M format needs nm=(N, M) or kind='N:M', got None")
        keep, width = (check_int(v, "nm", minimum=1) for v in nm)
        if keep > width:
            raise ValueError(f"nm: N must not exceed M, got {keep}:{width}")
        if density is not None and not math.isclose(float(density), keep / width):
            raise ValueError(f"density: an {keep}:{width} pattern keeps exactly {keep / width:g}, got {density!r}")
        stored = m * (-(-k // width)) * keep
        if nnz is not None and nnz != stored:
            raise ValueError(f"nnz: an {keep}:{width} pattern of shape ({m}, {k}) stores {stored}, got {nnz}")
        mode = nm_index
        if mode not in NM_INDEX:
            raise ValueError(f"nm_index: expected one of {', '.join(NM_INDEX)}, got {nm_index!r}")
        if mode == "auto":
            mode = "hw" if (keep, width) == (2, 4) else "bits"
        if mode == "hw":
            if (keep, width) != (2, 4) or dtype not in HW_META_BITS:
                raise ValueError(f"nm_index: 'hw' metadata exists for 2:4 in {', '.join(HW_META_BITS)}, "
                                 f"got {keep}:{width} {dtype}")
            index = -(-stored * HW_META_BITS[dtype] // 8)
        elif mode == "bits":
            index = -(-stored * (width - 1).bit_length() // 8)   # ceil(log2 M) bits
        else:
            index = stored
    return Counts(kind, m, k, n, stored, dtype, stored * vs, index, b_bytes, c_bytes)


def counts_of(fmt, n: int, *, out_dtype=None) -> Counts:
    """:class:`Counts` of an actual :mod:`sparsekit.formats` matrix (its ``nbytes()`` exactly)."""
    name = type(fmt).__name__
    kind = {"CSR": "csr", "COO": "coo", "ELL": "ell", "BSR": "bsr", "BlockedELL": "blocked-ell", "NM": "nm"}.get(name)
    if kind is None:
        raise TypeError(f"fmt: expected a sparsekit.formats matrix (CSR, COO, ELL, BSR, BlockedELL, NM), got {name}")
    m, k = fmt.shape
    n = check_int(n, "n", minimum=1)
    values = fmt.values if hasattr(fmt, "values") else fmt.data
    dtype = dtype_name(values.dtype)
    sizes = fmt.nbytes()
    vs = ITEMSIZE[dtype]
    out = dtype_name(out_dtype) if out_dtype is not None else dtype
    return Counts(kind, m, k, n, int(values.size), dtype, int(sizes.values), int(sizes.indices),
                  k * n * vs, m * n * ITEMSIZE[out])


# ----------------------------------------------------------------------------- speed of light

@dataclass(frozen=True)
class SoL:
    """Speed of light of one (Sp)MM on one device (Equation 2)."""

    counts: Counts
    flops: int
    device: str
    unit: str
    peak_flops: float   #: FLOP/s on stored values for this unit and dtype
    bandwidth: float    #: bytes/s
    compute_s: float
    memory_s: float

    @property
    def seconds(self) -> float:
        return max(self.compute_s, self.memory_s)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s > self.memory_s else "memory"

    @property
    def bytes(self) -> int:
        return self.counts.bytes

    @property
    def index_bytes(self) -> int:
        return self.counts.index_bytes

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOP per byte of DRAM traffic."""
        return self.flops / self.bytes

    @property
    def attainable(self) -> float:
        """Roofline throughput at this intensity: min(peak, intensity * bandwidth), FLOP/s."""
        return min(self.peak_flops, self.intensity * self.bandwidth)

    def fraction(self, measured_s: float) -> float:
        """Fraction of speed of light reached by a kernel that took ``measured_s`` (Section 3.4)."""
        if not measured_s > 0:
            raise ValueError(f"measured_s: must be a positive time, got {measured_s!r}")
        return self.seconds / measured_s


def compare(dense: SoL, sparse: SoL, dense_s: float, sparse_s: float) -> dict:
    """Predicted (SoL) vs measured speedup of one layer, with each kernel's fraction of SoL.

    Section 3.4: the two speedups are equal exactly when both fractions are equal;
    ``predicted / measured == dense_fraction / sparse_fraction`` says who is further
    from its roof. Times in seconds.
    """
    for name, sol in (("dense", dense), ("sparse", sparse)):
        if not isinstance(sol, SoL):
            raise TypeError(f"{name}: expected a SoL (speed_of_light or sol_of), got {type(sol).__name__}")
    fd, fs = dense.fraction(dense_s), sparse.fraction(sparse_s)
    return {"predicted_speedup": dense.seconds / sparse.seconds, "measured_speedup": dense_s / sparse_s,
            "dense_fraction_of_sol": fd, "sparse_fraction_of_sol": fs, "bound_dense": dense.bound,
            "bound_sparse": sparse.bound}


def default_unit(kind: str, dtype: str) -> str:
    """The unit a well-optimized kernel of ``kind`` uses for ``dtype`` (see module docstring)."""
    tc = dtype in TENSOR_DTYPES
    if kind == "nm":
        return "sparse-tensor" if tc else "cuda"
    if kind in ("dense", "bsr", "blocked-ell"):
        return "tensor" if tc else "cuda"
    return "cuda"


def speed_of_light(fmt, m: int | None = None, k: int | None = None, n: int | None = None, *,
                   density=None, nnz=None, dtype="float16", device="H100", unit: str = "auto",
                   convention: str = "2nnz", **count_args) -> SoL:
    """Speed-of-light time of ``C (m x n) = A (m x k) @ B (k x n)`` with ``A`` in ``fmt``.

    ``fmt`` is a kind (``"dense"``, ``"csr"``, ``"coo"``, ``"ell"``/``"uniform"``,
    ``"bsr:4"``/``"block4"``, ``"blocked-ell:2"``, ``"2:4"``, ...) with ``m, k, n`` and
    ``density`` or ``nnz``; or a :mod:`sparsekit.formats` matrix with ``n`` only.
    ``device`` is a name of ``sparsekit.device.PEAKS``, ``"measured"`` or a :class:`Roof`.
    Extra keywords (``index_dtype``, ``block``, ``nm``, ``nm_index``, ``b_elements``,
    ``out_dtype``) go to :func:`counts`.

    >>> d = speed_of_light("dense", 4096, 4096, 1, dtype="float16")
    >>> s = speed_of_light("2:4", 4096, 4096, 1, dtype="float16")
    >>> round(d.seconds / s.seconds, 2)   # memory bound: 2 bytes -> 1 + 1/8 byte per dense weight
    1.78
    """
    if isinstance(fmt, str):
        if m is None or k is None or n is None:
            raise ValueError(f"m, k, n: a format kind needs all three sizes, got m={m}, k={k}, n={n}")
        c = counts(fmt, m, k, n, density=density, nnz=nnz, dtype=dtype, **count_args)
    else:
        if m is not None or k is not None or density is not None or nnz is not None:
            raise ValueError("fmt: a format matrix fixes m, k and nnz; pass only n")
        c = counts_of(fmt, n if n is not None else check_int(None, "n"), **count_args)
    return sol_of(c, device=device, unit=unit, convention=convention)


def sol_of(c: Counts, *, device="H100", unit: str = "auto", convention: str = "2nnz") -> SoL:
    """Speed of light of already-computed :class:`Counts` on ``device``."""
    if not isinstance(c, Counts):
        raise TypeError(f"c: expected a Counts (the counts of a format), got {type(c).__name__}")
    if unit not in UNITS:
        raise ValueError(f"unit: expected one of {', '.join(UNITS)}, got {unit!r}")
    r = roof(device)
    u = default_unit(c.kind, c.dtype) if unit == "auto" else unit
    dt = "float32" if (u == "cuda" and c.dtype == "tf32") else c.dtype
    peak = r.peak(u, dt)
    flops = c.flops(convention)
    return SoL(c, flops, r.name, u, peak, r.bandwidth, flops / peak, c.bytes / r.bandwidth)


# ----------------------------------------------------------------------------- models

@dataclass(frozen=True)
class LayerSoL:
    """One layer of a model at speed of light, dense and sparse."""

    name: str
    count: int          #: times this layer shape occurs (its time is multiplied by it)
    dense: SoL
    sparse: SoL
    pruned: bool        #: False for layers kept dense (no weights, or not prunable)

    @property
    def speedup(self) -> float:
        return self.dense.seconds / self.sparse.seconds


@dataclass(frozen=True)
class ModelSoL:
    """Per-model sums (Equation 3)."""

    pattern: str
    layers: tuple

    @property
    def dense_s(self) -> float:
        return sum(l.count * l.dense.seconds for l in self.layers)

    @property
    def sparse_s(self) -> float:
        return sum(l.count * l.sparse.seconds for l in self.layers)

    @property
    def speedup(self) -> float:
        return self.dense_s / self.sparse_s

    @property
    def dense_flops(self) -> int:
        return sum(l.count * l.dense.flops for l in self.layers)

    def feature_share(self, which: str = "dense") -> float:
        """Share of the bytes moved that are input/output features (the paper's Figure 7)."""
        sols = [(l.count, getattr(l, which)) for l in self.layers]
        return sum(c * s.counts.feature_bytes for c, s in sols) / sum(c * s.bytes for c, s in sols)


def _density_of(pattern_kind: str, params: dict, sparsity) -> float | None:
    if pattern_kind == "nm":
        keep, width = params["nm"]
        return keep / width
    if pattern_kind == "dense":
        return None
    if sparsity is None:
        raise ValueError(f"sparsity: pattern {pattern_kind!r} needs a sparsity in [0, 1], got None")
    if isinstance(sparsity, bool) or not isinstance(sparsity, numbers.Real) or not 0.0 <= sparsity <= 1.0:
        raise ValueError(f"sparsity: must lie in [0, 1], got {sparsity!r}")
    return 1.0 - float(sparsity)


def model_sol(layers: Iterable, pattern: str, sparsity=None, *, dtype="float16", device="H100",
              densities: Sequence[float] | None = None, include_activation_matmuls: bool = False,
              dense_kind: str = "dense", convention: str = "2nnz", **count_args) -> ModelSoL:
    """Dense and sparse speed of light of every layer of a model and their sums.

    ``layers`` are :class:`sparsekit.models.Layer` (``name, m, k, n, count, inputs,
    weights``); weight layers get ``pattern`` at ``sparsity`` (or their own entry of
    ``densities``, e.g. from global magnitude pruning; ``None`` keeps that layer
    dense; N:M ignores the values); layers without weights
    (attention's ``QK^T`` and ``AV``) are left out unless
    ``include_activation_matmuls``, and then stay dense in both sums.
    """
    kind, params = parse_kind(pattern)
    r = roof(device)
    layers = [l for l in layers if l.weights or include_activation_matmuls]
    if densities is not None and len(densities) != len(layers):
        raise ValueError(f"densities: expected one per layer ({len(layers)}), got {len(densities)}")
    same = _density_of(kind, params, sparsity) if densities is None else None
    out = []
    for i, l in enumerate(layers):
        dense = sol_of(counts(dense_kind, l.m, l.k, l.n, dtype=dtype, b_elements=l.inputs), device=r,
                       convention=convention)
        density = densities[i] if densities is not None else same
        keep_dense = densities is not None and densities[i] is None
        if l.weights and kind != "dense" and not keep_dense:
            c = counts(pattern, l.m, l.k, l.n, density=None if kind == "nm" else density, dtype=dtype,
                       b_elements=l.inputs, **count_args)
            sparse = sol_of(c, device=r, convention=convention)
        else:
            sparse = dense
        out.append(LayerSoL(l.name, l.count, dense, sparse, sparse is not dense))
    return ModelSoL(pattern, tuple(out))
