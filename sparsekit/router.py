"""The USpMM router: the kernel and tunables ``sparsekit.gpu.uspmm.uspmm(..., config="auto")`` runs for a problem.

A configuration is a :class:`Config` (a variant and the tunables it sets). The routing is :data:`RULES`, a table
read top to bottom: the first :class:`Rule` whose condition holds of the :class:`Problem` gives the
configuration, and each rule names the measurement it rests on (a record in ``experiments/results/``, H100 runs:
the thresholds count output tiles against ``sms`` = 132 SMs). :func:`route` evaluates the table and
:func:`heuristic` returns its choice as the keyword tunables of ``sparsekit.gpu.uspmm.uspmm``.

The uniform-sparsity paper fixes (NWarp, VSize) by hand and leaves the choice of kernel to future work
(Section 4.3, "Performance Tuning Opportunities"); this table is that choice, fitted to exhaustive searches
(:func:`sparsekit.tune.tune`). Nothing here imports the kernels: the launchers import the router.
"""
from __future__ import annotations

import functools
import typing
from dataclasses import dataclass, fields, replace
from typing import Callable

import numpy as np

from sparsekit.checks import BFLOAT16

__all__ = ["Config", "CLOSED_TUNABLES", "Problem", "Rule", "RULES", "route", "heuristic", "VARIANTS", "PRECISIONS",
           "DECODE", "BITMAP",
           "LISTING1", "WARP_SPLIT_S1", "WARP_SPLIT_S2", "WARP_SPLIT_S1C2", "WARP_SPLIT_W16", "WARP_SPLIT_W4",
           "WARP_SPLIT_W1", "wide_warps", "TC_LARGE", "TC_DEFAULT", "TC_ONE_WAVE", "TC_HALF_WAVE", "tc_small_grid",
           "DECODE_BF16_MAX_N", "bf16_tensor_core",
           "WGMMA_LARGE", "WGMMA_MID", "WGMMA_WAVE", "WGMMA_HALF", "WGMMA_QUARTER", "WGMMA_EIGHTH"]

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
#: Every variant a configuration may name: ``sparsekit.gpu.uspmm``'s CUDA-core kernels, the tensor-core kernels of
#: ``sparsekit.gpu.uspmm_tc`` and ``sparsekit.gpu.uspmm_wgmma``, the decode path (``sparsekit.gpu.spmm_tiled``'s row kernel)
#: and the weight's entries as a TiledBitmap on tensor cores (``sparsekit.gpu.spmm_bitmap``).
VARIANTS = ("listing1", "pipelined", "direct", "dense_tile", "warp_split", "tensor_core", "wgmma", "decode", "bitmap")
#: The values of the wgmma kernel's ``precision``.
PRECISIONS = ("auto", "3xtf32", "tf32+bf16")


