"""Tutorial 8: a bitmap per 8x8 cell, a bit per lane's register, decoded by each lane straight into its tensor-core
registers.

What you will learn
-------------------
1. unstructured pruning *loads as sparse and computes as dense*: the weight travels compressed and is
   multiplied densely on tensor cores, so what matters is its bytes. Dense, :class:`~sparsekit.formats.TiledCSL`
   (a 32-bit (value, index) word a kept weight) and :class:`~sparsekit.formats.TiledBitmap` (a bit a pair of
   adjacent weights, and the pair as a 32-bit word when either is kept) at 50 / 80 / 90 % (``nbytes()``), and
   where the bitmap stops beating the list;
2. the TiledBitmap layout: a 16 x 16 MMA fragment is four 8 x 8 cells; lane ``l = 4 g + t`` of a warp holds, of
   each cell, one 32-bit register (row ``g``, logical columns ``2 t, 2 t + 1``), so a cell's bitmap is 32 bits, bit
   ``l`` for lane ``l``'s pair. A record is the four bitmaps (16 bytes), then the marked pairs, cell by cell,
   lanes ascending. The columns of each 32-column group are permuted so that lane ``t`` of a quad reads its B
   inputs of both k-steps in one 16-byte load;
3. one lane's decode by hand, as step 3 of ``sparsekit/gpu/spmm_bitmap.py``
   (:func:`~sparsekit.gpu.spmm_bitmap.pair_word`) does it: its bit, the popcounts of the earlier cells' bitmaps
   (where the cell's words start), the popcount of the bits below its own (which word is its), one 32-bit load
   and a select; then all 32 lanes' registers put where :func:`sparsekit.reference.mma.fragment_coords` says,
   which must give back the dense block;
4. the kernel, :func:`sparsekit.gpu.spmm_bitmap.spmm_bitmap_linear`, against ``sparsekit/reference/spmm_bitmap.py``;
5. what the H200 measured, quoted from ``experiments/results/spmm_bitmap.md``: its table of times against dense
   cuBLAS and its reading of them against the other sparse kernels; from the table, the share of the copy
   bandwidth the kernel reaches and how its time follows its bytes.

Without a GPU the kernel runs on the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) at toy size, with small
tunables; nothing is timed.

Run it: ``python tutorials/08_bitmap_decode.py`` (``--quick`` for toy sizes).
"""
from __future__ import annotations

import math
import os
import re
import sys
import textwrap
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results" / "spmm_bitmap.md"
#: The start of the quoted table's header row, cell by cell.
TABLE_HEADER = ("shape (M x K)", "sparsity", "bytes / dense", "dense", "N = 8", "N = 16", "N = 32", "N = 64")
#: The paragraph of RESULTS that compares the other sparse kernels, and the sentences of it step 5 quotes.
SPARSE_PARAGRAPH = "**Against the other sparse kernels**"
SPARSE_SENTENCES = ("TiledBitmap is the fastest sparse kernel", "The row kernel stays faster")
#: The measured copy bandwidth in RESULTS' header ("copy bandwidth measured 4.24 TB/s").
BANDWIDTH = re.compile(r"copy bandwidth measured ([0-9.]+) TB/s")
#: Sparsities of step 1.
SPARSITIES = (0.5, 0.8, 0.9)
#: How far the table's "bytes / dense" may lie from step 1's (its two decimals, and its larger shapes).
BYTES_TOLERANCE = 0.01
#: Step 3's lane and cell: lane 21 (row 5, logical columns 2, 3 of its cell) in cell 2 (rows 0-7, columns 8-15).
LANE, CELL = 21, 2
#: Small blocks for the simulator: 2 warps on consecutive row blocks, K in 2 slices (128 threads a block), the
#: smallest ring (4 chunks, one in flight).
SIM_TUNABLES = dict(rows=2, slices=2, splits=1, stages=4)


