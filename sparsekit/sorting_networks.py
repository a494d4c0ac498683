"""Comparator networks: generators, a 0-1-principle proof, and straight-line code.

A sorting network on ``n`` wires is a fixed list of comparators ``(i, j)``,
``i < j``; each one puts the smaller of wires ``i`` and ``j`` on ``i`` and the
larger on ``j``. Nothing depends on the data, so a GPU thread can sort in
registers with no branches: the 2:4 tile sparsifier of the semi-structured
training post sorts the 16 values of a 4x4 tile this way
(../shared/papers/semi-structured-24-training.txt, "Sorting elements in a 4x4
tile without warp-divergence").

Generators (each returns a :class:`Network`; the comparator ORDER is part of
the result: a network whose comparators swap equal keys, as PyTorch's does,
moves tied elements in an order that depends on it):

* :func:`bose_nelson` -- Bose and Nelson (1962), in the recursive order of
  the classic generator that PyTorch's ``StaticSort`` instantiates
  (sort each half, then merge with the "P-bracket" recursion);
* :func:`batcher_odd_even_merge` -- Batcher's odd-even merge sort (1968),
  any ``n`` (comparators beyond ``n`` dropped);
* :func:`green16` -- the best known 16-input network: 60 comparators in 10
  layers (Green 1969; listed in Knuth, TAOCP vol. 3, sec. 5.3.4).

:func:`verify` proves a network sorts every input by the 0-1 principle (a
comparator network sorts all inputs iff it sorts all ``2**n`` 0/1 inputs),
bit-parallel: wire ``w`` holds one bit per input, a comparator is an AND
(min) and an OR (max), so the ``2**16`` inputs take 60 vector operations.

:func:`compare_exchange_source` writes the network as straight-line Python for
a Numba kernel (one tuple assignment per comparator, no lists, so every key
stays in a register).

>>> net = green16()
>>> net.size, net.depth, verify(net)
(60, 10, True)
>>> bn = bose_nelson(16)
>>> bn.size, verify(bn)
(65, True)
>>> print(compare_exchange_source(bose_nelson(3), "k").splitlines()[0])
k1, k2 = min(k1, k2), max(k1, k2)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sparsekit.checks import check_int

__all__ = ["Network", "bose_nelson", "batcher_odd_even_merge", "green16", "verify",
           "compare_exchange_source"]

# The 16-input, 60-comparator, depth-10 network (Green 1969), layer by layer.
_GREEN16_LAYERS = (
    ((0, 13), (1, 12), (2, 15), (3, 14), (4, 8), (5, 6), (7, 11), (9, 10)),
    ((0, 5), (1, 7), (2, 9), (3, 4), (6, 13), (8, 14), (10, 15), (11, 12)),
    ((0, 1), (2, 3), (4, 5), (6, 8), (7, 9), (10, 11), (12, 13), (14, 15)),
    ((0, 2), (1, 3), (4, 10), (5, 11), (6, 7), (8, 9), (12, 14), (13, 15)),
    ((1, 2), (3, 12), (4, 6), (5, 7), (8, 10), (9, 11), (13, 14)),
    ((1, 4), (2, 6), (5, 8), (7, 10), (9, 13), (11, 14)),
    ((2, 4), (3, 6), (9, 12), (11, 13)),
    ((3, 5), (6, 8), (7, 9), (10, 12)),
    ((3, 4), (5, 6), (7, 8), (9, 10), (11, 12)),
    ((6, 7), (8, 9)),
)


@dataclass(frozen=True)
class Network:
    """A comparator network: ``n`` wires and an ordered tuple of comparators ``(i, j)``, ``i < j``."""

    name: str
    n: int
    comparators: tuple

    @property
    def size(self) -> int:
        """Number of comparators."""
        return len(self.comparators)

    def layers(self) -> list[list[tuple[int, int]]]:
        """Comparators grouped into parallel layers, as early as each one can run.

        A comparator goes one layer after the last layer that touched either
        of its wires; the order inside the original list is kept per wire, so
        running the layers one after another gives the same result.
        """
        last = [0] * self.n
        out: list[list[tuple[int, int]]] = []
        for i, j in self.comparators:
            layer = max(last[i], last[j]) + 1
            last[i] = last[j] = layer
            if layer > len(out):
                out.append([])
            out[layer - 1].append((i, j))
        return out

    @property
    def depth(self) -> int:
        """Number of parallel layers (the longest chain of dependent comparators)."""
        return len(self.layers())

    def __repr__(self) -> str:
        return f"<Network {self.name} n={self.n} size={self.size} depth={self.depth}>"


def bose_nelson(n: int) -> Network:
    """Bose-Nelson network on ``n`` wires, comparators in generation order.

    ``sort(i, m)`` sorts wires ``i .. i+m-1``: sort the first ``m // 2``,
    sort the rest, then merge the two sorted runs with ``bracket``.
    ``bracket(i, x, j, y)`` merges sorted runs ``i .. i+x-1`` and
    ``j .. j+y-1``: split the first run in ``a = x // 2``, the second in
    ``b = y // 2`` (``x`` odd) or ``(y + 1) // 2`` (``x`` even), merge the two
    front parts, the two back parts, then the first run's back with the second
    run's front. Runs of 1x1, 1x2 and 2x1 are the base cases.
    """
    n = check_int(n, "n", minimum=1)
    out: list[tuple[int, int]] = []

    def bracket(i: int, x: int, j: int, y: int) -> None:
        if x == 0 or y == 0:
            return
        if x == 1 and y == 1:
            out.append((i, j))
        elif x == 1 and y == 2:
            out.append((i, j + 1))
            out.append((i, j))
        elif x == 2 and y == 1:
            out.append((i, j))
            out.append((i + 1, j))
        else:
            a = x // 2
            b = y // 2 if x % 2 else (y + 1) // 2
            bracket(i, a, j, b)
            bracket(i + a, x - a, j + b, y - b)
            bracket(i + a, x - a, j, b)

    def sort(i: int, m: int) -> None:
        if m <= 1:
            return
        a = m // 2
        sort(i, a)
        sort(i + a, m - a)
        bracket(i, a, i + a, m - a)

    sort(0, n)
    return Network(f"bose_nelson_{n}", n, tuple(out))


def batcher_odd_even_merge(n: int) -> Network:
    """Batcher's odd-even merge sort on ``n`` wires (any ``n``; iterative form).

    For run length ``p = 1, 2, 4, ...`` and distance ``k = p, p/2, ..., 1``,
    compare ``i + j`` with ``i + j + k`` when both lie in the same block of
    ``2p`` wires, for ``j`` stepping by ``2k`` from ``k % p``.
    """
    n = check_int(n, "n", minimum=1)
    out: list[tuple[int, int]] = []
    p = 1
    while p < n:
        k = p
        while k >= 1:
            for j in range(k % p, n - k, 2 * k):
                for i in range(min(k, n - j - k)):
                    if (i + j) // (2 * p) == (i + j + k) // (2 * p):
                        out.append((i + j, i + j + k))
            k //= 2
        p *= 2
    return Network(f"batcher_{n}", n, tuple(out))


def green16() -> Network:
    """The best known 16-input sorting network: 60 comparators, depth 10 (Green 1969)."""
    return Network("green_16", 16, tuple(c for layer in _GREEN16_LAYERS for c in layer))


def _zero_one_wires(n: int) -> np.ndarray:
    """``(n, 2**n / 64)`` uint64: bit ``t`` of wire ``w`` is bit ``w`` of input ``t``."""
    t = np.arange(max(2**n, 64), dtype=np.uint64) % np.uint64(2**n)
    bits = ((t[None, :] >> np.arange(n, dtype=np.uint64)[:, None]) & np.uint64(1)).astype(np.uint8)
    return np.packbits(bits, axis=1, bitorder="little").view(np.uint64)


def verify(network: Network) -> bool:
    """True iff ``network`` sorts every input (ascending): all ``2**n`` 0/1 inputs, bit-parallel.

    Costs ``size`` AND/OR pairs on ``2**n``-bit vectors (16 wires: 60 pairs on
    1024 words each, a few milliseconds). ``n`` up to 24.
    """
    n = check_int(network.n, "network.n", minimum=1, maximum=24)
    wires = list(_zero_one_wires(n))
    for i, j in network.comparators:
        wires[i], wires[j] = wires[i] & wires[j], wires[i] | wires[j]
    # Sorted ascending: no input has a 1 on wire w and a 0 on wire w + 1.
    return all(not np.any(wires[w] & ~wires[w + 1]) for w in range(n - 1))


def compare_exchange_source(network: Network, prefix: str, *, swap_equal_on: str | None = None,
                            less: str | None = None, select: str | None = None, indent: str = "") -> str:
    """Straight-line Python that sorts variables ``{prefix}0 .. {prefix}{n-1}`` ascending.

    Default: each comparator is ``a, b = min(a, b), max(a, b)`` (keys must be
    distinct for the result to be independent of the network, or the caller
    does not care where equal keys go).

    ``swap_equal_on="expr"`` reproduces a comparator that compares a derived
    key and exchanges the two wires unless the first is strictly smaller, as
    PyTorch's ``StaticSort`` does: ``expr`` is a format string with ``{}`` for
    the variable, e.g. ``"({} >> 4)"`` to compare a value stored above 4
    position bits. ``less="expr"`` is the same comparator with the whole test
    given, a format string with ``{a}`` and ``{b}`` (e.g. ``"{a} < ({b} & ~15)"``,
    the same test as ``({a} >> 4) < ({b} >> 4)`` in one fewer operation).
    All forms compile to selects, no branches. ``select="name"`` writes the
    exchange of the last two forms as calls ``name(test, a, b)`` (meaning ``a if
    test else b``) instead of conditional expressions, which keeps the generated
    function one basic block for a compiler whose passes grow with the blocks
    (Numba makes three of each conditional expression).
    """
    lines = []
    for i, j in network.comparators:
        a, b = f"{prefix}{i}", f"{prefix}{j}"
        if swap_equal_on is None and less is None:
            lines.append(f"{indent}{a}, {b} = min({a}, {b}), max({a}, {b})")
        else:
            lt = less.format(a=a, b=b) if less is not None else \
                f"{swap_equal_on.format(a)} < {swap_equal_on.format(b)}"
            if select is None:
                lines.append(f"{indent}{a}, {b} = ({a} if {lt} else {b}), ({b} if {lt} else {a})")
            else:
                lines.append(f"{indent}{a}, {b} = {select}({lt}, {a}, {b}), {select}({lt}, {b}, {a})")
    return "\n".join(lines) + "\n"
