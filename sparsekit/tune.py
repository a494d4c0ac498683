"""Autotuner for :func:`gpu.uspmm.uspmm`: pick the variant and tunables per problem.

The uniform-sparsity paper fixes (NWarp, VSize) by hand and leaves the choice
between USpMM and USpMM-Vec to future work (Section 4.3, "Performance Tuning
Opportunities"). This module is that work, done by exhaustive search:

* :func:`space` lists the candidate configurations for a dtype and memory
  order: by default the tiled kernel's best setting, the pipelined kernel's
  :data:`PIPELINED_SHAPES`, the direct kernel's :data:`DIRECT_SHAPES` and the
  dense-tile kernel's :data:`DENSE_TILE_SHAPES` (row-major B), the paper's Listing 1 settings ((1, 8) USpMM, (2, 8)
  USpMM-Vec; column-major B);
  with ``full=True`` Listing 1 over :data:`LISTING1_SHAPES` x vecSize 1, 2, 4
  and grids of the other kernels' tunables. Configurations whose shared memory or block
  size the launcher would refuse are left out.
* :func:`tune` times every candidate with :func:`sparsekit.timing.measure`
  (device time, L2 flushed), checks each result against the best
  configuration's (a wrong answer is never a winner), stores the winner in a
  JSON cache and returns all records.
* The cache (``$SPARSEKIT_TUNE_CACHE`` or ``~/.cache/sparsekit/uspmm.json``)
  is keyed by device name and problem: ``M, K, N, K', dtype, index dtype,
  memory order of B``. :func:`resolve` serves ``uspmm(..., config="auto")``:
  the cached winner when there is one, else :func:`heuristic`.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import itertools
import json
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np

from sparsekit.checks import BFLOAT16

__all__ = ["LISTING1_SHAPES", "PIPELINED_SHAPES", "DIRECT_SHAPES", "DENSE_TILE_SHAPES", "SPLIT_SETTINGS",
           "WARP_SPLIT_S1", "WARP_SPLIT_S2", "WARP_SPLIT_S1C2", "WARP_SPLIT_W16", "WARP_SPLIT_W4", "WARP_SPLIT_W1",
           "WARP_SPLIT_SHAPES", "warp_split", "wide_warps", "small_n",
           "TC_MIN_DENSITY", "TC_FILL", "TC_MIN_K", "TC_LARGE", "TC_DEFAULT", "TC_ONE_WAVE", "TC_HALF_WAVE", "TC_SETTINGS", "tc_small_grid",
           "tensor_core", "pipelined", "direct", "dense_tile", "split_configs", "space", "problem_key", "cache_path", "lookup", "heuristic", "resolve",
           "tune", "make_ell"]
__all__ += ["WGMMA_LARGE", "WGMMA_MIN_DENSITY", "WGMMA_MID", "WGMMA_MID_WAVES", "WGMMA_WAVE",
            "WGMMA_HALF", "WGMMA_QUARTER", "WGMMA_SPLIT_MIN_K", "WGMMA_EIGHTH", "WGMMA_EIGHTH_MIN_DENSITY"]

#: (NWarp, VSize) pairs searched for Listing 1; (1, 8) and (2, 8) are the paper's.
LISTING1_SHAPES = ((1, 8), (2, 8), (1, 4), (2, 4), (4, 4), (1, 16), (4, 2))


#: The pipelined kernel's settings searched by default, as (cols_per_lane, rows_per_warp, nwarp, kc,
#: unroll, min_blocks): 128- and 256-column tiles of 8 to 32 rows (the shapes that won or came
#: close on the H100, experiments/results/uspmm.md; the full grid is ``space(..., full=True)``).
PIPELINED_SHAPES = ((4, 4, 8, 32, 4, 2), (4, 2, 8, 32, 4, 2), (4, 1, 8, 32, 4, 2), (8, 2, 8, 16, 2, 2),
                    (8, 1, 8, 16, 2, 2))
#: The dense-tile kernel's settings searched by default, as (cols_per_lane, rows_per_warp, nwarp, kc,
#: min_blocks): 32 or 64 rows x 128 or 256 columns a block.
DENSE_TILE_SHAPES = ((4, 8, 8, 16, 2), (4, 8, 4, 16, 2), (4, 4, 8, 16, 2), (8, 4, 8, 16, 1))


def _with_splits(cfg: dict, splits: int) -> dict:
    """``cfg`` with ``splits`` added when the K range is split (absent means 1)."""
    return cfg if splits == 1 else dict(cfg, splits=splits)


def dense_tile(cpl: int, rpw: int, nwarp: int, kc: int, min_blocks: int, splits: int = 1) -> dict:
    """The tunables of one dense-tile setting (the order of :data:`DENSE_TILE_SHAPES`; ``splits``:
    the K range of each output tile over that many blocks)."""
    return _with_splits(dict(variant="dense_tile", cols_per_lane=cpl, rows_per_warp=rpw, nwarp=nwarp, kc=kc,
                             min_blocks=min_blocks), splits)


#: The direct kernel's settings searched by default, as (cols_per_lane, rows_per_warp, nwarp, unroll).
DIRECT_SHAPES = ((4, 2, 4, 4), (8, 2, 4, 4))


def direct(cpl: int, rpw: int, nwarp: int, unroll: int, splits: int = 1) -> dict:
    """The tunables of one direct setting (the order of :data:`DIRECT_SHAPES`; ``splits``: the K'
    slots of each output tile over that many blocks)."""
    return _with_splits(dict(variant="direct", cols_per_lane=cpl, rows_per_warp=rpw, nwarp=nwarp, unroll=unroll),
                        splits)


def pipelined(cpl: int, rpw: int, nwarp: int, kc: int, unroll: int, min_blocks: int, splits: int = 1) -> dict:
    """The tunables of one pipelined setting (the order of :data:`PIPELINED_SHAPES`; ``splits``: the
    K range of each output tile over that many blocks)."""
    return _with_splits(dict(variant="pipelined", cols_per_lane=cpl, rows_per_warp=rpw, nwarp=nwarp, kc=kc,
                             unroll=unroll, min_blocks=min_blocks), splits)


#: The warp-split kernel's settings searched by default, as (cols_per_lane, rows_per_warp, nwarp, unroll,
#: min_blocks): :data:`WARP_SPLIT_S1`, :data:`WARP_SPLIT_S2`, 16 warps (:data:`WARP_SPLIT_W16`, the winner at M <= 128 with K >= 576)
#: and S1 with 2 columns a lane (N = 64); together within 11% of every winner of "Session 5, small-N kernel"
#: in experiments/results/uspmm.md.
#: Session 6 added the float32 settings of few warps a block: :data:`WARP_SPLIT_W16` (16 warps),
#: :data:`WARP_SPLIT_W4` and :data:`WARP_SPLIT_W1` (4 warps, 1), and 8 columns a lane with 1, 2 and 4 warps
#: (:func:`wide_warps`).
WARP_SPLIT_S1 = (4, 1, 8, 4, 1)
WARP_SPLIT_S2 = (4, 1, 4, 8, 6)
WARP_SPLIT_S1C2 = (2,) + WARP_SPLIT_S1[1:]          # S1 with 2 columns a lane (N = 64)
WARP_SPLIT_W16 = (4, 1, 16, 4, 1)
WARP_SPLIT_W4 = (4, 1, 4, 4, 1)
WARP_SPLIT_W1 = (4, 1, 1, 4, 1)
WARP_SPLIT_SHAPES = (WARP_SPLIT_S1, WARP_SPLIT_S2, WARP_SPLIT_W16, WARP_SPLIT_S1C2, WARP_SPLIT_W4, WARP_SPLIT_W1,
                     (8, 1, 1, 4, 1), (8, 1, 2, 4, 1), (8, 1, 4, 4, 1))


def warp_split(cpl: int, rpw: int, nwarp: int, unroll: int, min_blocks: int = 1) -> dict:
    """The tunables of one warp-split setting (the order of :data:`WARP_SPLIT_SHAPES`)."""
    return dict(variant="warp_split", cols_per_lane=cpl, rows_per_warp=rpw, nwarp=nwarp, unroll=unroll,
                min_blocks=min_blocks)


def wide_warps(m: int, n: int) -> dict:
    """The float32 warp-split setting of 8 columns a lane (256-column tiles) with about 2048 warps in the
    grid: ``nwarp`` = 2048 / (``M`` x ``N`` / 256) as a power of two from 1 to 4. It names the fastest
    setting of "Session 6, CUDA-core latency" (experiments/results/uspmm.md, call 3, 60%) at each of its
    five problems of 256-column tiles: 128 x 128 x 1024 4 warps (7.6 us), 256 x 256 x 1024 2 (14.1),
    1024 x 1024 x 256 2 (28.4), 512 x 512 x 1024 1 (35.1), 1024 x 1024 x 512 1 (53.2)."""
    return warp_split(8, 1, min(4, _pow2_at_most(2048 * 256 / (m * n))), 4, 1)


def small_n(m: int, k: int, n: int, kprime: int, half: bool) -> dict | None:
    """The warp-split choice for a row-major ``B`` of few columns (``N`` = 64, 128 or 256; float32 also
    ``N = 1024`` at small ``M`` or low density: the values measured), or None where another kernel
    measured faster or nothing was measured.

    The kernel (:func:`gpu.uspmm._warp_split_kernel`) keeps each output tile in one block and splits
    every row's K' entries over the block's warps, so small grids need no K split over blocks (whose
    hand-over left the SMs idle 43% of the time at 512 x 1024 x 128). Its column tile is 32 lanes x
    ``cols_per_lane``; a tile reaching past ``N`` takes an element-by-element edge path 2.4-3.7x slower,
    hence the exact ``N`` values. With ``d = K'/K`` (S1, S2: :data:`WARP_SPLIT_S1`, :data:`WARP_SPLIT_S2`):

    * float32: ``N = 64`` and ``M <= 2048``: S1 with 2 columns a lane; ``N`` = 128 or 256: S1 for
      ``M <= 1024``, S2 for ``M <= 4096`` with ``d < 0.3`` or ``M K <= 2.5e6``; but (session 6, ``K <=
      1024``, below) ``N = 128``: 16 warps at ``M <= 128`` with ``K' >= 104``, 4 warps
      (:data:`WARP_SPLIT_W4`) at ``512 < M <= 1024`` with ``K' >= 256``; ``N = 256`` at ``512 < M <= 1024``
      and ``N = 1024`` at ``M <= 256``: :func:`wide_warps`; ``N = 1024``, ``512 < M <= 1024`` and
      ``d`` under :data:`TC_MIN_DENSITY`: one warp a block (:data:`WARP_SPLIT_W1`);
    * float16: ``N = 128``: S1 for ``M <= 768``, or ``M <= 1024`` with ``d < 0.31``; S2 for ``M <= 1536``
      with ``d < 0.3``; ``N = 256``: S1 for ``M <= 512`` with ``d < 0.3``. Elsewhere the tensor cores
      measured faster (``N = 64``, ``M >= 2048``, density 0.4 above ``M = 1024``).

    "Session 5, small-N kernel" (H100, calls of 05:26 and 05:36 UTC): over its 90 rows (45 problems x 2
    dtypes) this choice is never slower than the earlier heuristic's nor than cuSPARSE CSR, and within 12%
    of the fastest time measured but at 768^2 x 128 60% float32 (S1 16.9 us, S2 14.4) and 128 x 1152 float16
    (S1 8.0, 16 warps 6.8). E.g. float32 512 x 1024 x 128 81%: 9.7 us against 30.0 (cuSPARSE 21.1).
    """
    density = kprime / k if k else 0.0
    if not half:
        if n == 64:
            return warp_split(*WARP_SPLIT_S1C2) if m <= 2048 else None
        chosen = _few_warps(m, k, n, kprime, density)
        if chosen is not None:
            return chosen
        if n in (128, 256):
            if m <= 1024:
                return warp_split(*WARP_SPLIT_S1)
            if m <= 4096 and (density < 0.3 or m * k <= 2_500_000):
                return warp_split(*WARP_SPLIT_S2)
        return None
    if n == 128:
        if m <= 768 or (m <= 1024 and density < 0.31):
            return warp_split(*WARP_SPLIT_S1)
        if m <= 1536 and density < 0.3:
            return warp_split(*WARP_SPLIT_S2)
    if n == 256 and m <= 512 and density < 0.3:
        return warp_split(*WARP_SPLIT_S1)
    return None


def _few_warps(m: int, k: int, n: int, kprime: int, density: float) -> dict | None:
    """float32, ``K <= 1024``: the warp-split settings of few warps that "Session 6, CUDA-core latency"
    (experiments/results/uspmm.md, H100, calls 2-3 of 07:52 and 07:59 UTC) measured fastest, in us against
    the earlier choice of the same call: 128^3 at 5-15% 16 warps 6.0 against S1's 6.3-6.4 (equal from
    20%); 768^2 x 128 and 1024^2 x 128 60% 4 warps 13.7 and 18.2 against 17.2 and 22.5 (call 2); 1024^3 at 90% and
    95% one warp 41.0 and 27.6 against the direct kernel's 60.3 and 35.8; :func:`wide_warps` at 128 x 128 x
    1024, 256 x 256 x 1024 and 1024 x 1024 x 256. Not where another choice measured faster or equal (512 x
    512 x 1024 and 1024 x 1024 x 512: :data:`TC_HALF_WAVE`) nor where these settings were not measured."""
    if k > 1024:
        return None
    if n == 128:
        if m <= 128 and kprime >= 104:
            return warp_split(*WARP_SPLIT_W16)
        if 512 < m <= 1024 and kprime >= 256:
            return warp_split(*WARP_SPLIT_W4)
    if (n == 256 and 512 < m <= 1024) or (n == 1024 and m <= 256):
        return wide_warps(m, n)
    if n == 1024 and 512 < m <= 1024 and density < TC_MIN_DENSITY[np.dtype(np.float32)]:
        return warp_split(*WARP_SPLIT_W1)
    return None


#: K-split settings searched by default: small-grid shapes of the kernels above with their K range
#: split over 2 to 8 blocks (``splits`` is a launch argument: no extra compilation), for outputs with
#: fewer tiles than SMs (N = 128 at M = 1024). Each entry: (function name, shape, splits).
SPLIT_SETTINGS = (("dense_tile", (4, 4, 8, 16, 2), 2), ("dense_tile", (4, 4, 8, 16, 2), 4),
                  ("dense_tile", (4, 4, 8, 16, 2), 8), ("dense_tile", (4, 8, 8, 16, 2), 4),
                  ("pipelined", (4, 1, 8, 32, 4, 2), 2), ("pipelined", (4, 1, 8, 32, 4, 2), 4),
                  ("direct", (4, 2, 4, 4), 4), ("direct", (4, 2, 4, 4), 8))


def split_configs() -> list[dict]:
    """The tunables of every :data:`SPLIT_SETTINGS` entry."""
    makers = dict(dense_tile=dense_tile, pipelined=pipelined, direct=direct)
    return [makers[name](*shape, splits=splits) for name, shape, splits in SPLIT_SETTINGS]


def space(dtype, order: str = "C", *, full: bool = False) -> list[dict]:
    """The configurations :func:`tune` tries for ``dtype`` and ``b``'s memory ``order``.

    Default (``full=False``): for a row-major B the tiled kernel's best setting,
    :data:`PIPELINED_SHAPES`, :data:`DIRECT_SHAPES`, :data:`DENSE_TILE_SHAPES` and the K-split
    :data:`SPLIT_SETTINGS` and :data:`TC_SETTINGS` (Listing 1
    gathers B along its rows there and lost every measured problem, experiments/results/uspmm.md);
    for a column-major B the paper's Listing 1 settings, USpMM (1, 8) and USpMM-Vec (2, 8). A few
    seconds per problem. ``full=True``: Listing 1 over :data:`LISTING1_SHAPES` x vecSize 1, 2, 4
    and the tiled, pipelined, direct and dense-tile kernels over grids of their tunables.
    Configurations whose shared memory or block size the launcher would refuse are left out.
    """
    from gpu.uspmm import (SHARED_LIMIT, WARP_SIZE, dense_tile_shared_bytes, pipelined_shared_bytes,
                           tiled_shared_bytes)
    itemsize = np.dtype(dtype).itemsize
    if not full:
        if order != "C":
            return [dict(variant="listing1", nwarp=1, vsize=8, vecsize=1),
                    dict(variant="listing1", nwarp=2, vsize=8, vecsize=2)]
        return ([dict(variant="tiled", nwarp=8, rows_per_warp=4, cols_per_lane=4, kc=64)]
                + [pipelined(*shape) for shape in PIPELINED_SHAPES] + [direct(*shape) for shape in DIRECT_SHAPES]
                + [dense_tile(*shape) for shape in DENSE_TILE_SHAPES] + split_configs()
                + [warp_split(*shape) for shape in WARP_SPLIT_SHAPES]
                + [tensor_core(**cfg) for cfg in TC_SETTINGS[np.dtype(dtype)]])
    out = []
    for (nwarp, vsize), vecsize in itertools.product(LISTING1_SHAPES, (1, 2, 4)):
        if vsize * vsize * nwarp * WARP_SIZE * vecsize * 4 <= SHARED_LIMIT:
            out.append(dict(variant="listing1", nwarp=nwarp, vsize=vsize, vecsize=vecsize))
    if order == "C":
        for nwarp, rpw, cpl, kc, batch in itertools.product((4, 8), (2, 4), (2, 4, 8), (32, 64), (False, True)):
            if tiled_shared_bytes(nwarp * rpw, cpl, kc, itemsize) <= SHARED_LIMIT and not (itemsize == 2 and cpl == 2):
                out.append(dict(variant="tiled", nwarp=nwarp, rows_per_warp=rpw, cols_per_lane=cpl, kc=kc,
                                batch=batch))
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
    return out


def problem_key(device: str, m: int, k: int, n: int, kprime: int, dtype, index_dtype, order: str) -> str:
    """The cache key of one problem on one device."""
    return (f"{device}|m={m}|k={k}|n={n}|kprime={kprime}|{np.dtype(dtype).name}|"
            f"{np.dtype(index_dtype).name}|{order}")


def cache_path() -> Path:
    """``$SPARSEKIT_TUNE_CACHE``, else ``~/.cache/sparsekit/uspmm.json``."""
    env = os.environ.get("SPARSEKIT_TUNE_CACHE")
    return Path(env) if env else _home_cache(os.environ.get("HOME"))


@functools.cache
def _home_cache(home: str | None) -> Path:
    """The default cache file for this ``$HOME``, built once (``Path.home()`` and three joins took 21-25 us on the
    H100 machine, on every ``config="auto"`` call; without ``$HOME`` it asks the password database)."""
    return Path.home() / ".cache" / "sparsekit" / "uspmm.json"


# (path, mtime, size) of the cache file last read -> its contents: every ``config="auto"`` call looks its problem
# up, and reading and parsing the file each time cost more than a launch. Not to be mutated (``_store`` copies).
_LOADED: dict = {}


@functools.cache
def _known_tunables() -> dict:
    """Tunable name -> the value types and (for strings) the values the launchers take: what :func:`space`
    tries, the tensor-core kernels' defaults and precisions, the warp-split kernel's two switches and the
    variants :func:`heuristic` routes to. An entry naming anything else was stored by another version of this
    package (a renamed or removed tunable)."""
    from gpu.uspmm import VARIANTS
    from gpu.uspmm_tc import DEFAULTS as TC
    from gpu.uspmm_wgmma import DEFAULTS as WGMMA
    from gpu.uspmm_wgmma import PRECISIONS
    configs = [cfg for dtype in TC_SETTINGS for order in "CF" for full in (False, True)
               for cfg in space(dtype, order, full=full)]
    configs += [*TC.values(), WGMMA, DECODE, dict(lookahead=False, l2_prefetch=False)]
    configs += [dict(precision=p) for p in PRECISIONS]
    known: dict = {"variant": ({str}, {*VARIANTS, "tensor_core", "wgmma", DECODE["variant"]})}
    for cfg in configs:
        for name, value in cfg.items():
            types, strings = known.setdefault(name, (set(), set()))
            types.add(type(value))
            if isinstance(value, str):
                strings.add(value)
    return known


def _valid_entry(entry) -> bool:
    """An entry as :func:`tune` stores it: a dict whose ``config`` is a dict of tunables naming its ``variant``,
    each tunable one this version's launchers take, with a value of its type (integers not negative)."""
    config = entry.get("config") if isinstance(entry, dict) else None
    if not (isinstance(config, dict) and isinstance(config.get("variant"), str)):
        return False
    known = _known_tunables()
    for name, value in config.items():
        types, strings = known.get(name, ((), ()))
        if type(value) not in types or (isinstance(value, str) and value not in strings) \
                or (type(value) is int and value < 0):
            return False
    return True


