"""Autotuner for :func:`sparsekit.gpu.uspmm.uspmm`: time the candidate configurations of a problem, cache the winner.

The router (:mod:`sparsekit.router`) picks a configuration from a table of rules fitted to measurements; this
module makes those measurements by exhaustive search:

* :func:`space` lists the candidate configurations for a dtype and memory order: by default the pipelined kernel's
  :data:`PIPELINED_SHAPES`, the direct kernel's :data:`DIRECT_SHAPES`, the dense-tile kernel's
  :data:`DENSE_TILE_SHAPES`, the K-split :data:`SPLIT_SETTINGS`, the warp-split :data:`WARP_SPLIT_SHAPES` and the
  tensor-core :data:`TC_SETTINGS` (row-major B), the paper's Listing 1 settings ((1, 8) USpMM, (2, 8) USpMM-Vec;
  column-major B); with ``full=True`` Listing 1 over :data:`LISTING1_SHAPES` x vecSize 1, 2, 4 and grids of the
  other kernels' tunables. Configurations whose shared memory or block size the launcher would refuse are left out.
  Half precision adds the TiledBitmap kernel (N <= 64, either order): its defaults and :data:`BITMAP_SHAPES`
  (:func:`bitmap_configs`). bfloat16 runs on three kernels only (:func:`sparsekit.gpu.uspmm.uspmm`): the decode
  and TiledBitmap kernels (N <= 64) and, with a row-major B, the tensor-core :data:`TC_SETTINGS` of float16 (the
  same kernel with the bf16 MMA, whose setting :func:`sparsekit.router.bf16_tensor_core` takes from float16's rules).
* :func:`tune` times every candidate with :func:`sparsekit.timing.measure` (device time, L2 flushed), checks each
  result against the first configuration's (a wrong answer is never a winner), stores the winner in the tune cache
  (:mod:`sparsekit.tune_cache`, keyed by dtype: a float16 winner is never bfloat16's) and returns all records. A
  bfloat16 B stays on the device as a ``torch.bfloat16`` tensor (Numba has no bfloat16 arrays), as in the
  benchmarks (:func:`sparsekit.arrays.half_b_on_device`). ``uspmm(..., config="auto")`` then runs the cached winner
  (:func:`resolve`), else the router's choice (:func:`heuristic`).

A shape below is a tuple of one maker's positional arguments (:func:`pipelined`, :func:`direct`,
:func:`dense_tile`, :func:`warp_split`, :func:`bitmap`); the routed settings are :class:`sparsekit.router.Config`
values, named here also as the keywords of their launchers (``WGMMA_*``, ``TC_*``) and as warp-split shapes
(``WARP_SPLIT_*``).
"""
from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np

from sparsekit import router
from sparsekit.checks import BFLOAT16
from sparsekit.router import Config, heuristic
from sparsekit.tune_cache import cache_path, lookup, problem_key, resolve
from sparsekit.tune_cache import _device_name, _store

__all__ = ["LISTING1_SHAPES", "PIPELINED_SHAPES", "DIRECT_SHAPES", "DENSE_TILE_SHAPES", "SPLIT_SETTINGS",
           "WARP_SPLIT_S1", "WARP_SPLIT_S2", "WARP_SPLIT_S1C2", "WARP_SPLIT_W16", "WARP_SPLIT_W4", "WARP_SPLIT_W1",
           "WARP_SPLIT_SHAPES", "warp_split", "TC_LARGE", "TC_DEFAULT", "TC_ONE_WAVE", "TC_HALF_WAVE",
           "TC_SETTINGS", "BITMAP_SHAPES", "BITMAP_FULL_GRID", "bitmap", "bitmap_fits",
           "bitmap_configs", "tc_small_grid", "tensor_core", "pipelined", "direct", "dense_tile",
           "split_configs", "space", "problem_key", "cache_path", "lookup", "heuristic", "resolve", "tune", "make_ell",
           "WGMMA_LARGE", "WGMMA_MID", "WGMMA_WAVE", "WGMMA_HALF", "WGMMA_QUARTER", "WGMMA_EIGHTH"]
