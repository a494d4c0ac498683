"""Tutorial 8: a bitmap per 8x8 cell, decoded by each lane straight into its tensor-core registers.

What you will learn
-------------------
1. unstructured pruning *loads as sparse and computes as dense*: the weight travels compressed and is
   multiplied densely on tensor cores, so what matters is its bytes. Dense, :class:`~sparsekit.formats.TiledCSL`
   (a 32-bit (value, index) word a kept weight) and :class:`~sparsekit.formats.TiledBitmap` (a bit a position
   and 16 bits a kept weight) at 50 / 80 / 90 % (``nbytes()``), and where the bitmap stops beating the list;
2. the TiledBitmap layout: a 16 x 16 MMA fragment is four 8 x 8 cells, each a 64-bit bitmap; a record holds the
   bitmap words, two header words of value offsets and the packed values. The columns of each 32-column group
   are permuted so that lane ``t`` of a quad reads its B inputs of both k-steps in one 16-byte load;
3. one lane's decode by hand (``sparsekit/gpu/spmm_bitmap.py``'s :func:`~sparsekit.gpu.spmm_bitmap.decode`):
   its pair of bits, the header byte, the popcount of the kept bits below the pair, two 16-bit loads and the
   register they make (checked against the kernel's NumPy model of ``pair_register``); then all 32 lanes'
   registers put where :func:`sparsekit.reference.mma.fragment_coords` says, which must give back the dense block;
4. the kernel, :func:`sparsekit.gpu.spmm_bitmap.spmm_bitmap_linear`, against ``sparsekit/reference/spmm_bitmap.py``;
5. what the H200 measured, quoted from ``experiments/results/spmm_bitmap.md``: where it is the fastest sparse
   kernel, and why it is still slower than dense cuBLAS (instructions a cell and load latency, not bytes).

Without a GPU the kernel runs on the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) at toy size, with small
tunables; nothing is timed.

Run it: ``python tutorials/08_bitmap_decode.py`` (``--quick`` for toy sizes).
"""
from __future__ import annotations

import os
import re
import sys
import textwrap
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parents[1] / "experiments" / "results" / "spmm_bitmap.md"
#: The start of the quoted table's header row, cell by cell.
TABLE_HEADER = ("shape (M x K)", "sparsity", "bytes / dense", "dense", "N = 8", "N = 16", "N = 32", "N = 64")
#: The paragraph of RESULTS that compares the other sparse kernels, and the sentences of it step 5 quotes.
SPARSE_PARAGRAPH = "**Against the other sparse kernels**"
SPARSE_SENTENCES = ("TiledBitmap is the fastest sparse kernel", "The row kernel stays faster")
#: The measured copy bandwidth in RESULTS' header ("copy bandwidth measured 4.24 TB/s").
BANDWIDTH = re.compile(r"copy bandwidth measured ([0-9.]+) TB/s")
#: Sparsities of step 1.
SPARSITIES = (0.5, 0.8, 0.9)
#: Step 3's lane and cell: a lane of the high half (lane >= 16), in a cell of logical columns 8-15.
LANE, CELL = 21, 2
#: Small blocks for the simulator: 2 warps on consecutive row blocks, K in 2 slices (128 threads a block).
SIM_TUNABLES = dict(rows=2, slices=2, splits=1)


def fragment_block(dense: np.ndarray, rb: int, ks: int) -> np.ndarray:
    """The 16 x 16 block of ``dense`` that fragment ``(rb, ks)`` covers, columns in the fragment's logical order."""
    from sparsekit.formats import TiledBitmap
    cols = [TiledBitmap.column(ks, j) for j in range(16)]
    return dense[16 * rb: 16 * rb + 16, cols]


def digits(values) -> str:
    """A row of small whole values as digits, ``.`` for a zero."""
    return " ".join(f"{int(v)}" if v else "." for v in values)


