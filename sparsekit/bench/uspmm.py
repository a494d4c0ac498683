"""USpMM benchmark: our kernels against cuSPARSE, cuBLAS and the roofline, one record per provider.

:func:`bench_problem` is the one declarative benchmark (``sparsekit bench uspmm``, the figures of
``experiments/uspmm_figures.py`` and the sweeps of ``experiments/bench_uspmm.py`` call it): a problem (M, K, N,
sparsity, dtype) and a dict of providers in, one record per provider out, each with median/p10/p90 device time
(:func:`sparsekit.timing.measure`, L2 flushed), TFLOP/s on the stored nonzeros (2 * nnz * N), % of the roofline
speed of light (:func:`sparsekit.roofline.speed_of_light` of the ELL problem on the table's peaks), and
``correct`` (against a float64 product, within the float32-accumulation bound of ``tests/test_spmm.py``).
A provider that cannot run the problem (a baseline that refuses bfloat16, a kernel past its widest N) gets
``error``, the reason, instead of times.

The dtype is float32, float16 or bfloat16 (``ml_dtypes.bfloat16``, :data:`sparsekit.checks.BFLOAT16`). bfloat16
runs on the decode kernel (N <= 64) and the tensor-core kernel only, and Numba has no bfloat16 device arrays: B
stays on the device as a ``torch.bfloat16`` tensor (the launchers view its bits); under the CUDA simulator, where
device memory is host memory, it is passed as the NumPy array.

Vendor baselines come from PyTorch when it is installed: cuSPARSE CSR (``torch.sparse_csr_tensor @ B``),
cuSPARSE COO (``torch.sparse.mm``) and dense cuBLAS (``W @ B``; TF32 off, so float32 runs on CUDA cores; float16
and bfloat16 on tensor cores, as they are). Without PyTorch they are skipped.
"""
from __future__ import annotations

import os

import ml_dtypes
import numpy as np

from sparsekit.arrays import cuda_torch, to_host, torch_tensor
from sparsekit.checks import BFLOAT16

#: The unit roundoff of float32.
U32 = 2.0 ** -24


def our_providers(dtype, *, quick: bool = False) -> dict:
    """Our kernels with their default or paper settings (name -> tunables dict, or a ``config``
    string: "auto", the tuner's cached choice, "heuristic", :func:`sparsekit.tune.heuristic`'s);
    ``quick``: the paper's layout of Listing 1, the pipelined kernel and auto only. USpMM-Vec
    with a row-major B (as slow as USpMM there) is timed in Fig. 8 and the sweep. "tensor cores": the
    tensor-core kernel at its default setting (float32 as 3xTF32, ``results/uspmm_tc.md``); "wgmma"
    (float32 on a compute capability 9.0 GPU): :mod:`sparsekit.gpu.uspmm_wgmma` at its default (``results/uspmm_wgmma.md``;
    ``precision="auto"``: bf16 corrections where their bound is no looser than 3xTF32's, K' >= 124), "wgmma
    3xtf32" the same with ``precision="3xtf32"`` pinned (three TF32 products whatever K'). bfloat16: only the
    kernels that take it, the decode kernel (N <= 64; B row-major and column-major), the tensor-core kernel,
    "heuristic" and "auto"; ``quick`` keeps the decode kernel, the tensor-core kernel and auto."""
    from sparsekit.tune import dense_tile, direct, pipelined, tensor_core
    if np.dtype(dtype) == BFLOAT16:
        provs = {"decode": dict(variant="decode"), "decode B col-major": dict(variant="decode", layout="F"),
                 "tensor cores": tensor_core(), "heuristic": "heuristic", "auto": "auto"}
        return {name: provs[name] for name in ("decode", "tensor cores", "auto")} if quick else provs
    provs = {
        "USpMM (1,8)": dict(variant="listing1", nwarp=1, vsize=8, vecsize=1),
        "USpMM (1,8) B col-major": dict(variant="listing1", nwarp=1, vsize=8, vecsize=1, layout="F"),
        "USpMM-Vec2 (2,8) B col-major": dict(variant="listing1", nwarp=2, vsize=8, vecsize=2, layout="F"),
        "pipelined": pipelined(4, 4, 8, 32, 4, 2),
        "direct": direct(4, 2, 4, 4),
        "dense tile": dense_tile(4, 8, 8, 16, 2),
        "heuristic": "heuristic",
        "auto": "auto",
    }
    provs["tensor cores"] = tensor_core()
    from sparsekit.gpu.uspmm_wgmma import supported
    if np.dtype(dtype) == np.float32 and supported():
        provs["wgmma"] = dict(variant="wgmma")                 # its default (a compute capability 9.0 GPU)
        provs["wgmma 3xtf32"] = dict(variant="wgmma", precision="3xtf32")         # the contract's own products
    if quick:
        provs = {name: provs[name] for name in ("USpMM (1,8) B col-major", "pipelined", "auto")}
    return provs


