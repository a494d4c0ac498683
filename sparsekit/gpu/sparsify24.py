"""Transposable 2:4 sparsifier on the GPU: one pass writes packed W, packed W^T, both metadata.

Computes exactly :func:`sparsekit.reference.sparsify24.sparsify24` (same masks, same
packed values, same metadata bits, for ``method`` "greedy" with ``ties``
"index" or "torch", "optimal" and "optimal_full"), following the kernel of the semi-structured
training post (../shared/papers/semi-structured-24-training.txt, sections 2-4):

* **Tiling (post, "Kernel tiling for efficient memory-IO")**: each thread owns
  an 8x8 block of ``w``, four 4x4 tiles A B / C D, in two halves (A B, then
  C D; a loop kept rolled, which halves the code and the compile time). A
  warp is 4 thread-rows x 8 thread-columns, so each of its row loads covers
  4 rows x 64 contiguous columns (128 bytes per row in fp16).
* **fp16: 32-bit words** (the post's kernel works on registers of 32 bits;
  Numba would widen every integer operation to 64): a row of a half is read
  with one 128-bit load (:func:`sparsekit.gpu.vector_loads.load4`, 8 fp16 as 4 words),
  every integer step is wrapped in ``np.uint32`` so LLVM keeps it 32-bit, and
  variable shifts and the fp16 lane shuffles go through three intrinsics
  (``shr32``, ``shl32``, ``prmt``: PTX's byte permute). Packed W and packed
  W^T are written as 64-bit words (4 fp16), the tile masks as 32-bit words.
  Compile checks: under 10% of the PTX is 64-bit integer work (addressing),
  64 registers under the default launch bounds (:func:`auto_min_blocks`: 8
  blocks of 128 a SM; 71 without), no spills. **fp32** keeps the first design:
  keys need 35 bits, so 64-bit integers, 64-bit loads, 32-bit stores.
* **Sorting without divergence (post, section 3)**: the 16 keys of a tile are
  sorted by a comparator network generated as straight-line code
  (:mod:`sparsekit.sorting_networks`), so they stay in registers and every
  comparator is a select or a min/max: Green's 60-comparator network for
  ``ties="index"`` (keys distinct), PyTorch's Bose-Nelson network with
  swap-on-equal for ``ties="torch"``. fp16 keys are 27 bits: ``|w|`` above a
  byte holding the row and column one-hot (its order among equal ``|w|`` is
  the tie order) above the position; the greedy pass tests and counts rows
  and columns with two masks of that byte ("holds >= 1", "holds 2"): three
  logic operations and two selects per step, no variable shift but the
  mask bit's. fp32 keys are ``|w| bits << 4 | position`` with 2-bit counters.
  NaN/Inf: the sorted tile's top key is the largest ``|w|`` (their bit patterns
  sort above every finite one), so one max per tile flags them (fp16 greedy).
  The generated functions select through :func:`_pick` calls, never
  conditional expressions, so each is one basic block for Numba (compile time:
  the 186-candidate kernel 7 s instead of ~105 s on the 2-core CI machine).
* **Optimal mask**: every candidate (186 maximal masks for "optimal", the 90
  full ones for "optimal_full") is scored from 24 row-pair sums and the 16
  magnitudes (3 float32 adds and two selects each), straight-line, first
  maximum wins.
* **Writing (post, section 4)**: fp16 dropped lanes are zeroed once per tile
  (a multiply and two sign-mode ``prmt`` per row), so both packers (W's rows,
  W^T's columns: one ``prmt`` per column pair) read 0 in a filler slot; one
  ``prmt`` picks a row group's two values, its selector and the metadata
  nibble read from a 16-entry table in shared memory (``pack_table``). The
  metadata nibbles go to shared memory and, after a ``syncthreads``, every
  thread writes two 32-bit words of each metadata array, consecutive threads
  consecutive words (the post shuffles inside a warp instead; shuffles do not
  run in the CUDA simulator, shared memory does). A block is 8 x
  ``row_threads`` threads = ``8 * row_threads`` rows x 64 columns (tunable,
  default 16), whole 32x32 metadata blocks.

Measured on the H100 (experiments/results/sparsify24.md, 2026-11-23,
median of 30, L2 flushed): fp16 greedy with index ties 14.8 / 39.0 / 133.1 us
at 4096x1024 / 4096^2 / 8192^2, 41 / 62.5 / 73 % of the copy bandwidth for the
4.375 bytes per element it must move, 0.63 / 0.53 / 0.50x the time of
``torch._sparse_semi_structured_tile``; with ``ties="torch"`` (masks and packed
values equal to PyTorch's at 128^2..8192^2) 0.72 / 0.62 / 0.59x. Nsight Compute
at 4096^2 (its clocks locked to 1.6 GHz): "Compute (SM) Throughput" 73% against
37% for DRAM, so the kernel is bound by instructions more than by bytes. Every kernel equals the reference
bit for bit on the GPU, clean under compute-sanitizer memcheck and racecheck.

Non-finite input is reported through a flag word the launcher reads back
(``check_finite=True``), so device arrays get the same error as NumPy ones.
bfloat16: Numba has no bfloat16 array dtype (NumPy has none), so it is not
offered; the kernel only moves bits and would need nothing else.
"""
from __future__ import annotations

import numpy as np
from numba import cuda, float32, uint8, uint32
from numba.cuda import config

from sparsekit.reference.sparsify24 import (ALIGN, CANDIDATES, DTYPES, METHODS, NIBBLE, PAIRS, ROW_TERMS,
                                  TIES, Sparse24)
from sparsekit.arrays import cdiv, operand, output, result
from sparsekit.checks import check_divisible, check_int
from sparsekit.sorting_networks import bose_nelson, compare_exchange_source, green16

from sparsekit.gpu.vector_loads import aligned, load4

if not config.ENABLE_CUDASIM:
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

__all__ = ["sparsify24", "prepare", "kernel_for", "auto_min_blocks", "tile_mask_source", "ROW_THREADS", "PREFETCH",
           "PACK_TABLE", "GREEDY_TILE16", "GREEDY_TILE32", "OPTIMAL_TILE", "TILE16"]

#: Default thread rows per block (a block is 8 x row_threads threads, 8*row_threads rows x 64 columns).
ROW_THREADS = 16
#: Default of the fp16 tunable ``prefetch``: read both halves of the 8x8 block before packing the first.
PREFETCH = False
#: Default of the fp16 tunable ``pack_table``: row groups packed by a shared-memory table lookup.
PACK_TABLE = True
#: Allowed row_threads: blocks must cover whole 32-row metadata groups.
ROW_THREADS_ALLOWED = (4, 8, 16, 32)
_BLOCK_COLS = 64

