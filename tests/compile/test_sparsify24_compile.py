"""The 2:4 sparsifier's kernels compile for sm_80 and sm_90 offline, and the PTX proves the claims.

* no ``.local`` in the post-LTO PTX and 0 bytes of spill in ptxas's report: the
  16 keys of a tile, the sorting network and the 64 values stay in registers;
* the generated tile-mask functions and the fp16 packer compile to straight-line
  code: a probe kernel around each has no branch at all;
* fp16: the integer work is 32-bit (Numba would make it 64-bit): under 10% of
  the PTX instructions are 64-bit ALU operations (the rest is addressing); W is
  read with one 128-bit load per row (``ld.global.v4.u32``, 4 per half of the
  8x8 block; 8 before the loop with ``prefetch``), packed W and W^T are written as 64-bit words;
* fp32: 64-bit loads (``ld.global.u64``), 16 per half;
* one ``bar.sync`` for the shared-memory metadata exchange (fp16: and one after the packing table's copy).
"""
from __future__ import annotations

import functools
import re

import pytest
from numba import cuda, types

from sparsekit.gpu import sparsify24 as g
from sparsekit import offline


def kernel_args(bits: int):
    if bits == 16:
        return (types.uint32[::1], types.float16[:, ::1], types.uint64[::1], types.uint64[::1], types.uint32[::1],
                types.uint32[::1], types.uint32[::1], types.int32[::1], types.int64, types.int64)
    return (types.int64[:, ::1], types.float32[:, ::1], types.uint32[:, ::1], types.uint32[:, ::1],
            types.uint32[::1], types.uint32[::1], types.uint16[:, ::1], types.int32[::1], types.int64, types.int64)


def alu64_share(ptx: str) -> float:
    """Share of PTX instructions that are 64-bit integer ALU operations (loads, stores, moves, conversions aside)."""
    ops = [line.split()[0] for line in ptx.splitlines()
           if line.strip() and line.startswith("\t") and ";" in line and not line.strip().startswith(("//", "."))]
    wide = [o for o in ops if o.split(".")[0] not in ("ld", "st", "mov", "cvt", "cvta")
            and re.search(r"\.(b64|s64|u64)$", o)]
    return len(wide) / len(ops)


@functools.cache
def build(kernel, args, cc) -> offline.Build:
    """(post-LTO PTX, ptxas report) of one kernel, with its launch bounds (cached: several tests read one build)."""
    return offline.build(kernel, args, cc)


# Each build is Numba + NVVM + two nvJitLink LTO passes (PTX, then cubin for ptxas's report): 2-8 s
# each on the 2-core CI machine since the generated functions select through calls (gpu.sparsify24._pick;
# with conditional expressions the 186-candidate kernel took ~105 s, optimal_full ~18 s).
BUILDS = [((9, 0), 16, "greedy", "index", False, True), ((9, 0), 16, "greedy", "torch", False, True),
          ((9, 0), 16, "optimal_full", "index", False, True), ((9, 0), 16, "optimal", "index", False, True),
          ((9, 0), 32, "greedy", "index", False, True), ((8, 0), 16, "greedy", "index", False, True),
          ((9, 0), 16, "greedy", "index", True, True), ((9, 0), 16, "greedy", "torch", True, True),
          ((9, 0), 16, "greedy", "index", False, False)]


@pytest.mark.parametrize("cc,bits,method,ties,prefetch,pack_table", BUILDS)
def test_kernel_compiles_in_registers(cc, bits, method, ties, prefetch, pack_table):
    ptx, report = build(g.kernel_for(bits, method, ties, prefetch=prefetch, pack_table=pack_table),
                        kernel_args(bits), cc)
    assert f".target sm_{cc[0]}{cc[1]}" in ptx
    assert ".local" not in ptx
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    assert spills and all(a == "0" and b == "0" for a, b in spills), report
    # fp16: the packing table's copy to shared memory, then the metadata exchange
    assert len(re.findall(r"\bbar\.sync\b", ptx)) == (2 if bits == 16 and pack_table else 1)
    # the loop over the two halves is not unrolled: the loads below are one half's (both halves'
    # with prefetch, read before the loop)
    if bits == 16:
        assert len(re.findall(r"ld\.global\.v4\.u32", ptx)) == (8 if prefetch else 4)
        assert len(re.findall(r"st\.global\.u64", ptx)) == 4 + 8       # packed W rows, packed W^T rows
        assert alu64_share(ptx) < 0.10
    else:
        assert len(re.findall(r"ld\.global\.u64", ptx)) == 16


_greedy_index = g.GREEDY_TILE16["index"]
_greedy_torch = g.GREEDY_TILE16["torch"]
_optimal_full = g.OPTIMAL_TILE["optimal_full"]
_tile16_table = g.TILE16[True]
_tile16_arith = g.TILE16[False]


@cuda.jit
def _probe_greedy16_index(w, out):
    out[0], out[1] = _greedy_index(w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7])


@cuda.jit
def _probe_greedy16_torch(w, out):
    out[0], out[1] = _greedy_torch(w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7])


@cuda.jit
def _probe_optimal_full(wf, out):
    out[0] = _optimal_full(wf, 0, 0)


@cuda.jit
def _probe_tile16_table(w, tab, out):
    r = _tile16_table(tab, w[8], w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7])
    for i in range(10):
        out[i] = r[i]


@cuda.jit
def _probe_tile16_arith(w, tab, out):
    r = _tile16_arith(tab, w[8], w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7])
    for i in range(10):
        out[i] = r[i]


@pytest.mark.parametrize("probe,args", [
    (_probe_greedy16_index, (types.uint32[::1], types.uint32[::1])),
    (_probe_greedy16_torch, (types.uint32[::1], types.uint32[::1])),
    (_probe_optimal_full, (types.float16[:, ::1], types.uint32[::1])),
    (_probe_tile16_table, (types.uint32[::1], types.uint32[::1], types.uint32[::1])),
    (_probe_tile16_arith, (types.uint32[::1], types.uint32[::1], types.uint32[::1])),
])
def test_tile_functions_are_branch_free(probe, args):
    ptx, _ = build(probe, args, (9, 0))
    assert not re.search(r"\bbra\b", ptx), "sorting, greedy, scoring and packing must be selects only"
    assert ".local" not in ptx


def test_greedy16_sorts_with_32_bit_min_max():
    ptx, _ = build(_probe_greedy16_index, (types.uint32[::1], types.uint32[::1]), (9, 0))
    # Green's network: 60 comparators, one min.u32 and one max.u32 each
    assert len(re.findall(r"\bmin\.u32", ptx)) == 60 and len(re.findall(r"\bmax\.u32", ptx)) == 60
    assert alu64_share(ptx) == 0


def test_register_count_is_reported(capsys):
    ptx, report = build(g.kernel_for(16, "greedy", "index"), kernel_args(16), (9, 0))
    regs = int(re.search(r"Used (\d+) registers", report).group(1))
    assert 0 < regs <= 255
    with capsys.disabled():
        print(f"\nsparsify24 fp16 greedy sm_90: {regs} registers, {100 * alu64_share(ptx):.1f}% 64-bit ALU PTX")