F16, F32 = router.F16, router.F32

#: (NWarp, VSize) pairs searched for Listing 1; (1, 8) and (2, 8) are the paper's.
LISTING1_SHAPES = ((1, 8), (2, 8), (1, 4), (2, 4), (4, 4), (1, 16), (4, 2))
#: The pipelined kernel's settings searched by default, as (cols_per_lane, rows_per_warp, nwarp, kc, unroll,
#: min_blocks): 128- and 256-column tiles of 8 to 32 rows (those that won or came close: experiments/results/uspmm.md).
PIPELINED_SHAPES = ((4, 4, 8, 32, 4, 2), (4, 2, 8, 32, 4, 2), (4, 1, 8, 32, 4, 2), (8, 2, 8, 16, 2, 2),
                    (8, 1, 8, 16, 2, 2))
#: The dense-tile kernel's settings searched by default, as (cols_per_lane, rows_per_warp, nwarp, kc, min_blocks):
#: 32 or 64 rows x 128 or 256 columns a block.
DENSE_TILE_SHAPES = ((4, 8, 8, 16, 2), (4, 8, 4, 16, 2), (4, 4, 8, 16, 2), (8, 4, 8, 16, 1))
#: The direct kernel's settings searched by default, as (cols_per_lane, rows_per_warp, nwarp, unroll).
DIRECT_SHAPES = ((4, 2, 4, 4), (8, 2, 4, 4))


def _splits(splits: int) -> dict:
    """``splits`` as a tunable: absent when the K range is not split."""
    return {} if splits == 1 else dict(splits=splits)


def dense_tile(cpl: int, rpw: int, nwarp: int, kc: int, min_blocks: int, splits: int = 1) -> dict:
    """The tunables of one dense-tile setting (the order of :data:`DENSE_TILE_SHAPES`; ``splits``: the K range of
    each output tile over that many blocks)."""
    return Config("dense_tile", cols_per_lane=cpl, rows_per_warp=rpw, nwarp=nwarp, kc=kc, min_blocks=min_blocks,
                  **_splits(splits)).tunables()


def direct(cpl: int, rpw: int, nwarp: int, unroll: int, splits: int = 1) -> dict:
    """The tunables of one direct setting (the order of :data:`DIRECT_SHAPES`; ``splits``: the K' slots of each
    output tile over that many blocks)."""
    return Config("direct", cols_per_lane=cpl, rows_per_warp=rpw, nwarp=nwarp, unroll=unroll,
                  **_splits(splits)).tunables()


def pipelined(cpl: int, rpw: int, nwarp: int, kc: int, unroll: int, min_blocks: int, splits: int = 1) -> dict:
    """The tunables of one pipelined setting (the order of :data:`PIPELINED_SHAPES`; ``splits``: the K range of
    each output tile over that many blocks)."""
    return Config("pipelined", cols_per_lane=cpl, rows_per_warp=rpw, nwarp=nwarp, kc=kc, unroll=unroll,
                  min_blocks=min_blocks, **_splits(splits)).tunables()


def warp_split(cpl: int, rpw: int, nwarp: int, unroll: int, min_blocks: int = 1) -> dict:
    """The tunables of one warp-split setting (the order of :data:`WARP_SPLIT_SHAPES`)."""
    return Config("warp_split", cols_per_lane=cpl, rows_per_warp=rpw, nwarp=nwarp, unroll=unroll,
                  min_blocks=min_blocks).tunables()


def _warp_split_shape(cfg: Config) -> tuple:
    """A routed warp-split setting as :func:`warp_split`'s arguments."""
    return cfg.cols_per_lane, cfg.rows_per_warp, cfg.nwarp, cfg.unroll, cfg.min_blocks


def tensor_core(**tunables) -> dict:
    """The tunables of a tensor-core setting (:func:`sparsekit.gpu.uspmm_tc.uspmm`; unset ones from its ``DEFAULTS``)."""
    return dict(variant="tensor_core", **tunables)