#: Most elements a weight may have, per bits of its dtype: the fp16 kernel computes element offsets in
#: 32 bits (``_U(r * k + col0)``), and both kernels address metadata words (``m * k / 32`` of them) in 32 bits.
MAX_ELEMENTS = {16: 2**32, 32: 2**37}

#: Metadata nibble of every 4-bit row-group pattern, 4 bits each (3+ kept never occurs -> 0).
_NIBBLES = sum(int(n) << (4 * p) for p, n in enumerate(NIBBLE) if n != 0xFF)


# ---------------------------------------------------------------- generated tile-mask functions

def _greedy_source(ties: str) -> str:
    """Source of the fp32 ``greedy_tile(r0, r1, r2, r3)``: 4 tuples of 4 raw bit patterns -> 16-bit mask.

    Keys ``|w| bits << 4 | position`` need 35 bits: 64-bit integers (see the fp16 form for 32).
    """
    absmask = 0x7FFFFFFF
    flip = 15 if ties == "index" else 0       # low key bits: 15 - position, or position
    lines = ["def greedy_tile(r0, r1, r2, r3):",
             "    a0, a1, a2, a3 = r0", "    a4, a5, a6, a7 = r1",
             "    a8, a9, a10, a11 = r2", "    a12, a13, a14, a15 = r3",
             "    # keys: |w| bits above 4 position bits"]
    lines += [f"    k{p} = ((a{p} & {absmask:#x}) << 4) | {p ^ flip}" for p in range(16)]
    if ties == "index":
        lines.append("    # Green's 60-comparator network (keys distinct: order is the key order)")
        lines.append(compare_exchange_source(green16(), "k", indent="    ").rstrip())
    else:
        lines.append("    # PyTorch's Bose-Nelson network, exchanging unless strictly smaller")
        lines.append(compare_exchange_source(bose_nelson(16), "k", swap_equal_on="({} >> 4)", select="_pick",
                                             indent="    ").rstrip())
    lines += ["    # greedy from the largest: keep when row and column hold < 2 (2-bit counters 0, 1, 3)",
              "    mask = 0", "    rows = 0", "    cols = 0"]
    for i in range(15, -1, -1):
        lines += [f"    p = (k{i} & 15) ^ {flip}",
                  "    rc = (rows >> ((p >> 2) << 1)) & 3",
                  "    cc = (cols >> ((p & 3) << 1)) & 3",
                  "    sel = _pick(rc + cc <= 2, 1, 0)",
                  "    mask |= sel << p",
                  "    rows |= (rc + sel) << ((p >> 2) << 1)",
                  "    cols |= (cc + sel) << ((p & 3) << 1)"]
    lines.append("    return mask")
    return "\n".join(lines) + "\n"


def _optimal_source(method: str) -> str:
    """Source of ``optimal_tile(wf, r, c)``: best candidate mask of the tile at (r, c).

    Row terms first (6 pair sums ``s<row>_<pair>`` per row; singles are the
    magnitudes ``f<4*row+col>``), then one score per candidate in
    :data:`sparsekit.reference.sparsify24.CANDIDATES` order, keeping the first maximum
    (selects through :func:`_pick`, see there).
    """
    masks, terms = CANDIDATES[method]
    lines = ["def optimal_tile(wf, r, c):"]
    lines += [f"    f{4 * i + j} = abs(float32(wf[r + {i}, c + {j}]))" for i in range(4) for j in range(4)]
    lines += [f"    s{i}_{q} = f{4 * i + a} + f{4 * i + b}" for i in range(4) for q, (a, b) in enumerate(PAIRS)]

    def term(row: int, t: int) -> str:
        return f"s{row}_{t}" if t < len(PAIRS) else f"f{4 * row + ROW_TERMS[t][0]}"

    for n, (rows, pat) in enumerate(zip(terms, masks)):
        score = f"(({term(0, rows[0])} + {term(1, rows[1])}) + {term(2, rows[2])}) + {term(3, rows[3])}"
        if n == 0:
            lines += [f"    best = {score}", f"    mask = _U({int(pat)})"]
        else:
            lines += [f"    t = {score}", "    better = t > best",
                      "    best = _pick(better, t, best)", f"    mask = _pick(better, _U({int(pat)}), mask)"]
    lines.append("    return mask")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- fp16: 32-bit words throughout
#
# Numba types every integer operation as 64-bit (an int32 op int32 is int64), so the fp16
# kernel wraps each step in np.uint32 (``_U``): LLVM then narrows adds, ands, ors, compares,
# min/max, multiplies and constant shifts to 32 bits. What it does not narrow gets an
# intrinsic: variable shifts (``shr32``, ``shl32``) and PTX's byte permute (``prmt``), which
# moves fp16 lanes between 32-bit words in one instruction.

_U = np.uint32
#: Key layout (fp16): |w| bits 12..26, tie payload 4..11 (row one-hot 8..11, column one-hot 4..7), position 0..3.
_KEY_MAG = 0x7FFF000
_KEY_RC = 0xFF0
#: Smallest key of a non-finite fp16 value (|w| >= 0x7C00: exponent all ones).
_KEY_INF = 0x7C00 << 12


def _payload(p: int, ties: str) -> int:
    """Bits 0..11 of the key of tile position ``p`` (see :data:`_KEY_MAG`).

    The row/column one-hot byte is what the greedy pass tests and counts with;
    its order among equal magnitudes is the tie order: increasing in ``p`` as
    ``16 << r | 1 << c``, so for ``ties="index"`` (lower position first from
    the top) the row and column are mirrored. With ``ties="torch"`` only
    the network decides where equal magnitudes go.
    """
    r, c = divmod(p, 4)
    if ties == "index":
        r, c = 3 - r, 3 - c
    return ((16 << r) | (1 << c)) << 4 | p


