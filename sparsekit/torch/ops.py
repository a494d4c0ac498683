"""The sparse linear product as a ``torch.library`` custom op, with a fake (meta) kernel and autograd.

``sparsekit::sparse_linear(x, values, indices, in_features, weight_id, inference=False)`` is ``y = x @ W^T`` for a
weight ``W`` (``M x K``) held as padded ELL rows (``sparsekit/reference/spmm_ell_rows.py``): ``values`` and ``indices``
(``M x W``, ``W`` a multiple of 8; column ``K`` marks padding; columns are read as unsigned 16-bit).
``sparsekit::sparse_linear_inference(x, values, indices, in_features, weight_id, copies=True)`` is the same product
with no autograd kernel, for calls without autograd (``copies`` as ``inference``).

On CUDA in float16/bfloat16, for ``x`` of ``N`` rows (:func:`route`; device times on the H200 at the Llama shapes
4096x4096, 14336x4096 and 4096x14336, 50-90 % sparsity):

* ``N < 8`` (``N = 1`` with autograd, or from 87.5 % sparse), ``N = 8`` where rows hold at most a quarter of ``K``
  and ``N = 9-16`` where they hold at most a sixteenth (:data:`sparsekit.router.BITMAP_N16_MIN_DENSITY`; N = 12 / 16
  at 95 %: 15.0 / 32.5 / 29.0 and 16.4 / 36.3 / 30.9 us against the bitmap kernel's 19.0 / 35.9 / 37.5 and 19.3 /
  35.9 / 37.4, at 90 % 19.2 / 46.2 / 42.5 and 20.9 / 52.4 / 45.2 against 19.5 / 36.6 / 37.8 and 19.3 / 36.6 / 37.5):
  the row kernel, :func:`sparsekit.gpu.spmm_ell_rows.spmm_ell_rows_linear`, bound by reading the weight's 4 bytes a
  kept entry (N = 1: 0.91-2.84x dense cuBLAS; N = 8 at 80 %: 16.0 / 37.7 / 36.5 us against the bitmap kernel's 19.5
  / 35.3 / 36.7: ``experiments/results/torch_decoder.md``, ``spmm_bitmap.md``).
* ``inference`` and ``N = 1`` where rows hold more than an eighth of ``K`` (below 87.5 % sparse): the compact row
  kernel, :func:`sparsekit.gpu.spmm_ell_compact.spmm_ell_compact_linear`, on a copy of the weight as compact ELL
  rows (3.25 bytes a slot against 4; :meth:`Prepared.compact`, made on the device at the first such call and kept
  as the TiledBitmap below): 1.10-1.17x the row kernel's speed at 50-80 % on the three shapes (a decoder layer's
  seven products 1.14 / 1.13 / 1.11x at 50 / 70 / 80 %), but 0.97-1.06x at 90 %, where the copy's 0.16x of the
  dense bytes is not worth it (``sparse_linear.md``, ``--compact``; :data:`sparsekit.router.COMPACT_MIN_DENSITY`).
* ``inference`` (no autograd) and ``8 <= N <= 32`` otherwise, or up to ``N = 64`` on weights of at least
  :data:`BITMAP_WIDE_MIN_WEIGHTS` entries: the weight as a
  :class:`~sparsekit.formats.TiledBitmap` on tensor cores, :func:`sparsekit.gpu.spmm_bitmap.spmm_bitmap_linear`,
  whose time hardly grows with ``N`` (``spmm_bitmap.md``: 0.76-1.21x dense at N = 8, 0.82-1.13x at 16, 0.67-0.91x
  at 32, 0.38-0.57x at 64, against the row kernel's 0.47-1.32x at N = 8 and 0.20-0.87x at 16,
  ``torch_decoder.md``). The TiledBitmap is built from the ELL rows on their device on the first such call
  (:mod:`sparsekit.torch.copies`) and rebuilt when ``values`` or ``indices`` change (:meth:`Prepared.bitmap`).
* With autograd recording, ``N <= KERNEL_MAX_N``: the row kernel (the values change every training step; a
  TiledBitmap would be rebuilt for each).
* A 2:4 weight (at most 2 of every 4 columns a row, :func:`is_two_four`; M and K multiples of 64) without autograd
  and past :data:`CUSPARSELT_MIN_N` rows: cuSPARSELt's 2:4 tensor-core GEMM (``torch._cslt_sparse_mm``) on the
  weight compressed once (:meth:`Prepared.cusparselt_product`, 9/16 of the dense bytes), with the fastest of its
  algorithms for the shape (:func:`cusparselt_algorithm`): 1.04-1.73x dense cuBLAS at N = 512-2048, where densify
  + GEMM takes 0.4-0.85x; 0.58-0.79x at N = 64 (densify + GEMM 0.36-0.41x; ``sparse_linear.md``).
* Wider ``x`` (prefill: past 64 rows without autograd, past 32 on smaller weights, past 16 with) or float32: ``W`` densified for the call
  (:func:`sparsekit.gpu.spmm_ell_rows.densify_ell_rows`, or torch's scatter for float32) and dense GEMM (cuBLAS);
  nothing dense is kept.

Each kernel's launches are recorded once per (weight, ``N``) and replayed with ``cuLaunchKernel`` on torch's
current stream (:mod:`sparsekit.launch`): no host sync, no allocation outside torch's allocator, so a CUDA graph
can capture them. Recording (and building the TiledBitmap) cannot happen inside a capture: the first call at a
width must come before it (the warm-up ``torch.cuda.graph`` asks for), else :class:`RuntimeError`.

On the CPU: torch ops on the densified weight with float32 accumulation (float64 stays float64: ``gradcheck``).

Autograd: ``dX = dY @ W`` (the densified weight) and the gradient of the kept entries only,
``dvalues[m, j] = (dY^T x)[m, indices[m, j]]`` (zero at padding), so training keeps the pattern.
"""
from __future__ import annotations