def _read(path: Path) -> dict:
    """The valid entries of the cache file at ``path`` ({} when it is absent). A file that is not a JSON object
    counts as empty and entries that are not :func:`_valid_entry` are left out, each case with one warning."""
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, ValueError) as err:
        data = err
    if not isinstance(data, dict):
        found = f"unreadable ({data})" if isinstance(data, Exception) else f"a JSON {type(data).__name__}"
        warnings.warn(f"tune cache {path}: expected a JSON object of tuned configurations, found {found}; "
                      f"ignored (the heuristic is used until a tune stores a winner)", RuntimeWarning, stacklevel=3)
        return {}
    bad = [key for key, entry in data.items() if not _valid_entry(entry)]
    if bad:
        warnings.warn(f"tune cache {path}: {len(bad)} entr{'y' if len(bad) == 1 else 'ies'} without a config of "
                      f"tunables this version takes, naming its variant (first: {bad[0]!r}); ignored (the heuristic "
                      f"is used for them)",
                      RuntimeWarning, stacklevel=3)
    return {key: entry for key, entry in data.items() if key not in bad}


def _load() -> dict:
    """The cache's valid entries, read again only when the file changes (so a malformed one warns once)."""
    path = cache_path()
    try:
        st = path.stat()
    except OSError:
        return {}
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _LOADED:
        data = _read(path)
        _LOADED.clear()
        _LOADED[key] = data
    return _LOADED[key]


