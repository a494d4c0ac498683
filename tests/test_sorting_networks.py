"""Comparator networks: 0-1 proofs, sizes and depths, and the generated code sorts."""
import functools
import itertools

import pytest
from hypothesis import given, strategies as st

from sparsekit.sorting_networks import (Network, batcher_odd_even_merge, bose_nelson,
                                        compare_exchange_source, green16, verify)

# Comparator counts from the literature (Knuth, TAOCP 3, 5.3.4): Batcher 16 -> 63 (depth 10),
# Bose-Nelson 16 -> 65, Green 16 -> 60 (depth 10); 15 is the depth of Bose-Nelson in generation order.
KNOWN = {("batcher", 16): (63, 10), ("bose_nelson", 16): (65, 15), ("green", 16): (60, 10)}


@pytest.mark.parametrize("make", [bose_nelson, batcher_odd_even_merge])
@pytest.mark.parametrize("n", range(1, 17))
def test_generated_networks_sort_all_zero_one_inputs(make, n):
    assert verify(make(n))


def test_sizes_and_depths_match_the_literature():
    assert (batcher_odd_even_merge(16).size, batcher_odd_even_merge(16).depth) == KNOWN[("batcher", 16)]
    assert (bose_nelson(16).size, bose_nelson(16).depth) == KNOWN[("bose_nelson", 16)]
    g = green16()
    assert (g.size, g.depth) == KNOWN[("green", 16)] and verify(g)


def test_comparators_are_ordered_pairs_in_range():
    for net in (bose_nelson(16), batcher_odd_even_merge(13), green16()):
        assert all(0 <= i < j < net.n for i, j in net.comparators)


@pytest.mark.parametrize("drop", [0, 30, 59])
def test_verify_rejects_a_network_missing_one_comparator(drop):
    g = green16()
    broken = Network("broken", 16, g.comparators[:drop] + g.comparators[drop + 1:])
    assert not verify(broken)


def test_layers_keep_per_wire_order():
    net = bose_nelson(16)
    flat = [c for layer in net.layers() for c in layer]
    assert sorted(flat) == sorted(net.comparators)
    for layer in net.layers():
        wires = [w for c in layer for w in c]
        assert len(wires) == len(set(wires))


@functools.cache
def _code(source: str):
    return compile(source, "<network>", "exec")   # once per source: exec of the string compiled it every call


def _run(source: str, n: int, keys):
    env = {f"k{i}": keys[i] for i in range(n)}
    exec(_code(source), {}, env)
    return [env[f"k{i}"] for i in range(n)]


@given(st.lists(st.integers(-5, 5), min_size=16, max_size=16))
def test_generated_source_sorts_with_ties(keys):
    for net in (green16(), bose_nelson(16), batcher_odd_even_merge(16)):
        assert _run(compare_exchange_source(net, "k"), 16, keys) == sorted(keys)


@given(st.lists(st.integers(0, 3), min_size=16, max_size=16))
def test_swap_equal_form_sorts_on_the_derived_key_and_moves_ties(keys):
    # Values above 4 position bits, as the tile sparsifier packs them.
    packed = [(v << 4) | i for i, v in enumerate(keys)]
    out = _run(compare_exchange_source(bose_nelson(16), "k", swap_equal_on="({} >> 4)"), 16, packed)
    assert [o >> 4 for o in out] == sorted(keys)
    assert sorted(o & 15 for o in out) == list(range(16))


@given(st.lists(st.integers(0, 3), min_size=16, max_size=16))
def test_less_form_is_the_swap_equal_form(keys):
    # "{a} < ({b} & ~15)" is the test "({a} >> 4) < ({b} >> 4)": same outputs, ties moved the same way
    packed = [(v << 4) | i for i, v in enumerate(keys)]
    net = bose_nelson(16)
    assert _run(compare_exchange_source(net, "k", less="{a} < ({b} & ~15)"), 16, packed) == \
        _run(compare_exchange_source(net, "k", swap_equal_on="({} >> 4)"), 16, packed)


def test_swap_equal_form_swaps_on_equal_keys():
    net = Network("one", 2, ((0, 1),))
    assert _run(compare_exchange_source(net, "k", swap_equal_on="({} >> 4)"), 2, [0x10, 0x11]) == [0x11, 0x10]
    assert _run(compare_exchange_source(net, "k"), 2, [0x10, 0x11]) == [0x10, 0x11]


def test_all_permutations_of_eight_sort():
    net = batcher_odd_even_merge(8)
    src = compare_exchange_source(net, "k")
    for perm in itertools.permutations(range(8)):
        if perm[0] % 3 == 0:  # a third of the 40320, enough and quick
            assert _run(src, 8, list(perm)) == list(range(8))


def test_verify_is_fast_for_sixteen_wires():
    import time
    t = time.perf_counter()
    verify(green16())
    assert time.perf_counter() - t < 1.0