def _greedy16_source(ties: str) -> str:
    """Source of ``greedy_tile16(l0, h0, .., l3, h3)``: 8 words (row i: l cols 0-1, h cols 2-3) -> (mask, top).

    ``top`` is the largest key after the sort: the tile holds a NaN or Inf
    exactly when ``top >= _KEY_INF`` (their magnitude bits are the largest).
    """
    lines = ["def greedy_tile16(l0, h0, l1, h1, l2, h2, l3, h3):",
             "    # keys: |w| above the row/column byte and the position (_payload)"]
    for p in range(16):
        word = ("l" if p % 4 < 2 else "h") + str(p // 4)
        shifted = f"({word} << 12)" if p % 2 == 0 else f"({word} >> 4)"
        lines.append(f"    k{p} = _U(_U({shifted} & {_KEY_MAG:#x}) | {_payload(p, ties):#x})")
    if ties == "index":
        lines.append("    # Green's 60-comparator network (keys distinct): min.u32 / max.u32")
        lines.append(compare_exchange_source(green16(), "k", indent="    ").rstrip())
    else:
        lines.append("    # PyTorch's Bose-Nelson network, exchanging unless |a| < |b| strictly")
        lines.append(compare_exchange_source(bose_nelson(16), "k", less=f"{{a}} < _U({{b}} & {_KEY_MAG:#x})",
                                             select="_pick", indent="    ").rstrip())
    lines += ["    # greedy from the largest: 'one' = rows/columns holding >= 1, 'two' = holding 2",
              "    one = _U(0)", "    two = _U(0)", "    mask = _U(0)"]
    for i in range(15, -1, -1):
        lines += [f"    keep = _U(two & k{i}) == 0",
                  f"    two = _pick(keep, _U(two | _U(one & k{i})), two)",
                  f"    one = _pick(keep, _U(one | _U(k{i} & {_KEY_RC:#x})), one)",
                  f"    mask = _pick(keep, _U(mask | shl32(1, _U(k{i} & 15))), mask)"]
    lines.append("    # the sorted keys' largest |w| (k15) is all the non-finite test needs (NaN/Inf sort on top)")
    lines.append("    return mask, k15")
    return "\n".join(lines) + "\n"


if config.ENABLE_CUDASIM:
    def shr32(x, s):
        """``x >> s`` on 32 bits (simulator form)."""
        return _U(int(x) >> int(s))

    def shl32(x, s):
        """``x << s`` on 32 bits (simulator form)."""
        return _U((int(x) << int(s)) & 0xFFFFFFFF)

    def prmt(a, b, s):
        """PTX ``prmt.b32`` (simulator form): byte i of the result is byte ``c & 7`` of ``b:a``, where
        ``c = (s >> 4i) & 15``, or that byte's sign bit replicated when ``c & 8``."""
        src = int(a) | int(b) << 32
        out = 0
        for i in range(4):
            c = (int(s) >> (4 * i)) & 15
            byte = (src >> (8 * (c & 7))) & 0xFF
            if c & 8:
                byte = 0xFF if byte & 0x80 else 0
            out |= byte << (8 * i)
        return _U(out)
else:
    def _shift32(name, op):
        """An intrinsic ``name(x, s)``: ``x`` and ``s`` as uint32, shifted by LLVM's ``op`` in 32 bits
        (Numba would widen a variable shift to 64 bits); ``s < 32``."""

        def typer(typingctx, x, s):
            if not (isinstance(x, types.Integer) and isinstance(s, types.Integer)):
                return None

            def codegen(context, builder, sig, args):
                a, n = (context.cast(builder, v, t, types.uint32) for v, t in zip(args, sig.args))
                return getattr(builder, op)(a, n)

            return types.uint32(x, s), codegen

        typer.__name__ = typer.__qualname__ = name
        return intrinsic(typer)

    #: ``x >> s`` as one ``shr.u32``.
    shr32 = _shift32("shr32", "lshr")
    #: ``x << s`` as one ``shl.b32``.
    shl32 = _shift32("shl32", "shl")

    @intrinsic
    def prmt(typingctx, a, b, s):
        """PTX ``prmt.b32 d, a, b, s`` (byte permute of the 8 bytes ``b:a``), inline assembly."""
        if not all(isinstance(v, types.Integer) for v in (a, b, s)):
            return None

        def codegen(context, builder, sig, args):
            vals = [context.cast(builder, v, t, types.uint32) for v, t in zip(args, sig.args)]
            fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32)] * 3)
            return builder.call(ir.InlineAsm(fnty, "prmt.b32 $0, $1, $2, $3;", "=r,r,r,r"), vals)

        return types.uint32(a, b, s), codegen


def tile_mask_source(method: str = "greedy", ties: str = "index", bits: int = 16) -> str:
    """The generated straight-line source of a tile-mask device function (for reading)."""
    if method != "greedy":
        return _optimal_source(method)
    return _greedy16_source(ties) if bits == 16 else _greedy_source(ties)


@cuda.jit(device=True)
def _pick(c, a, b):
    """``a if c else b`` (a select after inlining).

    The generated functions call this instead of writing conditional
    expressions: Numba makes three basic blocks of each, and its liveness and
    SSA passes grow with blocks times variables, so the 186-candidate scorer
    (372 of them) took minutes to compile; as calls, each generated function is
    one block.
    """
    return a if c else b


def _device(source: str, name: str):
    env = {"float32": float32, "_U": _U, "shl32": shl32, "_pick": _pick}
    exec(compile(source, f"<generated {name}>", "exec"), env)
    return cuda.jit(device=True)(env[name])


#: Generated device functions: ties -> greedy_tile16(l0, h0, .., l3, h3) (fp16 words) and
#: greedy_tile(r0, r1, r2, r3) (fp32 bit patterns); method -> optimal_tile(wf, r, c).
GREEDY_TILE16 = {t: _device(_greedy16_source(t), "greedy_tile16") for t in TIES}
GREEDY_TILE32 = {t: _device(_greedy_source(t), "greedy_tile") for t in TIES}
OPTIMAL_TILE = {m: _device(_optimal_source(m), "optimal_tile") for m in METHODS[1:]}


# ---------------------------------------------------------------- device helpers

@cuda.jit(device=True)
def _load4_32(words, r, c):
    """Bit patterns of fp32 w[r, c:c+4] (two 64-bit words; c a multiple of 4)."""
    x = words[r, c >> 1]
    y = words[r, (c >> 1) + 1]
    return x & 0xFFFFFFFF, (x >> 32) & 0xFFFFFFFF, y & 0xFFFFFFFF, (y >> 32) & 0xFFFFFFFF