@contextlib.contextmanager
def _locked(path: Path):
    """Hold an exclusive ``fcntl`` lock on the side file ``path.lock`` (not on ``path``, which a store replaces)."""
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _store(key: str, entry: dict) -> None:
    """Add ``entry`` under ``key``: under the lock, read the file afresh, write it with the entry to a unique
    temporary file and rename that over the cache (a reader sees the old file or the new one, never part of one).
    A failure warns and leaves the cache as it was; the caller keeps its result."""
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(path):
            data = _read(path)
            data[key] = entry
            fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump(data, f, indent=1, sort_keys=True)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
    except (OSError, TypeError, ValueError) as err:
        warnings.warn(f"tune cache {path}: could not store {key!r} ({type(err).__name__}: {err}); the result is "
                      f"returned but not cached", RuntimeWarning, stacklevel=2)


def _device_name() -> str:
    from sparsekit.device import info
    return info().name


def lookup(dell, n: int, order: str) -> dict | None:
    """The cached winner for ``dell`` (a :class:`gpu.uspmm.DeviceELL`) times a ``K x n`` B, or None."""
    m, k = dell.shape
    key = problem_key(_device_name(), m, k, n, dell.host.kprime, dell.dtype, dell.host.indices.dtype, order)
    entry = _load().get(key)
    return None if entry is None else dict(entry["config"])