def tc_small_grid(k: int, tiles: int = 1, sms: int = 132) -> dict:
    """:func:`sparsekit.router.tc_small_grid` as tunables."""
    return router.tc_small_grid(k, tiles, sms).tunables()


#: The routed warp-split settings (:mod:`sparsekit.router`), as :func:`warp_split`'s arguments.
WARP_SPLIT_S1, WARP_SPLIT_S2, WARP_SPLIT_S1C2, WARP_SPLIT_W16, WARP_SPLIT_W4, WARP_SPLIT_W1 = (
    _warp_split_shape(cfg) for cfg in (router.WARP_SPLIT_S1, router.WARP_SPLIT_S2, router.WARP_SPLIT_S1C2,
                                       router.WARP_SPLIT_W16, router.WARP_SPLIT_W4, router.WARP_SPLIT_W1))
#: The warp-split kernel's settings searched by default: the routed ones and 8 columns a lane with 1, 2 and 4 warps
#: (:func:`sparsekit.router.wide_warps`).
WARP_SPLIT_SHAPES = (WARP_SPLIT_S1, WARP_SPLIT_S2, WARP_SPLIT_W16, WARP_SPLIT_S1C2, WARP_SPLIT_W4, WARP_SPLIT_W1,
                     (8, 1, 1, 4, 1), (8, 1, 2, 4, 1), (8, 1, 4, 4, 1))
#: K-split settings searched by default: small-grid shapes of the kernels above with their K range split over 2 to
#: 8 blocks (``splits`` is a launch argument: no extra compilation), for outputs with fewer tiles than SMs.
#: Each entry: (maker name, shape, splits).
SPLIT_SETTINGS = (("dense_tile", (4, 4, 8, 16, 2), 2), ("dense_tile", (4, 4, 8, 16, 2), 4),
                  ("dense_tile", (4, 4, 8, 16, 2), 8), ("dense_tile", (4, 8, 8, 16, 2), 4),
                  ("pipelined", (4, 1, 8, 32, 4, 2), 2), ("pipelined", (4, 1, 8, 32, 4, 2), 4),
                  ("direct", (4, 2, 4, 4), 4), ("direct", (4, 2, 4, 4), 8))


def split_configs() -> list[dict]:
    """The tunables of every :data:`SPLIT_SETTINGS` entry."""
    makers = dict(dense_tile=dense_tile, pipelined=pipelined, direct=direct)
    return [makers[name](*shape, splits=splits) for name, shape, splits in SPLIT_SETTINGS]


#: The routed tensor-core settings (:mod:`sparsekit.router`) per dtype, as :func:`sparsekit.gpu.uspmm_tc.uspmm`'s keywords.
TC_LARGE = {dtype: cfg.keywords() for dtype, cfg in router.TC_LARGE.items()}
TC_DEFAULT = {dtype: router.TC_DEFAULT.keywords() for dtype in (F16, F32)}
TC_ONE_WAVE = {F32: router.TC_ONE_WAVE.keywords()}
TC_HALF_WAVE = {F32: router.TC_HALF_WAVE.keywords()}
#: Tensor-core settings of :func:`space` (row-major B) per dtype: the defaults,
#: :data:`TC_LARGE`, float16 also kc 32 and the small-grid setting with 1, 2 and 4 splits, float32
#: :data:`TC_ONE_WAVE` and :data:`TC_HALF_WAVE`; bfloat16 float16's (the settings the router gives it:
#: :func:`sparsekit.router.bf16_tensor_core`).
TC_SETTINGS = {F16: (TC_DEFAULT[F16], TC_LARGE[F16], dict(bm=64, bn=128, kc=32, warps_m=2, warps_n=4, stages=4))
               + tuple(dict(bm=32, bn=128, kc=64, warps_m=1, warps_n=8, stages=4, min_blocks=2, splits=s)
                       for s in (1, 2, 4)),
               F32: (TC_DEFAULT[F32], TC_LARGE[F32], TC_ONE_WAVE[F32], TC_HALF_WAVE[F32])}