@cuda.jit(device=True)
def _pack4(p, v):
    """One row group: kept-column pattern ``p`` (4 bits), values ``v`` -> (slot0, slot1, nibble)."""
    v0, v1, v2, v3 = v
    nib = (_NIBBLES >> (p << 2)) & 15
    i0 = nib & 3
    i1 = nib >> 2
    # v[i] as two levels of single selects (a chained ternary compiles to branches)
    lo = v1 if i0 & 1 else v0
    hi = v3 if i0 & 1 else v2
    x0 = hi if i0 & 2 else lo
    lo = v1 if i1 & 1 else v0
    hi = v3 if i1 & 1 else v2
    x1 = hi if i1 & 2 else lo
    x0 = x0 if (p >> i0) & 1 else 0   # a filler slot holds 0
    x1 = x1 if (p >> i1) & 1 else 0
    return x0, x1, nib


@cuda.jit(device=True)
def _transpose_mask(m):
    """4x4 bit transpose of a tile mask: bit 4r+c -> bit 4c+r."""
    t = 0
    for r in range(4):
        for c in range(4):
            t |= ((m >> (4 * r + c)) & 1) << (4 * c + r)
    return t


@cuda.jit(device=True)
def _transpose4(r0, r1, r2, r3):
    """Columns of a 4x4 block given as 4 row tuples."""
    return ((r0[0], r1[0], r2[0], r3[0]), (r0[1], r1[1], r2[1], r3[1]),
            (r0[2], r1[2], r2[2], r3[2]), (r0[3], r1[3], r2[3], r3[3]))


@cuda.jit(device=True)
def _pack_tile(out, r, c, m, r0, r1, r2, r3):
    """Write the 4 packed rows of a tile with mask ``m`` to out[r:r+4, c:c+2]; return the 4 nibbles.

    Nibble of tile row i in bits 4i..4i+3 of the result.
    """
    x0, x1, n0 = _pack4(m & 15, r0)
    out[r, c] = x0
    out[r, c + 1] = x1
    x0, x1, n1 = _pack4((m >> 4) & 15, r1)
    out[r + 1, c] = x0
    out[r + 1, c + 1] = x1
    x0, x1, n2 = _pack4((m >> 8) & 15, r2)
    out[r + 2, c] = x0
    out[r + 2, c + 1] = x1
    x0, x1, n3 = _pack4((m >> 12) & 15, r3)
    out[r + 3, c] = x0
    out[r + 3, c + 1] = x1
    return n0 | (n1 << 4) | (n2 << 8) | (n3 << 12)


@cuda.jit(device=True)
def _nonfinite(t, inf):
    """1 if any of the 4 bit patterns in ``t`` is Inf or NaN (exponent all ones), else 0."""
    a0, a1, a2, a3 = t
    m = inf | (inf - 1)   # all bits below the sign
    bad = ((a0 & m) >= inf) | ((a1 & m) >= inf) | ((a2 & m) >= inf) | ((a3 & m) >= inf)
    return 1 if bad else 0


@cuda.jit(device=True)
def _meta_row(d, h):
    """Logical metadata row of stored row ``d`` with column parity ``h`` (steps 3-4 undone)."""
    d0 = _U(_U(d & 0xFFFFFFFE) | h)
    return _U(_U(d0 & 0xFFFFFFE0) | _U(_U(_U(d0 & 3) << 3) | _U(_U(d0 >> 2) & 7)))


# ---------------------------------------------------------------- fp16 device helpers (32-bit words)

@cuda.jit(device=True)
def _row_lanes(b):
    """0xFFFF in each fp16 lane kept by row pattern ``b`` (bit c: column c): (word of cols 0-1, of cols 2-3).

    ``b * 0x10204080`` moves bit c to bit 8c+7, the sign of byte c (the four
    shifted copies of a 4-bit value do not overlap); ``prmt``'s sign mode (selector
    nibble 8 + byte) then fills each lane's two bytes with its column's bit.
    """
    s = _U(_U(b & 15) * 0x10204080)
    return prmt(s, 0, 0x9988), prmt(s, 0, 0xBBAA)


def _pack16_table() -> np.ndarray:
    """(16,) uint32: for each kept pattern ``b`` of a row group, ``prmt`` selector | metadata nibble << 16.

    The nibble names the slots' columns ``i0 | i1 << 2``; the selector's four
    nibbles pick bytes ``2*i0, 2*i0+1, 2*i1, 2*i1+1`` of ``hi:lo`` (fp16 lanes
    ``i0`` and ``i1``); ``prmt`` reads only the low 16 bits of its selector.
    """
    nib = (_NIBBLES >> (4 * np.arange(16, dtype=np.uint64))) & 15
    i0, i1 = nib & 3, nib >> 2
    sel = 2 * i0 | (2 * i0 + 1) << 4 | (2 * i1) << 8 | (2 * i1 + 1) << 12
    return (sel | nib << 16).astype(np.uint32)


#: :func:`_pack16_table`; each fp16 block copies it to shared memory (one load per row group after).
_PACK16 = _pack16_table()
#: Metadata nibbles of row-group patterns 0-7 and 8-15, 4 bits each, as two 32-bit constants.
_NIB_LO = _NIBBLES & 0xFFFFFFFF
_NIB_HI = _NIBBLES >> 32


@cuda.jit(device=True)
def _pack16_table(tab, b, lo, hi):
    """One row group: kept pattern ``b`` (4 bits), lanes ``lo`` (cols 0-1) ``hi`` (2-3) -> (word, nibble).

    ``tab``: :data:`_PACK16` (in shared memory). Dropped lanes are already 0, so
    the filler slot (module docstring of the reference) reads 0.
    """
    e = tab[b]
    return prmt(lo, hi, e), shr32(e, 16)


@cuda.jit(device=True)
def _pack16_arith(tab, b, lo, hi):
    """:func:`_pack16_table` computed instead of looked up (``tab`` unused): the nibble from two
    32-bit constants, the selector ``(2i0, 2i0+1, 2i1, 2i1+1)`` from the nibble."""
    nib = _U(shr32(_U(_NIB_HI) if b >= 8 else _U(_NIB_LO), _U(_U(b & 7) << 2)) & 15)
    sel = _U(_U(0x1010 + _U(_U(nib & 3) * 0x22)) + _U(_U(nib & 12) * 0x880))
    return prmt(lo, hi, sel), nib


@cuda.jit(device=True)
def _transpose16(m):
    """4x4 bit transpose (bit 4r+c -> bit 4c+r) by two delta swaps."""
    t = _U(_U(m ^ shr32(m, 3)) & 0x0A0A)
    m = _U(m ^ _U(t ^ _U(t << 3)))
    t = _U(_U(m ^ shr32(m, 6)) & 0x00CC)
    return _U(m ^ _U(t ^ _U(t << 6)))