import itertools
import weakref

import torch

from sparsekit.router import BITMAP_N16_MIN_DENSITY   # the row kernel's edge at N = 9-16, as uspmm's
from sparsekit.router import INFERENCE_COPIES, compact_wins   # compact rows at N = 1, as uspmm's

__all__ = ["sparse_linear", "sparse_linear_inference", "forward", "route", "bitmap_bytes",
           "cusparselt_bytes", "compact_bytes", "copies_bytes",
           "is_two_four", "cusparselt_algorithm", "CUSPARSELT_MIN_N", "COPIES",
           "dense_weight", "register", "KERNEL_MAX_N", "BITMAP_MIN_N", "BITMAP_MAX_N", "BITMAP_MIN_DENSITY",
           "KERNEL_DTYPES"]

#: The widest ``x`` the row kernel multiplies while autograd records; wider goes to dense GEMM on the densified
#: weight. At ``N <= 16`` the kernel beats densify + GEMM (which moves the dense weight twice) at every sparsity
#: from 50 %; at ``N = 32`` it takes 2.5-10x dense cuBLAS (``experiments/results/uspmm_decode.md``).
KERNEL_MAX_N = 16
#: Without autograd, ``x`` of ``BITMAP_MIN_N`` to ``BITMAP_MAX_N`` rows runs the TiledBitmap kernel, which pads
#: ``x`` to a multiple of 8 rows: narrower, it would take about its N = 8 time, above the row kernel's there
#: (N = 1: 4.7-34.5 us against the bitmap kernel's 19.0-49.8 at N = 8; ``torch_decoder.md``, ``spmm_bitmap.md``).
#: From N = 9 it is the faster (N = 16: 0.82-1.13x dense against 0.20-0.87x; the row kernel is faster there only
#: at 4096x4096 90 %, 15.9 against 19.3 us).
BITMAP_MIN_N = 8
#: The bitmap kernel's widest ``x``; beyond, densify + GEMM. At N = 32 and 64 the kernel takes 0.67-0.91x and
#: 0.38-0.57x dense cuBLAS (``spmm_bitmap.md``); densify + GEMM writes the dense weight, then reads it (batch 32
#: decode end to end: 0.43-0.61x dense, ``torch_decoder.md``).
BITMAP_MAX_N = 64
#: Past N = 32 the bitmap kernel only where the weight has at least this many entries. Through this layer on the
#: H200, bfloat16 80 %, device us, bitmap against densify + GEMM (``sparse_linear.md``): N = 32 23.1 / 46.1 / 50.1
#: against 27.2 / 81.9 / 105.7 at 4096x4096 / 14336x4096 / 4096x14336; N = 64 72.4 / 83.5 against 83.4 / 107.6 on
#: the two MLP shapes, but 40.7 against 25.6 at 4096x4096 (its dense weight stays in L2 between densify and GEMM).
BITMAP_WIDE_MIN_WEIGHTS = 2**25
#: At N = ``BITMAP_MIN_N``, the row kernel where a row stores at most this share of ``K`` (the layer's padded
#: width over ``in_features``: what the row kernel reads, known without looking at the values). Device us at
#: 4096x4096 / 14336x4096 / 4096x14336, row kernel against bitmap (``torch_decoder.md`` "One layer",
#: ``spmm_bitmap.md``): 90 % 10.4 / 23.9 / 24.8 against 19.0 / 33.7 / 35.8; 80 % 16.0 / 37.7 / 36.5 against
#: 19.5 / 35.3 / 36.7 (90.2 against 91.5 over the three); 70 % 19.1 / 47.2 / 44.9 against 20.0 / 38.5 / 40.6;
#: 50 % 24.2 / 63.5 / 61.7 against 23.2 / 44.6 / 49.8.
BITMAP_MIN_DENSITY = 0.25
#: Without autograd, a 2:4 weight (:func:`is_two_four`) multiplies ``x`` of more rows on cuSPARSELt's 2:4 tensor-core
#: GEMM (``torch._cslt_sparse_mm``) with its fastest algorithm (:func:`cusparselt_algorithm`): on the H200, bfloat16,
#: device us at 4096x4096 / 14336x4096 / 4096x14336 (``sparse_linear.md``): N = 64 21.2 / 42.4 / 55.9 against
#: this layer's other routes' 33.9 / 80.4 / 87.6 (dense cuBLAS 12.4 / 33.4 / 36.4); N = 2048 63.1 / 215.7 / 224.0
#: against 111.8 / 421.4 / 446.3 (dense 95.7 / 374.0 / 358.4). At N = 16 the TiledBitmap kernel is the faster
#: (18.6 / 40.8 / 41.6 against cuSPARSELt's 21.0 / 44.6 / 55.6).
CUSPARSELT_MIN_N = 32
#: The copies of a weight inference may keep beside its rows (:data:`sparsekit.router.INFERENCE_COPIES`).
COPIES = INFERENCE_COPIES
#: dtypes the CUDA kernels take.
KERNEL_DTYPES = (torch.float16, torch.bfloat16)

