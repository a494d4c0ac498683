"""The slides' loop-interchange cost table, computed, and checked by a cache simulator.

The course slides ("Loop Interchange", ../shared/papers/spmm-course-slides.txt)
tabulate, for ``C[i][j] += A[i][k] * B[k][j]`` in the order ``i, j, k``, how
many cache lines each loop level makes each array load::

        A     B     C
    i   N     N     N
    j   N     N     N/B
    k   N/B   N     1
        N^3/B N^3   N^2/B        (B = elements per cache line)

The rule behind the table (a cache far smaller than one row of a matrix, so
nothing survives an inner loop that sweeps a row or a column), applied from
the innermost loop outwards, per array:

* while the array's accesses inside the loop are still one element (it does
  not depend on any inner loop): the loop costs ``1`` if the array does not
  depend on it, ``trip/B`` if the loop walks the array's contiguous index, and
  ``trip`` otherwise;
* once the inner loops touch more than one element: ``trip`` (each iteration
  reloads the inner footprint).

:func:`cost_table` applies the rule to any :class:`LoopNest`;
:func:`dense_nest` builds the six dense orders and :func:`csr_nest` the four
CSR orders of ``sparsekit/cpu/spmm.py`` (A's values stream contiguously; ``B[indices[p]]``
is a gather, so ``p`` walks B's rows). :func:`simulate_misses` replays the
real address trace of the loop nest through a small fully associative LRU
cache and counts line loads: ``tests/test_loop_orders.py`` checks that the
count equals the table for every order.

>>> table = cost_table(dense_nest("ijk"))
>>> [(r["loop"], r["A"], r["B"], r["C"]) for r in table]
[('i', 'N', 'N', 'N'), ('j', 'N', 'N', 'N/B'), ('k', 'N/B', 'N', '1'), ('total', 'N^3/B', 'N^3', 'N^2/B')]
>>> predicted_misses(dense_nest("ijk"), {"N": 32}, line=4)
{'A': 8192, 'B': 32768, 'C': 256}
"""
from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass

import numpy as np

from sparsekit.checks import check_int

__all__ = ["Access", "LoopNest", "dense_nest", "csr_nest", "cost_table", "predicted_misses",
           "dense_trace", "csr_trace", "simulate_misses", "order_table", "DENSE_ORDERS", "CSR_ORDERS"]

DENSE_ORDERS = ("ijk", "ikj", "jik", "jki", "kij", "kji")
CSR_ORDERS = ("rowwise", "inner", "colwise", "outer")


@dataclass(frozen=True)
class Access:
    """One array reference in the loop body: the loops its address depends on,
    and the loop (if any) that walks its contiguous (unit-stride) index."""

    array: str
    depends: frozenset
    contiguous: str | None


@dataclass(frozen=True)
class LoopNest:
    """Loops outer to inner as ``(name, trip-count symbol)``, and the body's accesses."""

    loops: tuple
    accesses: tuple


def dense_nest(order: str) -> LoopNest:
    """``C[i][j] += A[i][k] * B[k][j]`` with loops in ``order`` (e.g. ``"ikj"``), all of trip ``N``."""
    if sorted(order) != ["i", "j", "k"]:
        raise ValueError(f"order: expected a permutation of 'ijk', got {order!r}")
    return LoopNest(tuple((x, "N") for x in order),
                    (Access("A", frozenset("ik"), "k"), Access("B", frozenset("kj"), "j"),
                     Access("C", frozenset("ij"), "j")))


def csr_nest(order: str) -> LoopNest:
    """The CSR loop nests of ``sparsekit.cpu.spmm.spmm_csr`` for a matrix with equal row (and column) counts.

    Trip symbols: ``M`` rows, ``N`` columns of B and C, ``K`` columns of A,
    ``r`` nonzeros per row, ``c`` nonzeros per column (the outer product walks
    A by columns, as CSC).
    A stands for the values array (the index array adds the same count again).
    """
    a, b, c = "A", "B", "C"
    if order == "rowwise":        # i, p, j:  C[i, j] += val[p] * B[idx[p], j]
        loops = (("i", "M"), ("p", "r"), ("j", "N"))
        acc = (Access(a, frozenset("ip"), "p"), Access(b, frozenset("pj"), "j"), Access(c, frozenset("ij"), "j"))
    elif order == "inner":        # i, j, p
        loops = (("i", "M"), ("j", "N"), ("p", "r"))
        acc = (Access(a, frozenset("ip"), "p"), Access(b, frozenset("pj"), "j"), Access(c, frozenset("ij"), "j"))
    elif order == "colwise":      # j, i, p
        loops = (("j", "N"), ("i", "M"), ("p", "r"))
        acc = (Access(a, frozenset("ip"), "p"), Access(b, frozenset("pj"), "j"), Access(c, frozenset("ij"), "j"))
    elif order == "outer":        # k, p, j:  C[row[p], j] += val[p] * B[k, j]   (A in CSC)
        loops = (("k", "K"), ("p", "c"), ("j", "N"))
        acc = (Access(a, frozenset("kp"), "p"), Access(b, frozenset("kj"), "j"), Access(c, frozenset("pj"), "j"))
    else:
        raise ValueError(f"order: expected one of {CSR_ORDERS}, got {order!r}")
    return LoopNest(loops, acc)


def _factors(nest: LoopNest) -> dict:
    """Per array, per loop (outer to inner): ``(symbol or None, per_line)``; None means 1."""
    out = {}
    for acc in nest.accesses:
        single = True
        facs = []
        for name, trip in reversed(nest.loops):
            if single:
                if name not in acc.depends:
                    facs.append((None, False))
                else:
                    facs.append((trip, name == acc.contiguous))
                    single = False
            else:
                facs.append((trip, False))
        out[acc.array] = facs[::-1]
    return out


