"""CSR SpMM on the GPU in lesson order: from one thread per row to Algorithm 3 and a split row.

Every kernel computes ``C = A @ B`` for ``A`` (``M x K``) in CSR and a dense
float32 ``B`` (``K x N``, C order), accumulating in float32, and equals
:func:`sparsekit.reference.spmm.spmm_csr` (``sparsekit/reference/spmm.py``) within float32
rounding; ``tests/test_spmm_lessons.py`` checks each one against it on the
CUDA simulator. The production kernels (tuned, more dtypes) live in
``sparsekit/gpu/spmm.py``; these are the steps a lesson walks through, each a separate
kernel that changes one thing (../shared/papers/spmm-course-slides.txt:
"Multithread on CUDA", "Detail about Shared Memory", "Load Balancing",
"Densify and Tile", Algorithm 3):

1. :func:`thread_per_row`: one thread per output element, consecutive threads
   on consecutive rows. Simple, but lanes of a warp walk rows of different
   lengths (divergence) and read ``B`` at scattered rows (uncoalesced).
2. :func:`warp_per_row`: a warp owns a row, its lanes own consecutive
   columns. Every lane walks the same nonzeros (no divergence) and a warp
   reads 32 consecutive floats of a row of ``B`` (coalesced).
3. :func:`smem_tiled`: a block stages a ``TILE_K x 32`` tile of ``B`` in shared
   memory once and every row of the block reads it from there (the slides'
   ``smem_b``), walking each row's nonzeros tile by tile (``swizzle=True``
   adds step 4's row order: swizzle + tiling).
4. :func:`warp_per_row_swizzled`: step 2 with Sputnik's row swizzle: warp ``w``
   takes row ``order[w]`` (rows by decreasing length, :func:`sparsekit.balance.row_swizzle`),
   so warps scheduled together carry similar work and the longest rows go first.
5. :func:`thread_group`: the slides' thread-group SpMM (Algorithm 3). A block
   owns a ``32 x 32`` tile of ``C``; its ``groups`` thread groups split the
   tile's K range (group ``g`` takes columns ``b = g, g + groups, ...``: its
   K-list); each thread caches ``B[b, n]`` in a register, accumulates
   ``A[a, b] * B[b, n]`` over the nonzeros ``a`` of column ``b`` inside the tile
   (``ACC[M_list, n]`` in registers), then the groups' ``ACC`` meet in shared
   memory by atomic adds and the block adds the tile into ``C`` atomically
   (``k_split > 1`` lets several blocks share one tile: the slides' first way
   of balancing blocks, here by K columns rather than by equal nonzeros).
   ``A`` is read by columns of each M-tile
   (:func:`tile_csc`), as SparseRT's code generator walks it. One honest
   difference: ``ACC[a]`` is indexed by a row read from memory, so the
   compiler keeps it in local memory (L1-cached), not in registers; SparseRT
   bakes the rows into the instruction stream as constants, which is what
   keeps its ACC in registers (:mod:`sparsekit.specialize` shows that step on
   the CPU; ``tests/compile/test_spmm_lessons_compile.py`` checks the PTX).

6. :func:`balanced_blocks`: the slides' *second way* of balancing blocks:
   each block owns a variable-height M-tile holding about equal nonzeros
   (:func:`sparsekit.balance.split_m`), one output tile per block.
7. :func:`row_split`: for long rows (large K), several warps per row. A block
   owns one row (by the row swizzle) and a 32-column strip; its
   ``warps_per_row`` warps stage a chunk of ``32 * warps_per_row`` (column,
   value) pairs of the row in shared memory with one coalesced load, each
   warp multiplies 32 of them, and the warps' partial sums meet in shared
   memory in a fixed order. The slides' "Comparing to Sputnik": Sputnik keeps
   the sparse row in shared memory (GE-SpMM calls it coalesced row caching);
   the staging and ``__syncthreads`` are those of "Detail about Shared
   Memory". It teaches that a warp walking a row of 205 nonzeros one after
   another is bound by load latency, not bandwidth: splitting the row puts
   more warps (more loads) in flight. :func:`sparsekit.gpu.spmm.spmm_csr` with
   ``warps_per_row``/``vector`` adds what comes next: several rows per
   block, vector loads of ``B`` and unrolled loads.

On the H100 over the 20-problem suite at 90% (``experiments/results/teaching.md``;
geometric-mean speedup over cuSPARSE): step 1 0.53x, step 2 1.09x, step 3
0.30x, step 4 1.14x, step 5 0.28x, step 6 0.72x, step 7 1.05x (1.2-2.1x faster
than step 4 on the long-row problems, slower on short rows); ``sparsekit.gpu.spmm``'s
staged kernel, step 7 with vector loads and unrolled loads, 1.79x. The
shared-memory tile of step 3 loses because a staged element of ``B`` serves
only 32 rows x 10% density and ``B`` fits in L2 anyway, while staging the
sparse row (step 7) pays; the lesson is what to stage, not that staging always
pays.

Launchers take a :class:`sparsekit.formats.CSR` (or a :class:`DeviceCSR` from
:func:`prepare`, to keep ``A`` on the device between calls) and ``b`` as a
NumPy array, a Numba device array or any ``__cuda_array_interface__`` object,
and return ``C`` as the same kind (:mod:`sparsekit.arrays`).
"""
from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32