class Problem:
    """One USpMM problem on the device: the ELL weight, B, and float64 answers."""

    def __init__(self, m, k, n, sparsity, dtype, *, seed=0, order="C", tf32_a=False):
        """``tf32_a``: A's values rounded to TF32 numbers (as weights from float16 or bfloat16 are:
        :func:`sparsekit.gpu.uspmm_tc.tf32_exact`)."""
        import dataclasses

        from numba import cuda

        from sparsekit.reference.mma import tf32_round
        from sparsekit.gpu.uspmm import prepare
        from sparsekit.tune import make_ell
        self.m, self.k, self.n, self.sparsity, self.dtype, self.order = m, k, n, sparsity, np.dtype(dtype), order
        self.ell = make_ell(m, k, sparsity, dtype, seed=seed)
        if tf32_a:
            self.ell = dataclasses.replace(self.ell, values=np.asfortranarray(tf32_round(self.ell.values)))
        self.dell = prepare(self.ell)
        rng = np.random.default_rng(seed + 1)
        self.b_host = np.asarray(rng.standard_normal((k, n)).astype(dtype), order=order)
        if self.dtype == BFLOAT16:                        # no Numba bfloat16 arrays (the module docstring)
            torch = cuda_torch()
            if torch is None:
                self.b, self.b_f = self.b_host, np.asfortranarray(self.b_host)
            else:
                b_c = torch_tensor(np.ascontiguousarray(self.b_host), torch).cuda()
                self.b_f = b_c.t().contiguous().t()               # column-major: the transpose's rows
                self.b = b_c if order == "C" else self.b_f
        else:
            self.b = cuda.to_device(self.b_host)
            self.b_f = cuda.to_device(np.asfortranarray(self.b_host))   # Eq. 2 / Listing 1's layout
        self.dense = self.ell.to_dense()
        self._exact = None

    @property
    def flops(self) -> int:
        return 2 * self.ell.nnz * self.n

    def exact(self):
        """(A @ B, |A| @ |B|) in float64, computed on the GPU with PyTorch (NumPy without it)."""
        if self._exact is None:
            torch = cuda_torch()
            if torch is not None:
                a = torch.from_numpy(self.dense.astype(np.float64)).cuda()
                b = torch.from_numpy(np.ascontiguousarray(self.b_host, dtype=np.float64)).cuda()
                self._exact = ((a @ b).cpu().numpy(), (a.abs() @ b.abs()).cpu().numpy())
            else:
                a, b = self.dense.astype(np.float64), self.b_host.astype(np.float64)
                self._exact = (a @ b, np.abs(a) @ np.abs(b))
        return self._exact

    def correct(self, got, reduction=None) -> bool:
        """Within the float32-accumulation bound (tests/test_spmm.py, ``assert_fp32_accumulated``) of ``reduction``
        roundings (default K', a float32 dot product's; :func:`sparsekit.gpu.uspmm_tc.error_reduction` gives the tensor-core
        kernels' own), plus twice the output dtype's unit roundoff of ``|exact|`` (``ml_dtypes.finfo``, which knows
        bfloat16: 2**-8 there, 2**-11 for float16) for its one rounding to nearest even."""
        exact, scale = self.exact()
        got = np.asarray(got, dtype=np.float64)
        finfo = ml_dtypes.finfo(self.dtype)
        u_out = float(finfo.eps) / 2
        reduction = self.ell.kprime if reduction is None else reduction
        bound = reduction * U32 * scale + 2 * u_out * np.abs(exact) + float(finfo.smallest_subnormal)
        return bool((np.abs(got - exact) <= bound).all())

    def sol_s(self, device="H100") -> float:
        from sparsekit.roofline import speed_of_light
        return speed_of_light(self.ell, n=self.n, device=device).seconds