def _symbol(factors) -> str:
    syms = Counter(s for s, _ in factors if s is not None)
    lines = sum(1 for _, per_line in factors if per_line)
    if not syms:
        return "1"
    num = "·".join(s if e == 1 else f"{s}^{e}" for s, e in syms.items())
    return num if lines == 0 else f"{num}/B" if lines == 1 else f"{num}/B^{lines}"


def cost_table(nest: LoopNest) -> list[dict]:
    """The slides' table for ``nest``: one row per loop (outer first) and a ``total`` row.

    Entries are strings: ``"1"``, the trip symbol (``"N"``), or ``"N/B"``.
    """
    facs = _factors(nest)
    rows = []
    for pos, (name, _) in enumerate(nest.loops):
        rows.append({"loop": name, **{arr: _symbol([f[pos]]) for arr, f in facs.items()}})
    rows.append({"loop": "total", **{arr: _symbol(f) for arr, f in facs.items()}})
    return rows


def predicted_misses(nest: LoopNest, sizes: dict, *, line: int) -> dict:
    """Cache lines loaded per array by the rule, for trip counts ``sizes`` (e.g. ``{"N": 32}``).

    Trip counts along a contiguous index must be multiples of ``line`` (the
    table's ``N/B`` assumes whole lines).
    """
    check_int(line, "line", minimum=1)
    out = {}
    for arr, facs in _factors(nest).items():
        total = 1
        for sym, per_line in facs:
            if sym is None:
                continue
            trip = check_int(sizes[sym], f"sizes[{sym!r}]", minimum=1)
            if per_line:
                if trip % line:
                    raise ValueError(f"sizes[{sym!r}]: must be a multiple of line = {line} "
                                     f"(it walks a contiguous index), got {trip}")
                trip //= line
            total *= trip
        out[arr] = total
    return out


# --------------------------------------------------------------------------- traces and the cache

def dense_trace(order: str, n: int):
    """Yield ``(array, flat element index)`` for every access of the dense loop nest, in order.

    Each iteration reads A, then B, then reads and writes C (one access: the
    line is the same). Matrices are ``n x n`` row-major.
    """
    dense_nest(order)
    for x0 in range(n):
        for x1 in range(n):
            for x2 in range(n):
                v = dict(zip(order, (x0, x1, x2)))
                i, j, k = v["i"], v["j"], v["k"]
                yield "A", i * n + k
                yield "B", k * n + j
                yield "C", i * n + j


def csr_trace(order: str, indptr: np.ndarray, indices: np.ndarray, shape, n: int):
    """Yield ``(array, flat index)`` for ``sparsekit.cpu.spmm.spmm_csr``'s loop nest ``order``.

    ``A`` is the values array (position ``p`` in CSR, or in CSC for
    ``outer``); B is ``K x n`` and C ``M x n``, row-major.
    """
    m, k = shape
    if order == "outer":
        # CSC of the structure: a stable sort by column keeps rows ascending.
        rows_of = np.repeat(np.arange(m), np.diff(indptr))
        perm = np.argsort(indices, kind="stable")
        colptr = np.zeros(k + 1, dtype=np.int64)
        np.cumsum(np.bincount(indices, minlength=k), out=colptr[1:])
        for kk in range(k):
            for p in range(colptr[kk], colptr[kk + 1]):
                i = int(rows_of[perm[p]])
                for j in range(n):
                    yield "A", p
                    yield "B", kk * n + j
                    yield "C", i * n + j
        return
    csr_nest(order)

    def body(i, p, j):
        yield "A", p
        yield "B", int(indices[p]) * n + j
        yield "C", i * n + j

    if order == "rowwise":
        for i in range(m):
            for p in range(indptr[i], indptr[i + 1]):
                for j in range(n):
                    yield from body(i, p, j)
    elif order == "inner":
        for i in range(m):
            for j in range(n):
                for p in range(indptr[i], indptr[i + 1]):
                    yield from body(i, p, j)
    else:  # colwise
        for j in range(n):
            for i in range(m):
                for p in range(indptr[i], indptr[i + 1]):
                    yield from body(i, p, j)


def simulate_misses(trace, *, line: int, capacity: int) -> dict:
    """Count line loads per array for ``trace`` through a fully associative LRU cache.

    ``capacity`` is in lines; each array starts on a line boundary of its own.
    Returns ``{array: misses}`` and, under ``"accesses"``, the element accesses
    per array.
    """
    check_int(line, "line", minimum=1)
    check_int(capacity, "capacity", minimum=1)
    cache: OrderedDict = OrderedDict()
    misses: Counter = Counter()
    accesses: Counter = Counter()
    for arr, idx in trace:
        accesses[arr] += 1
        key = (arr, idx // line)
        if key in cache:
            cache.move_to_end(key)
        else:
            misses[arr] += 1
            cache[key] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return {**dict(sorted(misses.items())), "accesses": dict(sorted(accesses.items()))}


def order_table(*, n: int = 16, line: int = 4, capacity: int = 4) -> list[dict]:
    """One record per dense order: the table's totals (symbolic and numeric) beside the simulated count."""
    records = []
    for order in DENSE_ORDERS:
        nest = dense_nest(order)
        total = cost_table(nest)[-1]
        pred = predicted_misses(nest, {"N": n}, line=line)
        sim = simulate_misses(dense_trace(order, n), line=line, capacity=capacity)
        rec = {"order": order}
        for arr in "ABC":
            rec[f"{arr} (table)"] = total[arr]
            rec[f"{arr} predicted"] = pred[arr]
            rec[f"{arr} simulated"] = sim[arr]
        rec["total predicted"] = sum(pred.values())
        records.append(rec)
    return records