def _pow2_at_most(x: float) -> int:
    """The largest power of two <= ``x`` (1 when ``x < 2``)."""
    return 1 << (max(int(x), 1).bit_length() - 1)


#: Problems routed to the tensor-core kernel (:mod:`gpu.uspmm_tc`; float32 as 3xTF32) by :func:`heuristic`,
#: all with a density ``K'/K`` of at least ``TC_MIN_DENSITY[dtype]``:
#:
#: * output grids of more than one wave: float16 more than ``sms`` tiles of 32 x 128, float32 at least
#:   ``TC_FILL * sms`` tiles of 64 x 128: :data:`TC_LARGE` where there are at least ``sms`` tiles of
#:   64 x 256; float32 :data:`TC_ONE_WAVE` where there are at most ``sms`` tiles of 64 x 128, else (float32)
#:   :data:`TC_LARGE` from ``TC_FILL * sms`` tiles of 64 x 256; else the defaults (:data:`TC_DEFAULT`);
#: * float16 only, smaller grids (at most ``sms`` tiles of 32 x 128) with ``K >= TC_MIN_K``:
#:   :func:`tc_small_grid`, 32 x 128 tiles at two blocks an SM, K split in runs of 8 or more chunks
#:   while the split grid stays within one wave;
#: * float32 only, grids of ``sms / 4`` to ``sms / 2`` tiles of 64 x 128 with ``K >= TC_MIN_K``:
#:   :data:`TC_ONE_WAVE` with the K range split in two (:data:`TC_HALF_WAVE`).
#:
#: Fitted to "Session 4" and "Session 4, K split" in experiments/results/uspmm_tc.md (H100, 2026-11-23
#: 03:04 and 03:29 UTC), tensor-core vs CUDA-core time in us. float16, all routed: 1024^3 at
#: 60/80/90/95%: 29.9/27.9/25.3/25.3 vs 107.7/94.4/55.3/34.6; 1024 x 1024 x 16384 60%: 246.6
#: (:data:`TC_LARGE`) vs 1136.8; 4096^2 x 1024 90%: 246.7 (64 x 256, one block an SM) vs 506.9; the eight
#: N = 128 problems of the split run (1024 x 1024 60% and seven ResNet-50 layers at 81%), e.g. 1024 x 1024
#: 18.2 vs 28.8, 512 x 4608 30.6 vs 50.9, 2048 x 512 13.0 vs 16.3. float32: routed 1024^3 at 60/80%:
#: 70.7 (two blocks an SM)/71.1 vs 91.5/91.6 and 1024 x 1024 x 16384 60%: 897.0 vs 1120.8, and (A split
#: once at the scatter, "Session 4, float32 split at the scatter", 04:11 UTC) 1024^3 85%: 71.1 vs 83.2;
#: not routed 1024^3 at 90/95%: 71.0/71.3 vs 60.1/35.9, 4096^2 x 1024 90%: 862.2 vs 648.1, and every
#: N = 128 problem of the split run (e.g. 1024 x 1024 at its best split 42.5 vs 33.7). Grids of about one
#: wave ("Session 5, grids of about one wave", 05:07 UTC): 768 x 768 x 1024 60% (96 tiles of 64 x 128, 192
#: of 32 x 128) float16 24.2 vs 81.4, float32 54.7 vs 81.6; 1024 x 1024 x 512 60% float16 (128 tiles of
#: 32 x 128) 32 x 128 tiles unsplit 21.1, split in two (16 chunks of 64: 256 blocks) 25.9.
TC_MIN_DENSITY = {np.dtype(np.float16): 0.045, np.dtype(np.float32): 0.14}   # the sparsest measured wins: 95% (d = 0.0498), 85% (d = 0.150)
TC_FILL = 0.7      # float32: 768 x 768 x 1024 (96 tiles of 64 x 128 on 132 SMs) measured, fewer not
TC_MIN_K = 512
#: The tensor-core setting per dtype where the output has at least ``sms`` tiles of 64 x 256 (64 x 256 tiles
#: at two blocks an SM re-densify each A tile for twice the default's columns; float32 with 4 warps of 64 x 64,
#: which issue fewer fragment loads and B splits per MMA). "Session 5, grids of many waves" of
#: experiments/results/uspmm_tc.md (H100, 05:24 UTC), float32 against its defaults at 60%: 1024 x 1024 x 4096
#: 184.4 vs 230.0 us, N = 16384 669.4 vs 863.5, 4096^2 x 1024 664.2 vs 862.4; float16 (the w2x4 setting)
#: 69.9 / 251.6 / 220.8 vs 105.6 / 392.8 / 364.7.
#: Session 6: with ``lean=True`` (:mod:`gpu.uspmm_tc`: the same arithmetic in fewer instructions, results
#: bit-identical), float32 N = 16384 598.6 against 668.9 ("Session 6, float32 lean", 07:57 UTC), 1024 x 1024 x
#: 4096 168.3 against 183.1, 4096^2 x 1024 603.6 against 667.6, float16 N = 16384 227.6 against 250.9
#: ("Sixth session, run 3" of experiments/results/lead_gpu_run.md, 08:30 UTC). float32 also where there are
#: ``TC_FILL * sms`` such tiles: 1024 x 1024 x 2048 (128 tiles) 102.0 against the defaults' 110.4 (lean) and
#: :data:`TC_ONE_WAVE`'s 107.4 (lean). Session 11 (ncu, N = 16384): the tensor pipe busy 58% of the time at two
#: warps a scheduler, the MMAs' waits on the MMA before into the same accumulator or on the B split; splitting B a
#: K step ahead spaced those out but was not faster (+0.9%).
TC_LARGE = {np.dtype(np.float16): dict(bm=64, bn=256, kc=32, warps_m=2, warps_n=4, stages=4, min_blocks=2,
                                       lean=True),
            np.dtype(np.float32): dict(bm=64, bn=256, kc=16, warps_m=1, warps_n=4, stages=4, lean=True)}