from sparsekit.gpu.launch import check_int32
from sparsekit.gpu.spmm import DeviceSparse
from sparsekit.arrays import cdiv, operand, output, result
from sparsekit.balance import split_m
from sparsekit.checks import check_int
from sparsekit.formats import CSR

__all__ = ["LESSONS", "DeviceCSR", "prepare", "tile_csc", "thread_per_row", "warp_per_row",
           "smem_tiled", "warp_per_row_swizzled", "thread_group", "balanced_blocks", "row_split", "WARP_SIZE",
           "TILE_M", "TILE_N"]

WARP_SIZE = 32
#: Rows and columns of the C tile of a thread-group block (the slides' 32 x 32 ACC).
TILE_M = 32
TILE_N = 32
_F32 = np.dtype(np.float32)


# --------------------------------------------------------------------------- 1. thread per row

@cuda.jit
def _thread_per_row_kernel(indptr, indices, data, b, c, m, n):
    # Thread t computes C[i, j] with i = t % m, j = t // m: a warp spans 32 rows of one column.
    t = cuda.grid(1)
    if t >= m * n:
        return
    i = t % m
    j = t // m
    acc = float32(0.0)
    for p in range(indptr[i], indptr[i + 1]):      # lanes run rows of different lengths
        acc += data[p] * b[indices[p], j]          # 32 lanes read 32 unrelated rows of B
    c[i, j] = acc


# --------------------------------------------------------------------------- 2. warp per row