_WEIGHTS: dict = {}
_IDS = itertools.count(1)
_UNRECORDED = object()


def route(n: int, width: int, in_features: int, inference: bool, *, out_features: int,
          two_four: bool = False, copies=COPIES) -> str:
    """The product for CUDA float16/bfloat16 ``x`` of ``n`` rows and an ``out_features x in_features`` weight of
    ``width`` stored entries a row: ``"rows"`` (row kernel), ``"compact"`` (compact row kernel), ``"bitmap"`` (TiledBitmap kernel), ``"cusparselt"``
    (cuSPARSELt's 2:4 GEMM) or ``"dense"`` (densify + GEMM). ``inference``: no autograd, so the weight may be read
    from a copy kept between calls (module docstring), of those named in ``copies`` (:data:`COPIES`). ``two_four``:
    every group of 4 columns of every row holds at most 2 entries and cuSPARSELt takes the shape
    (:meth:`Prepared.two_four`); asked only from ``n > CUSPARSELT_MIN_N``."""
    if inference and two_four and n > CUSPARSELT_MIN_N and "cusparselt" in copies:
        return "cusparselt"
    if inference and n == 1 and compact_wins(width, in_features, out_features) and "compact" in copies:
        return "compact"
    wide = n > 32 and out_features * in_features < BITMAP_WIDE_MIN_WEIGHTS
    rows_win = (n <= BITMAP_MIN_N and width <= BITMAP_MIN_DENSITY * in_features) or (    # at N = 9-16 from 93.75 %:
        n <= KERNEL_MAX_N and width <= BITMAP_N16_MIN_DENSITY * in_features)     # module docstring
    if inference and BITMAP_MIN_N <= n <= BITMAP_MAX_N and not wide and not rows_win and "bitmap" in copies:
        return "bitmap"
    return "rows" if n <= KERNEL_MAX_N else "dense"