def fragment_block(dense: np.ndarray, rb: int, ks: int) -> np.ndarray:
    """The 16 x 16 block of ``dense`` that fragment ``(rb, ks)`` covers, columns in the fragment's logical order."""
    from sparsekit.formats import TiledBitmap
    cols = [TiledBitmap.column(ks, j) for j in range(16)]
    return dense[16 * rb: 16 * rb + 16, cols]


def lane_pairs(block: np.ndarray, cell: int) -> np.ndarray:
    """The 32 lanes' pairs of cell ``cell`` of a 16 x 16 fragment ``block``, ``(32, 2)``: row ``l = 4 g + t`` is row
    ``g``, logical columns ``2 t, 2 t + 1`` of the cell (cell 0 rows 0-7 and columns 0-7, 1 rows 8-15, 2 columns
    8-15, 3 both)."""
    return block[8 * (cell % 2): 8 * (cell % 2) + 8, 8 * (cell // 2): 8 * (cell // 2) + 8].reshape(32, 2)


def digits(values) -> str:
    """A row of small whole values as digits, ``.`` for a zero."""
    return " ".join(f"{int(v)}" if v else "." for v in values)


def span(values, scale: float = 1, decimals: int = 2) -> str:
    """``min-max`` of ``values`` times ``scale`` (one number when they agree at ``decimals`` decimals)."""
    low, high = (f"{scale * v:.{decimals}f}" for v in (min(values), max(values)))
    return low if low == high else f"{low}-{high}"


def say(text: str, indent: str = "  ") -> None:
    """Print a paragraph of prose, wrapped to the tutorial's width."""
    print(textwrap.fill(text, 116, initial_indent=indent, subsequent_indent=indent))


def popc(x: int) -> int:
    """The set bits of ``x`` (``popc`` in the kernel)."""
    return bin(x).count("1")


def decode_lane(b, f: int, lane: int, cell: int) -> dict:
    """Lane ``lane``'s A-fragment register of cell ``cell`` of record ``f``, as step 3 of
    ``sparsekit/gpu/spmm_bitmap.py`` computes it (here in 32-bit words of ``stream``, where the kernel counts bytes
    of its shared-memory ring), every intermediate value returned."""
    record = int(b.offsets[f]) * 4                           # the record's first word: its four bitmaps
    masks = [int(m) for m in b.stream[record:record + 4]]    # one 16-byte load
    mask = masks[cell]
    earlier = [popc(m) for m in masks[:cell]]                # the pairs the earlier cells store
    first = record + 4 + sum(earlier)                        # the cell's first word (the kernel's w0 .. w3)
    lanebit = 1 << lane
    below = popc(mask & (lanebit - 1))                       # the pairs of lower lanes: the words before ours
    index = first + below
    # the load is made whatever bit l says (no branch); a lane without a pair may reach the word after the record's
    # pairs, past the stream for the last record: zero here (the kernel's load stays in its ring, whatever it holds)
    loaded = int(b.stream[index]) if index < b.stream.size else 0
    register = loaded if mask & lanebit else 0               # the select: no pair stored, a zero register
    return dict(record=record, masks=masks, mask=mask, lanebit=lanebit, earlier=earlier, first=first, below=below,
                index=index, loaded=loaded, register=register)


def assemble_fragment(b, f: int) -> np.ndarray:
    """The 16 x 16 A tile (uint16 bit patterns) that the 32 lanes' decoded registers of record ``f`` hold, each
    register's halves put at the elements :func:`~sparsekit.reference.mma.fragment_coords` gives it."""
    from sparsekit.reference.mma import fragment_coords

    tile = np.full((16, 16), -1, dtype=np.int64)
    for lane in range(32):
        coords = fragment_coords("m16n8k16", lane)
        for cell in range(4):
            reg = decode_lane(b, f, lane, cell)["register"]
            (r0, c0), (r1, c1) = coords[f"a{cell}"]
            tile[r0, c0], tile[r1, c1] = reg & 0xFFFF, reg >> 16
    assert (tile >= 0).all()                                 # every element came from one lane
    return tile.astype(np.uint16)


def byte_counts(m: int, k: int, sparsities=SPARSITIES, seed: int = 0) -> dict:
    """Step 1: an ``m x k`` bfloat16 weight (standard normal, ``seed``) pruned by magnitude at each sparsity, stored
    as TiledCSL and as TiledBitmap: ``{s: {dense, csl, bitmap, bitmap_index, pairs}}``, bytes (``nbytes()``) and
    the pairs the bitmap stores."""
    from sparsekit.arrays import BFLOAT16
    from sparsekit.formats import TiledBitmap, TiledCSL
    from sparsekit.prune import magnitude

    w = np.random.default_rng(seed).standard_normal((m, k)).astype(np.float32)
    sizes = {}
    for s in sparsities:
        mask = magnitude(w, s)
        w16 = np.where(mask, w, 0).astype(BFLOAT16)
        bitmap = TiledBitmap.from_dense(w16, mask)
        sizes[s] = dict(dense=2 * m * k, csl=TiledCSL.from_dense(w16, mask).nbytes().total,
                        bitmap=bitmap.nbytes().total, bitmap_index=bitmap.nbytes().indices,
                        pairs=int(bitmap.counts().sum()))
    return sizes


def table_bytes_match(sizes: dict, points: list[dict]) -> bool:
    """Whether the table's "bytes / dense" is step 1's bitmap bytes over dense at every sparsity both have (within
    :data:`BYTES_TOLERANCE`): the table measured this layout."""
    return all(abs(p["bytes"] - sizes[p["sparsity"]]["bitmap"] / sizes[p["sparsity"]]["dense"]) <= BYTES_TOLERANCE
               for p in points if p["sparsity"] in sizes)


def quoted_table(path: Path = RESULTS) -> list[list[str]]:
    """The rows of the first table of ``path`` whose header starts with :data:`TABLE_HEADER` (header first),
    cells stripped; [] if absent."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else None
        if not rows:
            if cells and tuple(cells[:len(TABLE_HEADER)]) == TABLE_HEADER:
                rows.append(cells)
        elif cells is None:
            break
        elif not line.startswith("|---"):
            rows.append(cells)
    return rows


def quoted_sentences(path: Path = RESULTS) -> list[str]:
    """The sentences (from each start on) of the paragraph :data:`SPARSE_PARAGRAPH` of ``path`` that begin with
    :data:`SPARSE_SENTENCES`, in that order (one line each); those absent are left out."""
    if not path.exists():
        return []
    paragraphs = [" ".join(p.split()) for p in path.read_text().split("\n\n")]
    text = next((p for p in paragraphs if p.startswith(SPARSE_PARAGRAPH)), "")
    found = [text.find(start) for start in SPARSE_SENTENCES]
    return [re.split(r"(?<=\.)\s+(?=[A-Z])", text[at:], maxsplit=1)[0] for at in found if at >= 0]


def copy_bandwidth(path: Path = RESULTS) -> float | None:
    """The copy bandwidth (bytes/s) RESULTS was measured against; None if absent."""
    found = BANDWIDTH.search(path.read_text()) if path.exists() else None
    return float(found.group(1)) * 1e12 if found else None


def measured(table: list[list[str]]) -> list[dict]:
    """Step 5's numbers from :func:`quoted_table`: a record a timed cell, ``{shape, m, k, sparsity, bytes, dense_us,
    n, us, speedup}`` (``bytes``: of dense; ``dense_us``: the middle of dense's range; ``speedup``: over dense)."""
    head = table[0]
    out = []
    for row in table[1:]:
        m, k = map(int, row[0].split("x"))
        for col, cell in zip(head, row):
            if col.startswith("N = "):
                us, speedup = re.fullmatch(r"([0-9.]+) \(([0-9.]+)x\)", cell).groups()
                dense_us = np.mean([float(v) for v in row[3].split("-")])
                out.append(dict(shape=row[0], m=m, k=k, sparsity=float(row[1].rstrip(" %")) / 100,
                                bytes=float(row[2]), dense_us=float(dense_us), n=int(col[4:]), us=float(us),
                                speedup=float(speedup)))
    return out


def report_measured(sizes: dict, path: Path = RESULTS) -> dict:
    """Step 5: the H200 table of ``path``, the page's reading of it against the other sparse kernels, and what
    follows from the table (against dense, the share of the copy bandwidth, how time follows bytes); whatever
    ``path`` lacks is left out. ``sizes``: step 1's bytes, which say whether the table measured this layout."""
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    print(f"\nStep 5: measured on the H200 (quoted from {shown}; Y = X W^T, bfloat16, device us, speedup over dense "
          "cuBLAS in brackets)")
    table = quoted_table(path)
    if not table:
        print("    (table not found in the results file)")
        return dict(quoted_rows=0)
    for row in table:
        print("    " + " | ".join(f"{c:>13s}" for c in row))
    points = measured(table)
    for n in sorted({p["n"] for p in points}):
        at = [p["speedup"] for p in points if p["n"] == n]
        print(f"  N = {n:2d}: {span(at)}x dense cuBLAS")
    faster = sum(p["speedup"] > 1 for p in points)
    print(f"  Faster than dense cuBLAS at {faster} of the {len(points)} measured points.")
    same_layout = table_bytes_match(sizes, points)
    if not same_layout:
        listed = {p["sparsity"]: p["bytes"] for p in points if p["sparsity"] in sizes}
        say("Its bytes / dense (" + ", ".join(f"{b:.2f} at {100 * s:.0f} %" for s, b in listed.items()) + ") are "
            "not this layout's (step 1: " + ", ".join(f"{sizes[s]['bitmap'] / sizes[s]['dense']:.2f}" for s in listed)
            + "): its times are of another layout, until experiments/bench_spmm_bitmap.py measures this one.")
    sentences = quoted_sentences(path)
    if sentences:
        say("The page's reading against the other sparse kernels (the tile and row kernels of "
            "sparsekit/gpu/spmm_tiled.py, on step 1's TiledCSL):")
        for sentence in sentences:
            say(sentence, indent="    ")
    bandwidth = copy_bandwidth(path)
    used = [p["bytes"] * 2 * p["m"] * p["k"] / (p["us"] * 1e-6) / bandwidth for p in points] if bandwidth else []
    if used:
        dense_used = [2 * p["m"] * p["k"] / (p["dense_us"] * 1e-6) / bandwidth for p in points]
        say(f"Its bytes are read at {span(used, 100, 0)} % of the measured copy bandwidth ({bandwidth / 1e12:.2f} "
            f"TB/s); dense cuBLAS reads its 2 B a weight at {span(dense_used, 100, 0)} %.")
    falls = [(p90["us"] / p50["us"], p90["bytes"] / p50["bytes"]) for p50 in points if p50["sparsity"] == 0.5
             for p90 in points if p90["sparsity"] == 0.9 and (p90["shape"], p90["n"]) == (p50["shape"], p50["n"])]
    if falls:
        say(f"From 50 % to 90 % its bytes fall to {span([b for _, b in falls])} of the 50 % bytes, its time to "
            f"{span([t for t, _ in falls])} of the 50 % time.")
    return dict(quoted_rows=len(table), points=len(points), faster=faster, same_layout=same_layout,
                quoted_sentences=len(sentences), bandwidth_used=used, falls=falls)


def main(quick: bool = False) -> dict:
    from sparsekit.arrays import BFLOAT16
    from sparsekit.formats import TiledBitmap
    from sparsekit.gpu import spmm_bitmap as gb
    from sparsekit.prune import magnitude
    from sparsekit.reference import spmm_bitmap as rb
    from sparsekit.reference.mma import fragment_coords

    on_gpu = os.environ.get("NUMBA_ENABLE_CUDASIM") != "1"
    rng = np.random.default_rng(0)
    out = {}

    # Step 1. Bytes: the product is dense on tensor cores, so the format's job is to load fewer bytes.
    m, k = (256, 512) if quick else (1024, 1024)
    sizes = byte_counts(m, k)
    print(f"Step 1: a {m}x{k} bfloat16 weight pruned by magnitude (any pattern), stored three ways")
    print("  sparsity   dense bytes   TiledCSL (4 B a kept weight)   TiledBitmap (4 B a stored pair, then bitmaps)")
    for s, v in sizes.items():
        print(f"  {100 * s:6.0f} %   {v['dense']:11d}   {v['csl']:11d} ({v['csl'] / v['dense']:.2f})          "
              f"{v['bitmap']:11d} ({v['bitmap'] / v['dense']:.2f}; {v['pairs']} pairs, {v['bitmap_index']} B index)")
    shares = {s: v["pairs"] / (m * k / 2) for s, v in sizes.items()}
    assert all(abs(share - (1 - s * s)) < 0.01 for s, share in shares.items())   # a pair is stored unless both go
    fixed = {s: (v["bitmap"] - 4 * v["pairs"]) / (m * k) for s, v in sizes.items()}   # B a weight besides the pairs
    assert max(fixed.values()) - min(fixed.values()) < 0.01                     # whatever is kept
    fixed_a_weight = fixed[SPARSITIES[0]]
    crossover = 1 - math.sqrt(fixed_a_weight / 2)            # 4 (1 - s) = 2 (1 - s^2) + fixed: 2 (1 - s)^2 = fixed
    low, high = sizes[SPARSITIES[0]], sizes[SPARSITIES[-1]]
    assert low["csl"] >= low["dense"] > low["bitmap"]
    assert all((v["csl"] < v["bitmap"]) == (s > crossover) for s, v in sizes.items())
    say("A pair of adjacent weights (one lane's register) is stored as a 32-bit word unless both are pruned: "
        "1 - s^2 of the pairs at sparsity s (here " +
        ", ".join(f"{share:.3f} at {100 * s:.0f} %" for s, share in shares.items()) + "). So the bitmap pays "
        f"2 (1 - s^2) B a weight where the list pays 4 (1 - s), and {fixed_a_weight:.3f} B a weight whatever is kept "
        "(16 B of bitmaps and 8 B of offset a 256-weight fragment, padding to 16 B); its index data are these and the "
        f"zero halves of its pairs. The list is the smaller once 2 (1 - s)^2 < {fixed_a_weight:.3f}, past "
        f"s = {100 * crossover:.1f} %: at {100 * SPARSITIES[0]:.0f} % the list loads {low['csl'] / low['dense']:.2f} "
        f"of dense's bytes and the bitmap {low['bitmap'] / low['dense']:.2f}; at {100 * SPARSITIES[-1]:.0f} % the "
        f"list {high['csl'] / high['dense']:.2f} and the bitmap {high['bitmap'] / high['dense']:.2f}.")
    out["bytes"] = sizes

    # Step 2. The layout of one record, on a 16 x 32 weight with small whole values (two fragments: k-steps 0, 1).
    toy = np.where(rng.random((16, 32)) < 0.35, rng.integers(1, 10, (16, 32)), 0).astype(np.float32)
    g, t = LANE // 4, LANE % 4                               # step 3's pair: of its two weights, only the high kept
    toy[g, TiledBitmap.column(0, 8 + 2 * t)], toy[g, TiledBitmap.column(0, 9 + 2 * t)] = 0, 7
    toy16 = toy.astype(BFLOAT16)
    b = TiledBitmap.from_dense(toy16)
    assert (b.to_dense() == toy16).all()
    print(f"\nStep 2: {b!r}: fragments (row block, k-step) (0, 0) and (0, 1), records at 16-byte units "
          f"{[int(x) for x in b.offsets]}")
    block = fragment_block(toy, 0, 0)
    print("  fragment (0, 0) in its logical columns, as four 8x8 cells in the MMA's register order")
    print("  (cell 0 rows 0-7 cols 0-7 | cell 2 rows 0-7 cols 8-15 / cell 1 rows 8-15 cols 0-7 | cell 3 rows 8-15 "
          "cols 8-15)")
    for r in range(16):
        print(f"    {digits(block[r, :8])}   {digits(block[r, 8:])}" + ("\n" if r == 7 else ""))
    masks = b.masks()[0]
    print("  the record's words 0-3, one bitmap a cell: bit l = 4 g + t for lane l's pair (row g, logical columns 2t,")
    print("  2t+1), set when either weight is kept; below, rows g = 0-7, each its pairs t = 0-3:")
    for cell in range(4):
        marked = lane_pairs(block, cell).any(axis=1)
        assert int(masks[cell]) == sum(1 << lane for lane in np.flatnonzero(marked))
        rows = " ".join("".join("1" if x else "." for x in marked[4 * r: 4 * r + 4]) for r in range(8))
        print(f"    cell {cell}: 0x{int(masks[cell]):08x}   {rows}")
    record, count = int(b.offsets[0]) * 4, int(b.counts()[0])
    words = b.stream[record + 4: record + 4 + count]
    print("  then the marked pairs, one word each (low half column 2t, high half 2t+1, a pruned weight a zero half),")
    print("  cell by cell, lanes ascending (lane: low high):")
    at = 0
    for cell in range(4):
        pairs = lane_pairs(block, cell)
        lanes = np.flatnonzero(pairs.any(axis=1))
        halves = words[at: at + lanes.size].view(np.uint16).view(BFLOAT16).astype(np.float32).reshape(-1, 2)
        assert (halves == pairs[lanes]).all()
        listed = "  ".join(f"{lane}: {digits(pair)}" for lane, pair in zip(lanes, halves))
        print(textwrap.fill(f"cell {cell}, words {4 + at}-{3 + at + lanes.size}: {listed}", 112,
                            initial_indent="    ", subsequent_indent="      "))
        at += lanes.size
    units = 1 + -(-count // 4)
    assert units == int(b.offsets[1] - b.offsets[0])
    print(f"  {count} pairs: the record is 1 + ceil({count} / 4) = {units} 16-byte units ({4 * units - 4 - count} zero "
          f"word(s) of padding); record 1 starts at unit {int(b.offsets[1])}")
    print("  Column permutation: lane t of a quad (lanes 4g + t) needs B rows 2t, 2t+1 (b0) and 2t+8, 2t+9 (b1) of")
    print("  both k-steps; the format stores those logical columns in A's (and X's) columns 8t..8t+7:")
    print("    lane t   step 0: b0    b1      step 1: b0    b1      one 16-byte load of X")
    perm = {}
    for lane_t in range(4):
        cols = [[TiledBitmap.column(s, j) for j in (2 * lane_t, 2 * lane_t + 1, 2 * lane_t + 8, 2 * lane_t + 9)]
                for s in range(2)]
        assert sorted(cols[0] + cols[1]) == list(range(8 * lane_t, 8 * lane_t + 8))
        perm[lane_t] = cols
        print(f"    {lane_t:6d}   {cols[0][:2]} {cols[0][2:]}   {cols[1][:2]} {cols[1][2:]}   "
              f"columns {8 * lane_t}-{8 * lane_t + 7}")
    out["permutation"] = perm

    # Step 3. One lane's decode by hand, then the whole warp's registers make the fragment's A tile.
    d = decode_lane(b, 0, LANE, CELL)
    (r0, c0), (r1, c1) = fragment_coords("m16n8k16", LANE)[f"a{CELL}"]
    halves = np.array([d["register"] & 0xFFFF, d["register"] >> 16], np.uint16).view(BFLOAT16)
    assert [float(v) for v in halves] == [block[r0, c0], block[r1, c1]] == [0, 7]
    assert d["mask"] & d["lanebit"] and d["earlier"] == [popc(int(x)) for x in masks[:CELL]]
    clear = [lane for lane in range(32) if not d["mask"] >> lane & 1]
    assert all(decode_lane(b, 0, lane, CELL)["register"] == 0 for lane in clear)
    print(f"\nStep 3: lane {LANE} (g = {g}, t = {t}) decodes its register a{CELL} of fragment (0, 0)")
    say(f"Its elements (fragment_coords): ({r0}, {c0}) and ({r1}, {c1}), row g and logical columns 8 + 2t, 9 + 2t: "
        f"its pair of cell {CELL}. The four bitmaps, one 16-byte load at the record's start: " +
        ", ".join(f"0x{x:08x}" for x in d["masks"]) + f". Cell {CELL}'s words start after the bitmaps and the pairs "
        f"of cells 0-{CELL - 1}: word {d['record']} + 4 + " + " + ".join(map(str, d["earlier"])) + f" = {d['first']} "
        "(" + ", ".join(f"popc(0x{x:08x}) = {n}" for x, n in zip(d["masks"], d["earlier"])) + "). "
        f"Bit {LANE} of bitmap {CELL} is set; the bits below it, 0x{d['mask']:08x} & 0x{d['lanebit'] - 1:08x}, "
        f"count {d['below']}: the pairs of lower lanes, stored before its own. One 32-bit load of word "
        f"{d['first']} + {d['below']} = {d['index']}: 0x{d['loaded']:08x}, kept by the select (bit {LANE} set).")
    say(f"register = 0x{d['register']:08x}: low half {float(halves[0]):g} (the weight at ({r0}, {c0}) is pruned), "
        f"high half {float(halves[1]):g}")
    say(f"The {len(clear)} lanes whose bit of bitmap {CELL} is clear load a word too and select zero. The kernel counts the same "
        "in bytes of its ring (w1 = w0 + 4 popc(m0), ...), and the popcount of all four bitmaps gives the record's "
        "length: where the next one starts.")
    for f in range(b.grid[1]):
        tile = assemble_fragment(b, f).view(BFLOAT16)
        assert (tile == fragment_block(toy16, 0, f)).all()
    say("All 32 lanes x 4 registers of fragments (0, 0) and (0, 1), placed by fragment_coords, equal the dense "
        "16x16 blocks (columns permuted).")
    out["lane"] = d

    # Step 4. The kernel: every lane of every warp does step 3, then mma.sync, on the simulator or the GPU.
    m, k, n = (32, 80, 8) if quick or not on_gpu else (256, 1024, 16)
    w = rng.standard_normal((m, k)).astype(np.float32)
    mask = magnitude(w, 0.7)
    a = TiledBitmap.from_dense(np.where(mask, w, 0).astype(BFLOAT16), mask)
    x = rng.standard_normal((n, k)).astype(BFLOAT16)
    tunables = {} if on_gpu else SIM_TUNABLES
    got = gb.spmm_bitmap_linear(a, x, **tunables)
    want = rb.spmm_bitmap_linear(a, x)
    a64, x64 = a.to_dense().astype(np.float64), x.astype(np.float64)
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    # both sum in float32 (in different orders) and round once to bfloat16
    bound = 2 * k * 2.0 ** -24 * (np.abs(x64) @ np.abs(a64).T) + 2.0 ** -7 * np.abs(x64 @ a64.T)
    assert (err <= bound).all(), float((err - bound).max())
    print(f"\nStep 4: gpu.spmm_bitmap.spmm_bitmap_linear, Y = X A^T, A {m}x{k} 70 % sparse ({a!r}), X {n}x{k} "
          f"bfloat16, {'defaults' if on_gpu else SIM_TUNABLES}")
    say(f"max |kernel Y - reference Y| = {float(err.max()):.3g}, within the bound of float32 sums rounded once "
        f"to bfloat16 everywhere (K = {k}: the last group cut inside, X staged with zero columns)")
    out["kernel_error"] = float(err.max())

    # Step 5. What the H200 measured (quoted from the results file, so the numbers cannot drift).
    out.update(report_measured(sizes))
    return out


if __name__ == "__main__":
    from sparsekit.backend import choose_backend

    choose_backend()      # the simulator when no GPU answers (before numba.cuda is imported)
    main(quick="--quick" in sys.argv)