#: The defaults as routed: ``lean=True`` (float16 1024^3 60% 28.8 against 30.7 us, run 3 of the sixth
#: session; float32 67.9 against 71.1, "Session 6, float32 lean").
TC_DEFAULT = {np.dtype(np.float16): dict(lean=True), np.dtype(np.float32): dict(lean=True)}
#: The float32 tensor-core setting for grids of at most one wave (``TC_FILL * sms`` to ``sms`` tiles of
#: 64 x 128): four K groups of two warps, each warp a 64 x 64 tile (``gpu.uspmm_tc``'s ``kgroups``: more
#: MMAs per fragment load than the default's 32 x 32 warp tiles, still 8 warps an SM). "Session 5, K
#: groups" of experiments/results/uspmm_tc.md (H100, 05:56 UTC): 1024^3 at 60/70/80/85% 60.8/61.1/60.3/60.3
#: us against the default's 70.2/70.4/70.3/70.0 (dense fp32 cuBLAS 62.4/62.2/61.5/62.1), 768 x 768 x 1024 60%
#: 47.8 against 54.1; past one wave it loses (N = 16384: 909.7 against 861.7, :data:`TC_LARGE` 664.0).
#: Session 6, ``lean=True`` ("Session 6, float32 lean", 07:57 UTC): 1024^3 60% 55.7 against 62.3 (dense fp32
#: cuBLAS 62.3), 90% 55.3 against 60.3, 768 x 768 x 1024 44.0 against 48.8.
TC_ONE_WAVE = {np.dtype(np.float32): dict(bm=64, bn=128, kc=32, warps_m=1, warps_n=2, stages=4, min_blocks=1,
                                          kgroups=4, lean=True)}
#: float32 grids of half a wave: "Sixth session, run 2" of experiments/results/lead_gpu_run.md (H100, 08:07
#: UTC), float32 60%, 64 tiles of 64 x 128 on 132 SMs: the defaults at 512 x 512 x 1024 35.0 us with two splits
#: (unsplit 37.9, four 43.2) against the CUDA-core choice's 40.1; 1024 x 1024 x 512 51.1 (68.8, 57.1) against 70.9.
#: Not at 32 tiles (256 x 256 x 1024: 21.9 unsplit, 24.4 two splits, CUDA cores 19.6; 1024 x 1024 x 256: four
#: splits 44.4 against the warp-split kernel's 40.6) nor 16 (128 x 128 x 1024: 13.8 unsplit against 14.2).
#: Session 10 ("Session 10" of experiments/results/uspmm_tc.md, H100, 19:57 UTC): once the split sum's loads
#: were issued together (they had waited on each other behind per-element bounds branches), :data:`TC_ONE_WAVE`
#: with two splits (128 blocks: one wave at one block an SM) won at all four half-wave grids timed: 512 x 512 x
#: 1024 60/80% 27.8/27.6 us against the defaults' 30.6/30.9 with two splits, 1024 x 1024 x 512 39.8/39.8 against
#: 47.6/47.5 (unsplit 30.5 and 52.7; four splits 38.0 and 50.1).
TC_HALF_WAVE = {np.dtype(np.float32): dict(TC_ONE_WAVE[np.dtype(np.float32)], splits=2)}
#: Tensor-core settings in the search space of :func:`space` (row-major B) per dtype: the defaults (with
#: and without ``lean``), :data:`TC_LARGE`, float16 also kc 32 and the small-grid setting with 1, 2 and 4 splits, float32
#: :data:`TC_ONE_WAVE` and :data:`TC_HALF_WAVE`.
TC_SETTINGS = {np.dtype(np.float16): (dict(), TC_DEFAULT[np.dtype(np.float16)], TC_LARGE[np.dtype(np.float16)],
                                      dict(bm=64, bn=128, kc=32, warps_m=2, warps_n=4, stages=4))
               + tuple(dict(bm=32, bn=128, kc=64, warps_m=1, warps_n=8, stages=4, min_blocks=2, splits=s)
                       for s in (1, 2, 4)),
               np.dtype(np.float32): (dict(), TC_DEFAULT[np.dtype(np.float32)], TC_LARGE[np.dtype(np.float32)],
                                      TC_ONE_WAVE[np.dtype(np.float32)],
                                      TC_HALF_WAVE[np.dtype(np.float32)])}


