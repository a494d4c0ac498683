"""Experiments: the registry behind ``sparsekit reproduce``.

An experiment is a module in the repository's top-level ``experiments`` package that defines
``EXPERIMENT = Experiment(...)``. ``discover()`` finds them all, so a new figure
or table is registered by adding one file, and nothing else changes.

``run(ctx)`` computes, writes its PNGs into ``ctx.out_dir`` and returns a
:class:`Section`; ``sparsekit reproduce`` writes each table as CSV and stitches
the sections into ``REPORT.md``.

>>> sec = Section("Demo", text="Two rows.", tables=[Table("t", [{"a": 1, "b": 2.5}])])
>>> print(markdown_table(sec.tables[0].records))
| a | b |
|---|---|
| 1 | 2.5 |
"""
from __future__ import annotations

import csv
import importlib
import json
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from tqdm.auto import tqdm


def progress_bar(iterable: Iterable, desc: str, total: int | None = None):
    """``iterable`` behind a progress bar on stderr (silent when stderr is not a terminal): the long sweeps'
    ``progress`` argument."""
    return tqdm(iterable, desc=desc, total=total, leave=False, dynamic_ncols=True, disable=None)


@dataclass
class Context:
    """What an experiment is told about its run."""

    quick: bool            #: tiny sizes (CI, simulator) instead of the paper's
    backend: str           #: "gpu" or "simulator"
    out_dir: Path          #: this experiment's own output folder (exists)
    seed: int = 0

    @property
    def on_gpu(self) -> bool:
        return self.backend == "gpu"

    def progress(self, iterable: Iterable, desc: str, total: int | None = None):
        """Wrap a long loop in a progress bar (stderr; silent when not a TTY)."""
        return progress_bar(iterable, desc, total)


@dataclass
class Table:
    """One result table: a caption and one dict per row (same keys in each)."""

    caption: str
    records: list[dict]
    csv_name: str | None = None   #: file name; defaults to a slug of the caption


@dataclass
class Section:
    """An experiment's part of REPORT.md."""

    title: str
    text: str = ""                                    #: markdown; cite the paper's numbers here
    tables: list[Table] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)  #: PNG names inside out_dir


@dataclass(frozen=True)
class Experiment:
    name: str                          #: short id used by ``--only``
    title: str
    paper: str                         #: which source text it reproduces
    run: Callable[[Context], Section]
    needs_gpu: bool = False            #: skipped (and said so) on the simulator


class NotASourceCheckout(RuntimeError):
    """The ``experiments`` package is not importable: sparsekit runs from an installed copy alone."""


def discover() -> dict[str, Experiment]:
    """Every ``EXPERIMENT`` defined in a module of the ``experiments`` package.

    That package is a folder of the source repository, not part of the installed library, so
    ``reproduce`` runs from a checkout (``./dev reproduce`` from its root).
    """
    try:
        import experiments
    except ModuleNotFoundError as err:
        if err.name != "experiments":
            raise
        raise NotASourceCheckout("sparsekit reproduce runs from a source checkout: the experiments package is a "
                           "folder of the repository, not installed; run ./dev reproduce (or "
                           "python -m sparsekit reproduce) from the repository root") from err

    found: dict[str, Experiment] = {}
    for info in sorted(pkgutil.iter_modules(experiments.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"experiments.{info.name}")
        except Exception as err:  # a broken module is reported by reproduce, it does not hide the others
            found[info.name] = _import_failure(info.name, err)
            continue
        exp = getattr(module, "EXPERIMENT", None)
        if isinstance(exp, Experiment):
            if exp.name in found:
                raise ValueError(f"experiment name {exp.name!r} is registered twice")
            found[exp.name] = exp
    return found


def _import_failure(name: str, err: Exception) -> Experiment:
    """A stand-in whose run re-raises why ``experiments.<name>`` failed to import."""
    def run(ctx: Context) -> Section:
        raise RuntimeError(f"experiments.{name} failed to import") from err
    return Experiment(name, f"{name} (failed to import)", "unknown", run)


def save_figure(fig, path: Path) -> str:
    """Lay out ``fig``, write it to ``path`` as a PNG at 120 dpi, close it; returns the file's name
    (what :attr:`Section.figures` lists)."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path.name


def slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text.lower()).strip("_")[:60] or "table"


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def markdown_table(records: list[dict]) -> str:
    """Render records (dicts with the same keys) as a GitHub markdown table."""
    if not records:
        return "_(no rows)_"
    keys = list(records[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(_fmt(r.get(k, "")) for k in keys) + " |" for r in records]
    return "\n".join(lines)


def merge_records(old: list[dict], new: list[dict], key: tuple[str, ...]) -> list[dict]:
    """``old`` with each record that ``new`` measured again (the same values of the ``key`` fields) replaced in
    place, and ``new``'s other records appended: a run of part of a sweep updates the one current record.
    ``ValueError`` where a record lacks a ``key`` field or ``new`` holds one point twice."""
    def point(record: dict, which: str) -> tuple:
        missing = [name for name in key if name not in record]
        if missing:
            raise ValueError(f"merge: a record of the {which} run has no {', '.join(missing)} field "
                             f"(a record of another benchmark?)")
        return tuple(record[name] for name in key)

    fresh: dict[tuple, dict] = {}
    for record in new:
        at = point(record, "new")
        if at in fresh:
            raise ValueError(f"merge: the new run measured {dict(zip(key, at))} twice")
        fresh[at] = record
    merged = [fresh.pop(point(record, "old"), record) for record in old]
    return merged + list(fresh.values())


def read_record(path: Path, key: tuple[str, ...], what: str) -> dict:
    """An earlier run's JSON record to merge a new one into (:func:`merge_records`), read and checked before the
    new run: a list of records, or an object holding them under ``records`` beside its other fields (returned
    as they are, the list under ``records``). ``ValueError`` naming ``what`` unless every record has the ``key``
    fields."""
    try:
        data = json.loads(Path(path).read_text())
        held = data if isinstance(data, list) else data["records"]
        if not (isinstance(held, list) and all(isinstance(r, dict) and set(key) <= set(r) for r in held)):
            raise TypeError("records without the fields " + ", ".join(key))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a {what} record ({type(err).__name__}: {err})") from None
    return {"records": held} if isinstance(data, list) else data


def write_csv(records: list[dict], path: Path) -> None:
    keys: list[str] = []
    for r in records:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(records)