@dataclass(frozen=True)
class Config:
    """One USpMM kernel (``variant``) and the tunables it sets; a tunable left ``None`` is the launcher's default.

    CUDA-core kernels (``sparsekit.gpu.uspmm``): ``nwarp``, ``vsize``, ``vecsize`` (Listing 1's NWarp, VSize, vecSize),
    ``cols_per_lane``, ``rows_per_warp``, ``kc`` (rows of B a shared tile), ``unroll``, ``min_blocks``
    (resident blocks an SM), ``splits`` (the K range of a tile over that many blocks). Tensor-core kernels: ``bm``
    x ``bn`` tiles, ``kc``, ``warps_m`` x ``warps_n`` warps, ``stages``, ``min_blocks``, ``kgroups``,
    ``splits`` (``sparsekit.gpu.uspmm_tc``); ``bm``, ``bn``, ``kc``, ``stages``, ``min_blocks``, ``split``, ``producers``,
    ``precision`` (``sparsekit.gpu.uspmm_wgmma``). The TiledBitmap kernel (``sparsekit.gpu.spmm_bitmap``):
    ``rows`` x ``slices`` warps a block (consecutive 16-row blocks x slices of ``K``), ``splits``, ``stages``
    (:data:`CLOSED_TUNABLES`: the decode and TiledBitmap kernels take no other tunable).
    """

    variant: str
    cols_per_lane: int | None = None
    rows_per_warp: int | None = None
    nwarp: int | None = None
    vsize: int | None = None
    vecsize: int | None = None
    bm: int | None = None
    bn: int | None = None
    kc: int | None = None
    warps_m: int | None = None
    warps_n: int | None = None
    rows: int | None = None
    slices: int | None = None
    stages: int | None = None
    unroll: int | None = None
    min_blocks: int | None = None
    kgroups: int | None = None
    splits: int | None = None
    split: int | None = None
    producers: int | None = None
    precision: str | None = None

    def tunables(self) -> dict:
        """The keyword tunables of ``sparsekit.gpu.uspmm.uspmm``: ``variant``, then every tunable set."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def keywords(self) -> dict:
        """The tunables set, without ``variant``: the keywords of the variant's own launcher."""
        out = self.tunables()
        del out["variant"]
        return out

    @classmethod
    def valid(cls, tunables) -> bool:
        """Whether ``tunables`` is a dict that names a known :data:`VARIANTS` and only :class:`Config`'s tunables,
        each of its type (integers not negative; ``precision`` one of :data:`PRECISIONS`), and for a variant of
        :data:`CLOSED_TUNABLES` only those it takes (``rows`` and ``slices`` are the TiledBitmap kernel's alone)."""
        if not (isinstance(tunables, dict) and tunables.get("variant") in VARIANTS):
            return False
        variant, given = tunables["variant"], set(tunables) - {"variant"}
        if not given <= CLOSED_TUNABLES.get(variant, given) or variant != "bitmap" and given & {"rows", "slices"}:
            return False
        kinds = _kinds()
        for name, value in tunables.items():
            if type(value) is not kinds.get(name) or (type(value) is int and value < 0):
                return False
        return tunables.get("precision", "auto") in PRECISIONS


#: The tunables of the variants whose launchers take no others (``uspmm`` refuses the rest by name): the decode path
#: none, the TiledBitmap kernel ``sparsekit.gpu.spmm_bitmap.TUNABLES``.
CLOSED_TUNABLES = {"decode": frozenset(), "bitmap": frozenset({"rows", "slices", "splits", "stages"})}


@functools.cache
def _kinds() -> dict:
    """Tunable name -> the one type its values have (the annotation without ``None``)."""
    hints = typing.get_type_hints(Config)
    return {name: next(t for t in typing.get_args(hint) or (hint,) if t is not type(None))
            for name, hint in hints.items()}


def _pow2_at_most(x: float) -> int:
    """The largest power of two <= ``x`` (1 when ``x < 2``)."""
    return 1 << (max(int(x), 1).bit_length() - 1)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Problem:
    """What the rules read: ``A`` (``m x k``, ``kprime`` entries a row, ``dtype``) times ``B`` (``k x n`` in
    ``order``) on a device of ``sms`` SMs that runs the wgmma kernel (``wgmma``: compute capability 9.0).
    ``tensor_cores=False`` keeps to the CUDA cores; ``few_columns=False`` leaves out the warp-split kernel."""

    m: int
    k: int
    n: int
    kprime: int
    dtype: np.dtype
    order: str
    sms: int = 132
    tensor_cores: bool = True
    few_columns: bool = True
    wgmma: bool = False

    @property
    def density(self) -> float:
        """``K'/K``."""
        return self.kprime / self.k if self.k else 0.0

    @property
    def half(self) -> bool:
        return self.dtype == F16

    @property
    def col_tiles(self) -> int:
        """Output tiles of 128 columns across ``n``."""
        return _cdiv(self.n, 128)

    def tiles(self, rows: int, cols: int = 128) -> int:
        """Output tiles of ``rows x cols``."""
        return _cdiv(self.m, rows) * _cdiv(self.n, cols)

    @property
    def tensor_dense(self) -> bool:
        """The tensor-core kernels may be routed: ``tensor_cores`` and a density of at least
        :data:`TC_MIN_DENSITY` (they multiply the densified tile, zeros included, at one cost at every density)."""
        return self.tensor_cores and self.density >= TC_MIN_DENSITY[self.dtype]

    @property
    def wgmma_dense(self) -> bool:
        """The wgmma kernel may be routed: ``wgmma``, ``tensor_cores``, float32 and :data:`WGMMA_MIN_DENSITY`."""
        return self.wgmma and self.tensor_cores and not self.half and self.density >= WGMMA_MIN_DENSITY

    @property
    def many_waves(self) -> bool:
        """More than a wave of tensor-core tiles: float16 more than ``sms`` of 32 x 128, float32 at least
        ``TC_FILL * sms`` of 64 x 128."""
        return self.tiles(32) > self.sms if self.half else self.tiles(64) >= TC_FILL * self.sms

    def in_waves(self, low: float, high: float) -> bool:
        """``low * sms < tiles of 64 x 128 <= high * sms``."""
        return low * self.sms < self.tiles(64) <= high * self.sms