def _columns(indices: torch.Tensor) -> torch.Tensor:
    """The columns of ``indices`` as int64 (stored as int16: read unsigned)."""
    return indices.long() & 0xFFFF


def dense_weight(values: torch.Tensor, indices: torch.Tensor, in_features: int) -> torch.Tensor:
    """``W`` (``M x K``) from padded ELL rows with torch ops, zeros where nothing is stored."""
    out = values.new_zeros((values.shape[0], in_features + 1))        # column K: padding lands there
    return out.scatter(1, _columns(indices), values)[:, :in_features]


def _version(t: torch.Tensor) -> int:
    """torch's count of the in-place changes of ``t`` (an inference tensor keeps none: 0)."""
    return 0 if t.is_inference() else t._version


_WARM_UP = "call the layer once with such an x before capturing (the warm-up torch.cuda.graph asks for)"


def _refuse_in_capture(x: torch.Tensor, what: str, hint: str = _WARM_UP) -> None:
    """A RuntimeError naming ``what`` and ``hint`` when a CUDA graph capture is under way on the current stream
    (work that syncs with the host or allocates outside torch cannot be captured)."""
    if x.is_cuda and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(f"sparse_linear: cannot {what} for x of shape {tuple(x.shape)} and {x.dtype} inside a "
                           f"CUDA graph capture; {hint}")