def decode_lane(b, f: int, lane: int, cell: int) -> dict:
    """Lane ``lane``'s A-fragment register of cell ``cell`` of record ``f``, as ``sparsekit/gpu/spmm_bitmap.py``'s
    step 3 computes it, every intermediate value returned. The stream gets the kernel's zero tail
    (:func:`~sparsekit.gpu.spmm_bitmap.upload`): the second load may fall past the last record."""
    from sparsekit.gpu.spmm_bitmap import TAIL_WORDS

    halves = np.concatenate([b.stream, np.zeros(TAIL_WORDS, np.uint32)]).view(np.uint16)
    rec = int(b.offsets[f]) * 4                              # the record's first 32-bit word
    high = lane >= 16                                        # bits 32-63 of the cell: words 4-7
    own = int(b.stream[rec + cell + 4 * high])
    sh = 2 * (lane % 16)                                     # this lane's pair in its half
    header = int(b.stream[rec + 8 + high])                   # word 8 for the low halves, 9 for the high
    byte = (header >> (8 * cell)) & 0xFF if high or cell else 0   # low half, cell 0: byte 0 is the length
    below = bin(own & ((1 << sh) - 1)).count("1")            # kept bits before the pair: values before ours
    first = 2 * rec + 20 + byte + below                      # values start after 10 words = 20 halves
    v0, v1 = int(halves[first]), int(halves[first + 1])      # both loads, whatever the bits
    pair = (own >> sh) & 3
    low_half = v0 if pair & 1 else 0                         # bit 0 kept: the first value is ours
    high_half = (v1 if pair & 1 else v0) if pair & 2 else 0  # bit 1 kept: the value after bit 0's, if any
    return dict(own=own, sh=sh, pair=pair, high=high, header=header, byte=byte, below=below, first=first,
                v0=v0, v1=v1, register=low_half | high_half << 16)


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