TC_SETTINGS[BFLOAT16] = TC_SETTINGS[F16]
#: The TiledBitmap kernel's block shapes searched by default besides its own (4 x 4 warps, 4-chunk rings), as
#: (rows, slices, stages): 16 warps as 8 x 2, 8 warps as 4 x 2 and 2 x 4 (a 4- or 8-chunk ring), 8 rows of one
#: slice. ``splits`` stays the launcher's, which fills the GPU's resident blocks for each shape (one wave measured
#: best against two: :func:`sparsekit.gpu.spmm_bitmap.default_config`). Seven settings in all, so that bfloat16's
#: default search (14) fits the table ``sparsekit tune`` prints.
BITMAP_SHAPES = ((8, 2, 4), (4, 2, 4), (2, 4, 4), (4, 2, 8), (2, 4, 8), (8, 1, 4))
#: ``full=True``: every (rows, slices, stages) of these whose block the launcher takes (:func:`bitmap_fits`).
BITMAP_FULL_GRID = ((1, 2, 4, 8), (1, 2, 4, 8), (4, 8, 16))


def bitmap(rows: int, slices: int, stages: int) -> dict:
    """The tunables of one TiledBitmap setting (:func:`sparsekit.gpu.spmm_bitmap.spmm_bitmap`): ``rows`` x
    ``slices`` warps a block, rings of ``stages`` chunks, the launcher's ``splits``."""
    return Config("bitmap", rows=rows, slices=slices, stages=stages).tunables()


def bitmap_fits(rows: int, slices: int, stages: int) -> bool:
    """Whether :func:`sparsekit.gpu.spmm_bitmap.spmm_bitmap` launches a block of ``rows`` x ``slices`` warps with
    rings of ``stages`` chunks (:func:`sparsekit.gpu.spmm_bitmap.check_block`)."""
    from sparsekit.gpu.spmm_bitmap import check_block
    try:
        check_block(rows, slices, stages)
    except ValueError:
        return False
    return True


def bitmap_configs(full: bool = False) -> list[dict]:
    """The TiledBitmap settings of :func:`space`: the launcher's defaults (:data:`sparsekit.router.BITMAP`), then
    :data:`BITMAP_SHAPES`, or with ``full`` every other shape of :data:`BITMAP_FULL_GRID` that fits."""
    from sparsekit.gpu.spmm_bitmap import default_config
    default = default_config(16, 32, 8)                     # its block shape and ring are the same for every weight
    own = (default["rows"], default["slices"], default["stages"])
    shapes = itertools.product(*BITMAP_FULL_GRID) if full else BITMAP_SHAPES
    return [router.BITMAP.tunables()] + [bitmap(*shape) for shape in shapes if shape != own and bitmap_fits(*shape)]


#: The routed wgmma settings (:mod:`sparsekit.router`), as :func:`sparsekit.gpu.uspmm_wgmma.uspmm`'s keywords.
WGMMA_LARGE, WGMMA_MID, WGMMA_WAVE, WGMMA_HALF, WGMMA_QUARTER, WGMMA_EIGHTH = (
    cfg.keywords() for cfg in (router.WGMMA_LARGE, router.WGMMA_MID, router.WGMMA_WAVE, router.WGMMA_HALF,
                               router.WGMMA_QUARTER, router.WGMMA_EIGHTH))