#: The wgmma kernel's setting (:mod:`gpu.uspmm_wgmma`, float32, compute capability 9.0) for grids of at least
#: ``TC_FILL * sms`` tiles of 128 x 256 with a density ``K'/K`` of at least :data:`WGMMA_MIN_DENSITY`.
#: Session 13 (experiments/results/uspmm_wgmma.md, "Where it wins", H100, 2026-11-24 02:30 UTC), against the
#: routed choice before it, us: 1024 x 1024 x N 60% at N = 4096 / 8192 / 16384 133.2 / 260.4 / 511.1 vs 158.3 /
#: 299.0 / 573.0 (N = 2048, 64 tiles: 132.4 vs 100.4, not routed); 1536^2 x 2048 96 tiles 191.4 vs 221.9;
#: 2048^3 254.9 vs 294.8; 4096^2 x 1024 at 60/80/90% 498.1/499.6/501.6 vs 566.3/565.9/642.5; N = 16384 at
#: 80/90% 513.4/519.1 vs 572.0/650.0; at 95% (d = 0.05) it loses: 515.2 vs 399.5, 501.4 vs 386.5. (That run was
#: the kernel's v3; v6, "v4-v6" of the same file: N = 16384 452.4, 4096^2 x 1024 90% 440.0, 2048^3 224.4.)
WGMMA_LARGE = dict(bm=128, bn=256, kc=16, stages=4)
#: The density ``K'/K`` from which every wgmma setting is routed: its work does not fall with the density (it
#: multiplies dense A tiles), the CUDA-core kernels' does. Session 15 (column-class scatter, H100, 2026-11-24): 1024^3
#: at 90% (d = 0.0996) :data:`WGMMA_WAVE` 34.4 us against the CUDA-core route's 40.8, 1024 x 1024 x 512 90% 33.6
#: against 50.4; at 95% (d = 0.05) it loses: 34.4 against 27.4.
WGMMA_MIN_DENSITY = 0.09
#: The wgmma setting for float32 grids of fewer 128 x 256 tiles but at least ``WGMMA_MID_WAVES * sms`` tiles of
#: 64 x 128 (two warpgroups of m64n64, about two blocks an SM), at a density where the tensor-core kernels are
#: routed anyway (``TC_MIN_DENSITY``: their cost does not fall with it). Session 13, after the kernel's v6 ("Smaller
#: grids" of experiments/results/uspmm_wgmma.md, 03:08 UTC): 1024 x 1024 x 2048 60% (256 tiles) 81.3 us against
#: the routed 98.9 (``TC_LARGE``); one wave or less stays on :mod:`gpu.uspmm_tc`: 1024^3 60/80% best wgmma setting
#: (64 x 128 kc32 s3) 51.0/52.1 against 52.6/52.8, 768 x 768 x 1024 40.2 against 41.3, 1024 x 1024 x 512 51.0
#: against 39.0.
WGMMA_MID = dict(bm=64, bn=128, kc=16, stages=4)
WGMMA_MID_WAVES = 1.5
#: The wgmma setting for float32 grids of ``sms / 2`` to ``sms`` tiles of 64 x 128 (one wave or less), density at
#: least :data:`WGMMA_MIN_DENSITY`: warp specialised (two producer warpgroups copy and build the A tiles, two consumer
#: warpgroups only multiply; named barriers instead of a block barrier per chunk), chunks of 32 columns, 6 stages
#: (four A buffers, copies two chunks ahead), one block an SM. Session 15 (v12, H100): 1024^3 60% 33.9 us against
#: 34.6 with 5 stages (one chunk ahead), 768^2 x 1024 26.5 / 27.0, 1024 x 2048 x 1024 62.1 / 63.1. Session 14 (experiments/results/uspmm_wgmma.md, "Warp specialised", H100, 2026-11-24 05:51 UTC),
#: against the K split in two over a cluster that it replaced and the routing before it, us: 1024^3 at
#: 30/60/85% 43.0/43.4/43.9 against 46.2/46.1/46.7 (session 13: 48.7/50.0/51.2), 768 x 768 x 1024 33.9 against
#: 36.6, 640 x 640 x 1024 29.5 against 32.1, 2048 x 512 x 512 25.6 against 28.4, the Table 1 layer 1024 x 4096 x
#: 1024 65% 153.2 against 156.9 (session 13: 187.5), 1024 x 2048 x 1024 80.1 against 83.2.
WGMMA_WAVE = dict(bm=64, bn=128, kc=32, stages=6, producers=256)
#: The wgmma setting for float32 grids of ``sms / 4`` to ``sms / 2`` tiles of 64 x 128, density at least
#: ``TC_MIN_DENSITY``, ``K >= WGMMA_SPLIT_MIN_K``: K split in two, chunks of 32 columns, one block an SM (one wave
#: of blocks). Same runs (05:03, 05:07 UTC): 512 x 512 x 1024 at 30/60/85% 19.2/19.4/19.2 us against 27.5
#: (``TC_HALF_WAVE``), 1024 x 1024 x 512 at 60/85% 29.7/29.6 against 39.6, 384 x 384 x 1024 16.6 against 47.1
#: (then the CUDA-core route), 512 x 2048 x 1024 49.8.
WGMMA_HALF = dict(bm=64, bn=128, kc=32, stages=4, split=2)
#: The wgmma setting for float32 grids of ``sms / 8`` to ``sms / 4`` tiles of 64 x 128 with ``N >= 256``, density at
#: least :data:`WGMMA_MIN_DENSITY`, ``K >= WGMMA_SPLIT_MIN_K``, ahead of :func:`small_n`: K split in four, chunks of 16,
#: two blocks an SM. Same run (05:07 UTC): 256 x 256 x 1024 12.8 us against 14.1 (``small_n``), 1024 x 1024 x 256
#: 27.4 against 28.2, 768 x 768 x 256 17.1 against 21.9; 128 x 128 x 1024 (16 tiles) 9.0 against 7.3: not routed.
WGMMA_QUARTER = dict(bm=64, bn=128, kc=16, stages=4, min_blocks=2, split=4)
WGMMA_SPLIT_MIN_K = 256
#: The wgmma setting for float32 with one column tile (``N <= 128``), ``0.7 sms / 8`` to ``sms / 4`` tiles of
#: 64 x 128 (12 to 33 on the H100's 132 SMs: the split grid 0.7 to 2 blocks an SM), ``K >= 768`` and a density of at
#: least :data:`WGMMA_EIGHTH_MIN_DENSITY`, ahead of :func:`small_n`: K split in eight, chunks of 16, two blocks an SM.
#: Session 20 (precision "auto", H100, 2026-11-24 23:17-23:20 UTC, records
#: ``experiments/results/uspmm_wgmma_small_n_*_session20.json``), against the routed warp-split kernel, us:
#: 1024 x 1024 x 128 at 50/60/65/70/75% 15.0/15.2/15.1/15.2/15.1 against 20.4/18.1/16.8/15.1/13.6; 768 x 768 x 128
#: 60% 11.2 against 14.0, 1536^2 x 128 19.7 against 37.1, 2048^2 x 128 34.5 against 65.1, 1024 x 2048 x 128
#: 21.9 against 40.5, 2048 x 1024 x 128 23.0 against 39.9, 1536 x 768 x 128 14.5 against 24.1, and at 70% every
#: one of them within 1% or faster; it loses on 8 tiles or fewer (512^2 x 128 60% 9.5 against 8.9) and at the
#: lower densities of 1024^2 x 128 (75%: 15.1 against 13.6).
WGMMA_EIGHTH = dict(bm=64, bn=128, kc=16, stages=4, min_blocks=2, split=8)
WGMMA_EIGHTH_MIN_DENSITY = 0.29                        # (70% sparsity: K' = 230 of 768 is 0.2995)