def _make_tile16(pack):
    """``tile16(tab, m, l0, h0, .., l3, h3)`` packing row groups with ``pack`` (:func:`_pack16_table` or
    :func:`_pack16_arith`)."""

    @cuda.jit(device=True)
    def tile16(tab, m, l0, h0, l1, h1, l2, h2, l3, h3):
        """Pack one fp16 tile with mask ``m`` for W and W^T.

        Returns W's 4 packed words (row i: 2 fp16), W's 4 nibbles (row i in bits
        4i..), W^T's 4 packed words (W column c) and W^T's nibbles.
        """
        # drop: zero every fp16 lane outside the mask (both packers then read 0 in a filler slot)
        k0, k1 = _row_lanes(m)
        k2, k3 = _row_lanes(shr32(m, 4))
        k4, k5 = _row_lanes(shr32(m, 8))
        k6, k7 = _row_lanes(shr32(m, 12))
        l0, h0, l1, h1 = _U(l0 & k0), _U(h0 & k1), _U(l1 & k2), _U(h1 & k3)
        l2, h2, l3, h3 = _U(l2 & k4), _U(h2 & k5), _U(l3 & k6), _U(h3 & k7)
        w0, n0 = pack(tab, _U(m & 15), l0, h0)
        w1, n1 = pack(tab, _U(shr32(m, 4) & 15), l1, h1)
        w2, n2 = pack(tab, _U(shr32(m, 8) & 15), l2, h2)
        w3, n3 = pack(tab, _U(shr32(m, 12) & 15), l3, h3)
        # W^T: column c of the tile as two words (rows 0-1, rows 2-3), one byte permute each
        mt = _transpose16(m)
        t0, u0 = pack(tab, _U(mt & 15), prmt(l0, l1, 0x5410), prmt(l2, l3, 0x5410))
        t1, u1 = pack(tab, _U(shr32(mt, 4) & 15), prmt(l0, l1, 0x7632), prmt(l2, l3, 0x7632))
        t2, u2 = pack(tab, _U(shr32(mt, 8) & 15), prmt(h0, h1, 0x5410), prmt(h2, h3, 0x5410))
        t3, u3 = pack(tab, _U(shr32(mt, 12) & 15), prmt(h0, h1, 0x7632), prmt(h2, h3, 0x7632))
        nib = _U(_U(n0 | _U(n1 << 4)) | _U(_U(n2 << 8) | _U(n3 << 12)))
        nib_t = _U(_U(u0 | _U(u1 << 4)) | _U(_U(u2 << 8) | _U(u3 << 12)))
        return w0, w1, w2, w3, nib, t0, t1, t2, t3, nib_t

    return tile16


#: fp16 tile packers: pack_table -> tile16 (the kernels' compile-time choice of row-group packer).
TILE16 = {True: _make_tile16(_pack16_table), False: _make_tile16(_pack16_arith)}


@cuda.jit(device=True)
def _bad16(acc, x):
    """Accumulate a non-finite test of the two fp16 lanes of ``x``: bit 15/31 set if a lane's exponent is all ones."""
    return _U(acc | _U(_U(x & 0x7C007C00) + 0x04000400))


@cuda.jit(device=True)
def _u64(lo, hi):
    """One 64-bit word from two 32-bit ones (``lo`` first in memory)."""
    return np.uint64(lo) | (np.uint64(hi) << np.uint64(32))


# ---------------------------------------------------------------- kernels

