"""Transposable 2:4 sparsifier on the GPU: one pass writes packed W, packed W^T, both metadata.

Computes exactly :func:`reference.sparsify24.sparsify24` (same masks, same
packed values, same metadata bits, for ``method`` "greedy" with ``ties``
"index" or "torch", "optimal" and "optimal_full"), following the kernel of the semi-structured
training post (../shared/papers/semi-structured-24-training.txt, sections 2-4):

* **Tiling (post, "Kernel tiling for efficient memory-IO")**: each thread owns
  an 8x8 block of ``w``, four 4x4 tiles A B / C D. A warp is 4 thread-rows x
  8 thread-columns, so each of its row loads covers 4 rows x 64 contiguous
  columns (128 bytes per row in fp16). Values are read as 64-bit words
  (4 fp16 or 2 fp32 per load) and kept as integer bit patterns.
* **Sorting without divergence (post, section 3)**: the 16 keys of a tile are
  ``(|w| bits) << 4 | position`` and are sorted by a comparator network
  generated as straight-line code (:mod:`sparsekit.sorting_networks`), so
  they stay in registers and every comparator is a select: Green's 60-comparator
  network for ``ties="index"`` (keys distinct: the low bits are
  ``15 - position``), PyTorch's Bose-Nelson network with swap-on-equal for
  ``ties="torch"``. The greedy pass counts kept values per row and column in
  2-bit fields of two integers, as PyTorch's kernel does.
* **Optimal mask**: every candidate (186 maximal masks for "optimal", the 90
  full ones for "optimal_full") is scored from 24 row-pair sums and the 16
  magnitudes (3 float32 adds and two selects each), straight-line, first
  maximum wins.
* **Writing (post, section 4)**: packed W and packed W^T are written from
  registers; the metadata nibbles go to shared memory and, after one
  ``syncthreads``, every thread writes two 32-bit words of each metadata
  array, consecutive threads consecutive words (the post shuffles inside a
  warp instead; shuffles do not run in the CUDA simulator, shared memory does).
  A block is 8 x ``row_threads`` threads = ``8 * row_threads`` rows x 64 columns
  (tunable, default 16), whole 32x32 metadata blocks.

Measured on the H100 (experiments/results/sparsify24.md): masks, packed W and
packed W^T identical to ``torch._sparse_semi_structured_tile`` with
``ties="torch"`` at 128^2..8192^2; compute-sanitizer clean; the greedy kernel
takes 1.2x PyTorch's time (28.6 vs 23.5 us at 4096x1024), the 90-candidate
optimal_full kernel 0.89-0.95x: the greedy pass is instruction-bound on the
64-bit integers Numba computes with.

Non-finite input is reported through a flag word the launcher reads back
(``check_finite=True``), so device arrays get the same error as NumPy ones.
bfloat16: Numba has no bfloat16 array dtype (NumPy has none), so it is not
offered; the kernel only moves bits and would need nothing else.
"""
from __future__ import annotations

import numpy as np
from numba import cuda, float32, uint8

from reference.sparsify24 import (ALIGN, CANDIDATES, DTYPES, METHODS, NIBBLE, PAIRS, ROW_TERMS,
                                  TIES, Sparse24)
from sparsekit.arrays import cdiv, operand, output, result
from sparsekit.checks import check_divisible, check_int
from sparsekit.sorting_networks import bose_nelson, compare_exchange_source, green16

__all__ = ["sparsify24", "prepare", "kernel_for", "tile_mask_source", "ROW_THREADS", "GREEDY_TILE",
           "OPTIMAL_TILE"]

#: Default thread rows per block (a block is 8 x row_threads threads, 8*row_threads rows x 64 columns).
ROW_THREADS = 16
#: Allowed row_threads: blocks must cover whole 32-row metadata groups.
ROW_THREADS_ALLOWED = (4, 8, 16, 32)
_BLOCK_COLS = 64

#: Metadata nibble of every 4-bit row-group pattern, 4 bits each (3+ kept never occurs -> 0).
_NIBBLES = sum(int(n) << (4 * p) for p, n in enumerate(NIBBLE) if n != 0xFF)


# ---------------------------------------------------------------- generated tile-mask functions

def _greedy_source(bits: int, ties: str) -> str:
    """Source of ``greedy_tile(r0, r1, r2, r3)``: 4 tuples of 4 raw bit patterns -> 16-bit mask."""
    absmask = (1 << (bits - 1)) - 1
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
        lines.append(compare_exchange_source(bose_nelson(16), "k", swap_equal_on="({} >> 4)",
                                             indent="    ").rstrip())
    lines += ["    # greedy from the largest: keep when row and column hold < 2 (2-bit counters 0, 1, 3)",
              "    mask = 0", "    rows = 0", "    cols = 0"]
    for i in range(15, -1, -1):
        lines += [f"    p = (k{i} & 15) ^ {flip}",
                  "    rc = (rows >> ((p >> 2) << 1)) & 3",
                  "    cc = (cols >> ((p & 3) << 1)) & 3",
                  "    sel = 1 if rc + cc <= 2 else 0",
                  "    mask |= sel << p",
                  "    rows |= (rc + sel) << ((p >> 2) << 1)",
                  "    cols |= (cc + sel) << ((p & 3) << 1)"]
    lines.append("    return mask")
    return "\n".join(lines) + "\n"