def host_bytes(m: int, k: int, n: int, sparsity: float, dtype) -> int:
    """About the most host memory :func:`bench_problem` holds at once for the problem on this process's backend,
    for refusing one that cannot fit. Bytes per element of the dense A: 32 (the draw and pruning of
    :func:`sparsekit.tune.make_ell`, the dense copy, the float64 copies for the exact product) and 20 more per
    kept one (the ELL, the CSR baseline and its coordinates); of B: 8 and its own size (the float64 draw, then the
    float64 copy the exact product reads; ``b_host``); of C: 56 (the float64 exact product and ``|A| |B|``, on the
    host wherever they are computed, the bound's temporaries, each result). Under the CUDA simulator
    (``NUMBA_ENABLE_CUDASIM=1``) device arrays are host arrays: 8 more per kept element (the ELL's copy) and twice
    B's size (``b`` and ``b_f``). Without PyTorch on a GPU :meth:`Problem.exact` multiplies in NumPy: 8 more per
    element of B (``|B|``). tracemalloc measured 36-97 % of it at toy sizes, each operand dominant in turn, on the
    simulator and with device arrays and PyTorch's products off the traced memory, as on a GPU. bfloat16 takes 2
    bytes an element, like float16 (under the simulator B is the host array itself, its column-major copy, and the
    bits a launch copies)."""
    itemsize = np.dtype(dtype).itemsize
    simulator = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    kept = 20 + 8 * simulator
    per_b = 8 + itemsize + 2 * itemsize * simulator + 8 * (cuda_torch() is None)
    return int((32 + kept * (1.0 - sparsity)) * m * k) + per_b * k * n + 56 * m * n


def bfloat16_b_on_device() -> bool:
    """Whether a bfloat16 B can stay on the device between launches: PyTorch sees a CUDA device (a
    ``torch.bfloat16`` tensor), or the CUDA simulator runs (device memory is host memory). Otherwise every launch
    would copy it from the host and the copy would be timed."""
    return cuda_torch() is not None or os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def _refused(err: Exception):
    """A launch that raises ``err``: a baseline whose setup refused the problem is recorded with the reason."""
    def launch():
        raise err
    return launch


def vendor_launches(p: Problem, *, coo: bool = True) -> dict:
    """name -> launch for the PyTorch baselines (empty without PyTorch); ``coo=False`` leaves
    cuSPARSE COO out. A sparse conversion PyTorch refuses (a dtype without a cuSPARSE kernel there) gives a
    launch that raises its error, so that :func:`bench_problem` records the reason."""
    torch = cuda_torch()
    if torch is None:
        return {}
    torch.backends.cuda.matmul.allow_tf32 = False
    w = torch_tensor(p.dense, torch).cuda()
    b = torch_tensor(np.ascontiguousarray(p.b_host), torch).cuda()
    conversions = {"cuSPARSE CSR (torch)": (w.to_sparse_csr, torch.matmul)}
    if coo:
        conversions["cuSPARSE COO (torch)"] = (w.to_sparse_coo, torch.sparse.mm)
    out = {}
    for name, (convert, product) in conversions.items():
        try:
            sparse_w = convert()
        except (RuntimeError, TypeError, NotImplementedError) as err:
            out[name] = _refused(err)
            continue
        out[name] = lambda sparse_w=sparse_w, product=product: product(sparse_w, b)
    half = p.dtype in (np.float16, BFLOAT16)
    out["dense cuBLAS (torch" + (", tensor cores)" if half else ", TF32 off)")] = lambda: w @ b
    return out


def spmm_launches(p: Problem) -> dict:
    """Our CSR baselines (sparsekit/gpu/spmm.py) on the same matrix, device-resident."""
    from sparsekit.gpu import spmm as gs
    from sparsekit.formats import CSR
    csr = gs.prepare(CSR.from_dense(p.dense, p.ell.mask()), CSR)
    if p.order != "C":
        return {}
    return {"ours CSR warp/row": lambda: gs.spmm_csr(csr, p.b),
            "ours CSR swizzled": lambda: gs.spmm_csr(csr, p.b, swizzle=True)}