class Prepared:
    """One layer's launch plans (per route, ``N``, dtype, device and the addresses of its tensors), the scratch
    buffers they point at, the copies of the weight its inference routes read once made (compact rows,
    TiledBitmap, cuSPARSELt's buffer: :data:`COPIES`) and which of them its layer allows; dropped with its
    layer."""

    def __init__(self):
        from sparsekit.gpu.launch import Buffers

        self.plans: dict = {}
        self.buffers = Buffers()
        self._bitmap = None                        # (what it was built from, DeviceBitmap)
        self._two_four = None                      # (what it was checked on, whether cuSPARSELt takes it)
        self._cusparselt = None                    # (what it was compressed from, cuSPARSELt's buffer)
        self._compact = None                       # (what it was converted from, compact ELL rows)
        self.copies = frozenset(COPIES)            # the copies its layer lets inference keep

    def _run(self, key, product, x, out_shape) -> torch.Tensor:
        """``product()(x)``, an output of ``out_shape``: recorded on the first call with ``key``, replayed after
        (when it could be). ``product`` builds the callable only when it is needed."""
        plan = self.plans.get(key, _UNRECORDED)
        if plan is None:                          # a product whose launches could not be recorded
            from sparsekit.launch import on_torch_stream

            _refuse_in_capture(x, "run a product whose launches could not be recorded",
                               "run this layer outside the graph")
            with on_torch_stream():
                return product()(x)
        if plan is _UNRECORDED:
            from sparsekit.launch import record

            _refuse_in_capture(x, "record the launches")
            out, self.plans[key] = record(product(), x, lambda t: t.new_empty(out_shape))
            return out
        out = x.new_empty(out_shape)
        plan(x.data_ptr(), out.data_ptr(), torch._C._cuda_getCurrentRawStream(x.get_device()))
        return out

    def rows_product(self, x, values, indices, in_features: int) -> torch.Tensor:
        """``x @ W^T`` by the row kernel (``x`` ``N x K`` C-contiguous on CUDA, ``N <= 64``, a kernel dtype). At
        ``N = 1`` an ``x`` on a 16-byte boundary is copied to shared memory in 16-byte loads: its own plan."""
        key = ("rows", x.shape[0], x.dtype, x.get_device(), x.data_ptr() % 16 == 0, values.data_ptr(),
               indices.data_ptr())

        def product():
            from sparsekit.gpu.spmm_ell_rows import spmm_ell_rows_linear

            return lambda t: spmm_ell_rows_linear(values.detach(), indices, in_features, t.detach(),
                                                  buffers=self.buffers)

        return self._run(key, product, x, (x.shape[0], values.shape[0]))

    def bitmap(self, values, indices, in_features: int):
        """The weight as a :class:`~sparsekit.gpu.spmm_bitmap.DeviceBitmap`: built from the ELL rows on their device
        (:func:`sparsekit.torch.copies.tiled_bitmap`), through the host to Numba's arrays, when first asked for;
        built again once ``values`` or ``indices`` is another tensor or was changed in place as torch counts it (``_version``: an optimizer
        step, ``copy_``, an in-place op under ``no_grad``; not a write through ``.data`` nor one to an inference
        tensor), the launch plans of the TiledBitmap it replaces dropped with it."""
        def build():
            from sparsekit.gpu.spmm_bitmap import upload
            from sparsekit.torch.copies import tiled_bitmap

            return upload(tiled_bitmap(values, indices, in_features))

        return self._kept("_bitmap", values, indices, "build the weight's TiledBitmap", build, plans="bitmap")

    def _kept(self, attr: str, values, indices, what: str, build, plans: str | None = None):
        """The copy of the weight (or fact about it) held in ``attr`` as ``(source, copy)``: made by ``build()`` when
        first asked for and again once ``values`` or ``indices`` is another tensor or changed in place
        (:func:`_source`), the replaced one freed first with the launch plans of the route ``plans`` that read
        it; a capture under way is refused (``what``) when it must be made."""
        source = _source(values, indices)
        held = getattr(self, attr)
        if held is None or held[0] != source:
            _refuse_in_capture(values, what)
            for key in [key for key in self.plans if key[0] == plans]:
                del self.plans[key]
            setattr(self, attr, None)
            held = (source, build())
            setattr(self, attr, held)
        return held[1]

    def bitmap_product(self, x, values, indices, in_features: int) -> torch.Tensor:
        """``x @ W^T`` by the TiledBitmap kernel (``x`` ``N x K`` C-contiguous on CUDA, ``N <= 64``, the values'
        dtype). ``x`` not on a 16-byte boundary is staged by the launcher: its own plan."""
        key = ("bitmap", x.shape[0], x.dtype, x.data_ptr() % 16 == 0, values.data_ptr(), _version(values),
               indices.data_ptr(), _version(indices))

        def product():
            from sparsekit.gpu.spmm_bitmap import spmm_bitmap_linear

            dev = self.bitmap(values, indices, in_features)
            return lambda t: spmm_bitmap_linear(dev, t.detach())

        return self._run(key, product, x, (x.shape[0], values.shape[0]))

    def compact(self, values, indices, in_features: int) -> tuple:
        """The weight as compact ELL rows ``(values, offsets, bases)`` on its device
        (:func:`sparsekit.torch.copies.compact_rows`, torch ops there: a few host syncs), made when first asked
        for and again after ``values`` or ``indices`` change (as :meth:`bitmap`), the plans of the copy it
        replaces dropped with it."""
        def build():
            from sparsekit.torch.copies import compact_rows

            return compact_rows(values.detach(), indices, in_features)

        return self._kept("_compact", values, indices, "convert the weight to compact ELL rows", build,
                          plans="compact")

    def compact_product(self, x, values, indices, in_features: int) -> torch.Tensor:
        """``x @ W^T`` by the compact row kernel (``x`` ``1 x K`` C-contiguous on CUDA, the values' dtype)."""
        key = ("compact", x.dtype, x.data_ptr() % 16 == 0, values.data_ptr(), _version(values),
               indices.data_ptr(), _version(indices))

        def product():
            from sparsekit.gpu.spmm_ell_compact import spmm_ell_compact_linear

            rows = self.compact(values, indices, in_features)
            return lambda t: spmm_ell_compact_linear(*rows, in_features, t.detach())

        return self._run(key, product, x, (1, values.shape[0]))

    def route(self, n: int, values, indices, in_features: int, inference: bool) -> str:
        """:func:`route` for ``x`` of ``n`` rows and this weight, with the copies its layer allows (the 2:4 check
        asked only where cuSPARSELt could run)."""
        two_four = (inference and n > CUSPARSELT_MIN_N and "cusparselt" in self.copies
                    and self.two_four(values, indices, in_features))
        return route(n, values.shape[1], in_features, inference, out_features=values.shape[0], two_four=two_four,
                     copies=self.copies)

    def two_four(self, values, indices, in_features: int) -> bool:
        """Whether cuSPARSELt can multiply by this weight: a 2:4 pattern (:func:`is_two_four`), M and K multiples
        of 64, float16/bfloat16 on CUDA, cuSPARSELt present. Checked again once ``values`` or ``indices`` is
        another tensor or was changed in place (as :meth:`bitmap`); the check syncs with the host."""
        def check():
            from sparsekit.reference.sparse24_cusparselt import CSLT_ALIGN

            takes = (values.is_cuda and values.dtype in KERNEL_DTYPES and torch.backends.cusparselt.is_available()
                     and values.shape[0] % CSLT_ALIGN == 0 and in_features % CSLT_ALIGN == 0)
            return takes and is_two_four(indices, in_features)

        return self._kept("_two_four", values, indices, "check the weight's 2:4 pattern", check)

    def cusparselt_product(self, x, values, indices, in_features: int) -> torch.Tensor:
        """``x @ W^T`` by cuSPARSELt's 2:4 GEMM (``x`` ``N x K`` on CUDA, the values' dtype) on the weight compressed
        once (``torch._cslt_compress`` of the densified weight: 9/16 of the dense bytes), again after ``values``
        or ``indices`` change, with the fastest algorithm for the shape (:func:`cusparselt_algorithm`). ``x`` of
        a row count not a multiple of 8 is padded with zero rows for the call."""
        compressed = self._kept("_cusparselt", values, indices, "compress the weight for cuSPARSELt",
                                lambda: torch._cslt_compress(self.dense(values, indices, in_features)))
        n = x.shape[0]
        xp = x if n % 8 == 0 else torch.nn.functional.pad(x, (0, 0, 0, -n % 8))
        y = torch._cslt_sparse_mm(compressed, xp.t(), alg_id=cusparselt_algorithm(compressed, xp),
                                  transpose_result=True)
        return y if xp is x else y[:n]

    def dense(self, values, indices, in_features: int) -> torch.Tensor:
        """``W`` densified on CUDA for one call (float16/bfloat16: the densify kernel, recorded with the
        values as its input)."""
        v = values.detach()
        if v.dtype not in KERNEL_DTYPES:
            return dense_weight(v, indices, in_features)
        key = ("dense", v.dtype, v.get_device(), v.data_ptr(), indices.data_ptr())

        def product():
            from sparsekit.gpu.spmm_ell_rows import densify_ell_rows

            return lambda t: densify_ell_rows(t, indices, in_features)

        return self._run(key, product, v, (v.shape[0], in_features))