# --- the routed settings and thresholds, each with the record it was measured in ---------------------------------

#: float16 up to DECODE_MAX_N columns, bfloat16 up to DECODE_BF16_MAX_N (and with a column-major B or
#: ``tensor_cores=False``: no other kernel takes it there): experiments/results/uspmm_decode.md.
DECODE = Config("decode")
DECODE_MAX_N = 16
#: The widest N of the decode kernel (``sparsekit.gpu.spmm_tiled.MAX_N``); wider bfloat16 products with a row-major B run on
#: the tensor cores (:func:`bf16_tensor_core`).
DECODE_BF16_MAX_N = 64
#: float16 and bfloat16 from N = 8 to BITMAP_MAX_N columns, tensor cores allowed: the weight's entries as a TiledBitmap
#: (``sparsekit.gpu.spmm_bitmap``), whose time depends on the density only (experiments/results/spmm_bitmap.md,
#: H200, Llama shapes): at N = 8 0.76-1.00x dense at 50-70 % where the decode path's row kernel is 0.58-0.88x
#: (uspmm_decode.md), which stays from 75 % (BITMAP_MIN_DENSITY: 1.04-1.7x against 0.90-1.12x); at N = 16-32
#: 0.65-1.04x against 0.09-0.73x; float16 past DECODE_MAX_N up to BITMAP_F16_MAX_DENSITY (measured to 50 %)
#: against the tensor-core kernel's 60-61 us at 4096^2, N = 16-64 (44-48 us at N = 64). Measured on weights of
#: BITMAP_MIN_WEIGHTS entries and more; smaller weights keep the routes below.
BITMAP = Config("bitmap")
BITMAP_MAX_N = 64
BITMAP_MIN_WEIGHTS = 4096 * 4096
BITMAP_MIN_DENSITY = 0.25
#: At N = 16 the row kernel again from 93.75 % sparsity (between the measured 90 and 95 %); at N = 9-15 never (its
#: columns past N take an edge path). bfloat16, us at 4096^2 / 14336x4096 / 4096x14336, the row kernel against
#: TiledBitmap: N = 16 at 95 % 13.6 / 32.2 / 26.5 against 21.7 / 39.5 / 40.4, at 90 % 18.7 / 46.7 / 41.5 against
#: 22.0 / 39.3 / 41.3; N = 12 at 95 % 23.5 / 61.7 / 65.3 against 21.7 / 38.5 / 39.9 (H200; uspmm_decode.md).
#: One edge for every shape: at 4096^2 and 90 % it gives up the row kernel's lead (18.7 against 22.0). The layer's
#: row kernel (:func:`sparsekit.torch.ops.route`) takes the same edge at N = 9-16.
BITMAP_N16_MIN_DENSITY = 1 / 16
BITMAP_F16_MAX_DENSITY = 0.5
#: At N = 1 the decode path (and the layer's, :func:`sparsekit.torch.ops.route`) reads the weight as compact ELL rows
#: (``sparsekit.gpu.spmm_ell_compact``, 3.25 bytes a slot) where a row stores more than this share of K, else as
#: padded ELL rows (``sparsekit.gpu.spmm_ell_rows``, 4 bytes). bfloat16, us at 4096^2 / 14336x4096 / 4096x14336,
#: padded against compact rows (H200; ``bench_sparse_linear --compact``, uspmm_decode.md): 80 % 6.81 / 16.11 / 14.83
#: against 5.83 / 15.20 / 13.38, 50 % 11.07 / 31.56 / 30.01 against 10.09 / 27.18 / 25.94; 90 % 4.06 / 10.40 / 9.20
#: against 4.18 / 10.05 / 8.69, where a layer's extra copy would buy 0-6 %.
COMPACT_MIN_DENSITY = 0.125
#: The copies of its weight a ``sparsekit.torch.SparseLinear`` may keep for inference, by route: compact rows
#: (``N = 1``), the TiledBitmap (``N = 8-64``), cuSPARSELt's compressed 2:4 buffer (a 2:4 weight past 32 rows).
INFERENCE_COPIES = ("compact", "bitmap", "cusparselt")