def tc_small_grid(k: int, tiles: int = 1, sms: int = 132) -> dict:
    """The float16 tensor-core setting for small output grids (``tiles`` tiles of 32 x 128 on ``sms``
    SMs): 32 x 128 tiles, 8 warps, two blocks an SM, the K range split so that each split keeps at
    least 8 chunks of 64 (at most 4 splits, and at most ``sms // tiles``: the split grid stays within
    one wave): the fastest or within 5% of it on all eight N = 128 problems of "Session 4, K split",
    and unsplit at 1024 x 1024 x 512 (128 tiles: 21.1 us against 25.9 with two splits)."""
    return tensor_core(bm=32, bn=128, kc=64, warps_m=1, warps_n=8, stages=4, min_blocks=2,
                       splits=max(1, min(4, -(-k // 64) // 8, sms // max(tiles, 1))))


def tensor_core(**tunables) -> dict:
    """The tunables of a tensor-core setting (:func:`gpu.uspmm_tc.uspmm`; unset ones from its
    ``DEFAULTS``): ``gpu.uspmm.uspmm`` hands ``variant="tensor_core"`` to that launcher."""
    return dict(variant="tensor_core", **tunables)


#: The memory-bound decode path (:mod:`gpu.spmm_tiled`'s row kernel on the ELL's rows as TiledCSL): float16
#: at ``N <= DECODE_MAX_N`` (faster there than every other USpMM kernel, and than dense cuBLAS from 70 % at
#: N = 1 and from 80 % at N = 8: experiments/results/uspmm_decode.md), and every bfloat16 product (the one
#: USpMM kernel that takes bfloat16; it takes N <= 64).
DECODE = dict(variant="decode")
DECODE_MAX_N = 16


def half_decode(dtype, n: int) -> bool:
    """Whether a float16 product of ``n`` columns takes the decode path (:data:`DECODE`)."""
    return np.dtype(dtype) == np.float16 and n <= DECODE_MAX_N


def heuristic(m: int, k: int, n: int, kprime: int, dtype, order: str, *, sms: int = 132,
              tensor_cores: bool = True, few_columns: bool = True, wgmma: bool = False) -> dict:
    """The configuration used when the cache has no entry.

    Row-major ``B`` (and ``few_columns``): first :func:`small_n` (the warp-split kernel where it
    measured fastest: ``N`` of 64, 128 or 256 columns, and float32 ``N = 1024`` at small ``M`` or below
    :data:`TC_MIN_DENSITY`). Then, float32 with ``wgmma`` (a compute capability 9.0 GPU) and
    ``tensor_cores``, at a density of at least :data:`WGMMA_MIN_DENSITY`: the wgmma kernel, :data:`WGMMA_LARGE`
    where the grid has at least ``TC_FILL * sms`` tiles of 128 x 256, else :data:`WGMMA_MID` where it has at least
    ``WGMMA_MID_WAVES * sms`` tiles of 64 x 128 and :data:`WGMMA_HALF` where it has ``sms / 4`` to ``sms / 2`` and
    ``K >= WGMMA_SPLIT_MIN_K``. Before all of that (and before :func:`small_n`), :data:`WGMMA_QUARTER` (K split in
    four) for ``sms / 8`` to ``sms / 4`` tiles, ``N >= 256``; :data:`WGMMA_EIGHTH` (K split in eight) for ``N <= 128``,
    ``0.7 sms / 8`` to ``sms / 4`` tiles, ``K >= 768`` and a density of at least :data:`WGMMA_EIGHTH_MIN_DENSITY`; and
    :data:`WGMMA_WAVE` (warp specialised) for ``sms / 2`` to ``sms`` tiles.
    Then (and ``tensor_cores``) the tensor-core kernel (:func:`tensor_core`) where
    :data:`TC_MIN_DENSITY` and the grid rules above it hold. It multiplies the densified tile, zeros
    included, at the same cost at every density, so very sparse problems stay on the CUDA cores.
    Otherwise (and with ``tensor_cores=False``, the CUDA-core choice alone):

    Column-major ``B`` (Eq. 2 / Listing 1's layout): Listing 1 with the paper's USpMM setting
    (NWarp, VSize) = (1, 8). Row-major ``B``, by the number of output tiles (``sms``: the H100 has
    132 SMs), the density ``d = K'/K`` and ``K``:

    * at least ``0.75 * sms`` tiles of 32 x 128 (the grid fills the GPU unsplit):
      ``d < 0.18`` (float16: ``d < 0.25``) the direct kernel (float32 4 columns a lane, float16 8:
      16-byte reads of B either way); else the dense-tile kernel, 64 x 128 blocks where there
      are at least ``0.75 * sms`` of them (float16: ``2 * sms``), else 32 x 128;
    * fewer (N = 128 at M <= 2048, 128^3, ...): the K range is split over ``splits`` blocks a
      tile (:mod:`gpu.uspmm`'s fixed-order sum of partial tiles):

      - ``d < 0.1``: the direct kernel (8 x 128 tiles), ``splits`` up to 16, about 1024 / tiles
        and at least 12 slots a split;
      - ``K >= 512``, ``d >= 0.3`` and at least 96 tiles of 8 x 128; or ``K >= 1024``, ``d < 0.3``
        and at least 256 of them: the dense-tile kernel with 32 x 128 blocks, ``splits`` up to 8,
        about ``2 * sms`` blocks and at least 192 rows of B a split;
      - ``K >= 1024``, ``d < 0.3`` and 64 to 255 tiles of 8 x 128: the direct kernel as above;
      - otherwise the pipelined kernel with 8-row blocks, ``splits`` up to 8 and the K chunks,
        about 256 blocks.

    Fitted to the H100 runs of experiments/results/uspmm.md: the float32 tuning run (23:00 UTC,
    unsplit kernels), the float16 tuning run and the K-split exploration of 2026-11-23 00:49 UTC;
    ``tests/test_uspmm.py`` checks its choices against those winners. The float32 direct-kernel
    bound moved from 0.15 to 0.18 after the figure sweep of 01:02 UTC: at 1024^3 85% (``d =
    0.150``) the dense-tile kernel ran 92.1 us against cuSPARSE's 93.3, where the direct kernel's
    measured times on each side (105 us at 80%, 60.4 us at 90%) put it near 83 us (not measured).
    """
    if np.dtype(dtype) == BFLOAT16 or half_decode(dtype, n):
        return dict(DECODE)
    if order != "C":
        return dict(variant="listing1", nwarp=1, vsize=8, vecsize=1)
    half = np.dtype(dtype) == np.float16
    density = kprime / k if k else 0.0
    col_tiles = -(-n // 128)
    tiles32 = -(-m // 32) * col_tiles
    tiles64 = -(-m // 64) * col_tiles
    dense_enough = density >= TC_MIN_DENSITY[np.dtype(dtype)]      # for the mma.sync tensor-core kernels
    wgmma_ok = wgmma and tensor_cores and not half and density >= WGMMA_MIN_DENSITY
    split_wgmma = wgmma_ok and k >= WGMMA_SPLIT_MIN_K
    if split_wgmma and sms / 8 < tiles64 <= sms / 4 and n >= 256:
        return dict(variant="wgmma", **WGMMA_QUARTER)
    if (wgmma_ok and col_tiles == 1 and 0.7 * sms <= 8 * tiles64 <= 2 * sms and k >= 768
            and density >= WGMMA_EIGHTH_MIN_DENSITY):
        return dict(variant="wgmma", **WGMMA_EIGHTH)
    if wgmma_ok and sms / 2 < tiles64 <= sms:                      # (ahead of small_n's N = 1024 one-warp rule)
        return dict(variant="wgmma", **WGMMA_WAVE)
    chosen = small_n(m, k, n, kprime, half) if few_columns else None
    if chosen is not None:
        return chosen
    if wgmma_ok:
        if -(-m // 128) * -(-n // 256) >= TC_FILL * sms:
            return dict(variant="wgmma", **WGMMA_LARGE)
        if tiles64 >= WGMMA_MID_WAVES * sms:
            return dict(variant="wgmma", **WGMMA_MID)
        if split_wgmma and sms / 4 < tiles64 <= sms / 2:
            return dict(variant="wgmma", **WGMMA_HALF)
    if tensor_cores and dense_enough:
        if (tiles32 > sms) if half else (tiles64 >= TC_FILL * sms):
            tiles64x256 = -(-m // 64) * -(-n // 256)
            if tiles64x256 >= sms:
                return tensor_core(**TC_LARGE[np.dtype(dtype)])
            if not half and tiles64 <= sms:
                return tensor_core(**TC_ONE_WAVE[np.dtype(dtype)])
            if not half and tiles64x256 >= TC_FILL * sms:
                return tensor_core(**TC_LARGE[np.dtype(dtype)])
            return tensor_core(**TC_DEFAULT[np.dtype(dtype)])
        if half and k >= TC_MIN_K:
            return tc_small_grid(k, tiles32, sms)
        if not half and k >= TC_MIN_K and sms / 4 < tiles64 <= sms / 2:
            return tensor_core(**TC_HALF_WAVE[np.dtype(dtype)])   # two splits: one wave of blocks
    tiles8 = -(-m // 8) * col_tiles
    if tiles32 >= 0.75 * sms:
        if density < (0.25 if half else 0.18):
            return direct(8 if half else 4, 2, 4, 4)
        return dense_tile(4, 8, 8, 16, 2) if tiles64 >= (2 if half else 0.75) * sms else dense_tile(4, 4, 8, 16, 2)
    direct_splits = min(16, _pow2_at_most(1024 / tiles8), _pow2_at_most(kprime / 12))
    if density < 0.1:
        return direct(4, 2, 4, 4, splits=direct_splits)
    if (k >= 512 and density >= 0.3 and tiles8 >= 96) or (k >= 1024 and density < 0.3 and tiles8 >= 256):
        return dense_tile(4, 4, 8, 16, 2, splits=min(8, _pow2_at_most(2 * sms / tiles32), _pow2_at_most(k / 192)))
    if k >= 1024 and density < 0.3 and tiles8 >= 64:
        return direct(4, 2, 4, 4, splits=direct_splits)
    return pipelined(4, 1, 8, 32, 4, 2, splits=min(8, _pow2_at_most(256 / tiles8), _pow2_at_most(-(-k // 32))))


def resolve(config, dell, n: int, order: str, *, wgmma: bool = False) -> dict:
    """Tunables for ``uspmm(..., config=config)``: a dict passes through; ``"auto"``
    is the cached winner or :func:`heuristic`; ``"heuristic"`` is :func:`heuristic` alone.
    ``wgmma``: the device runs the wgmma kernel (:func:`gpu.uspmm_wgmma.supported`); a cached wgmma
    winner is not used without it."""
    if isinstance(config, dict):
        return dict(config)
    if config not in ("auto", "heuristic"):
        raise ValueError(f"config: expected a dict of tunables, 'auto' or 'heuristic', got {config!r}")
    found = lookup(dell, n, order) if config == "auto" else None
    if found is not None and (wgmma or found.get("variant") != "wgmma"):
        return found
    m, k = dell.shape
    return heuristic(m, k, n, dell.host.kprime, dell.dtype, order, wgmma=wgmma)


def make_ell(m: int, k: int, sparsity: float, dtype, *, seed: int = 0, index_dtype=np.int32):
    """A random ``m x k`` weight pruned to uniform ``sparsity`` (:func:`sparsekit.prune.uniform`), as ELL."""
    from sparsekit.formats import ELL
    from sparsekit.prune import uniform
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((m, k)).astype(dtype)
    return ELL.from_dense(w, uniform(w, sparsity), index_dtype=index_dtype)


def tune(ell, n: int, *, order: str = "C", configs=None, full: bool = False, repeat: int = 20, seed: int = 0,
         store: bool = True, progress=None) -> tuple[dict, list[dict]]:
    """Time every configuration of :func:`space` (``full`` passed on; or ``configs``) on ``ell`` times a
    random ``K x n`` B; return ``(winner, records)`` and cache the winner. On a compute capability 9.0 GPU,
    float32 with a row-major B, :data:`WGMMA_LARGE`, :data:`WGMMA_MID`, :data:`WGMMA_WAVE`,
    :data:`WGMMA_HALF`, :data:`WGMMA_QUARTER` and :data:`WGMMA_EIGHTH`
    (:mod:`gpu.uspmm_wgmma`) are tried too.

    Each record: the configuration, ``median_us``, ``p10_us``, ``p90_us`` and
    ``correct`` (bit pattern within float32 accumulation of the first
    configuration's result: all must agree to 1e-3 relative to ``|A| |B|``);
    a configuration the launcher refuses gets ``error`` instead of times.
    Needs a GPU (timing raises ``RuntimeError`` otherwise).
    """
    from numba import cuda

    from gpu.uspmm import prepare, uspmm
    from sparsekit.timing import measure, require_gpu

    require_gpu("sparsekit.tune.tune")
    dell = prepare(ell)
    m, k = dell.shape
    rng = np.random.default_rng(seed)
    b_host = np.asarray(rng.standard_normal((k, n)).astype(dell.dtype), order=order)
    b = cuda.to_device(b_host)
    scale = (np.abs(dell.host.to_dense().astype(np.float64)) @ np.abs(b_host.astype(np.float64))).max()
    if configs is None:
        from gpu import uspmm_wgmma
        wgmma = uspmm_wgmma.supported() and order == "C" and dell.dtype == np.float32
        candidates = space(dell.dtype, order, full=full) + ([dict(variant="wgmma", **cfg)
                                                              for cfg in (WGMMA_LARGE, WGMMA_MID, WGMMA_WAVE,
                                                                          WGMMA_HALF, WGMMA_QUARTER,
                                                                          WGMMA_EIGHTH)]
                                                             if wgmma else [])
    else:
        candidates = list(configs)
    records, first = [], None
    for cfg in (candidates if progress is None else progress(candidates)):
        try:
            out = uspmm(dell, b, **cfg).copy_to_host().astype(np.float64)
        except ValueError as err:            # e.g. a block too big for the register file
            records.append(dict(cfg, error=str(err), correct=False))
            continue
        if first is None:
            first = out
        correct = bool(np.abs(out - first).max() <= 1e-3 * scale)
        t = measure(lambda: uspmm(dell, b, **cfg), repeat=repeat, warmup=2)
        records.append(dict(cfg, median_us=t.median_s * 1e6, p10_us=t.p10_s * 1e6, p90_us=t.p90_s * 1e6,
                            correct=correct))
    good = [r for r in records if r["correct"]]
    best = min(good, key=lambda r: r["median_us"])
    winner = {key: best[key] for key in candidates[records.index(best)]}
    if store:
        key = problem_key(_device_name(), m, k, n, dell.host.kprime, dell.dtype, dell.host.indices.dtype, order)
        _store(key, dict(config=winner, median_us=best["median_us"]))
    return winner, records
