"""Probe kernels of sparsekit/gpu/mma.py's and sparsekit/gpu/wgmma.py's intrinsics: one MMA, one ldmatrix, one
rounding or one wgmma per warp/thread/warpgroup, kernels that exist only to test an instruction.

They load fragments from row-major tiles by the layout of :func:`sparsekit.reference.mma.fragment_coords`, so a
wrong layout in the intrinsics or in the simulator fallbacks shows up as a wrong product; ``tests/test_mma.py``
and ``tests/test_uspmm_wgmma.py`` run them on the simulator, ``tests/gpu/test_uspmm_tc_gpu.py`` and
``tests/gpu/test_uspmm_wgmma_gpu.py`` on the GPU, ``tests/compile/test_uspmm_wgmma_compile.py`` compiles the wgmma
probe for sm_90a.
"""
from __future__ import annotations

import numpy as np
from numba import cuda, float32
from numba.core.types import float16
from numba.cuda import config

from sparsekit.gpu.mma import (ldmatrix_x4, ldmatrix_x4_trans, load_b32, mma_m16n8k8_tf32_f32, mma_m16n8k16_f16_f32,
                               pack_bf16x2, shared_addr, to_tf32)
from sparsekit.gpu.wgmma import fence_proxy_async, smem_desc, wgmma_commit, wgmma_fence, wgmma_tf32, wgmma_wait
from sparsekit.reference.mma import tf32_round


@cuda.jit(device=True)
def _store_accumulators(d, cr, x):
    """A lane's four accumulators of a 16x8 fp32 C tile (flat, row stride 8) at ``cr`` = C[g, 2t]:
    C[g, 2t], C[g, 2t+1], C[g+8, 2t], C[g+8, 2t+1]."""
    d[cr] = x[0]
    d[cr + 1] = x[1]
    d[cr + 64] = x[2]
    d[cr + 65] = x[3]


@cuda.jit
def mma_probe_f16(a, bt, c, d, nbatch):
    """``d[w] = a[w] @ bt[w].T + c[w]`` for problem ``w`` = the global warp index, via
    :func:`mma_m16n8k16_f16_f32`. Arrays are flat, C-ordered: ``a`` ``(nbatch, 16, 16)`` float16,
    ``bt`` ``(nbatch, 8, 16)`` float16 (B transposed: a column of B is a row, so the pair of rows
    ``2t, 2t+1`` of ``b0`` is one 32-bit word), ``c``/``d`` ``(nbatch, 16, 8)`` float32."""
    w = cuda.grid(1) // 32
    lane = cuda.threadIdx.x % 32
    g = lane // 4
    t = lane % 4
    if w < nbatch:                                                       # (uniform across the warp)
        ar = w * 256 + g * 16 + 2 * t                                    # A[g, 2t]
        br = w * 128 + g * 16 + 2 * t                                    # B[2t, g] = bt[g, 2t]
        cr = w * 128 + g * 8 + 2 * t                                     # C[g, 2t]
        x = mma_m16n8k16_f16_f32(load_b32(a, ar), load_b32(a, ar + 128), load_b32(a, ar + 8),
                                 load_b32(a, ar + 136), load_b32(bt, br), load_b32(bt, br + 8),
                                 c[cr], c[cr + 1], c[cr + 64], c[cr + 65])
        _store_accumulators(d, cr, x)


@cuda.jit
def mma_probe_tf32(a, b, c, d, nbatch):
    """``d[w] = tf32(a[w]) @ tf32(b[w]) + c[w]`` via :func:`to_tf32` and
    :func:`mma_m16n8k8_tf32_f32`; flat C-ordered float32 arrays ``a`` ``(nbatch, 16, 8)``,
    ``b`` ``(nbatch, 8, 8)``, ``c``/``d`` ``(nbatch, 16, 8)``."""
    w = cuda.grid(1) // 32
    lane = cuda.threadIdx.x % 32
    g = lane // 4
    t = lane % 4
    if w < nbatch:
        ar = w * 128 + g * 8 + t                                         # A[g, t]
        br = w * 64 + t * 8 + g                                          # B[t, g]
        cr = w * 128 + g * 8 + 2 * t
        x = mma_m16n8k8_tf32_f32(to_tf32(a[ar]), to_tf32(a[ar + 64]), to_tf32(a[ar + 4]), to_tf32(a[ar + 68]),
                                 to_tf32(b[br]), to_tf32(b[br + 32]),
                                 c[cr], c[cr + 1], c[cr + 64], c[cr + 65])
        _store_accumulators(d, cr, x)


@cuda.jit
def tf32_probe(x, out):
    """``out[i] = to_tf32(x[i])``."""
    i = cuda.grid(1)
    if i < x.size:
        out[i] = to_tf32(x[i])


@cuda.jit
def bf16x2_probe(lo, hi, out):
    """``out[i] = pack_bf16x2(lo[i], hi[i])``."""
    i = cuda.grid(1)
    if i < lo.size:
        out[i] = pack_bf16x2(lo[i], hi[i])


#: ldmatrix reads 16-byte rows (the simulator takes no alignment argument).
_PROBE_ALIGN = None if config.ENABLE_CUDASIM else 16