@cuda.jit(device=True)
def _write_meta(smem_w, smem_t, meta, meta_t, m, k, block_rows):
    """Metadata out, after the block's nibble bytes are in shared memory (one syncthreads before).

    32-bit word u of a stored array holds the two 16-bit words of stored row
    d = u % rows at stored columns 2j, 2j+1 (j = u // rows); each comes from
    logical row _meta_row(d, h), logical column 2j | (d & 1) (module docstring
    of reference.sparsify24, steps 3-5 inverted). Each thread writes two words
    of each array, consecutive threads consecutive words.
    (int(): shared bytes are uint8; widen before shifting, as the simulator keeps uint8.)
    """
    t = _U(_U(cuda.threadIdx.y * 8) + cuda.threadIdx.x)
    rb = _U(cuda.blockIdx.y * block_rows)
    cb = _U(cuda.blockIdx.x * _BLOCK_COLS)
    for s in range(2):
        # W: this block's stored rows rb.., column pairs j = cb/32, cb/32 + 1
        q = _U(t + _U(s * block_rows))
        d = _U(rb + _U(q % block_rows))
        j = _U(_U(cb // 32) + _U(q // block_rows))
        if d < m and _U(j * 32) < k:
            cl = _U(2 * _U(_U(_U(2 * j) + _U(d & 1)) - _U(cb // 16)))     # byte of the 16-col word
            lo = _U(_meta_row(d, 0) - rb)
            hi = _U(_meta_row(d, 1) - rb)
            meta[_U(_U(j * m) + d)] = (int(smem_w[lo, cl]) | (int(smem_w[lo, cl + 1]) << 8)
                                       | (int(smem_w[hi, cl]) << 16) | (int(smem_w[hi, cl + 1]) << 24))
        # W^T: stored rows cb.. (W columns), column pairs j = rb/32 ..
        d = _U(cb + _U(q % _BLOCK_COLS))
        j = _U(_U(rb // 32) + _U(q // _BLOCK_COLS))
        if d < k and _U(j * 32) < m:
            cl = _U(2 * _U(_U(_U(2 * j) + _U(d & 1)) - _U(rb // 16)))
            lo = _U(_meta_row(d, 0) - cb)
            hi = _U(_meta_row(d, 1) - cb)
            meta_t[_U(_U(j * k) + d)] = (int(smem_t[lo, cl]) | (int(smem_t[lo, cl + 1]) << 8)
                                         | (int(smem_t[hi, cl]) << 16) | (int(smem_t[hi, cl + 1]) << 24))


def _jit(kernel, row_threads: int, min_blocks: int):
    if not min_blocks or config.ENABLE_CUDASIM:      # (the simulator's jit takes no launch_bounds at all)
        return cuda.jit(kernel)
    return cuda.jit(kernel, launch_bounds=(8 * row_threads, min_blocks))


def auto_min_blocks(bits: int, method: str, row_threads: int, prefetch: bool) -> int:
    """Launch bounds' minimum blocks per SM when the caller gives none (0: no bound).

    1024 threads per SM (64 registers) for the fp16 greedy and optimal_full
    kernels without prefetch: ptxas then fits them without spilling (compile
    checks) where it would otherwise take 71-108 registers and fewer blocks per
    SM. None for the others (the 186-candidate scorer spills under it; prefetch
    needs 80 registers).
    """
    if bits == 16 and method in ("greedy", "optimal_full") and not prefetch:
        return 1024 // (8 * row_threads)
    return 0


def _make_kernel16(method: str, ties: str, row_threads: int, min_blocks: int, prefetch: bool,
                   pack_table: bool):
    """fp16 kernel for one (method, ties, block shape, launch bound, prefetch, packer): 32-bit words,
    128-bit loads, 64-bit stores."""
    greedy = method == "greedy"
    tile16 = TILE16[pack_table]
    greedy_tile = GREEDY_TILE16[ties]
    optimal_tile = OPTIMAL_TILE["optimal" if greedy else method]
    rows_t = row_threads
    block_rows = 8 * row_threads

    @cuda.jit(device=True)
    def load_half(w32, r, col0, k):
        """Rows r..r+3 of the thread's 8 columns, one 128-bit load per row: 4 tuples (la, ha, lb, hb)."""
        stride = _U(k >> 1)
        base = _U(_U(r * k + col0) >> 1)                # 32-bit word of w[r, col0]
        return (load4(w32, base), load4(w32, _U(base + stride)), load4(w32, _U(base + _U(2 * stride))),
                load4(w32, _U(base + _U(3 * stride))))

    @cuda.jit(device=True)
    def half(x, tab, wf, packed64, tmasks32, r, col0, k):
        """Rows r..r+3 (words ``x`` from load_half) of the thread's 8 columns: tiles A (col0..) and B (col0+4..).

        Writes packed W (one 64-bit word per row) and the two tile masks (one
        32-bit word); returns the non-finite indicator (>= _KEY_INF when a value
        is NaN/Inf), W's nibbles of A and B, and the W^T words and nibbles of A and B.
        """
        (la0, ha0, lb0, hb0), (la1, ha1, lb1, hb1), (la2, ha2, lb2, hb2), (la3, ha3, lb3, hb3) = x
        if greedy:
            ma, top_a = greedy_tile(la0, ha0, la1, ha1, la2, ha2, la3, ha3)
            mb, top_b = greedy_tile(lb0, hb0, lb1, hb1, lb2, hb2, lb3, hb3)
            bad = _U(top_a if top_a > top_b else top_b)
        else:
            ma = optimal_tile(wf, r, col0)
            mb = optimal_tile(wf, r, col0 + 4)
            acc = _bad16(_bad16(_bad16(_bad16(_U(0), la0), ha0), lb0), hb0)
            acc = _bad16(_bad16(_bad16(_bad16(acc, la1), ha1), lb1), hb1)
            acc = _bad16(_bad16(_bad16(_bad16(acc, la2), ha2), lb2), hb2)
            acc = _bad16(_bad16(_bad16(_bad16(acc, la3), ha3), lb3), hb3)
            bad = _U(_KEY_INF) if acc & 0x80008000 else _U(0)
        q = _U(k >> 3)
        tmasks32[_U(_U(_U(r >> 2) * q) + _U(col0 >> 3))] = _U(ma | _U(mb << 16))
        wa0, wa1, wa2, wa3, na, ta0, ta1, ta2, ta3, tna = tile16(tab, ma, la0, ha0, la1, ha1, la2, ha2, la3, ha3)
        wb0, wb1, wb2, wb3, nb, tb0, tb1, tb2, tb3, tnb = tile16(tab, mb, lb0, hb0, lb1, hb1, lb2, hb2, lb3, hb3)
        p = _U(_U(r * q) + _U(col0 >> 3))               # packed W[r, col0/2 ..] as 64-bit words
        packed64[p] = _u64(wa0, wb0)
        packed64[_U(p + q)] = _u64(wa1, wb1)
        packed64[_U(p + _U(2 * q))] = _u64(wa2, wb2)
        packed64[_U(p + _U(3 * q))] = _u64(wa3, wb3)
        return bad, na, nb, ta0, ta1, ta2, ta3, tna, tb0, tb1, tb2, tb3, tnb

    def kernel(w32, wf, packed64, packed_t64, meta, meta_t, tmasks32, flags, m, k):
        # arrays: w32 (M*K/2,) uint32 view of w; wf w itself (optimal scores); packed64
        #   (M*K/8,) / packed_t64 (K*M/8,) uint64 views of packed W / W^T; meta / meta_t
        #   (M*K/32,) uint32; tmasks32 (M*K/32,) uint32 view of the (M/4, K/4) uint16 masks;
        #   flags (1,) int32.  sizes: m, k.
        smem_w = cuda.shared.array((block_rows, 8), uint8)      # nibble bytes: W row, 8-col block
        smem_t = cuda.shared.array((_BLOCK_COLS, rows_t), uint8)  # W^T row (W col), 8-row block
        tab = cuda.shared.array(16, uint32)                     # _PACK16: packing selector and nibble
        tx = _U(cuda.threadIdx.x)
        ty = _U(cuda.threadIdx.y)
        if pack_table:
            t = _U(_U(ty * 8) + tx)
            if t < 16:
                tab[t] = _PACK16[t]
            cuda.syncthreads()
        row0 = _U(_U(_U(cuda.blockIdx.y * rows_t) + ty) * 8)
        col0 = _U(_U(_U(cuda.blockIdx.x * 8) + tx) * 8)
        if row0 < m and col0 < k:
            bad = _U(0)
            # half 0's W^T words and nibbles, kept for half 1 (a loop, not unrolled: half the code)
            sa0 = sa1 = sa2 = sa3 = sb0 = sb1 = sb2 = sb3 = sna = snb = _U(0)
            # prefetch: half 1's rows are read before half 0's stores (which the compiler may not move
            # loads across), so both halves' loads are in flight at once
            x = load_half(w32, row0, col0, k)
            nxt = load_half(w32, _U(row0 + 4), col0, k) if prefetch else x
            for h in range(2):                          # tiles A, B (rows 0-3), then C, D (rows 4-7)
                r = _U(row0 + _U(4 * h))
                if not prefetch:
                    x = load_half(w32, r, col0, k)
                (b, na, nb, ta0, ta1, ta2, ta3, tna,
                 tb0, tb1, tb2, tb3, tnb) = half(x, tab, wf, packed64, tmasks32, r, col0, k)
                if prefetch:
                    x = nxt
                bad = _U(bad if bad > b else b)
                for i in range(4):
                    smem_w[ty * 8 + 4 * h + i, tx] = _U(shr32(na, 4 * i) & 15) | _U(_U(shr32(nb, 4 * i) & 15) << 4)
                if h == 0:
                    sa0, sa1, sa2, sa3, sna = ta0, ta1, ta2, ta3, tna
                    sb0, sb1, sb2, sb3, snb = tb0, tb1, tb2, tb3, tnb
                else:
                    for i in range(4):
                        # W^T metadata byte of a W column: low nibble rows 0-3, high rows 4-7
                        smem_t[tx * 8 + i, ty] = _U(shr32(sna, 4 * i) & 15) | _U(_U(shr32(tna, 4 * i) & 15) << 4)
                        smem_t[tx * 8 + 4 + i, ty] = (_U(shr32(snb, 4 * i) & 15)
                                                      | _U(_U(shr32(tnb, 4 * i) & 15) << 4))
                    # packed W^T rows col0..col0+7, packed columns row0/2 .. + 3: one 64-bit word each
                    q = _U(m >> 3)
                    p = _U(_U(col0 * q) + _U(row0 >> 3))
                    packed_t64[p] = _u64(sa0, ta0)
                    packed_t64[_U(p + q)] = _u64(sa1, ta1)
                    packed_t64[_U(p + _U(2 * q))] = _u64(sa2, ta2)
                    packed_t64[_U(p + _U(3 * q))] = _u64(sa3, ta3)
                    packed_t64[_U(p + _U(4 * q))] = _u64(sb0, tb0)
                    packed_t64[_U(p + _U(5 * q))] = _u64(sb1, tb1)
                    packed_t64[_U(p + _U(6 * q))] = _u64(sb2, tb2)
                    packed_t64[_U(p + _U(7 * q))] = _u64(sb3, tb3)
            if bad >= _KEY_INF:
                flags[0] = 1
        cuda.syncthreads()
        _write_meta(smem_w, smem_t, meta, meta_t, m, k, block_rows)

    return _jit(kernel, row_threads, min_blocks)


def _make_kernel32(method: str, ties: str, row_threads: int, min_blocks: int | None):
    """fp32 kernel for one (method, ties, block shape): keys need 35 bits, so 64-bit integers."""
    inf = 0x7F800000
    optimal = method != "greedy"
    greedy_tile = GREEDY_TILE32["index" if optimal else ties]
    optimal_tile = OPTIMAL_TILE["optimal" if method == "greedy" else method]
    rows_t = row_threads
    block_rows = 8 * row_threads

    def kernel(words, wf, packed, packed_t, meta, meta_t, tmasks, flags, m, k):
        # arrays: words (M, K/2) int64 view of w; wf w itself (optimal scores);
        #   packed (M, K/2) / packed_t (K, M/2) uint32 views; meta (M*K/32,) /
        #   meta_t uint32 views; tmasks (M/4, K/4) uint16; flags (1,) int32.
        # sizes: m, k.
        smem_w = cuda.shared.array((block_rows, 8), uint8)    # nibble bytes: W row, 8-col block
        smem_t = cuda.shared.array((_BLOCK_COLS, rows_t), uint8)  # W^T row (W col), 8-row block
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        row0 = (cuda.blockIdx.y * rows_t + ty) * 8
        col0 = (cuda.blockIdx.x * 8 + tx) * 8
        if row0 < m and col0 < k:
            bad = 0
            for half in range(2):                       # tiles A, B (rows 0-3), then C, D (rows 4-7)
                r = row0 + 4 * half
                a0 = _load4_32(words, r, col0)          # left tile rows
                a1 = _load4_32(words, r + 1, col0)
                a2 = _load4_32(words, r + 2, col0)
                a3 = _load4_32(words, r + 3, col0)
                b0 = _load4_32(words, r, col0 + 4)      # right tile rows
                b1 = _load4_32(words, r + 1, col0 + 4)
                b2 = _load4_32(words, r + 2, col0 + 4)
                b3 = _load4_32(words, r + 3, col0 + 4)
                bad |= (_nonfinite(a0, inf) | _nonfinite(a1, inf) | _nonfinite(a2, inf)
                        | _nonfinite(a3, inf) | _nonfinite(b0, inf) | _nonfinite(b1, inf)
                        | _nonfinite(b2, inf) | _nonfinite(b3, inf))
                if optimal:
                    ma = int(optimal_tile(wf, r, col0))       # (64-bit, as the rest of this kernel)
                    mb = int(optimal_tile(wf, r, col0 + 4))
                else:
                    ma = greedy_tile(a0, a1, a2, a3)
                    mb = greedy_tile(b0, b1, b2, b3)
                tmasks[r >> 2, col0 >> 2] = ma
                tmasks[r >> 2, (col0 >> 2) + 1] = mb
                # packed W: rows r..r+3, packed columns col0/2 .. col0/2 + 3
                na = _pack_tile(packed, r, col0 >> 1, ma, a0, a1, a2, a3)
                nb = _pack_tile(packed, r, (col0 >> 1) + 2, mb, b0, b1, b2, b3)
                for i in range(4):
                    smem_w[ty * 8 + 4 * half + i, tx] = ((na >> (4 * i)) & 15) | (((nb >> (4 * i)) & 15) << 4)
                # packed W^T: rows col0..col0+7, packed columns row0/2 + 2*half .. + 1
                c0, c1, c2, c3 = _transpose4(a0, a1, a2, a3)
                ta = _pack_tile(packed_t, col0, (r >> 1), _transpose_mask(ma), c0, c1, c2, c3)
                c0, c1, c2, c3 = _transpose4(b0, b1, b2, b3)
                tb = _pack_tile(packed_t, col0 + 4, (r >> 1), _transpose_mask(mb), c0, c1, c2, c3)
                for i in range(4):
                    # W^T metadata byte of a W column: low nibble rows 0-3 (half 0), high rows 4-7
                    if half == 0:
                        smem_t[tx * 8 + i, ty] = (ta >> (4 * i)) & 15
                        smem_t[tx * 8 + 4 + i, ty] = (tb >> (4 * i)) & 15
                    else:
                        smem_t[tx * 8 + i, ty] |= ((ta >> (4 * i)) & 15) << 4
                        smem_t[tx * 8 + 4 + i, ty] |= ((tb >> (4 * i)) & 15) << 4
            if bad:
                flags[0] = 1
        cuda.syncthreads()
        _write_meta(smem_w, smem_t, meta, meta_t, m, k, block_rows)

    return _jit(kernel, row_threads, min_blocks)


_KERNELS: dict = {}


def kernel_for(bits: int, method: str, ties: str, row_threads: int = ROW_THREADS,
               min_blocks: int | None = None, prefetch: bool = PREFETCH, pack_table: bool = PACK_TABLE):
    """The (cached) kernel for these compile-time choices; optimal methods ignore ``ties``, fp32
    ``prefetch`` and ``pack_table``; ``min_blocks`` None: :func:`auto_min_blocks`, 0: no bound."""
    prefetch = bool(prefetch) and bits == 16
    if min_blocks is None:
        min_blocks = auto_min_blocks(bits, method, row_threads, prefetch)
    key = (bits, method, ties if method == "greedy" else "index", row_threads, min_blocks, prefetch,
           bool(pack_table) and bits == 16)
    if key not in _KERNELS:
        _KERNELS[key] = _make_kernel16(*key[1:]) if bits == 16 else _make_kernel32(*key[1:5])
    return _KERNELS[key]


# ---------------------------------------------------------------- launcher

def prepare(w, *, method: str = "greedy", ties: str = "index", row_threads: int = ROW_THREADS,
            min_blocks: int | None = None, prefetch: bool = PREFETCH, pack_table: bool = PACK_TABLE):
    """Validate and allocate once; return ``(launch, out)`` for repeated launches (benchmarks).

    ``launch()`` queues the kernel and returns without synchronising. The second
    item is ``(operand, out, flags)``: the validated input, a :class:`Sparse24`
    of the Numba device arrays the kernel writes (metadata as flat 16-bit
    views) and the non-finite flag word.
    """
    if method not in METHODS:
        raise ValueError(f"method: must be one of {METHODS}, got {method!r}")
    if ties not in TIES:
        raise ValueError(f"ties: must be one of {TIES}, got {ties!r}")
    if row_threads not in ROW_THREADS_ALLOWED:
        raise ValueError(f"row_threads: must be one of {ROW_THREADS_ALLOWED}, got {row_threads!r}")
    if min_blocks is not None:
        check_int(min_blocks, "min_blocks", minimum=0, maximum=32)
    for name, flag in (("prefetch", prefetch), ("pack_table", pack_table)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name}: expected a bool, got {type(flag).__name__}")
    op = operand(w, "w", dtypes=DTYPES, ndim=2, order="C")
    dev = op.dev
    m, k = dev.shape
    check_divisible(m, ALIGN, "w.shape[0]")
    check_divisible(k, ALIGN, "w.shape[1]")
    bits = 8 * dev.dtype.itemsize
    if m * k > MAX_ELEMENTS[bits]:
        raise ValueError(f"w: a {dev.dtype} weight may have at most {MAX_ELEMENTS[bits]} elements (the kernel's "
                         f"offsets are 32-bit), got shape {tuple(dev.shape)} = {m * k} elements; sparsify it in "
                         f"row blocks")
    if bits == 16 and not aligned(dev, 8):
        raise ValueError("w: float16 data must start on a 16-byte boundary (the kernel reads 8 values "
                         "per load), got an offset view")
    packed = output((m, k // 2), dev.dtype, like=op)
    packed_t = output((k, m // 2), dev.dtype, like=op)
    meta = output((m * k // 32,), np.uint32, like=op)      # written as 32-bit words
    meta_t = output((m * k // 32,), np.uint32, like=op)
    tmasks = output((m // 4, k // 4), np.uint16, like=op)
    flags = cuda.to_device(np.zeros(1, np.int32))
    kern = kernel_for(bits, method, ties, row_threads, min_blocks, prefetch, pack_table)
    grid = (cdiv(k, _BLOCK_COLS), cdiv(m, 8 * row_threads))
    if not (m and k):
        args = None
    elif bits == 16:      # flat 32-bit words in, 64-bit words out (vector loads and stores)
        args = (dev.reshape(-1).view(np.uint32), dev, packed.reshape(-1).view(np.uint64),
                packed_t.reshape(-1).view(np.uint64), meta, meta_t, tmasks.reshape(-1).view(np.uint32),
                flags, m, k)
    else:
        args = (dev.view(np.int64), dev, packed.view(np.uint32), packed_t.view(np.uint32), meta, meta_t,
                tmasks, flags, m, k)

    def launch():
        if args is not None:
            kern[grid, (8, row_threads)](*args)

    out = Sparse24(tmasks, packed, meta.view(np.int16), packed_t, meta_t.view(np.int16), method,
                   ties if method == "greedy" else "index")
    return launch, (op, out, flags)


def sparsify24(w, *, method: str = "greedy", ties: str = "index", check_finite: bool = True,
               row_threads: int = ROW_THREADS, min_blocks: int | None = None,
               prefetch: bool = PREFETCH, pack_table: bool = PACK_TABLE) -> Sparse24:
    """GPU :func:`sparsekit.reference.sparsify24.sparsify24`; arrays come back as the kind ``w`` is.

    Parameters
    ----------
    w : (M, K) float16 or float32, C-contiguous; NumPy, Numba device array or CAI
        (CuPy, PyTorch). M and K multiples of 32.
    method, ties : as in the reference.
    check_finite : read the kernel's non-finite flag back and raise ``ValueError``
        (one small device-to-host copy, which synchronises; pass False when timing).
    row_threads : tunable, thread rows per block (4, 8, 16, 32; 8 thread columns).
    min_blocks : tunable, launch bounds' minimum resident blocks per SM (None: :func:`auto_min_blocks`;
        0: no bound).
    prefetch : tunable (fp16; fp32 ignores it), issue the loads of both halves of the thread's 8x8
        block before packing the first (more bytes in flight, 16 more registers).
    pack_table : tunable (fp16), pack row groups with a 16-entry table in shared memory (one load
        per group) instead of computing the selector and nibble (~6 more instructions per group).
    """
    launch, (op, out, flags) = prepare(w, method=method, ties=ties, row_threads=row_threads,
                                       min_blocks=min_blocks, prefetch=prefetch, pack_table=pack_table)
    launch()
    if check_finite and flags.copy_to_host()[0]:
        raise ValueError("w: must be finite, found NaN/Inf value(s) (flagged by the kernel)")
    m, k = out.shape
    return Sparse24(result(out.tile_masks, like=op), result(out.packed, like=op),
                    result(out.meta, like=op).reshape(m, k // 16), result(out.packed_t, like=op),
                    result(out.meta_t, like=op).reshape(k, m // 16), out.method, out.ties)