def bench_problem(m, k, n, sparsity, dtype, *, providers=None, vendors=True, repeat=30, seed=0,
                  device="H100", tf32_a=False) -> list[dict]:
    """One record per provider for the problem (see the module docstring). ``vendors``: True for
    every baseline, "fast" for cuSPARSE CSR and dense cuBLAS only, False for none; ``tf32_a``: A's values
    rounded to TF32 numbers (:class:`Problem`)."""
    from sparsekit.gpu.uspmm import uspmm
    from sparsekit.timing import measure
    p = Problem(m, k, n, sparsity, dtype, seed=seed, tf32_a=tf32_a)
    sol = p.sol_s(device)
    from sparsekit.gpu.uspmm import resolved
    launches, chosen = {}, {}
    for name, cfg in (our_providers(dtype) if providers is None else providers).items():
        kw = dict(config=cfg) if isinstance(cfg, str) else dict(cfg)
        layout = kw.pop("layout", "C")
        b = p.b_f if layout == "F" else p.b
        launches[name] = (lambda kw=kw, b=b: uspmm(p.dell, b, **kw))
        if isinstance(cfg, str):                         # what "auto"/"heuristic" chose for this problem
            chosen[name] = config_name(with_precision(resolved(cfg, p.dell, n, layout), p.dell))
    if vendors:
        launches.update(vendor_launches(p, coo=vendors != "fast"))
        if vendors != "fast":
            launches.update(spmm_launches(p))
    records = []
    for name, launch in launches.items():
        rec = dict(m=m, k=k, n=n, sparsity=sparsity, dtype=p.dtype.name, kprime=p.ell.kprime, provider=name)
        if name in chosen:
            rec["config"] = chosen[name]
        try:
            correct = p.correct(to_host(launch()))
            t = measure(launch, repeat=repeat, warmup=2)
        except Exception as err:  # a provider that cannot run this problem: say why, keep going
            records.append(dict(rec, error=f"{type(err).__name__}: {err}"))
            continue
        records.append(dict(rec, median_us=t.median_s * 1e6, p10_us=t.p10_s * 1e6, p90_us=t.p90_s * 1e6,
                            tflops=p.flops / t.median_s / 1e12, sol_us=sol * 1e6,
                            pct_sol=100 * sol / t.median_s, correct=correct))
    base = {r["provider"]: r.get("median_us") for r in records}
    ref = base.get("cuSPARSE CSR (torch)")
    for r in records:
        if ref and r.get("median_us"):
            r["speedup_vs_cusparse_csr"] = ref / r["median_us"]
    return records


def with_precision(cfg: dict, dell) -> dict:
    """``cfg`` with the precision a wgmma setting runs for ``dell`` named (its default ``"auto"`` resolved:
    :func:`sparsekit.gpu.uspmm_wgmma.auto_precision`), so that records say whether bf16 corrections ran; others unchanged."""
    if cfg.get("variant") != "wgmma" or cfg.get("precision", "auto") != "auto":
        return cfg
    from sparsekit.gpu.uspmm_wgmma import auto_precision
    return dict(cfg, precision=auto_precision(dell))


def config_name(cfg: dict) -> str:
    """A short name of a tunables dict, e.g. ``dense_tile cpl4 rpw4 nw8 kc16 mb2 s4`` or ``wgmma bm64 bn128 kc32
    stages6 producers256 tf32+bf16``."""
    short = dict(cols_per_lane="cpl", rows_per_warp="rpw", nwarp="nw", kc="kc", unroll="u", min_blocks="mb",
                 splits="s", vsize="vs", vecsize="vec", precision="")
    return " ".join([cfg.get("variant", "listing1")] + [f"{short.get(key, key)}{val}" for key, val in cfg.items()
                                                         if key != "variant"])


def markdown(records, keys) -> str:
    """``records`` as a GitHub markdown table of the columns ``keys`` (three significant digits; blank where a
    record lacks a column)."""
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
        return str(v)
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(fmt(r.get(k, "")) for k in keys) + " |" for r in records]
    return "\n".join(lines)


#: The columns of ``sparsekit bench uspmm``'s table.
TABLE_KEYS = ["m", "k", "n", "sparsity", "dtype", "provider", "median_us", "p10_us", "p90_us", "tflops",
              "pct_sol", "speedup_vs_cusparse_csr", "correct"]