def _optimal_source(method: str) -> str:
    """Source of ``optimal_tile(wf, r, c)``: best candidate mask of the tile at (r, c).

    Row terms first (6 pair sums ``s<row>_<pair>`` per row; singles are the
    magnitudes ``f<4*row+col>``), then one score per candidate in
    :data:`reference.sparsify24.CANDIDATES` order, keeping the first maximum.
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
            lines += [f"    best = {score}", f"    mask = {int(pat)}"]
        else:
            lines += [f"    t = {score}", "    better = t > best",
                      "    best = t if better else best", f"    mask = {int(pat)} if better else mask"]
    lines.append("    return mask")
    return "\n".join(lines) + "\n"


def tile_mask_source(method: str = "greedy", ties: str = "index", bits: int = 16) -> str:
    """The generated straight-line source of a tile-mask device function (for reading)."""
    return _greedy_source(bits, ties) if method == "greedy" else _optimal_source(method)


def _device(source: str, name: str):
    env = {"float32": float32}
    exec(compile(source, f"<generated {name}>", "exec"), env)
    return cuda.jit(device=True)(env[name])


#: Generated device functions: (bits, ties) -> greedy_tile(r0, r1, r2, r3); method -> optimal_tile(wf, r, c).
GREEDY_TILE = {(b, t): _device(_greedy_source(b, t), "greedy_tile") for b in (16, 32) for t in TIES}
OPTIMAL_TILE = {m: _device(_optimal_source(m), "optimal_tile") for m in METHODS[1:]}


# ---------------------------------------------------------------- device helpers

@cuda.jit(device=True)
def _load4_16(words, r, c):
    """Bit patterns of fp16 w[r, c:c+4] (one 64-bit word; c a multiple of 4)."""
    x = words[r, c >> 2]
    return x & 0xFFFF, (x >> 16) & 0xFFFF, (x >> 32) & 0xFFFF, (x >> 48) & 0xFFFF


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
    d0 = (d & ~1) | h
    return (d0 & ~31) | ((d0 & 3) << 3) | ((d0 >> 2) & 7)


# ---------------------------------------------------------------- kernels

def _make_kernel(bits: int, method: str, ties: str, row_threads: int, min_blocks: int | None):
    """Kernel for one (element bits, method, ties, block shape); all compile-time constants.

    ``min_blocks``: launch bounds asking ptxas for that many resident blocks per SM
    (caps registers); None leaves ptxas free.
    """
    load4 = _load4_16 if bits == 16 else _load4_32
    inf = 0x7C00 if bits == 16 else 0x7F800000
    optimal = method != "greedy"
    greedy_tile = GREEDY_TILE[(bits, "index" if optimal else ties)]
    optimal_tile = OPTIMAL_TILE["optimal" if method == "greedy" else method]
    rows_t = row_threads
    block_rows = 8 * row_threads

    def kernel(words, wf, packed, packed_t, meta, meta_t, tmasks, flags, m, k):
        # arrays: words (M, K*bits/64) int64 view of w; wf w itself (optimal scores);
        #   packed (M, K/2) / packed_t (K, M/2) element-bit views; meta (M*K/32,) /
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
                a0 = load4(words, r, col0)              # left tile rows
                a1 = load4(words, r + 1, col0)
                a2 = load4(words, r + 2, col0)
                a3 = load4(words, r + 3, col0)
                b0 = load4(words, r, col0 + 4)          # right tile rows
                b1 = load4(words, r + 1, col0 + 4)
                b2 = load4(words, r + 2, col0 + 4)
                b3 = load4(words, r + 3, col0 + 4)
                bad |= (_nonfinite(a0, inf) | _nonfinite(a1, inf) | _nonfinite(a2, inf)
                        | _nonfinite(a3, inf) | _nonfinite(b0, inf) | _nonfinite(b1, inf)
                        | _nonfinite(b2, inf) | _nonfinite(b3, inf))
                if optimal:
                    ma = optimal_tile(wf, r, col0)
                    mb = optimal_tile(wf, r, col0 + 4)
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
        # (int(): shared bytes are uint8; widen before shifting, as the simulator keeps uint8)
        # Metadata out: 32-bit word u of a stored array holds the two 16-bit words of
        # stored row d = u % rows at stored columns 2j, 2j+1 (j = u // rows); each comes
        # from logical row _meta_row(d, h), logical column 2j | (d & 1) (module docstring
        # of reference.sparsify24, steps 3-5 inverted).
        t = ty * 8 + tx
        rb = cuda.blockIdx.y * block_rows
        cb = cuda.blockIdx.x * _BLOCK_COLS
        for s in range(2):
            # W: this block's stored rows rb.., column pairs j = cb/32, cb/32 + 1
            q = t + s * block_rows
            d = rb + q % block_rows
            j = cb // 32 + q // block_rows
            if d < m and j * 32 < k:
                cl = 2 * (2 * j + (d & 1) - cb // 16)            # byte of the 16-col word
                lo = _meta_row(d, 0) - rb
                hi = _meta_row(d, 1) - rb
                word = (int(smem_w[lo, cl]) | (int(smem_w[lo, cl + 1]) << 8)
                        | (int(smem_w[hi, cl]) << 16) | (int(smem_w[hi, cl + 1]) << 24))
                meta[j * m + d] = word
            # W^T: stored rows cb.. (W columns), column pairs j = rb/32 ..
            d = cb + q % _BLOCK_COLS
            j = rb // 32 + q // _BLOCK_COLS
            if d < k and j * 32 < m:
                cl = 2 * (2 * j + (d & 1) - rb // 16)
                lo = _meta_row(d, 0) - cb
                hi = _meta_row(d, 1) - cb
                word = (int(smem_t[lo, cl]) | (int(smem_t[lo, cl + 1]) << 8)
                        | (int(smem_t[hi, cl]) << 16) | (int(smem_t[hi, cl + 1]) << 24))
                meta_t[j * k + d] = word

    if min_blocks is None:       # (the simulator's jit takes no launch_bounds at all)
        return cuda.jit(kernel)
    return cuda.jit(kernel, launch_bounds=(8 * row_threads, min_blocks))


_KERNELS: dict = {}


def kernel_for(bits: int, method: str, ties: str, row_threads: int = ROW_THREADS,
               min_blocks: int | None = None):
    """The (cached) kernel for these compile-time choices; optimal methods ignore ``ties``."""
    key = (bits, method, ties if method == "greedy" else "index", row_threads, min_blocks)
    if key not in _KERNELS:
        _KERNELS[key] = _make_kernel(*key)
    return _KERNELS[key]


# ---------------------------------------------------------------- launcher

def prepare(w, *, method: str = "greedy", ties: str = "index", row_threads: int = ROW_THREADS,
            min_blocks: int | None = None):
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
        check_int(min_blocks, "min_blocks", minimum=1, maximum=32)
    op = operand(w, "w", dtypes=DTYPES, ndim=2, order="C")
    dev = op.dev
    m, k = dev.shape
    check_divisible(m, ALIGN, "w.shape[0]")
    check_divisible(k, ALIGN, "w.shape[1]")
    bits = 8 * dev.dtype.itemsize
    ebits = np.uint16 if bits == 16 else np.uint32
    packed = output((m, k // 2), dev.dtype, like=op)
    packed_t = output((k, m // 2), dev.dtype, like=op)
    meta = output((m * k // 32,), np.uint32, like=op)      # written as 32-bit words
    meta_t = output((m * k // 32,), np.uint32, like=op)
    tmasks = output((m // 4, k // 4), np.uint16, like=op)
    flags = cuda.to_device(np.zeros(1, np.int32))
    kern = kernel_for(bits, method, ties, row_threads, min_blocks)
    grid = (cdiv(k, _BLOCK_COLS), cdiv(m, 8 * row_threads))
    args = (dev.view(np.int64), dev, packed.view(ebits), packed_t.view(ebits), meta, meta_t, tmasks,
            flags, m, k)

    def launch():
        if m and k:
            kern[grid, (8, row_threads)](*args)

    out = Sparse24(tmasks, packed, meta.view(np.int16), packed_t, meta_t.view(np.int16), method,
                   ties if method == "greedy" else "index")
    return launch, (op, out, flags)


def sparsify24(w, *, method: str = "greedy", ties: str = "index", check_finite: bool = True,
               row_threads: int = ROW_THREADS, min_blocks: int | None = None) -> Sparse24:
    """GPU :func:`reference.sparsify24.sparsify24`; arrays come back as the kind ``w`` is.

    Parameters
    ----------
    w : (M, K) float16 or float32, C-contiguous; NumPy, Numba device array or CAI
        (CuPy, PyTorch). M and K multiples of 32.
    method, ties : as in the reference.
    check_finite : read the kernel's non-finite flag back and raise ``ValueError``
        (one small device-to-host copy, which synchronises; pass False when timing).
    row_threads : tunable, thread rows per block (4, 8, 16, 32; 8 thread columns).
    min_blocks : tunable, launch bounds' minimum resident blocks per SM (None: no bound).
    """
    launch, (op, out, flags) = prepare(w, method=method, ties=ties, row_threads=row_threads,
                                       min_blocks=min_blocks)
    launch()
    if check_finite and flags.copy_to_host()[0]:
        raise ValueError("w: must be finite, found NaN/Inf value(s) (flagged by the kernel)")
    m, k = out.shape
    return Sparse24(result(out.tile_masks, like=op), result(out.packed, like=op),
                    result(out.meta, like=op).reshape(m, k // 16), result(out.packed_t, like=op),
                    result(out.meta_t, like=op).reshape(k, m // 16), out.method, out.ties)