def _source(values: torch.Tensor, indices: torch.Tensor) -> tuple:
    """What a copy of the weight kept between calls was made from: the tensors, their in-place change counts
    and the dtype."""
    return values.data_ptr(), _version(values), indices.data_ptr(), _version(indices), values.dtype


def is_two_four(indices: torch.Tensor, in_features: int) -> bool:
    """Whether padded ELL rows keep at most 2 columns of every aligned group of 4 (the 2:4 pattern), on the
    indices' device (one host sync)."""
    if in_features % 4:
        return False
    cols = _columns(indices)
    groups = torch.where(cols < in_features, cols // 4, in_features // 4)     # padding: one group past the last
    counts = torch.zeros((indices.shape[0], in_features // 4 + 1), dtype=torch.int32, device=indices.device)
    counts.scatter_add_(1, groups, torch.ones_like(groups, dtype=torch.int32))
    return bool((counts[:, :-1] <= 2).all())


#: cuSPARSELt's algorithm ids tried by :func:`cusparselt_algorithm` (the H200's build takes 0-23 at these shapes).
CUSPARSELT_ALGORITHMS = 24
#: Runs of each algorithm timed together by :func:`cusparselt_algorithm`.
CUSPARSELT_TIMED_RUNS = 5
_CUSPARSELT_CHOICE: dict = {}


def cusparselt_algorithm(compressed: torch.Tensor, x: torch.Tensor) -> int:
    """The fastest of cuSPARSELt's algorithms for ``compressed @ x^T`` at ``x``'s row count rounded up to a
    power of two, dtype and device, timed once and remembered for the process: device time of
    :data:`CUSPARSELT_TIMED_RUNS` runs replayed from a CUDA graph (events around calls from the host would count
    the host's cost, which cuSPARSELt's plan set-up at every call makes larger than a small product; a host
    sync). Its default (0) took 1.5-2x the fastest at N = 64-2048 on the H200 (``sparse_linear.md``);
    cuSPARSELt's own search (``torch._cslt_sparse_mm_search``) fails on float16 there."""
    n = x.shape[0]
    key = (tuple(compressed.shape), x.shape[1], 1 << max(n - 1, 0).bit_length(), x.dtype, x.get_device())
    if key not in _CUSPARSELT_CHOICE:
        from sparsekit.torch.graphs import graph_time

        _refuse_in_capture(x, "choose cuSPARSELt's algorithm")
        times = []
        for alg in range(CUSPARSELT_ALGORITHMS):
            try:
                torch._cslt_sparse_mm(compressed, x.t(), alg_id=alg, transpose_result=True)
            except RuntimeError:                   # past the build's last algorithm
                break
            times.append(graph_time(lambda: torch._cslt_sparse_mm(compressed, x.t(), alg_id=alg, transpose_result=True),
                                    CUSPARSELT_TIMED_RUNS))
        _CUSPARSELT_CHOICE[key] = min(range(len(times)), key=times.__getitem__)
    return _CUSPARSELT_CHOICE[key]


def register(owner) -> int:
    """A new weight id for :func:`sparse_linear`, its :class:`Prepared` dropped when ``owner`` is."""
    wid = next(_IDS)
    _WEIGHTS[wid] = Prepared()
    weakref.finalize(owner, _WEIGHTS.pop, wid, None)
    return wid


def bitmap_bytes(weight_id: int) -> int:
    """Device bytes of the TiledBitmap kept for weight ``weight_id`` (its stream and offsets; 0 until built)."""
    built = _WEIGHTS[weight_id]._bitmap
    return 0 if built is None else sum(a.size * a.dtype.itemsize for a in (built[1].stream, built[1].offsets))


def cusparselt_bytes(weight_id: int) -> int:
    """Device bytes of cuSPARSELt's compressed buffer kept for weight ``weight_id`` (0 until built)."""
    built = _WEIGHTS[weight_id]._cusparselt
    return 0 if built is None else built[1].numel() * built[1].element_size()


def compact_bytes(weight_id: int) -> int:
    """Device bytes of the compact ELL rows kept for weight ``weight_id`` (0 until built)."""
    built = _WEIGHTS[weight_id]._compact
    return 0 if built is None else sum(t.numel() * t.element_size() for t in built[1])


def copies_bytes(weight_id: int) -> int:
    """Device bytes of the copies of weight ``weight_id`` kept for inference, once built: its TiledBitmap,
    cuSPARSELt's compressed buffer and its compact ELL rows."""
    return bitmap_bytes(weight_id) + cusparselt_bytes(weight_id) + compact_bytes(weight_id)


def forward(x: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, in_features: int, weight_id: int,
            inference: bool = False) -> torch.Tensor:
    """``x @ W^T`` on ``x``'s device (the op's body; also the eager fast path of the layer)."""
    if x.is_cuda:
        prep = _WEIGHTS[weight_id]
        if x.dtype in KERNEL_DTYPES:
            kernel = prep.route(x.shape[0], values, indices, in_features, inference)
            if kernel != "dense":
                x = x if x.is_contiguous() else x.contiguous()
                if kernel == "rows":
                    return prep.rows_product(x, values, indices, in_features)
                if kernel == "compact":
                    return prep.compact_product(x, values, indices, in_features)
                if kernel == "cusparselt":
                    return prep.cusparselt_product(x, values, indices, in_features)
                return prep.bitmap_product(x, values, indices, in_features)
        return torch.nn.functional.linear(x, prep.dense(values, indices, in_features))
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    return (x.to(acc) @ dense_weight(values, indices, in_features).to(acc).T).to(x.dtype)


#: The op's schema, registered once for the process (the library object must stay alive: dropping it would
#: unregister the op). A ``torch.library.Library`` rather than ``torch.library.custom_op``: the same op, fake
#: kernel and autograd, with fewer Python layers between the dispatcher and :func:`forward` on each call.
_LIBRARY = torch.library.Library("sparsekit", "DEF")
_LIBRARY.define("sparse_linear(Tensor x, Tensor values, Tensor indices, int in_features, int weight_id, "
                "bool inference=False) -> Tensor")


def _sparse_linear(x, values, indices, in_features, weight_id, inference=False):
    """The ops' body. Its defaults must be the schemas': the dispatcher leaves out an argument equal to the
    schema's default when it calls a Python kernel."""
    if x.dtype != values.dtype:
        raise ValueError(f"x: dtype must be the weight's {values.dtype}, got {x.dtype}")
    return forward(x, values, indices, in_features, weight_id, inference)


def _sparse_linear_inference(x, values, indices, in_features, weight_id, copies=True):
    return _sparse_linear(x, values, indices, in_features, weight_id, copies)


_LIBRARY.impl("sparse_linear", _sparse_linear, "CompositeExplicitAutograd")      # every device: forward()
_OP = torch.ops.sparsekit.sparse_linear.default


def sparse_linear(x: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, in_features: int,
                  weight_id: int, inference: bool = False) -> torch.Tensor:
    """``x @ W^T`` for ``x`` (``N x K``) and the weight of padded ELL rows ``values``/``indices``, through the op
    ``torch.ops.sparsekit.sparse_linear``. ``inference``: no gradient will be asked of this call (the layer
    passes ``not torch.is_grad_enabled()``), so the weight may be read from a copy kept between calls
    (:func:`route`); inside the op autograd's recording cannot be seen (its forward runs below autograd)."""
    return _OP(x, values, indices, in_features, weight_id, inference)


_LIBRARY.define("sparse_linear_inference(Tensor x, Tensor values, Tensor indices, int in_features, int weight_id, "
                "bool copies=True) -> Tensor")
_LIBRARY.impl("sparse_linear_inference", _sparse_linear_inference, "CompositeExplicitAutograd")
_INFERENCE_OP = torch.ops.sparsekit.sparse_linear_inference.default


def sparse_linear_inference(x: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, in_features: int,
                            weight_id: int, copies: bool = True) -> torch.Tensor:
    """:func:`sparse_linear` where no gradient will be asked, through the op
    ``torch.ops.sparsekit.sparse_linear_inference``, which has no autograd kernel: a call under ``no_grad`` (as
    ``torch.compile``'s inference graphs make, 56 a decoder token) skips autograd's Python layer: on a 2-core
    CPU host the op adds 3-8 us to its work's 23-25, the differentiable op 13-17. Not differentiable.
    ``copies``: the weight may be read from a copy kept between calls (:func:`route`)."""
    return _INFERENCE_OP(x, values, indices, in_features, weight_id, copies)


def _fake(x, values, indices, in_features, weight_id, flag=False):
    return x.new_empty((x.shape[0], values.shape[0]))


torch.library.register_fake("sparsekit::sparse_linear", _fake, lib=_LIBRARY)
torch.library.register_fake("sparsekit::sparse_linear_inference", _fake, lib=_LIBRARY)


def _setup(ctx, inputs, output):
    x, values, indices, in_features, weight_id, _ = inputs
    ctx.in_features, ctx.weight_id = in_features, weight_id
    ctx.save_for_backward(x, values, indices)


def _backward(ctx, grad):
    x, values, indices = ctx.saved_tensors
    grad_x = grad_values = None
    acc = torch.float64 if grad.dtype == torch.float64 else torch.float32
    if ctx.needs_input_grad[0]:
        w = (_WEIGHTS[ctx.weight_id].dense(values, indices, ctx.in_features) if grad.is_cuda
             else dense_weight(values, indices, ctx.in_features))
        grad_x = (grad.to(acc) @ w.to(acc)).to(x.dtype)
    if ctx.needs_input_grad[1]:
        outer = grad.to(acc).T @ x.to(acc)                                 # (M x K) dY^T x
        outer = torch.nn.functional.pad(outer, (0, 1))                     # column K (padding): zero
        grad_values = outer.gather(1, _columns(indices)).to(values.dtype)
    return grad_x, grad_values, None, None, None, None


torch.library.register_autograd("sparsekit::sparse_linear", _backward, setup_context=_setup, lib=_LIBRARY)
