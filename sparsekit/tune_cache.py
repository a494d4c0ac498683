"""The tune cache: the winners :func:`sparsekit.tune.tune` measured, per device and problem, and :func:`resolve`,
which serves ``sparsekit.gpu.uspmm.uspmm(..., config="auto")``: the cached winner, else the router's choice.

The file is ``$SPARSEKIT_TUNE_CACHE`` or ``~/.cache/sparsekit/uspmm.json``, a JSON object keyed by device name and
problem (``M, K, N, K', dtype, index dtype, memory order of B``). A file that is not a JSON object, or an entry
whose config is not one this version's launchers take (:meth:`sparsekit.router.Config.valid`), counts as absent
with one warning; stores are locked and atomic.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np

from sparsekit.router import Config, heuristic

__all__ = ["problem_key", "cache_path", "lookup", "resolve", "stores"]


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
    """The default cache file for this ``$HOME``, built once (``Path.home()`` and three joins cost 21-25 us: without
    ``$HOME`` it asks the password database; experiments/results/uspmm.md, host time of a call)."""
    return Path.home() / ".cache" / "sparsekit" / "uspmm.json"


# (path, mtime, size) of the cache file last read -> its contents: reading and parsing the file for every lookup
# cost more than a launch. Not to be mutated (``_store`` copies).
_LOADED: dict = {}
_stored = 0                    # winners stored by this process (:func:`stores`)


def _valid_entry(entry) -> bool:
    """An entry as :func:`sparsekit.tune.tune` stores it: a dict whose ``config`` is a valid set of tunables
    (:meth:`Config.valid`: a known variant, each tunable one this version's launchers take, of its type; for the
    decode and TiledBitmap kernels only their own, e.g. a TiledBitmap winner's ``rows``, ``slices``, ``splits``,
    ``stages``)."""
    return isinstance(entry, dict) and Config.valid(entry.get("config"))


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
    global _stored
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
                _stored += 1
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
    """The cached winner for ``dell`` (a :class:`sparsekit.gpu.uspmm.DeviceELL`) times a ``K x n`` B, or None."""
    m, k = dell.shape
    key = problem_key(_device_name(), m, k, n, dell.host.kprime, dell.dtype, dell.host.indices.dtype, order)
    entry = _load().get(key)
    return None if entry is None else dict(entry["config"])


def stores() -> int:
    """How many winners this process has stored: a configuration resolved before a store may be stale after it."""
    return _stored


def resolve(config, dell, n: int, order: str, *, wgmma: bool = False) -> dict:
    """Tunables for ``uspmm(..., config=config)``: a dict passes through (copied); ``"auto"`` is the cached winner,
    else :func:`sparsekit.router.heuristic`; ``"heuristic"`` is the router's choice alone. ``wgmma``: the device
    runs the wgmma kernel; a cached wgmma winner is not used without it."""
    if isinstance(config, dict):
        return dict(config)
    if config not in ("auto", "heuristic"):
        raise ValueError(f"config: expected a dict of tunables, 'auto' or 'heuristic', got {config!r}")
    found = lookup(dell, n, order) if config == "auto" else None
    if found is not None and (wgmma or found.get("variant") != "wgmma"):
        return found
    m, k = dell.shape
    return heuristic(m, k, n, dell.host.kprime, dell.dtype, order, wgmma=wgmma)