def compact_wins(stored: int, k: int, m: int) -> bool:
    """Whether the ``N = 1`` product of ``m`` rows reads compact rows: rows of ``stored`` entries (rounded up to 8,
    as padded ELL rows hold them) of ``k`` columns hold more than :data:`COMPACT_MIN_DENSITY` of them, and the
    compact kernel's 32-bit slot indices reach every slot (the padded rows' kernel indexes in 64 bits)."""
    width = -(-stored // 8) * 8
    return width > COMPACT_MIN_DENSITY * k and m * width <= 2**31 - 1
#: Column-major B: Listing 1 with the paper's USpMM setting (NWarp, VSize) = (1, 8) (Section 4.3).
LISTING1 = Config("listing1", nwarp=1, vsize=8, vecsize=1)

#: Warp-split settings of few columns: experiments/results/uspmm.md ("small-N kernel", "CUDA-core latency").
WARP_SPLIT_S1 = Config("warp_split", cols_per_lane=4, rows_per_warp=1, nwarp=8, unroll=4, min_blocks=1)
WARP_SPLIT_S2 = Config("warp_split", cols_per_lane=4, rows_per_warp=1, nwarp=4, unroll=8, min_blocks=6)
WARP_SPLIT_S1C2 = replace(WARP_SPLIT_S1, cols_per_lane=2)
WARP_SPLIT_W16 = replace(WARP_SPLIT_S1, nwarp=16)
WARP_SPLIT_W4 = replace(WARP_SPLIT_S1, nwarp=4)
WARP_SPLIT_W1 = replace(WARP_SPLIT_S1, nwarp=1)


def wide_warps(m: int, n: int) -> Config:
    """Warp split with 8 columns a lane and about 2048 warps in the grid (``nwarp`` a power of two from 1 to 4):
    experiments/results/uspmm.md ("CUDA-core latency")."""
    return replace(WARP_SPLIT_S1, cols_per_lane=8, nwarp=min(4, _pow2_at_most(2048 * 256 / (m * n))))


#: Tensor cores from these densities (float16 95% measured, float32 85%): experiments/results/uspmm_tc.md.
TC_MIN_DENSITY = {F16: 0.045, F32: 0.14}
TC_FILL = 0.7                  # float32 grids from 0.7 waves of 64 x 128 tiles: experiments/results/uspmm_tc.md
TC_MIN_K = 512                 # small grids on tensor cores from this K: experiments/results/uspmm_tc.md
#: At least ``sms`` tiles of 64 x 256: experiments/results/uspmm_tc.md ("grids of many waves", "float32 lean").
TC_LARGE = {F16: Config("tensor_core", bm=64, bn=256, kc=32, warps_m=2, warps_n=4, stages=4, min_blocks=2),
            F32: Config("tensor_core", bm=64, bn=256, kc=16, warps_m=1, warps_n=4, stages=4)}
#: The defaults: experiments/results/uspmm_tc.md (float32), experiments/results/gpu_verification.md (float16).
TC_DEFAULT = Config("tensor_core")
#: float32 grids of at most one wave, four K groups: experiments/results/uspmm_tc.md ("K groups", "float32 lean").
TC_ONE_WAVE = Config("tensor_core", bm=64, bn=128, kc=32, warps_m=1, warps_n=2, stages=4, min_blocks=1, kgroups=4)
#: float32 grids of half a wave: the one-wave setting with K split in two: experiments/results/uspmm_tc.md.
TC_HALF_WAVE = replace(TC_ONE_WAVE, splits=2)


def tc_small_grid(k: int, tiles: int = 1, sms: int = 132) -> Config:
    """float16 grids of at most a wave (``tiles`` of 32 x 128 on ``sms`` SMs): 32 x 128 tiles at two blocks an SM,
    K split so that a split keeps 8 or more chunks of 64, at most 4 splits and within one wave:
    experiments/results/uspmm_tc.md ("K split")."""
    return Config("tensor_core", bm=32, bn=128, kc=64, warps_m=1, warps_n=8, stages=4, min_blocks=2,
                  splits=max(1, min(4, _cdiv(k, 64) // 8, sms // max(tiles, 1))))


#: The wgmma kernel from this density (float32; 90% won, 95% lost): experiments/results/uspmm_wgmma.md.
WGMMA_MIN_DENSITY = 0.09
WGMMA_MID_WAVES = 1.5          # WGMMA_MID from 1.5 waves of 64 x 128 tiles: experiments/results/uspmm_wgmma.md
WGMMA_SPLIT_MIN_K = 256        # the wgmma K splits from this K: experiments/results/uspmm_wgmma.md
WGMMA_EIGHTH_MIN_DENSITY = 0.29                # (70% sparsity: K' = 230 of 768 is 0.2995)
#: At least ``TC_FILL * sms`` tiles of 128 x 256: experiments/results/uspmm_wgmma.md ("Where it wins").
WGMMA_LARGE = Config("wgmma", bm=128, bn=256, kc=16, stages=4)
#: At least ``WGMMA_MID_WAVES * sms`` tiles of 64 x 128: experiments/results/uspmm_wgmma.md ("Smaller grids").
WGMMA_MID = Config("wgmma", bm=64, bn=128, kc=16, stages=4)
#: One wave or less, warp specialised, 6 stages: experiments/results/uspmm_wgmma.md ("Warp specialised").
WGMMA_WAVE = Config("wgmma", bm=64, bn=128, kc=32, stages=6, producers=256)
#: A quarter to half a wave, K split in two: experiments/results/uspmm_wgmma.md ("Split K").
WGMMA_HALF = Config("wgmma", bm=64, bn=128, kc=32, stages=4, split=2)
#: An eighth to a quarter of a wave, N >= 256, K split in four: experiments/results/uspmm_wgmma.md ("Split K").
WGMMA_QUARTER = Config("wgmma", bm=64, bn=128, kc=16, stages=4, min_blocks=2, split=4)
#: One column tile, 0.7/8 to 1/4 of a wave, K split in eight: experiments/results/uspmm_wgmma.md ("K split in eight").
WGMMA_EIGHTH = Config("wgmma", bm=64, bn=128, kc=16, stages=4, min_blocks=2, split=8)

#: CUDA-core settings of grids that fill the GPU: experiments/results/uspmm.md (tuning runs, float32 and float16).
DIRECT = Config("direct", cols_per_lane=4, rows_per_warp=2, nwarp=4, unroll=4)
DIRECT_HALF = replace(DIRECT, cols_per_lane=8)            # 16-byte reads of a float16 B
DENSE_TILE_64 = Config("dense_tile", cols_per_lane=4, rows_per_warp=8, nwarp=8, kc=16, min_blocks=2)
DENSE_TILE_32 = replace(DENSE_TILE_64, rows_per_warp=4)
#: The K-split kernels of smaller grids: experiments/results/uspmm.md (K-split exploration).
PIPELINED_8 = Config("pipelined", cols_per_lane=4, rows_per_warp=1, nwarp=8, kc=32, unroll=4, min_blocks=2)


def _unsplit(splits: int) -> int | None:
    """``splits`` as a tunable: unset when the K range is not split."""
    return None if splits == 1 else splits


def _direct_split(p: Problem) -> Config:
    """The direct kernel on 8 x 128 tiles, K' split up to 16 ways: about 1024 / tiles, 12 slots a split or more."""
    return replace(DIRECT, splits=_unsplit(min(16, _pow2_at_most(1024 / p.tiles(8)), _pow2_at_most(p.kprime / 12))))


def _dense_tile_split(p: Problem) -> Config:
    """32 x 128 blocks, K split up to 8 ways: about ``2 * sms`` blocks, 192 rows of B a split or more."""
    return replace(DENSE_TILE_32, splits=_unsplit(min(8, _pow2_at_most(2 * p.sms / p.tiles(32)),
                                                     _pow2_at_most(p.k / 192))))


def _pipelined_split(p: Problem) -> Config:
    """The pipelined kernel on 8-row blocks, K split up to 8 ways: about 256 blocks."""
    return replace(PIPELINED_8, splits=_unsplit(min(8, _pow2_at_most(256 / p.tiles(8)),
                                                    _pow2_at_most(_cdiv(p.k, 32)))))


# --- the table ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    """Where ``when(problem)`` holds, ``then`` (a :class:`Config`, or a function of the problem giving one);
    ``measured``: the record in ``experiments/results/`` the rule rests on."""

    when: Callable[[Problem], bool]
    then: Config | Callable[[Problem], Config]
    measured: str

    def config(self, p: Problem) -> Config:
        return self.then if isinstance(self.then, Config) else self.then(p)


def _few(p: Problem, half: bool, *ns: int) -> bool:
    """The warp-split kernel's domain: ``few_columns``, a float16 (``half``) or float32 B, and ``n`` one of ``ns``
    (a column tile reaching past ``N`` takes an edge path 2.4-3.7x slower, hence exact values)."""
    return p.few_columns and p.half == half and p.n in ns


def _bitmap(p: Problem) -> bool:
    """Half precision at 8 <= N <= :data:`BITMAP_MAX_N`, tensor cores allowed, where :data:`BITMAP` was measured
    faster than the row kernel and float16's tensor-core kernel."""
    return (p.tensor_cores and (p.half or p.dtype == BFLOAT16) and 8 <= p.n <= BITMAP_MAX_N
            and p.m * p.k >= BITMAP_MIN_WEIGHTS and (p.n > 8 or p.density >= BITMAP_MIN_DENSITY)
            and (p.n != DECODE_MAX_N or p.density > BITMAP_N16_MIN_DENSITY)
            and (p.dtype == BFLOAT16 or p.n <= DECODE_MAX_N or p.density <= BITMAP_F16_MAX_DENSITY))


def _bf16_wide(p: Problem) -> bool:
    """bfloat16 past the decode kernel's N with a row-major B, tensor cores allowed: :func:`bf16_tensor_core`."""
    return p.dtype == BFLOAT16 and p.n > DECODE_BF16_MAX_N and p.order == "C" and p.tensor_cores


def bf16_tensor_core(p: Problem) -> Config:
    """The tensor-core setting float16 gets for ``p``'s shape, N and density. bfloat16 runs ``sparsekit.gpu.uspmm_tc``'s
    float16 kernel with the bf16 MMA (the same tiles, shared memory and instructions), so float16's measurements
    choose its setting: the first rule of :data:`RULES` holding of the float16 problem whose setting is a
    tensor-core one (the CUDA-core rules are passed over: none of those kernels takes bfloat16). Where none holds
    (float16 keeps to the CUDA cores there: a density under ``TC_MIN_DENSITY``, or at most a wave of tiles and K
    under ``TC_MIN_K``), float16's tensor-core setting for the grid without those thresholds: the defaults over
    many waves, else the small-grid setting (:func:`tc_small_grid`)."""
    half = replace(p, dtype=F16)
    for rule in RULES:
        if rule.when(half):
            config = rule.config(half)
            if config.variant == "tensor_core":
                return config
    return TC_DEFAULT if half.many_waves else tc_small_grid(p.k, p.tiles(32), p.sms)


RULES = (
    # every dtype and order
    Rule(_bitmap, BITMAP, "spmm_bitmap.md: 14336x4096 80 % N = 32 48.9 us against the row kernel's 167.8 (uspmm_decode.md)"),
    Rule(_bf16_wide, bf16_tensor_core, "uspmm_tc.md: float16's tensor-core rules below (the same kernel, bf16 MMA)"),
    Rule(lambda p: p.dtype == BFLOAT16 or (p.half and p.n <= DECODE_MAX_N), DECODE, "uspmm_decode.md"),
    Rule(lambda p: p.order != "C", LISTING1, "uspmm.md: the one kernel of a column-major B"),
    # row-major B; float32 on the wgmma kernel ahead of the warp-split kernel
    Rule(lambda p: p.wgmma_dense and p.k >= WGMMA_SPLIT_MIN_K and p.in_waves(1 / 8, 1 / 4) and p.n >= 256,
         WGMMA_QUARTER, "uspmm_wgmma.md: 256 x 256 x 1024 12.8 us against 14.1"),
    Rule(lambda p: (p.wgmma_dense and p.col_tiles == 1 and 0.7 * p.sms <= 8 * p.tiles(64) <= 2 * p.sms
                    and p.k >= 768 and p.density >= WGMMA_EIGHTH_MIN_DENSITY),
         WGMMA_EIGHTH, "uspmm_wgmma.md: 1024^2 x 128 60% 15.2 us against 18.1"),
    Rule(lambda p: p.wgmma_dense and p.in_waves(1 / 2, 1), WGMMA_WAVE, "uspmm_wgmma.md: 1024^3 60% 33.9 us"),
    # few columns: the warp-split kernel; float32 ...
    Rule(lambda p: _few(p, False, 64) and p.m <= 2048, WARP_SPLIT_S1C2, "uspmm.md (small-N kernel)"),
    Rule(lambda p: _few(p, False, 128) and p.k <= 1024 and p.m <= 128 and p.kprime >= 104, WARP_SPLIT_W16,
         "uspmm.md (CUDA-core latency): 128^3 6.0 us against 6.3"),
    Rule(lambda p: _few(p, False, 128) and p.k <= 1024 and 512 < p.m <= 1024 and p.kprime >= 256, WARP_SPLIT_W4,
         "uspmm.md (CUDA-core latency): 1024^2 x 128 60% 18.2 us against 22.5"),
    Rule(lambda p: (_few(p, False, 256, 1024) and p.k <= 1024
                    and ((p.n == 256 and 512 < p.m <= 1024) or (p.n == 1024 and p.m <= 256))),
         lambda p: wide_warps(p.m, p.n), "uspmm.md (CUDA-core latency)"),
    Rule(lambda p: (_few(p, False, 1024) and p.k <= 1024 and 512 < p.m <= 1024
                    and p.density < TC_MIN_DENSITY[F32]),
         WARP_SPLIT_W1, "uspmm.md (CUDA-core latency): 1024^3 90% 41.0 us against 60.3"),
    Rule(lambda p: _few(p, False, 128, 256) and p.m <= 1024, WARP_SPLIT_S1, "uspmm.md (small-N kernel)"),
    Rule(lambda p: _few(p, False, 128, 256) and p.m <= 4096 and (p.density < 0.3 or p.m * p.k <= 2_500_000),
         WARP_SPLIT_S2, "uspmm.md (small-N kernel)"),
    # ... and float16
    Rule(lambda p: _few(p, True, 128) and (p.m <= 768 or (p.m <= 1024 and p.density < 0.31)), WARP_SPLIT_S1,
         "uspmm.md (small-N kernel)"),
    Rule(lambda p: _few(p, True, 128) and p.m <= 1536 and p.density < 0.3, WARP_SPLIT_S2, "uspmm.md (small-N kernel)"),
    Rule(lambda p: _few(p, True, 256) and p.m <= 512 and p.density < 0.3, WARP_SPLIT_S1, "uspmm.md (small-N kernel)"),
    # float32 on the wgmma kernel, larger and half-wave grids
    Rule(lambda p: p.wgmma_dense and p.tiles(128, 256) >= TC_FILL * p.sms, WGMMA_LARGE,
         "uspmm_wgmma.md: 1024 x 1024 x 16384 60% 511.1 us against 573.0"),
    Rule(lambda p: p.wgmma_dense and p.tiles(64) >= WGMMA_MID_WAVES * p.sms, WGMMA_MID,
         "uspmm_wgmma.md: 1024 x 1024 x 2048 60% 81.3 us against 98.9"),
    Rule(lambda p: p.wgmma_dense and p.k >= WGMMA_SPLIT_MIN_K and p.in_waves(1 / 4, 1 / 2), WGMMA_HALF,
         "uspmm_wgmma.md: 512 x 512 x 1024 60% 19.4 us against 27.5"),
    # mma.sync tensor cores (gpu.uspmm_tc)
    Rule(lambda p: p.tensor_dense and p.many_waves and p.tiles(64, 256) >= p.sms, lambda p: TC_LARGE[p.dtype],
         "uspmm_tc.md (grids of many waves)"),
    Rule(lambda p: p.tensor_dense and p.many_waves and not p.half and p.tiles(64) <= p.sms, TC_ONE_WAVE,
         "uspmm_tc.md (K groups): 1024^3 60% 60.8 us against 70.2"),
    Rule(lambda p: (p.tensor_dense and p.many_waves and not p.half
                    and p.tiles(64, 256) >= TC_FILL * p.sms), TC_LARGE[F32],
         "uspmm_tc.md: 1024 x 1024 x 2048 102.0 us against 110.4"),
    Rule(lambda p: p.tensor_dense and p.many_waves, TC_DEFAULT,
         "uspmm_tc.md: float16 1024^3 60% 29.9 us against 107.7"),
    Rule(lambda p: p.tensor_dense and p.half and p.k >= TC_MIN_K, lambda p: tc_small_grid(p.k, p.tiles(32), p.sms),
         "uspmm_tc.md (K split)"),
    Rule(lambda p: p.tensor_dense and not p.half and p.k >= TC_MIN_K and p.in_waves(1 / 4, 1 / 2), TC_HALF_WAVE,
         "uspmm_tc.md: 512 x 512 x 1024 60% 27.8 us against 30.6"),
    # CUDA cores: grids of at least 0.75 waves of 32 x 128 tiles ...
    Rule(lambda p: p.tiles(32) >= 0.75 * p.sms and p.half and p.density < 0.25, DIRECT_HALF,
         "uspmm.md (float16 tuning run)"),
    Rule(lambda p: p.tiles(32) >= 0.75 * p.sms and not p.half and p.density < 0.18, DIRECT,
         "uspmm.md (float32 tuning run): 1024^3 95% 35.9 us"),
    Rule(lambda p: p.tiles(32) >= 0.75 * p.sms and p.tiles(64) >= (2 if p.half else 0.75) * p.sms, DENSE_TILE_64,
         "uspmm.md (tuning runs): 1024^3 60% 89.5 us"),
    Rule(lambda p: p.tiles(32) >= 0.75 * p.sms, DENSE_TILE_32, "uspmm.md (tuning runs)"),
    # ... and smaller grids, the K range split over blocks
    Rule(lambda p: p.density < 0.1, _direct_split, "uspmm.md (K-split exploration)"),
    Rule(lambda p: ((p.k >= 512 and p.density >= 0.3 and p.tiles(8) >= 96)
                    or (p.k >= 1024 and p.density < 0.3 and p.tiles(8) >= 256)), _dense_tile_split,
         "uspmm.md (K-split exploration): 1024^2 x 128 60% 33.6 us, unsplit 71.2"),
    Rule(lambda p: p.k >= 1024 and p.density < 0.3 and p.tiles(8) >= 64, _direct_split,
         "uspmm.md (K-split exploration)"),
    Rule(lambda p: True, _pipelined_split, "uspmm.md (K-split exploration): 128^3 10.7 us with 4 splits"),
)


def route(p: Problem) -> Config:
    """The configuration of the first rule of :data:`RULES` that holds of ``p``."""
    return next(rule.config(p) for rule in RULES if rule.when(p))


def heuristic(m: int, k: int, n: int, kprime: int, dtype, order: str, *, sms: int = 132,
              tensor_cores: bool = True, few_columns: bool = True, wgmma: bool = False) -> dict:
    """:func:`route`'s choice for the problem (:class:`Problem`'s fields), as ``sparsekit.gpu.uspmm.uspmm``'s tunables."""
    return route(Problem(m, k, n, kprime, np.dtype(dtype), order, sms, tensor_cores, few_columns, wgmma)).tunables()