def space(dtype, order: str = "C", *, full: bool = False) -> list[dict]:
    """The configurations :func:`tune` tries for ``dtype`` and ``b``'s memory ``order``.

    Default (``full=False``): for a row-major B :data:`PIPELINED_SHAPES`, :data:`DIRECT_SHAPES`,
    :data:`DENSE_TILE_SHAPES` and the K-split :data:`SPLIT_SETTINGS` and :data:`TC_SETTINGS` (Listing 1
    gathers B along its rows there and lost every measured problem, experiments/results/uspmm.md);
    for a column-major B the paper's Listing 1 settings, USpMM (1, 8) and USpMM-Vec (2, 8). A few
    seconds per problem. ``full=True``: Listing 1 over :data:`LISTING1_SHAPES` x vecSize 1, 2, 4
    and the pipelined, direct, dense-tile and warp-split kernels over grids of their tunables.
    Configurations whose shared memory or block size the launcher would refuse are left out.
    bfloat16: the decode kernel, the TiledBitmap settings of :func:`bitmap_configs` (``full`` passed on) and for
    a row-major B its :data:`TC_SETTINGS` (its other kernels refuse it). Half precision (float16 as well, either
    order) ends with the TiledBitmap settings, which take N <= 64 only: past it each is refused by name (a
    record with ``error``).
    """
    from sparsekit.gpu.uspmm import SHARED_LIMIT, WARP_SIZE, dense_tile_shared_bytes, pipelined_shared_bytes
    if np.dtype(dtype) == BFLOAT16:
        return ([router.DECODE.tunables()] + bitmap_configs(full)
                + ([tensor_core(**cfg) for cfg in TC_SETTINGS[BFLOAT16]] if order == "C" else []))
    bitmaps = bitmap_configs(full) if np.dtype(dtype) == F16 else []
    if not full:
        if order != "C":
            return [dict(variant="listing1", nwarp=1, vsize=8, vecsize=1),
                    dict(variant="listing1", nwarp=2, vsize=8, vecsize=2)] + bitmaps
        return ([pipelined(*shape) for shape in PIPELINED_SHAPES] + [direct(*shape) for shape in DIRECT_SHAPES]
                + [dense_tile(*shape) for shape in DENSE_TILE_SHAPES] + split_configs()
                + [warp_split(*shape) for shape in WARP_SPLIT_SHAPES]
                + [tensor_core(**cfg) for cfg in TC_SETTINGS[np.dtype(dtype)]] + bitmaps)
    out = []
    for (nwarp, vsize), vecsize in itertools.product(LISTING1_SHAPES, (1, 2, 4)):
        if vsize * vsize * nwarp * WARP_SIZE * vecsize * 4 <= SHARED_LIMIT:
            out.append(dict(variant="listing1", nwarp=nwarp, vsize=vsize, vecsize=vecsize))
    if order == "C":
        for cpl, rpw, kc, unroll in itertools.product((2, 4, 8), (1, 2, 4, 8), (16, 32), (2, 4)):
            if pipelined_shared_bytes(8 * rpw, cpl, kc) <= SHARED_LIMIT:
                out.append(pipelined(cpl, rpw, 8, kc, unroll, 2))
        for cpl, rpw, nwarp, unroll in itertools.product((4, 8), (1, 2, 4), (4, 8), (2, 4)):
            out.append(direct(cpl, rpw, nwarp, unroll))
        for cpl, rpw, nwarp, kc in itertools.product((4, 8), (4, 8), (4, 8), (8, 16)):
            if dense_tile_shared_bytes(nwarp * rpw, cpl, kc) <= SHARED_LIMIT:
                out.append(dense_tile(cpl, rpw, nwarp, kc, 1))
        for cpl, rpw, nwarp, unroll in itertools.product((2, 4, 8), (1, 2, 4), (1, 2, 4, 8, 16), (4, 8)):
            out.append(warp_split(cpl, rpw, nwarp, unroll))
        out += split_configs() + [tensor_core(**cfg) for cfg in TC_SETTINGS[np.dtype(dtype)]]
    return out + bitmaps



def make_ell(m: int, k: int, sparsity: float, dtype, *, seed: int = 0, index_dtype=np.int32):
    """A random ``m x k`` weight pruned to uniform ``sparsity`` (:func:`sparsekit.prune.uniform`), as ELL."""
    from sparsekit.formats import ELL
    from sparsekit.prune import uniform
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((m, k)).astype(dtype)
    return ELL.from_dense(w, uniform(w, sparsity), index_dtype=index_dtype)