@cuda.jit
def _warp_per_row_kernel(indptr, indices, data, b, c, m, n):
    # Block (x: row group, y: 32-column strip); warp w of the block owns row i, lane owns column j.
    warp = cuda.threadIdx.x // WARP_SIZE
    lane = cuda.threadIdx.x % WARP_SIZE
    i = cuda.blockIdx.x * (cuda.blockDim.x // WARP_SIZE) + warp
    j = cuda.blockIdx.y * WARP_SIZE + lane
    if i >= m or j >= n:
        return
    acc = float32(0.0)
    for p in range(indptr[i], indptr[i + 1]):      # the same trip count for every lane
        acc += data[p] * b[indices[p], j]          # lanes read consecutive floats of row indices[p]
    c[i, j] = acc


# --------------------------------------------------------------------------- 3. shared-memory tile of B

@functools.cache
def _smem_tiled_kernel(nwarps: int, rows_per_warp: int, tile_k: int):
    rows_per_block = nwarps * rows_per_warp

    @cuda.jit
    def kernel(order, indptr, indices, data, b, c, m, n, k):
        # Row slot s of the block is row order[s] (the identity, or the row swizzle of step 4).
        warp = cuda.threadIdx.x // WARP_SIZE
        lane = cuda.threadIdx.x % WARP_SIZE
        tid = cuda.threadIdx.x
        j0 = cuda.blockIdx.y * WARP_SIZE
        j = j0 + lane
        i0 = cuda.blockIdx.x * rows_per_block + warp * rows_per_warp
        smem_b = cuda.shared.array((tile_k, WARP_SIZE), float32)      # the slides' smem_b
        acc = cuda.local.array(rows_per_warp, float32)
        cursor = cuda.local.array(rows_per_warp, np.int64)            # where each row stopped
        for r in range(rows_per_warp):
            acc[r] = 0.0
            cursor[r] = indptr[order[i0 + r]] if i0 + r < m else 0
        for k0 in range(0, k, tile_k):
            # Phase 1: the block copies B[k0:k0+tile_k, j0:j0+32] into shared memory (zeros past the edge).
            for e in range(tid, tile_k * WARP_SIZE, cuda.blockDim.x):
                kk = k0 + e // WARP_SIZE
                jj = j0 + e % WARP_SIZE
                smem_b[e // WARP_SIZE, e % WARP_SIZE] = b[kk, jj] if kk < k and jj < n else 0.0
            cuda.syncthreads()
            # Phase 2: each row consumes its nonzeros with a column inside this K tile.
            for r in range(rows_per_warp):
                if i0 + r < m:
                    i = order[i0 + r]
                    p = cursor[r]
                    end = indptr[i + 1]
                    while p < end and indices[p] < k0 + tile_k:
                        acc[r] += data[p] * smem_b[indices[p] - k0, lane]
                        p += 1
                    cursor[r] = p
            cuda.syncthreads()                                        # before the tile is overwritten
        for r in range(rows_per_warp):
            if i0 + r < m and j < n:
                c[order[i0 + r], j] = acc[r]

    return kernel


# --------------------------------------------------------------------------- 4. row swizzle

@cuda.jit
def _warp_per_row_swizzled_kernel(order, indptr, indices, data, b, c, m, n):
    # Step 2 with one indirection: warp slot s processes row order[s].
    warp = cuda.threadIdx.x // WARP_SIZE
    lane = cuda.threadIdx.x % WARP_SIZE
    s = cuda.blockIdx.x * (cuda.blockDim.x // WARP_SIZE) + warp
    j = cuda.blockIdx.y * WARP_SIZE + lane
    if s >= m or j >= n:
        return
    i = order[s]
    acc = float32(0.0)
    for p in range(indptr[i], indptr[i + 1]):
        acc += data[p] * b[indices[p], j]
    c[i, j] = acc


# --------------------------------------------------------------------------- 6. balanced blocks

@cuda.jit
def _balanced_blocks_kernel(starts, indptr, indices, data, b, c, m, n):
    # Block x owns rows starts[x] .. starts[x+1]-1 (a variable-height M-tile holding about
    # nnz / blocks nonzeros: the slides' second way); its warps stride over those rows.
    nwarps = cuda.blockDim.x // WARP_SIZE
    warp = cuda.threadIdx.x // WARP_SIZE
    lane = cuda.threadIdx.x % WARP_SIZE
    j = cuda.blockIdx.y * WARP_SIZE + lane
    if j >= n:
        return
    for i in range(starts[cuda.blockIdx.x] + warp, starts[cuda.blockIdx.x + 1], nwarps):
        if i < m:
            acc = float32(0.0)
            for p in range(indptr[i], indptr[i + 1]):
                acc += data[p] * b[indices[p], j]
            c[i, j] = acc


# --------------------------------------------------------------------------- 5. Algorithm 3

@functools.cache
def _thread_group_kernel(groups: int):
    @cuda.jit
    def kernel(tile_ptr, tile_rows, tile_vals, b, c, m, n, k, k_split):
        # Block (x: M-tile, y: N-tile, z: K share). Thread = (group g, column n_local).
        g = cuda.threadIdx.x // TILE_N
        nl = cuda.threadIdx.x % TILE_N
        t = cuda.blockIdx.x
        m0 = t * TILE_M
        j = cuda.blockIdx.y * TILE_N + nl
        kz = cuda.blockIdx.z
        sh_c = cuda.shared.array((TILE_M, TILE_N), float32)
        for e in range(cuda.threadIdx.x, TILE_M * TILE_N, cuda.blockDim.x):
            sh_c[e // TILE_N, e % TILE_N] = 0.0
        acc = cuda.local.array(TILE_M, float32)                       # line 5: ACC[M_list, N_list] = 0
        for a in range(TILE_M):
            acc[a] = 0.0
        cuda.syncthreads()
        if j < n:
            # line 2: this group's K-list, the columns b = g, g + groups*k_split, ... of its K share
            for bcol in range(kz * groups + g, k, groups * k_split):
                breg = b[bcol, j]                                    # line 8: cache B[b, N_list] in a register
                for p in range(tile_ptr[t, bcol], tile_ptr[t, bcol + 1]):   # line 7: M_nnz of A[M_list, b]
                    acc[tile_rows[p]] += tile_vals[p] * breg         # line 10: ACC[a, N_list] += A[a, b] * B[b, N_list]
            for a in range(TILE_M):                                   # groups meet in shared memory
                if acc[a] != 0.0:
                    cuda.atomic.add(sh_c, (a, nl), acc[a])
        cuda.syncthreads()
        for e in range(cuda.threadIdx.x, TILE_M * TILE_N, cuda.blockDim.x):   # add the tile into C
            i = m0 + e // TILE_N
            jj = cuda.blockIdx.y * TILE_N + e % TILE_N
            if i < m and jj < n:
                cuda.atomic.add(c, (i, jj), sh_c[e // TILE_N, e % TILE_N])

    return kernel


@cuda.jit
def _zero_kernel(c, m, n):
    t = cuda.grid(1)
    if t < m * n:
        c[t // n, t % n] = 0.0


# --------------------------------------------------------------------------- 7. row split

@functools.cache
def _row_split_kernel(warps_per_row: int):
    chunk = WARP_SIZE * warps_per_row

    @cuda.jit
    def kernel(order, indptr, indices, data, b, c, m, n):
        # Block (x: row slot, y: 32-column strip); warp w takes staged entries w*32 .. w*32+31.
        tid = cuda.threadIdx.x
        warp = tid // WARP_SIZE
        lane = tid % WARP_SIZE
        j = cuda.blockIdx.y * WARP_SIZE + lane
        i = order[cuda.blockIdx.x]                                  # m > 0: one block per row
        start = indptr[i]
        end = indptr[i + 1]
        s_col = cuda.shared.array(chunk, np.int32)                  # the row's chunk, staged
        s_val = cuda.shared.array(chunk, float32)
        s_sum = cuda.shared.array((warps_per_row, WARP_SIZE), float32)
        acc = float32(0.0)
        for p0 in range(start, end, chunk):                         # the same trip count for the block
            if p0 + tid < end:                                      # one coalesced load per thread
                s_col[tid] = indices[p0 + tid]
                s_val[tid] = data[p0 + tid]
            cuda.syncthreads()
            if j < n:
                for e in range(warp * WARP_SIZE, min((warp + 1) * WARP_SIZE, end - p0)):
                    acc += s_val[e] * b[s_col[e], j]                # s_val[e]: one broadcast read
            cuda.syncthreads()                                      # before the next chunk
        s_sum[warp, lane] = acc
        cuda.syncthreads()
        if warp == 0 and j < n:                                     # fixed order: deterministic
            total = float32(0.0)
            for w in range(warps_per_row):
                total += s_sum[w, lane]
            c[i, j] = total

    return kernel


# --------------------------------------------------------------------------- host side

def tile_csc(csr, tile_m: int = TILE_M):
    """``A`` by columns inside each ``tile_m``-row tile: ``(tile_ptr, rows, vals)``.

    The nonzeros of rows ``t*tile_m .. (t+1)*tile_m - 1`` in column ``b`` are
    ``vals[tile_ptr[t, b] : tile_ptr[t, b+1]]`` at tile-local rows ``rows[...]``
    (ascending). ``tile_ptr`` is ``(ceil(M/tile_m), K+1)`` int32.
    """
    tm = check_int(tile_m, "tile_m", minimum=1)
    check_int32(csr.nnz, "csr.nnz", "stored entries", "smem_tiled's tile pointers are int32")
    m, k = csr.shape
    lengths = np.diff(csr.indptr).astype(np.int64)
    rows = np.repeat(np.arange(m, dtype=np.int64), lengths)
    cols = csr.indices.astype(np.int64)
    tiles = rows // tm
    ntiles = max(1, cdiv(m, tm))
    order = np.lexsort((rows, cols, tiles))
    starts = np.zeros(ntiles * k + 1, dtype=np.int64)
    np.cumsum(np.bincount(tiles * k + cols, minlength=ntiles * k), out=starts[1:])
    ptr = starts[np.arange(ntiles)[:, None] * k + np.arange(k + 1)[None, :]]
    return (ptr.astype(np.int32), (rows[order] % tm).astype(np.int32),
            np.ascontiguousarray(csr.data[order]))


class DeviceCSR(DeviceSparse):
    """A CSR matrix on the device (float32 values), with the derived layouts made on first use:
    the row orders of :class:`sparsekit.gpu.spmm.DeviceSparse` (``swizzle()``, ``identity()``) and the
    ones below."""

    @property
    def csr(self) -> tuple:
        """``(indptr, indices, data)`` on the device, in the order the kernels take them."""
        return tuple(self.arrays[f] for f in _CSR_FIELDS)

    def balanced_starts(self, rows_per_block: int):
        """Row boundaries of :func:`sparsekit.balance.split_m` into ``ceil(M / rows_per_block)``
        blocks of about equal nonzeros, on the device (computed once per size)."""
        return self.cached(("balanced", rows_per_block), lambda: self._balanced_starts(rows_per_block))

    def _balanced_starts(self, rows_per_block: int) -> np.ndarray:
        plan = split_m(self.host, max(1, cdiv(self.shape[0], rows_per_block)))
        return np.append(plan.start, self.shape[0]).astype(np.int32)

    def tiles(self):
        """:func:`tile_csc` of ``A`` on the device (computed once)."""
        return self.cached("tiles", lambda: tile_csc(self.host, TILE_M))


_CSR_FIELDS = ("indptr", "indices", "data")


def prepare(csr) -> DeviceCSR:
    """Check ``csr`` fully and copy it to the device (pass the result to every lesson kernel). At most
    2**31 - 1 rows: the launch orders and block starts the lessons take are int32 row numbers."""
    if isinstance(csr, CSR):
        check_int32(csr.shape[0], "csr.shape[0]", "rows", "the lessons' launch orders and block starts are "
                                                          "int32 row numbers")
    return DeviceCSR.from_host(csr, CSR, _CSR_FIELDS, name="csr", dtypes=(_F32,),
                               dtype_rule="the lesson kernels compute in float32, got values of dtype {dtype}")


def _operands(csr, b):
    dcsr = prepare(csr)
    bop = operand(b, "b", dtypes=(_F32,), ndim=2, shape=(dcsr.shape[1], None), order="C")
    m, n = dcsr.shape[0], bop.dev.shape[1]
    return dcsr, bop, output((m, n), _F32, like=bop), m, n


def _zero(c, m, n):
    if m * n:
        _zero_kernel[cdiv(m * n, 256), 256](c, m, n)


def thread_per_row(csr, b, *, threads: int = 128):
    """Step 1: a thread per output element, warps spanning rows (``threads`` per block)."""
    threads = check_int(threads, "threads", minimum=32, maximum=1024)
    dcsr, bop, c, m, n = _operands(csr, b)
    if m * n:
        _thread_per_row_kernel[cdiv(m * n, threads), threads](*dcsr.csr, bop.dev, c, m, n)
    return result(c, like=bop)


def warp_per_row(csr, b, *, nwarps: int = 4):
    """Step 2: a warp per row, lanes on consecutive columns (``nwarps`` rows per block)."""
    nwarps = check_int(nwarps, "nwarps", minimum=1, maximum=32)
    dcsr, bop, c, m, n = _operands(csr, b)
    if m and n:
        grid = (cdiv(m, nwarps), cdiv(n, WARP_SIZE))
        _warp_per_row_kernel[grid, WARP_SIZE * nwarps](*dcsr.csr, bop.dev, c, m, n)
    return result(c, like=bop)


def smem_tiled(csr, b, *, nwarps: int = 8, rows_per_warp: int = 4, tile_k: int = 32, swizzle: bool = False):
    """Step 3: ``B`` staged in shared memory, ``tile_k`` rows x 32 columns at a time.

    A staged element is used by the block's ``nwarps * rows_per_warp`` rows
    times the density, so the tile pays only when that product exceeds about 1
    (32 rows at 90% sparsity: 3.2 uses). ``swizzle=True`` combines it with
    step 4: the block's rows are consecutive entries of the row swizzle, so
    they have similar lengths.
    """
    if not isinstance(swizzle, bool):
        raise TypeError(f"swizzle: expected True or False, got {type(swizzle).__name__}")
    nwarps = check_int(nwarps, "nwarps", minimum=1, maximum=32)
    rows_per_warp = check_int(rows_per_warp, "rows_per_warp", minimum=1, maximum=16)
    tile_k = check_int(tile_k, "tile_k", minimum=1, maximum=256)
    dcsr, bop, c, m, n = _operands(csr, b)
    if m and n:
        grid = (cdiv(m, nwarps * rows_per_warp), cdiv(n, WARP_SIZE))
        kernel = _smem_tiled_kernel(nwarps, rows_per_warp, tile_k)
        order = dcsr.swizzle() if swizzle else dcsr.identity()
        kernel[grid, WARP_SIZE * nwarps](order, *dcsr.csr, bop.dev, c, m, n, dcsr.shape[1])
    return result(c, like=bop)


def warp_per_row_swizzled(csr, b, *, nwarps: int = 4):
    """Step 4: step 2 over Sputnik's row swizzle (rows by decreasing length)."""
    nwarps = check_int(nwarps, "nwarps", minimum=1, maximum=32)
    dcsr, bop, c, m, n = _operands(csr, b)
    if m and n:
        grid = (cdiv(m, nwarps), cdiv(n, WARP_SIZE))
        _warp_per_row_swizzled_kernel[grid, WARP_SIZE * nwarps](dcsr.swizzle(), *dcsr.csr, bop.dev, c, m, n)
    return result(c, like=bop)


def thread_group(csr, b, *, groups: int = 4, k_split: int = 1):
    """Step 5: the slides' Algorithm 3 (``groups`` thread groups of 32 threads per block,
    ``k_split`` blocks sharing each 32 x 32 tile of ``C`` through atomic adds)."""
    groups = check_int(groups, "groups", minimum=1, maximum=32)
    k_split = check_int(k_split, "k_split", minimum=1)
    dcsr, bop, c, m, n = _operands(csr, b)
    _zero(c, m, n)
    if m and n:
        ptr, rows, vals = dcsr.tiles()
        grid = (cdiv(m, TILE_M), cdiv(n, TILE_N), k_split)
        _thread_group_kernel(groups)[grid, TILE_N * groups](ptr, rows, vals, bop.dev, c, m, n,
                                                             dcsr.shape[1], k_split)
    return result(c, like=bop)


def balanced_blocks(csr, b, *, nwarps: int = 4, rows_per_block: int = 16):
    """Step 6: the slides' second way of balancing blocks: variable-height M-tiles holding about
    equal nonzeros (:func:`sparsekit.balance.split_m`), ``nwarps`` warps striding over each tile's
    rows. ``rows_per_block`` sets the number of blocks, ``ceil(M / rows_per_block)``."""
    nwarps = check_int(nwarps, "nwarps", minimum=1, maximum=32)
    rows_per_block = check_int(rows_per_block, "rows_per_block", minimum=1)
    dcsr, bop, c, m, n = _operands(csr, b)
    if m and n:
        starts = dcsr.balanced_starts(rows_per_block)
        grid = (starts.shape[0] - 1, cdiv(n, WARP_SIZE))
        _balanced_blocks_kernel[grid, WARP_SIZE * nwarps](starts, *dcsr.csr, bop.dev, c, m, n)
    return result(c, like=bop)


def row_split(csr, b, *, warps_per_row: int = 4):
    """Step 7: ``warps_per_row`` warps share each row (one row per block, rows by the swizzle),
    a chunk of the row's (column, value) pairs staged in shared memory, partial sums added in
    shared memory."""
    warps_per_row = check_int(warps_per_row, "warps_per_row", minimum=1, maximum=32)
    dcsr, bop, c, m, n = _operands(csr, b)
    if m and n:
        grid = (m, cdiv(n, WARP_SIZE))
        _row_split_kernel(warps_per_row)[grid, WARP_SIZE * warps_per_row](dcsr.swizzle(), *dcsr.csr, bop.dev,
                                                                         c, m, n)
    return result(c, like=bop)


#: The steps in lesson order: (name, launcher, one line of what changes).
LESSONS = (
    ("thread_per_row", thread_per_row, "a thread per C element; warps span rows: divergent, uncoalesced"),
    ("warp_per_row", warp_per_row, "a warp per row, lanes on columns: uniform trip count, coalesced B"),
    ("smem_tiled", smem_tiled, "a TILE_K x 32 tile of B staged in shared memory for the block's rows"),
    ("warp_per_row_swizzled", warp_per_row_swizzled, "Sputnik's row swizzle: rows by decreasing length"),
    ("thread_group", thread_group, "Algorithm 3: K-lists per thread group, ACC per thread, atomic adds"),
    ("balanced_blocks", balanced_blocks, "variable M-tiles of equal nonzeros (the slides' second way)"),
    ("row_split", row_split, "several warps per row, the row's nonzeros staged in shared memory"),
)