@cuda.jit
def ldmatrix_probe(tile, out):
    """One warp: a 16x16 float16 tile (row-major, flat) into shared memory, then
    ``out[4*l + j] = ldmatrix_x4_trans(...)[j]`` for lane ``l`` giving row ``l % 16``, columns
    ``8 * (l // 16)``: tiles 0, 1 = rows 0-7, 8-15 of columns 0-7; tiles 2, 3 = of columns 8-15."""
    sh = cuda.shared.array(256, float16, alignment=_PROBE_ALIGN)
    lane = cuda.threadIdx.x
    for i in range(lane, 256, 32):
        sh[i] = tile[i]
    cuda.syncthreads()
    r = ldmatrix_x4_trans(sh, (lane % 16) * 16 + (lane // 16) * 8)
    for j in range(4):
        out[4 * lane + j] = r[j]


@cuda.jit
def ldmatrix_x4_probe(tile, out):
    """One warp: a 16x8 float32 tile (row-major, flat) into shared memory, then ``out[4*l + j] =
    ldmatrix_x4(...)[j]`` for lane ``l`` giving row ``l % 8 + 8 * ((l // 8) % 2)``, words ``4 * (l // 16)``:
    lane ``(g, t)`` must receive the m16n8k8 A fragment ``tile[g, t], tile[g+8, t], tile[g, t+4], tile[g+8, t+4]``."""
    sh = cuda.shared.array(128, np.float32, alignment=_PROBE_ALIGN)
    lane = cuda.threadIdx.x
    for i in range(lane, 128, 32):
        sh[i] = tile[i]
    cuda.syncthreads()
    r = ldmatrix_x4(sh, shared_addr(sh, (lane % 8 + 8 * ((lane // 8) % 2)) * 8 + 4 * (lane // 16)))
    for j in range(4):
        out[4 * lane + j] = r[j]


# -- wgmma (sparsekit/gpu/wgmma.py): one per warpgroup, the check of that module's layouts --------------------

#: Columns of the probe's product (the wgmma's n; 8 accumulators a thread).
PROBE_N = 16
_PROBE_B = PROBE_N * 8                # B's elements
_PROBE_ACC = PROBE_N // 2             # accumulators a thread


@cuda.jit
def wgmma_probe(a, bt, d):
    """``d = a @ bt.T`` for ``a`` (64 x 8) and ``bt`` (``PROBE_N`` x 8, B transposed), flat float32 arrays of
    TF32 values, with one 128-thread block: A from registers (lane ``4g + t`` of warp ``w``: rows
    ``16w + g (+8)``, columns ``t (+4)``), B from shared memory through :func:`smem_desc` (K-major 8 x 4
    core matrices: ``lbo = 128`` bytes between the two along K, ``sbo = 256`` between 8-column groups);
    ``d`` flat 64 x ``PROBE_N``, accumulator ``4j + e`` at row ``16w + g + 8 (e >= 2)``, column
    ``8j + 2t + e % 2``."""
    sh = cuda.shared.array(_PROBE_B, float32)
    t = cuda.threadIdx.x
    if t < _PROBE_B:
        col, k = t // 8, t % 8
        sh[(col // 8) * 64 + (k // 4) * 32 + (col % 8) * 4 + k % 4] = bt[t]
    fence_proxy_async()
    cuda.syncthreads()
    w, lane = t // 32, t % 32
    g, tq = lane // 4, lane % 4
    r = 16 * w + g
    acc = cuda.local.array(_PROBE_ACC, float32)
    for i in range(_PROBE_ACC):
        acc[i] = float32(0.0)
    wgmma_fence()
    wgmma_tf32(acc, _PROBE_ACC, a[r * 8 + tq], a[(r + 8) * 8 + tq], a[r * 8 + tq + 4], a[(r + 8) * 8 + tq + 4],
               smem_desc(np.uint64(shared_addr(sh, 0)), np.uint64(128), np.uint64(256)), sh)
    wgmma_commit()
    wgmma_wait(acc, _PROBE_ACC, 0)
    for j in range(PROBE_N // 8):
        for e in range(4):
            d[(r + 8 * (e // 2)) * PROBE_N + 8 * j + 2 * tq + e % 2] = acc[4 * j + e]


def probe_case(seed: int = 3):
    """:func:`wgmma_probe` on random TF32 operands: ``(d, exact, scale)``, its 64 x ``PROBE_N`` result, the float64
    product and ``|A| @ |B|`` (the tests bound the error by a multiple of it: the simulator rounds once, the tensor
    core truncates its sum)."""
    rng = np.random.default_rng(seed)
    a = tf32_round(rng.standard_normal((64, 8)).astype(np.float32))
    bt = tf32_round(rng.standard_normal((PROBE_N, 8)).astype(np.float32))
    d = np.zeros(64 * PROBE_N, np.float32)
    wgmma_probe[1, 128](a.ravel(), bt.ravel(), d)
    a64, b64 = a.astype(np.float64), bt.T.astype(np.float64)
    return d.reshape(64, PROBE_N), a64 @ b64, np.abs(a64) @ np.abs(b64)