def main(quick: bool = False) -> dict:
    from sparsekit.arrays import BFLOAT16
    from sparsekit.formats import TiledBitmap, TiledCSL
    from sparsekit.gpu import spmm_bitmap as gb
    from sparsekit.prune import magnitude
    from sparsekit.reference import spmm_bitmap as rb

    on_gpu = os.environ.get("NUMBA_ENABLE_CUDASIM") != "1"
    rng = np.random.default_rng(0)
    out = {}
    table = quoted_table()
    quoted_bytes = {r["sparsity"]: r["bytes"] for r in measured(table)} if table else {}

    # Step 1. Bytes: the product is dense on tensor cores, so the format's job is to load fewer bytes.
    m, k = (256, 512) if quick else (1024, 1024)
    w = rng.standard_normal((m, k)).astype(np.float32)
    print(f"Step 1: a {m}x{k} bfloat16 weight pruned by magnitude (any pattern), stored three ways")
    print("  sparsity   dense bytes   TiledCSL (4 B a kept)   TiledBitmap (1 bit a position + 2 B a kept)")
    sizes = {}
    for s in SPARSITIES:
        mask = magnitude(w, s)
        w16 = np.where(mask, w, 0).astype(BFLOAT16)
        dense, csl, bmp = 2 * m * k, TiledCSL.from_dense(w16, mask).nbytes(), TiledBitmap.from_dense(w16, mask).nbytes()
        sizes[s] = dict(dense=dense, csl=csl.total, bitmap=bmp.total, bitmap_index=bmp.indices)
        print(f"  {s:8.0%}   {dense:11d}   {csl.total:11d} ({csl.total / dense:.2f})   "
              f"{bmp.total:11d} ({bmp.total / dense:.2f}, of it {bmp.indices} index)")
        if s in quoted_bytes:                                # the same ratio the H200 table lists
            assert abs(bmp.total / dense - quoted_bytes[s]) <= 0.01, (s, bmp.total / dense, quoted_bytes[s])
    index_a_weight = sizes[0.5]["bitmap_index"] / (m * k)    # the same at every sparsity: a bit a position
    assert max(abs(v["bitmap_index"] / (m * k) - index_a_weight) for v in sizes.values()) < 0.01
    crossover = 1 - index_a_weight / 2                       # where the list's 2 B index a kept weight costs as much
    assert sizes[0.5]["csl"] >= sizes[0.5]["dense"] > sizes[0.5]["bitmap"]
    assert all((v["csl"] < v["bitmap"]) == (s > crossover) for s, v in sizes.items())
    print(f"  The bitmap's index data cost {index_a_weight:.3f} B a weight whatever is kept (1 bit = 0.125 B, then")
    print("  8 B of header and 8 B of offset a 256-weight fragment, and padding to 16 B); the list pays 2 B of index")
    print(f"  a KEPT weight, 2 (1 - s) B a weight: more than the bitmap below s = {crossover:.1%}. At 50 % the list")
    print(f"  loads {sizes[0.5]['csl'] / sizes[0.5]['dense']:.2f} of dense's bytes, the bitmap "
          f"{sizes[0.5]['bitmap'] / sizes[0.5]['dense']:.2f}; past {crossover:.1%} the list is the smaller.")
    out["bytes"] = sizes

    # Step 2. The layout of one record, on a 16 x 32 weight with small whole values (two fragments: k-steps 0, 1).
    toy = np.where(rng.random((16, 32)) < 0.35, rng.integers(1, 10, (16, 32)), 0).astype(np.float32)
    g, t = LANE // 4, LANE % 4                               # step 3's lane: make sure its pair is kept
    for j, value in ((2 * t + 8, 7), (2 * t + 9, 3)):        # cell 2: rows 0-7, logical columns 8-15
        toy[g, TiledBitmap.column(0, j)] = value
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
    words, (ha, hb) = b.bitmaps()[0], b.headers()[0]
    for cell in range(4):                                    # bit 8 r + c of a cell is its row r, column c
        bits = int(words[cell]) | int(words[cell + 4]) << 32
        rows, cols = (8 * (cell % 2), 8 * (cell % 2) + 8), (8 * (cell // 2), 8 * (cell // 2) + 8)
        want = sum(1 << (8 * r + c) for r in range(8) for c in range(8) if block[rows[0] + r, cols[0] + c])
        assert bits == want
        print(f"  cell {cell}: bitmap 0x{bits:016x} = low word 0x{int(words[cell]):08x} (rows 0-3), "
              f"high word 0x{int(words[cell + 4]):08x} (rows 4-7)")
    bytes_a, bytes_b = [(int(ha) >> 8 * i) & 0xFF for i in range(4)], [(int(hb) >> 8 * i) & 0xFF for i in range(4)]
    print(f"  header word 8 = 0x{int(ha):08x}: bytes {bytes_a}: the record is {bytes_a[0]} 16-byte units, cells 1-3 "
          "start after that many values")
    print(f"  header word 9 = 0x{int(hb):08x}: bytes {bytes_b}: each cell's high half starts after that many values")
    count = int(b.counts()[0])
    values = b.stream.view(np.uint16)[int(b.offsets[0]) * 8 + 20:][:count].view(BFLOAT16)
    assert bytes_a[0] == int(b.offsets[1] - b.offsets[0]) == -(-(40 + 2 * count) // 16)
    cells = [block[8 * (c % 2): 8 * (c % 2) + 8, 8 * (c // 2): 8 * (c // 2) + 8].ravel() for c in range(4)]
    assert [float(v) for v in values] == [float(v) for v in np.concatenate(cells) if v]   # bit 8 r + c: row-major
    print(f"  then the {count} kept values, cell by cell in bit order (row by row), each cell from its header byte:")
    starts = [0] + bytes_a[1:] + [count]
    for cell in range(4):
        kept = [int(v) for v in values[starts[cell]: starts[cell + 1]].astype(np.float32)]
        print(f"    cell {cell} (values {starts[cell]}-{starts[cell + 1] - 1}, high half from {bytes_b[cell]}): {kept}")
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
    from sparsekit.gpu.spmm_bitmap import pair_register_model
    from sparsekit.reference.mma import fragment_coords

    d = decode_lane(b, 0, LANE, CELL)
    model = int(pair_register_model(d["own"], d["sh"], d["v0"], d["v1"]))
    assert d["register"] == model
    (r0, c0), (r1, c1) = fragment_coords("m16n8k16", LANE)[f"a{CELL}"]
    halves = np.array([d["register"] & 0xFFFF, d["register"] >> 16], np.uint16).view(BFLOAT16)
    assert [float(v) for v in halves] == [block[r0, c0], block[r1, c1]]
    print(f"\nStep 3: lane {LANE} (g = {LANE // 4}, t = {LANE % 4}) decodes its register a{CELL} of fragment (0, 0)")
    print(f"  its elements (fragment_coords): ({r0}, {c0}) and ({r1}, {c1}) = bits {2 * LANE} and {2 * LANE + 1} of "
          f"cell {CELL}: lane {LANE} >= 16, so bits {d['sh']}, {d['sh'] + 1} of the high word 0x{d['own']:08x}")
    print(f"  pair of bits = {d['pair']:02b} (bit 1, bit 0); header word 9 byte {CELL} = {d['byte']} values before "
          f"this half; popcount of the {d['sh']} bits below the pair = {d['below']}")
    print(f"  first value at half {d['first']} of the stream (= 2 x record word {int(b.offsets[0]) * 4} + 20 + "
          f"{d['byte']} + {d['below']}); loads v0 = 0x{d['v0']:04x}, v1 = 0x{d['v1']:04x}")
    print(f"  register = 0x{d['register']:08x} (low half {float(halves[0]):g}, high half {float(halves[1]):g}); "
          f"spmm_bitmap.pair_register_model gives 0x{model:08x}")
    for f in range(b.grid[1]):
        tile = assemble_fragment(b, f).view(BFLOAT16)
        assert (tile == fragment_block(toy16, 0, f)).all()
    print("  all 32 lanes x 4 registers of fragments (0, 0) and (0, 1), placed by fragment_coords, equal the dense "
          "16x16 blocks (columns permuted)")
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
    print(f"  max |kernel Y - reference Y| = {float(err.max()):.3g}, within the bound of float32 sums rounded once "
          f"to bfloat16 everywhere (K = {k}: the last group cut inside, X staged with zero columns)")
    out["kernel_error"] = float(err.max())

    # Step 5. What the H200 measured (quoted from the results file, so the numbers cannot drift).
    print(f"\nStep 5: measured on the H200 (quoted from {RESULTS.relative_to(RESULTS.parents[2])}; Y = X W^T, "
          "bfloat16, device us, speedup over dense cuBLAS in brackets)")
    if not table:
        print("    (table not found in the results file)")
        out["quoted_rows"] = 0
        return out
    for row in table:
        print("    " + " | ".join(f"{c:>13s}" for c in row))
    points = measured(table)
    for n_ in sorted({p["n"] for p in points}):
        at = [p["speedup"] for p in points if p["n"] == n_]
        print(f"  N = {n_:2d}: {min(at):.2f}-{max(at):.2f}x dense cuBLAS")
    assert all(p["speedup"] < 1 for p in points)
    print("  It is slower than dense cuBLAS at every measured point. Against the other sparse kernels (same file; the")
    print("  tile and row kernels of sparsekit/gpu/spmm_tiled.py, on step 1's TiledCSL):")
    for sentence in quoted_sentences():
        print(textwrap.fill(sentence, 112, initial_indent="    ", subsequent_indent="    "))
    bandwidth = copy_bandwidth()
    used = [p["bytes"] * 2 * p["m"] * p["k"] / (p["us"] * 1e-6) / bandwidth for p in points] if bandwidth else []
    falls = [(p90["us"] / p50["us"], p90["bytes"] / p50["bytes"]) for p50 in points if p50["sparsity"] == 0.5
             for p90 in points if p90["sparsity"] == 0.9 and (p90["shape"], p90["n"]) == (p50["shape"], p50["n"])]
    assert falls and all(time > 2 * byte for time, byte in falls)   # time falls far less than the bytes
    print("  Why not faster: not bytes but instructions and latency.")
    if used:
        print(f"  - it reads its bytes at {100 * min(used):.0f}-{100 * max(used):.0f} % of the measured copy bandwidth "
              f"({bandwidth / 1e12:.2f} TB/s);")
    print(f"  - from 50 % to 90 % its bytes fall to {min(b_ for _, b_ in falls):.2f} but its time only to "
          f"{min(t_ for t_, _ in falls):.2f}-{max(t_ for t_, _ in falls):.2f} of the 50 % time: step 3 costs the same")
    print("    whatever a cell keeps (header byte, popcount, two 16-bit loads, two prmt: about 12 instructions a cell,")
    print("    four cells a fragment), and the MMA waits on the two value loads, which wait on the bitmap and header;")
    if bandwidth:
        dense_used = [2 * p["m"] * p["k"] / (p["dense_us"] * 1e-6) / bandwidth for p in points]
        print(f"  - dense cuBLAS reads all 2 B a weight, with nothing to decode, at {100 * min(dense_used):.0f}-"
              f"{100 * max(dense_used):.0f} % of the copy bandwidth: more bytes, read faster.")
    out.update(quoted_rows=len(table), quoted_sentences=len(quoted_sentences()), bandwidth_used=used, falls=falls)
    return out


if __name__ == "__main__":
    from sparsekit.backend import choose_backend

    choose_backend()      # the simulator when no GPU answers (before numba.cuda is imported)
    main(quick="--quick" in sys.argv)