def tune(ell, n: int, *, order: str = "C", configs=None, full: bool = False, repeat: int = 20, seed: int = 0,
         store: bool = True, progress=None) -> tuple[dict, list[dict]]:
    """Time every configuration of :func:`space` (``full`` passed on) and the router's choice for the problem
    (``config="heuristic"``, where the space lacks it: the cached winner never lost to it in the search), or
    ``configs``, on ``ell`` times a random ``K x n`` B; return ``(winner, records)`` and cache the winner. On a
    compute capability 9.0 GPU, float32 with a row-major B, :data:`WGMMA_LARGE`, :data:`WGMMA_MID`,
    :data:`WGMMA_WAVE`, :data:`WGMMA_HALF`, :data:`WGMMA_QUARTER` and :data:`WGMMA_EIGHTH`
    (:mod:`sparsekit.gpu.uspmm_wgmma`) are tried too.

    Each record: the configuration, ``median_us``, ``p10_us``, ``p90_us`` and
    ``correct`` (within float32 accumulation of the first configuration's
    result: all must agree to 1e-3 of ``|A| |B|``, or to the output dtype's
    ``eps`` of it where that is larger: bfloat16's 2**-7, as two sums a
    float32 rounding apart may round to neighbouring bfloat16 values);
    a configuration the launcher refuses gets ``error`` instead of times, and
    a ``ValueError`` names the first refusal when no configuration runs.
    B is a Numba device array, for bfloat16 a ``torch.bfloat16`` CUDA tensor
    (:func:`sparsekit.arrays.half_b_on_device`: PyTorch with CUDA needed).
    Needs a GPU (timing raises ``RuntimeError`` otherwise).
    """
    from numba import cuda

    from sparsekit.arrays import half_b_on_device, to_host
    from sparsekit.gpu.uspmm import prepare, uspmm
    from sparsekit.timing import measure, require_gpu

    require_gpu("sparsekit.tune.tune")
    dell = prepare(ell)
    m, k = dell.shape
    rng = np.random.default_rng(seed)
    b_host = np.asarray(rng.standard_normal((k, n)).astype(dell.dtype), order=order)
    b = half_b_on_device(b_host) if dell.dtype == BFLOAT16 else cuda.to_device(b_host)
    scale = (np.abs(dell.host.to_dense().astype(np.float64)) @ np.abs(b_host.astype(np.float64))).max()
    tolerance = max(1e-3, float(ml_dtypes.finfo(dell.dtype).eps)) * scale
    if configs is None:
        from sparsekit.gpu import uspmm_wgmma
        wgmma = uspmm_wgmma.supported() and order == "C" and dell.dtype == np.float32
        routed = (router.WGMMA_LARGE, router.WGMMA_MID, router.WGMMA_WAVE, router.WGMMA_HALF, router.WGMMA_QUARTER,
                  router.WGMMA_EIGHTH)
        candidates = space(dell.dtype, order, full=full) + ([cfg.tunables() for cfg in routed] if wgmma else [])
        chosen = resolve("heuristic", dell, n, order, wgmma=uspmm_wgmma.supported())
        candidates += [] if chosen in candidates else [chosen]
    else:
        candidates = list(configs)
    records, first = [], None
    for cfg in (candidates if progress is None else progress(candidates)):
        try:
            out = to_host(uspmm(dell, b, **cfg)).astype(np.float64)
        except ValueError as err:            # e.g. a block too big for the register file
            records.append(dict(cfg, error=str(err), correct=False))
            continue
        if first is None:
            first = out
        correct = bool(np.abs(out - first).max() <= tolerance)
        t = measure(lambda: uspmm(dell, b, **cfg), repeat=repeat, warmup=2)
        records.append(dict(cfg, median_us=t.median_s * 1e6, p10_us=t.p10_s * 1e6, p90_us=t.p90_s * 1e6,
                            correct=correct))
    good = [r for r in records if r["correct"]]
    if not good:
        raise ValueError(f"no configuration ran {m} x {k} {dell.dtype.name} times a {k} x {n} B in order {order!r}: "
                         f"{next((r['error'] for r in records if 'error' in r), 'none agreed')}")
    best = min(good, key=lambda r: r["median_us"])
    winner = {key: best[key] for key in candidates[records.index(best)]}
    if store:
        key = problem_key(_device_name(), m, k, n, dell.host.kprime, dell.dtype, dell.host.indices.dtype, order)
        _store(key, dict(config=winner, median_us=best["median_us"]))
    return winner, records
