"""USpMM on Hopper's warpgroup MMA (``wgmma``): float32 ``C = A @ B`` (3xTF32), A uniform-sparse in ELL.

Equals :func:`sparsekit.reference.uspmm.uspmm` with :func:`sparsekit.gpu.uspmm_tc.uspmm`'s float32 contract: C-ordered ``b``
(rows of B copied by 16-byte cp.async where ``N`` is a multiple of 4 and ``b`` 16-byte aligned, else by
plain loads: a kernel of its own), ``C`` in ``b``'s array kind, the 3xTF32 split and its error bound
(:func:`sparsekit.gpu.uspmm_tc.error_reduction`). Needs a compute capability 9.0 GPU
(:func:`supported`; numba-cuda 0.30 compiles for ``sm_90a`` there, which ``wgmma`` needs); under the
simulator :mod:`sparsekit.gpu.wgmma`'s fallbacks run it.

Why: :mod:`sparsekit.gpu.uspmm_tc` issues ``mma.sync`` (a warp's 16x8x8, its registers held until it returns); on
the H100 its float32 kernel keeps the tensor pipe 58% busy at best and reaches 24-36% of the
Roofline's speed of light. ``wgmma`` multiplies 64 x n x 8 for a whole warpgroup asynchronously, one operand read from
shared memory, so the threads build the next A tile while the tensor core multiplies the current one.

The product runs transposed, ``C^T = B^T A^T``: wgmma's register operand is ``B^T`` (each warpgroup 64
columns of the block's B tile, as ``mma.m16n8k8``'s A fragments, read from the row-major B tile and
split into big and small TF32 parts in registers), its shared-memory operand the densified ``A`` tile
(``bm`` rows x ``kc``), K-major, the layout the scatter writes anyway (TF32 wgmma takes only K-major
shared operands, and B arrives N-major).

One block per ``bm x bn`` tile of ``C`` (``bn / 64`` warpgroups; ``bm`` = the wgmma's n, 16..256),
``stages`` B tiles and entry stages, three A buffers. The A tile is built by the threads that build it
(``tpr = threads / bm`` of them a row, at least 4): a row's ``kc`` columns are ``tpr / 4`` bands of ``4 seg``
columns (``seg = kc / tpr``), and a thread owns one column class ``c % 4`` of one band: ``seg`` columns, every
fourth. Its entries come from :func:`sparsekit.gpu.uspmm_tc.segment_entries` with ``classes`` (padded to ``w`` slots,
values split on the host). Lane bits 0-1 pick the class, bits 2-4 the row, so the scatter's 4-byte stores of a
warp (8 rows of a core matrix x 4 classes) hit 32 different banks, and its staged entries are 32 neighbours
(10-15% faster than segments of ``seg`` neighbouring columns, whose stores collided up to 4 ways).
Step ``j`` (one K chunk of ``kc`` columns; the loop takes two, so that the two fragment sets swap roles):

1. load this thread's B fragments of chunk ``j`` from its B stage and split them (``to_tf32_finite``,
   then ``cvt.rna`` of the rest), ``wgmma.fence``;
2. issue three wgmma per 8 columns of K (``b_big a_small``, ``b_small a_big``, ``b_big a_big``: small
   terms first, as :mod:`sparsekit.gpu.uspmm_tc`) and commit them as one group; 2 when A's values are TF32 numbers
   (weights from float16 or bfloat16, or quantised: :func:`sparsekit.gpu.uspmm_tc.tf32_exact`, checked once per matrix),
   whose ``a_small`` is all zero: the same sums, bit for bit, a third less tensor-core work;
3. ``wgmma.wait_group 1``: chunk ``j-1``'s group is done (its A buffer and fragment registers free),
   chunk ``j``'s runs on;
4. cp.async: B's chunk ``j + stages - 1`` and the entries of chunk ``j + stages``, one commit group;
   then the thread zeroes its share of its row's band in chunk ``j+1``'s A buffer (big and small tiles), a warp
   barrier, and writes its staged entries into it, in slot order (padding first: value 0 at offset 0);
5. ``cp.async.wait_group stages-2``, ``fence.proxy.async`` (the scatter's stores made visible to the
   tensor core), one barrier.

Split K (``split`` of 2, 4 or 8, for grids of a wave of tiles or less): a tile's chunks are cut into ``split``
K parts of consecutive chunks, each computed by one block of a thread-block cluster of ``split`` blocks (the
pipeline above over its part). After the loop each block writes its accumulators into its own shared memory
(over the pipeline's buffers; word ``i * threads + t`` for thread ``t``'s accumulator ``i``), a cluster barrier,
then part ``p`` reads accumulator quads ``p * bm / (8 split)`` onwards of every block through distributed shared
memory (:func:`sparsekit.gpu.cluster.ld_cluster`), sums them in part order and stores that share of C; a last cluster
barrier keeps every block's shared memory alive until the others have read it. The sum's order is fixed, so
results repeat bit for bit; each partial sums ``K / split`` products, so the error bound only shrinks. The
simulator has no clusters: there one block computes the parts one after another, each partial at its own
shared-memory address, and sums them in the same order.

Warp specialised (``producers`` of 128 or 256, no split): the block gains one or two producer warpgroups
(threads ``0 .. producers - 1``) that issue the copies and build the A tiles, while the ``bn / 64`` consumer
warpgroups after them only load B's fragments, multiply and write C. They hand over through named barriers
(``bar.sync`` / ``bar.arrive``, :mod:`sparsekit.gpu.sync_primitives`) instead of one block barrier a chunk: per A buffer a
"full" barrier (producers arrive once the tile is built and fenced, consumers wait) and an "empty" one (consumers
arrive once that buffer's wgmma is done, producers wait before building chunk ``j + 4`` into it: four A buffers);
a producer's scatter reads only the entries it copied itself, so it waits for its own copies only. Copies run
``stages - 4`` chunks ahead of the scatter (``stages`` B stages, ``stages - 3`` entry stages). Under the simulator
the named barriers are Python conditions on the block's threads.

Precision (tunable ``precision``): ``"auto"``, the default, keeps :mod:`sparsekit.gpu.uspmm_tc`'s float32 contract (an
error within ``error_reduction(K', float32)`` = ``3 K' + 13`` float32 roundoffs of ``|A| @ |B|``) with the faster
of two ways that meet it (:func:`auto_precision`). ``"3xtf32"`` is the contract's own computation above (three TF32
products a multiply-add). ``"tf32+bf16"`` keeps ``b_big a_big`` in TF32 and computes both correction terms with one
bf16 ``wgmma m64nNk16`` an 8-column step (bf16 runs at twice TF32's rate: a third less tensor-core work, which is
what limits this kernel at one wave; ``experiments/results/uspmm_wgmma.md``). The entries' small values
become bf16 pairs ``(bf16(big), bf16(small))`` (:func:`sparsekit.reference.mma.bf16_pairs`, on the host), stored by the
unchanged scatter where the small TF32 value went: in a bf16 view of that tile, column ``c`` holds K positions
``2c`` (big) and ``2c + 1`` (small), so the TF32 tile's descriptor serves the bf16 wgmma over the interleaved K.
The consumers pack B's parts to match (``cvt.rn.bf16x2.f32`` of ``(small, big)``: the k16 fragment's pairs are
exactly the columns of their TF32 fragment). Error: the bf16 roundings of the correction terms add about 2**-17
of ``|a b|`` a product (:data:`sparsekit.gpu.uspmm_tc.SPLIT_ERROR_BF16_U`, 137 u against 13), and a product goes through
two MMAs instead of three (:data:`sparsekit.gpu.uspmm_tc.MMAS_PER_PRODUCT`), so ``error_reduction(K', float32,
"tf32+bf16")`` is ``2 K' + 137``: looser than 3xTF32's for K' below 124, tighter above. ``"auto"`` runs
``"tf32+bf16"`` where its bound is no looser (K' >= 124) and A's values are not TF32 numbers (3xTF32 then
issues two products too, with the smaller split error), else ``"3xtf32"``; naming either pins it.

Shared-memory accesses in the loop go through byte addresses taken once per thread
(:func:`sparsekit.gpu.mma.ld_shared` and kin): Numba's element indexing recomputes 64-bit addresses at every access.
A tiles are 8 x 4 float32 core matrices (128 contiguous bytes): element ``(r, c)`` at ``(r // 8) * 8 kc
+ (c // 4) * 32 + (r % 8) * 4 + c % 4``, so a wgmma's descriptor has ``lbo = 128`` bytes (the next 4
columns) and ``sbo = 32 kc`` (the next 8 rows); no swizzle.

Measured on the H100 (``experiments/results/uspmm_wgmma.md``): :data:`DEFAULTS` (128 x 256,
kc 16, 4 stages: 16 warps, one block an SM) at 1024 x 1024 x 16384 60% 452-456 us (45% of the speed of light;
:mod:`sparsekit.gpu.uspmm_tc`'s best 573), 4096^2 x 1024 90% 440 us (its CUDA-core route 643), 2048^3 60% 224 us (295);
64 x 128 kc 16 at 1024 x 1024 x 2048 81 us (99); 64 x 128 kc 32 at one wave of tiles (1024^3 60%) 50.5-51.9 us
against 53.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from numba import cuda, float32
from numba.core.types import uint32
from numba.cuda import config as cuda_config

from sparsekit.gpu.cluster import cluster_rank, cluster_sync, ld_cluster
from sparsekit.gpu.cluster import launch as cluster_launch
from sparsekit.gpu.inline import inlined
from sparsekit.gpu.mma import (cp_async4_raw, cp_async8_raw, cp_async16_raw, cp_async_commit, cp_async_wait, global_addr,
                     ld_shared, ld_shared2, ld_shared4, pack_bf16x2, shared_addr, st_shared, st_shared4, to_tf32,
                     to_tf32_finite)
from sparsekit.gpu.device_ell import prepare, rhs
from sparsekit.gpu.launch import SMEM_ALIGN, DynamicShared, opt_in
from sparsekit.gpu.launch import launch as _launch
from sparsekit.gpu.sync_primitives import bar_arrive, bar_sync
from sparsekit.gpu.uspmm_tc import (SPLIT_ERRORS_U, error_reduction, offset_bytes, scatter_slots,
                          segment_entries, tf32_exact)
from sparsekit.gpu.vector_loads import aligned
from sparsekit.gpu.wgmma import fence_proxy_async, smem_desc, wgmma_bf16, wgmma_commit, wgmma_fence, wgmma_tf32, wgmma_wait
from sparsekit.arrays import cdiv, flat_view, output, result
from sparsekit.device import require_cluster

__all__ = ["uspmm", "run", "DEFAULTS", "PRECISIONS", "auto_precision", "shared_bytes", "supported"]

DEFAULTS = dict(bm=128, bn=256, kc=16, stages=4, min_blocks=1, split=1, producers=0, precision="auto")
#: ``precision``: "3xtf32" (the float32 contract of :mod:`sparsekit.gpu.uspmm_tc`) or "tf32+bf16" (module docstring); the
#: default "auto" picks one of them per matrix (:func:`auto_precision`)
PRECISIONS = tuple(SPLIT_ERRORS_U)
SIM = bool(cuda_config.ENABLE_CUDASIM)
U = np.uint64
S32 = np.uint32                                        # shared-window byte addresses (kept in 32 bits)
WG = 128                                               # threads of a warpgroup
u0, u1, u16 = U(0), U(1), U(16)                        # the device code's unsigned constants


def shared_bytes(bm: int, bn: int, kc: int, stages: int, slots: int, split: int = 1, producers: int = 0) -> int:
    """Three A buffers (big and small tiles each), ``stages`` B tiles and
    ``stages`` entry stages (for each of the ``2 bn`` threads that build A tiles: ``slots`` big and small values
    and :func:`sparsekit.gpu.uspmm_tc.offset_bytes` bytes of 8-bit offsets). With ``split``, a partial tile
    (``4 bm bn`` bytes) over the same bytes after the K loop; the simulator keeps its ``split`` partials
    after the pipeline's bytes instead (one block computes all K parts there). With ``producers`` (warp
    specialised), four A buffers and ``stages - 3`` entry stages of ``producers`` threads."""
    workers = producers or 2 * bn
    pipeline = (4 * (2 * (4 if producers else 3) * bm * kc + stages * kc * bn)
                + (stages - 3 if producers else stages) * workers * (8 * slots + offset_bytes(slots)))
    if split == 1:
        return pipeline
    return pipeline + split * 4 * bm * bn if SIM else max(pipeline, 4 * bm * bn)


@inlined
def _rot(x, n):
    """``(x + 1) % n`` for ``x < n``, without a division."""
    y = x + u1
    return y if y < U(n) else u0


@inlined
def _rot_by(x, d, n):
    """``(x + d) % n`` for ``x < n``, ``d <= n``, without a division."""
    y = x + U(d)
    return y if y < U(n) else y - U(n)


class _Plan(NamedTuple):
    """The compile-time constants of one setting, the kernel's geometry: the tunables, then the sizes derived
    from them (:func:`_plan`, where each is explained). Hashable, so the phases' factories below are cached
    per setting and every kernel built for it shares their device functions."""
    bm: int
    bn: int
    kc: int
    stages: int
    slots: int
    vec: bool
    split: int
    producers: int
    bf16: bool
    exact_a: bool
    ncons: int
    nthreads: int
    workers: int
    tpr: int
    seg: int
    nacc: int
    a_tile: int
    a_buf: int
    sbn: int
    b_buf: int
    nbuf: int
    a_all: int
    per_row: int
    rstep: int
    nbp: int
    ev_buf: int
    ob: int
    eo_buf: int
    copy_offsets: object
    lead: int
    se: int
    ev0: int
    eo0: int
    ksteps: int
    frag_small: object
    nfrag: int
    pend: int
    pend_first: int
    lbo: object
    sbo: object
    bpt: int
    parts: int
    part_bytes: int
    red0: int
    red_step: int
    workers_bar: int
    full0: int
    empty0: int
    jper: int


@functools.cache
def _plan(bm: int, bn: int, kc: int, stages: int, slots: int, vec: bool, split: int, producers: int, bf16: bool,
          exact_a: bool) -> _Plan:
    """Geometry and constants (phase 0): the warpgroups' roles, the shared buffers' sizes and where they start,
    a thread's segment and copies, the pipeline's depth, the K parts and the named barriers."""
    ncons = WG * (bn // 64)                           # threads that multiply (warpgroups of 64 columns of B)
    nthreads = ncons + producers
    workers = producers or ncons                      # threads that copy and scatter
    tpr = workers // bm                               # threads per A row
    seg = kc // tpr                                   # columns of a thread's segment
    nacc = bm // 2                                    # accumulators a thread
    a_tile = bm * kc                                  # floats of one A tile (big or small)
    a_buf = 2 * a_tile * 4                            # bytes of one A buffer (big, small)
    sbn = bn                                          # B stage rows (16-byte chunk c of row r at c ^ 2 (r % 4):
    b_buf = kc * sbn * 4                              # the fragment loads hit 32 banks, the copies whole lines)
    nbuf = 4 if producers else 3                      # A buffers: chunk j's, j+1's, j-1's (its wgmma may run);
    a_all = nbuf * a_buf                              # warp specialised, one more for the producers to run ahead
    per_row = bn // 4                                 # 16-byte pieces of a B row
    rstep = workers // per_row                        # B rows between a thread's pieces
    nbp = kc // rstep                                 # B pieces a thread copies per chunk
    ev_buf = slots * workers * 8                      # bytes of one entry-value stage (a slot pair: every item's
    ob = offset_bytes(slots)                          # big and small values of two slots; an item's offsets)
    eo_buf = workers * ob
    copy_offsets = {4: cp_async4_raw, 8: cp_async8_raw, 16: cp_async16_raw}[ob]
    lead = stages - nbuf                              # warp specialised: chunks copied ahead of the scatter (B's
    #                                                   stage of chunk j + lead - stages is free once the consumers
    #                                                   are past chunk j - nbuf, and before that unused)
    se = lead + 1 if producers else stages            # entry stages (warp specialised: the scatter frees its own)
    ev0 = a_all + stages * b_buf                      # where the entry values start (bytes)
    eo0 = ev0 + se * ev_buf                           # and the offsets
    # entry copies (segment_entries' classes layout): the thread of item row * tpr + segment copies its own
    # 16-byte pieces, one a slot pair of values, one of offsets, and its scatter reads only them
    ksteps = kc // 8
    frag_small = np.uint32 if bf16 else float32       # B's small parts: TF32 values, or bf16 (small, big) pairs
    nfrag = 4 * ksteps                                # B fragment values a thread per chunk
    pend = stages - 2
    pend_first = stages - 1                           # the prologue: chunk 0's entries landed
    lbo, sbo = U(128), U(32 * kc)
    bpt = 1 if SIM else split                         # blocks a tile (GPU: one cluster, a K part a block)
    parts = split if SIM else 1                       # K parts a block computes
    part_bytes = 4 * bm * bn                          # one partial tile, word i * ncons + t: thread t's acc[i]
    red0 = shared_bytes(bm, bn, kc, stages, slots, 1, producers) if SIM else 0   # partial 0's bytes (simulator:
    red_step = part_bytes if SIM else 0               # part q's at red0 + q * part_bytes; GPU: each block's own)
    workers_bar, full0, empty0 = 1, 2, 2 + nbuf       # named barriers: the workers' (the simulator's stand-in for
    #                                                   the scatter's warp barrier); warp specialised: an A buffer
    #                                                   built (nbuf), an A buffer's wgmma done (nbuf)
    jper = nacc // 4 // split                         # accumulator quads a K part writes to C
    return _Plan(bm=bm, bn=bn, kc=kc, stages=stages, slots=slots, vec=vec, split=split, producers=producers,
                 bf16=bf16, exact_a=exact_a, ncons=ncons, nthreads=nthreads, workers=workers, tpr=tpr, seg=seg,
                 nacc=nacc, a_tile=a_tile, a_buf=a_buf, sbn=sbn, b_buf=b_buf, nbuf=nbuf, a_all=a_all,
                 per_row=per_row, rstep=rstep, nbp=nbp, ev_buf=ev_buf, ob=ob, eo_buf=eo_buf,
                 copy_offsets=copy_offsets, lead=lead, se=se, ev0=ev0, eo0=eo0, ksteps=ksteps,
                 frag_small=frag_small, nfrag=nfrag, pend=pend, pend_first=pend_first, lbo=lbo, sbo=sbo, bpt=bpt,
                 parts=parts, part_bytes=part_bytes, red0=red0, red_step=red_step, workers_bar=workers_bar,
                 full0=full0, empty0=empty0, jper=jper)


@functools.cache
def _setup(plan: _Plan):
    """Phase 0, a thread's addresses taken once: ``worker_setup`` (copying and scattering) and ``consumer_setup``
    (fragments and A's descriptor)."""
    bm, kc, vec, tpr, seg, sbn, a_all = plan.bm, plan.kc, plan.vec, plan.tpr, plan.seg, plan.sbn, plan.a_all
    per_row, rstep, lbo, sbo = plan.per_row, plan.rstep, plan.lbo, plan.sbo
    entry_bases, _ = _entry_copy(plan)
    b_limits, _ = _b_copy(plan)

    @inlined
    def worker_setup(pt, row0, col0, un, uk, uw, ump, sa, ev, eo, sh, sh32, b, blim):
        """Thread ``pt``'s addresses for copying and scattering, taken once (``blim`` filled): the scatter's
        segment (lane bits 0-1: its column class, bits 2-4 and the warp: its row, the warp: its band) as its
        class's word in buffer 0 (``rbs``) and its staged entries (``eb``, :func:`entry_bases`; 32 neighbouring
        items a warp); the 16-byte pieces it zeroes (``rbz``; lane bits 0-2: a row of the warp's 8, bits 3-4: a
        quarter of the band); its B pieces (4 columns from ``gc``, rows from ``r0``; shared and global chunk-0
        addresses, bytes of ``rstep`` rows)."""
        rows8 = ((pt >> U(5)) % U(bm // 8)) * U(8)                        # the warp's 8 rows
        arow = rows8 + ((pt >> U(2)) & U(7))
        cls = pt & U(3)
        band = pt // U(4 * bm)
        h = band * U(4) + cls                                            # its segment of the chunk
        zrow = rows8 + (pt & U(7))
        rbz = S32(sa + ((zrow >> U(3)) * U(8 * kc) + (zrow & U(7)) * U(4)) * U(4)
                  + (band * U(seg) + ((pt >> U(3)) & U(3)) * U(seg // 4)) * U(128))
        rbs = S32(sa + ((arow >> U(3)) * U(8 * kc) + (arow & U(7)) * U(4)) * U(4) + band * U(seg * 128) + cls * U(4))
        pc = (pt % U(per_row)) * U(4)
        r0 = pt // U(per_row)
        gc = col0 + pc
        bsh0 = shared_addr(sh, U(a_all // 4) + r0 * U(sbn) + (((pc >> U(2)) ^ ((r0 & U(3)) << u1)) << U(2)))
        bgl = global_addr(b, u0)
        bgl0 = global_addr(b, r0 * un + gc) if vec and gc < un else bgl
        bstep = U(rstep) * un * U(4)
        b_limits(uk, un, gc, r0, blim)
        eb = entry_bases(arow * U(tpr) + h, row0, uw, ump, sa, ev, eo)
        return rbz, rbs, gc, r0, bsh0, bgl0, bgl, bstep, eb

    @inlined
    def consumer_setup(ct, sa):
        """Consumer ``ct``'s lane coordinates (``tq``), fragment rows of B^T (``nb``: 16 a warp, 64 a
        warpgroup), its fragments ``B[tq, nb]`` and ``B[tq, nb + 8]`` in stage 0 (swizzled chunks; rows ``tq + 4 i``
        share the swizzle) and A buffer 0's descriptor."""
        lane = ct % U(32)
        wq = (ct // U(32)) % U(4)                                        # warp within the warpgroup
        tq = lane % U(4)
        nb = ct // U(WG) * U(64) + wq * U(16) + lane // U(4)
        row = sa + U(a_all) + tq * U(sbn * 4)
        fb = (S32(row + ((((nb >> U(2)) ^ (tq << u1)) << U(2)) + (nb & U(3))) * U(4)),
              S32(row + (((((nb >> U(2)) + U(2)) ^ (tq << u1)) << U(2)) + (nb & U(3))) * U(4)))
        return tq, nb, fb, smem_desc(sa, lbo, sbo)
    return worker_setup, consumer_setup


@functools.cache
def _entry_copy(plan: _Plan):
    """Step 4's entry copies: ``entry_bases`` (a thread's staged entries, addresses taken once) and
    ``issue_entries`` (one chunk's entries into an entry stage)."""
    slots, workers, tpr, ev_buf, ob, eo_buf = plan.slots, plan.workers, plan.tpr, plan.ev_buf, plan.ob, plan.eo_buf
    copy_offsets, ev0, eo0 = plan.copy_offsets, plan.ev0, plan.eo0

    @inlined
    def entry_bases(item, row0, w, mp, sa, ev, eo):
        """The staged entries of this thread's ``item`` (``row * tpr + segment`` of the block's rows): its values'
        and offsets' stage-0 shared byte addresses (slot pair ``i`` of the values: ``+ 16 i workers``), their
        chunk-0 global addresses (the arrays' start where the row lies past ``mp``: the copies then read nothing),
        whether the row lies within, the global bytes of a chunk of values and of offsets, and of a slot pair, and
        the arrays' start addresses (what a copy that reads nothing names)."""
        ok = row0 + item // U(tpr) < mp
        g = row0 * U(tpr) + item                                         # its piece of a slot pair / of offsets
        pair = mp * U(tpr * 16)
        return (S32(sa + U(ev0) + item * u16), S32(sa + U(eo0) + item * U(ob)), global_addr(ev, g * U(4) if ok else u0),
                global_addr(eo, g * U(ob // 4) if ok else u0), ok, w // U(2) * pair, mp * U(tpr * ob), pair,
                global_addr(ev, u0), global_addr(eo, u0))

    @inlined
    def issue_entries(ch, st, eb, ev, eo, sh, sh32):
        """Chunk ``ch``'s entries of this thread's item (``slots`` of them) into entry stage ``st`` by cp.async
        (nothing read past the arrays' rows). ``eb``: :func:`entry_bases`."""
        vdst, odst, vsrc, osrc, ok, vchunk, ochunk, vpair, evgl, eogl = eb
        vs = vsrc + ch * vchunk
        for i in range(slots // 2):
            cp_async16_raw(sh, vdst + st * U(ev_buf) + U(i * 16 * workers), ev, vs + U(i) * vpair if ok else evgl,
                           u16 if ok else u0)
        copy_offsets(sh32, odst + st * U(eo_buf), eo, osrc + ch * ochunk if ok else eogl, U(ob) if ok else u0)
    return entry_bases, issue_entries


@functools.cache
def _b_copy(plan: _Plan):
    """Step 4's B copies: ``b_limits`` (the chunks each of a thread's pieces lies within B) and ``issue_b`` (one
    chunk of B into its stage)."""
    kc, vec, sbn, b_buf, rstep, nbp = plan.kc, plan.vec, plan.sbn, plan.b_buf, plan.rstep, plan.nbp

    @inlined
    def b_limits(k, n, gc, r0, blim):
        """``blim[i]``: the chunks for which this thread's ``i``-th piece of B (row ``r0 + i * rstep`` of the
        chunk, columns ``gc .. gc + 3``) lies within B (0: its columns lie past N)."""
        for i in range(nbp):
            left = max(np.int64(k) - np.int64(r0 + U(i * rstep)), np.int64(0))
            blim[i] = S32((left + np.int64(kc - 1)) // np.int64(kc)) if gc < n else S32(0)

    @inlined
    def issue_b(ch, st, k, n, gc, r0, bsh0, bgl0, bgl, bstep, blim, sh, b):
        """B's chunk ``ch`` into stage ``st`` (zeros past K and N): this thread's pieces, rows ``r0 + i * rstep``
        at columns ``gc .. gc + 3``, by cp.async (``vec``: 16-byte rows; ``bgl0`` its chunk-0 address,
        ``bstep`` the bytes of ``rstep`` rows, ``blim`` from :func:`b_limits`), else by plain loads and stores."""
        k0 = ch * U(kc)
        dst = bsh0 + st * U(b_buf)
        src = bgl0 + k0 * n * U(4)
        zero = float32(0.0)
        for i in range(nbp):
            if vec:
                ok = S32(ch) < blim[i]
                cp_async16_raw(sh, dst + U(i * rstep * sbn * 4), b, src + U(i) * bstep if ok else bgl,
                               u16 if ok else u0)
            else:
                row = k0 + r0 + U(i * rstep)
                x = row * n + gc
                st_shared4(sh, dst + U(i * rstep * sbn * 4), b[x] if (row < k) & (gc < n) else zero,
                           b[x + u1] if (row < k) & (gc + u1 < n) else zero,
                           b[x + U(2)] if (row < k) & (gc + U(2) < n) else zero,
                           b[x + U(3)] if (row < k) & (gc + U(3) < n) else zero)
    return b_limits, issue_b


@functools.cache
def _scatter(plan: _Plan):
    """Step 4's densify: ``scatter``, a thread's staged entries into its segment of the next A tile."""
    slots, workers, seg, a_tile, a_buf = plan.slots, plan.workers, plan.seg, plan.a_tile, plan.a_buf
    ev_buf, ob, eo_buf, workers_bar = plan.ev_buf, plan.ob, plan.eo_buf, plan.workers_bar

    @inlined
    def scatter(st, ab, eb, rbz, rbs, sh, sh32):
        """This thread's segment of the A tile in entry stage ``st`` into A buffer ``ab``: read its staged slots
        (all before any store), zero its share of its row's band in both tiles, a warp barrier (the band's
        other classes are zeroed by the lanes beside it), write the entries in slot order (padding, value 0 at
        offset 0, comes first, so it never overwrites an entry). ``eb[0]``/``eb[1]``: its values and offsets in
        stage 0; ``rbz``: the first 16 bytes it zeroes, ``rbs``: its class's word in its band's first core
        matrix, in buffer 0 (byte addresses). A warp's 8 rows x 4 classes store to 32 banks, each 8 lanes'
        16-byte zeroes to 8 rows' banks."""
        offs = cuda.local.array(slots, np.uint32)
        big = cuda.local.array(slots, float32)
        small = cuda.local.array(slots, float32)
        evr, eor = eb[0], eb[1]                                          # (entry_bases)
        for i in range(slots // 2):
            quad = ld_shared4(sh, evr + st * U(ev_buf) + U(i * 16 * workers))
            big[2 * i], small[2 * i], big[2 * i + 1], small[2 * i + 1] = quad
        if ob == 4:
            w0 = ld_shared(sh32, eor + st * U(eo_buf))
            words = (w0, w0, w0, w0)
        elif ob == 8:
            w01 = ld_shared2(sh32, eor + st * U(eo_buf))
            words = (w01[0], w01[1], w01[1], w01[1])
        else:
            words = ld_shared4(sh32, eor + st * U(eo_buf))
        for i in range(slots):
            offs[i] = (words[i // 4] >> U(8 * (i % 4))) & U(255)
        zero = float32(0.0)
        base = rbz + ab * U(a_buf)
        for z in range(seg // 4):
            st_shared4(sh, base + U(z * 128), zero, zero, zero, zero)
            st_shared4(sh, base + U(z * 128 + a_tile * 4), zero, zero, zero, zero)
        if SIM:                                                          # (no warp barrier there: the workers')
            bar_sync(U(workers_bar), U(workers))
        else:
            cuda.syncwarp()
        base = rbs + ab * U(a_buf)
        for i in range(slots):                                           # offset g: g core matrices on
            x = base + (offs[i] << U(7))
            st_shared(sh, x, big[i])
            st_shared(sh, x + U(a_tile * 4), small[i])
    return scatter


@functools.cache
def _mma_chunk(plan: _Plan):
    """Steps 1-3: ``mma_chunk``, a chunk's B fragments split, its wgmmas issued and committed, the previous
    chunk's group waited for."""
    bf16, exact_a, nacc, a_tile, a_buf, sbn = plan.bf16, plan.exact_a, plan.nacc, plan.a_tile, plan.a_buf, plan.sbn
    b_buf, ksteps = plan.b_buf, plan.ksteps

    @inlined
    def mma_chunk(ja, jb, fb, d0, acc, bfb, bfs, sh):
        """Steps 1-3 of a chunk: B's fragments from stage ``jb`` split into ``bfb``/``bfs`` (``bf16``: ``bfs``
        holds packed bf16 (small, big) pairs), the wgmmas on A buffer ``ja``, committed; returns when the previous
        chunk's group is done."""
        for ks in range(ksteps):                                         # fragments of B^T, split
            for e in range(4):
                x = ld_shared(sh, fb[e % 2] + jb * U(b_buf) + U((ks * 8 + (e // 2) * 4) * sbn * 4))
                hi = to_tf32_finite(x)
                bfb[4 * ks + e] = hi
                if bf16:                                                 # bf16 (small, big): register e of the
                    bfs[4 * ks + e] = pack_bf16x2(x - hi, hi)            # k16 fragment, K pairs 2c, 2c + 1
                else:
                    bfs[4 * ks + e] = to_tf32(x - hi)
        wgmma_fence()
        da = d0 + ja * U(a_buf >> 4)
        for ks in range(ksteps):
            dbig = da + U(ks * 16)                                       # (256 bytes: two core matrices)
            dsmall = dbig + U(a_tile * 4 >> 4)
            f = 4 * ks
            if bf16:                                                     # both corrections in one bf16 k16:
                wgmma_bf16(acc, nacc, bfs[f], bfs[f + 1], bfs[f + 2], bfs[f + 3], dsmall, sh)   # the small tile's
            else:                                                        # (big, small) pairs; or 3xTF32's two
                if not exact_a:                                          # (a TF32-exact A: a_small is all 0)
                    wgmma_tf32(acc, nacc, bfb[f], bfb[f + 1], bfb[f + 2], bfb[f + 3], dsmall, sh)
                wgmma_tf32(acc, nacc, bfs[f], bfs[f + 1], bfs[f + 2], bfs[f + 3], dbig, sh)
            wgmma_tf32(acc, nacc, bfb[f], bfb[f + 1], bfb[f + 2], bfb[f + 3], dbig, sh)   # b_big a_big
        wgmma_commit()
        wgmma_wait(acc, nacc, 1)                                         # 3. chunk j-1's wgmma done
    return mma_chunk


@functools.cache
def _pipeline_step(plan: _Plan):
    """Steps 1-5 of one chunk in the single-role kernel: ``step``."""
    stages, pend = plan.stages, plan.pend
    _, issue_entries = _entry_copy(plan)
    _, issue_b = _b_copy(plan)
    scatter = _scatter(plan)
    mma_chunk = _mma_chunk(plan)

    @inlined
    def step(j, ja, jb, end, fb, rbz, rbs, d0, acc, bfb, bfs, ev, eo, eb, uk, un,
             gc, r0, bsh0, bgl0, bgl, bstep, blim, sh, sh32, b):
        """Chunk ``j`` (module docstring, steps 1-5); ``ja = j % 3`` (its A buffer), ``jb = j % stages``.
        ``end``: the K part's end (chunks). Returns the next chunk's ``(ja, jb)``."""
        mma_chunk(ja, jb, fb, d0, acc, bfb, bfs, sh)
        na, nb_ = _rot(ja, 3), _rot(jb, stages)
        if j + u1 < end:                                                 # 4. the next A tile (its buffer's
            scatter(nb_, na, eb, rbz, rbs, sh, sh32)                     # wgmma: chunk j-2, done)
        fence_proxy_async()                                              # (before the copies: it waits for
        jp = jb + U(stages - 1) if jb == u0 else jb - u1                 # the thread's copies in flight)
        if j + U(stages - 1) < end:                                      # B's chunk j + stages - 1,
            issue_b(j + U(stages - 1), jp, uk, un, gc, r0, bsh0, bgl0, bgl, bstep, blim, sh, b)
        if j + U(stages) < end:                                          # the entries of chunk j + stages
            issue_entries(j + U(stages), jb, eb, ev, eo, sh, sh32)
        cp_async_commit()
        cp_async_wait(pend)
        cuda.syncthreads()
        return na, nb_
    return step


@functools.cache
def _warp_specialised(plan: _Plan):
    """The warp-specialised loop: ``produce`` (the producers' copies and scatters) and ``consume`` (the
    consumers' steps 1-3), meeting at named barriers."""
    stages, nthreads, nacc, nbuf, lead, se = plan.stages, plan.nthreads, plan.nacc, plan.nbuf, plan.lead, plan.se
    full0, empty0 = plan.full0, plan.empty0
    _, issue_entries = _entry_copy(plan)
    _, issue_b = _b_copy(plan)
    scatter = _scatter(plan)
    mma_chunk = _mma_chunk(plan)

    @inlined
    def produce(lo, hi, rbz, rbs, ev, eo, eb, uk, un, gc, r0, bsh0, bgl0, bgl, bstep,
                blim, sh, sh32, b):
        """A producer thread's chunks ``lo .. hi - 1`` (warp specialised): copies ``lead`` chunks ahead; per
        chunk ``j``: wait until the consumers are done with chunk ``j - nbuf`` (its A buffer; B stages of chunks
        up to ``j - nbuf + 1``), copy chunk ``j + lead``, wait for its own copies of chunk ``j`` (the scatter reads only
        those), build its share of chunk ``j``'s A tile, ``fence.proxy.async``, arrive at the buffer's full
        barrier (the consumers wait for every producer's arrival: every B copy of chunk ``j`` landed)."""
        for s_ in range(lead):
            if lo + U(s_) < hi:
                issue_b(lo + U(s_), U(s_), uk, un, gc, r0, bsh0, bgl0, bgl, bstep, blim, sh, b)
                issue_entries(lo + U(s_), U(s_), eb, ev, eo, sh, sh32)
            cp_async_commit()
        ja, jb, je = u0, U(lead % stages), U(lead % se)                 # (jb, je: the stages of chunk j + lead)
        for j0 in range(lo, hi):
            j = U(j0)
            if j >= lo + U(nbuf):
                bar_sync(U(empty0) + ja, U(nthreads))                   # chunk j - nbuf's wgmma done
            if j + U(lead) < hi:
                issue_b(j + U(lead), jb, uk, un, gc, r0, bsh0, bgl0, bgl, bstep, blim, sh, b)
                issue_entries(j + U(lead), je, eb, ev, eo, sh, sh32)
            cp_async_commit()
            cp_async_wait(lead)                                          # this thread's copies of chunk j
            scatter(_rot_by(je, se - lead, se), ja, eb, rbz, rbs, sh, sh32)   # (entry stage of chunk j)
            fence_proxy_async()
            bar_arrive(U(full0) + ja, U(nthreads))                       # A tile and B of chunk j ready
            ja, jb, je = _rot(ja, nbuf), _rot(jb, stages), _rot(je, se)

    @inlined
    def consume(lo, hi, fb, d0, acc, bfb0, bfs0, bfb1, bfs1, sh):
        """A consumer thread's chunks ``lo .. hi - 1`` (warp specialised): per chunk wait at its A buffer's
        full barrier, steps 1-3, and once the previous chunk's wgmma is done tell the producers (for the
        chunks they wait for: up to ``hi - nbuf - 1``); two fragment sets alternate, as in :func:`step`."""
        ja, jb = u0, u0
        for j0 in range(lo, hi):
            j = U(j0)
            bar_sync(U(full0) + ja, U(nthreads))
            if (j - lo) % U(2) == u0:
                mma_chunk(ja, jb, fb, d0, acc, bfb0, bfs0, sh)
            else:
                mma_chunk(ja, jb, fb, d0, acc, bfb1, bfs1, sh)
            if (j > lo) & (j + U(nbuf - 1) < hi):                        # chunk j - 1 done
                bar_arrive(U(empty0) + _rot_by(ja, nbuf - 1, nbuf), U(nthreads))
            ja, jb = _rot(ja, nbuf), _rot(jb, stages)
        wgmma_wait(acc, nacc, 0)
    return produce, consume


@functools.cache
def _epilogue(plan: _Plan):
    """The epilogue: ``store_partial`` (split K: a part's accumulators into shared memory) and ``finish`` (C,
    from the accumulators or the summed parts)."""
    bm, bn, split, ncons, nacc, parts = plan.bm, plan.bn, plan.split, plan.ncons, plan.nacc, plan.parts
    red0, red_step, jper = plan.red0, plan.red_step, plan.jper

    @inlined
    def store_partial(acc, q, ct, sa, sh):
        """Split K: consumer ``ct``'s accumulators of part ``q`` into shared memory (word ``i * ncons + ct``)."""
        for i in range(nacc):
            st_shared(sh, S32(sa + U(red0) + U(q * red_step) + (U(i * ncons) + ct) * U(4)), acc[i])

    @inlined
    def finish(acc, rank, ct, tq, nb, row0, col0, um, un, sa, sh, c):
        """C from consumer ``ct``'s accumulators; split K: from the parts' partials instead, summed in part
        order, this block's share of the quads (the simulator's block: all of them), between cluster barriers."""
        # C^T fragments: accumulator 4jj + e is B^T row nb + 8 (e >= 2) = C column, A^T column 8 jj + 2 tq + e % 2
        inside = (row0 + U(bm) <= um) & (col0 + U(bn) <= un)            # (a whole tile: no test per element)
        if split == 1:
            for jj in range(nacc // 4):
                for e in range(4):
                    rr = row0 + U(8 * jj + e % 2) + U(2) * tq
                    cc = col0 + nb + U((e // 2) * 8)
                    if inside or ((rr < um) & (cc < un)):
                        c[rr, cc] = acc[4 * jj + e]
        else:
            # split-K: every part's partial is in its block's shared memory; part p sums quads p * jper ..
            # (p + 1) * jper - 1 over the parts, in part order (the simulator's block sums all quads)
            cluster_sync()
            for q in range(parts):
                p = rank + U(q)
                for jl in range(jper):
                    jj = p * U(jper) + U(jl)
                    for e in range(4):
                        word = (jj * U(4) + U(e)) * U(ncons) + ct
                        total = float32(0.0)
                        for r in range(split):
                            x = ld_cluster(sh, S32(sa + U(red0 + r * red_step) + word * U(4)), U(r))
                            total = x if r == 0 else total + x
                        rr = row0 + jj * U(8) + U(e % 2) + U(2) * tq
                        cc = col0 + nb + U((e // 2) * 8)
                        if inside or ((rr < um) & (cc < un)):
                            c[rr, cc] = total
            cluster_sync()                                               # (no block leaves while its partial is read)
    return store_partial, finish


@functools.cache
def _wgmma_kernel(bm: int, bn: int, kc: int, stages: int, slots: int, min_blocks: int = 1, vec: bool = True,
                  split: int = 1, producers: int = 0, bf16: bool = False, exact_a: bool = False):
    """The kernel for one setting (the launcher has checked it; module docstring for the algorithm).

    ``slots``: the staged slots of a segment (the padded entries' ``w``); ``min_blocks``: resident blocks an SM
    the registers are capped for; ``vec``: B's rows start on 16-byte boundaries (N a multiple of 4), so B moves
    by cp.async, else by plain loads (a kernel of its own); ``split``: K parts a tile (a cluster of ``split``
    blocks on the GPU, module docstring; the simulator computes the parts one after another in one block,
    summed in the same order); ``producers``: 0, or the threads (128 or 256: one or two warpgroups) that copy
    and build the A tiles while the other warpgroups only multiply (module docstring; no split K); ``bf16``:
    ``precision="tf32+bf16"`` (the entries' small values are bf16 pairs, module docstring); ``exact_a`` (3xTF32
    only): A's values are TF32 numbers (:func:`sparsekit.gpu.uspmm_tc.tf32_exact`), so ``b_big a_small``, whose products are
    all zero, is not issued. Arguments: ``ev``, ``eo`` (flattened :func:`sparsekit.gpu.uspmm_tc.segment_entries` with
    ``pad``, ``split`` and ``classes``), ``b`` (flat ``K*N``, row-major), ``c`` (``M x N``, out), sizes ``m``,
    ``n``, ``k``, ``w`` (slots) and ``mp`` (rows of the entry arrays).

    Its geometry is :func:`_plan`; the body runs the phases in order, each a device function of a factory
    cached per setting (:func:`_setup`, :func:`_entry_copy`, :func:`_b_copy`, :func:`_scatter`,
    :func:`_mma_chunk`, :func:`_pipeline_step` or :func:`_warp_specialised`, :func:`_epilogue`)."""
    plan = _plan(bm, bn, kc, stages, slots, vec, split, producers, bf16, exact_a)
    nthreads, nacc, nbp, frag_small, nfrag = plan.nthreads, plan.nacc, plan.nbp, plan.frag_small, plan.nfrag
    pend, pend_first, bpt, parts = plan.pend, plan.pend_first, plan.bpt, plan.parts
    worker_setup, consumer_setup = _setup(plan)                      # 0. addresses taken once
    _, issue_entries = _entry_copy(plan)                             # 4. the entries into their stages
    _, issue_b = _b_copy(plan)                                       # 4. B into its stages
    scatter = _scatter(plan)                                         # 4. the next A tile, densified
    step = _pipeline_step(plan)                                      # 1-5. one chunk
    produce, consume = _warp_specialised(plan)                       # the same, warp specialised
    store_partial, finish = _epilogue(plan)                          # epilogue: split K's parts, C

    @cuda.jit
    def kernel(ev, eo, b, c, m, n, k, w, mp):
        t = U(cuda.threadIdx.x)
        row0 = U(cuda.blockIdx.x) // U(bpt) * U(bm)
        col0 = U(cuda.blockIdx.y) * U(bn)
        um, un, uk, uw, ump = U(m), U(n), U(k), U(w), U(mp)
        nch = (uk + U(kc - 1)) // U(kc)
        sh = cuda.shared.array(0, float32, alignment=SMEM_ALIGN)        # [A0, A1, A2 (big, small) | B | values |
        sh32 = cuda.shared.array(0, uint32, alignment=SMEM_ALIGN)        #  offsets]
        sa = U(shared_addr(sh, u0))
        blim = cuda.local.array(nbp, np.uint32)                          # 0. addresses, accumulators, fragments
        rbz, rbs, gc, r0, bsh0, bgl0, bgl, bstep, eb = worker_setup(t, row0, col0, un, uk, uw, ump, sa, ev,
                                                                              eo, sh, sh32, b, blim)
        tq, nb, fb, d0 = consumer_setup(t, sa)
        acc = cuda.local.array(nacc, float32)
        bfb0 = cuda.local.array(nfrag, float32)                          # two fragment sets: chunk j's
        bfs0 = cuda.local.array(nfrag, frag_small)                       # registers stay the tensor core's
        bfb1 = cuda.local.array(nfrag, float32)                          # while chunk j+1 loads its own
        bfs1 = cuda.local.array(nfrag, frag_small)
        rank = U(cluster_rank()) if split > 1 else u0                    # (simulator: 0)
        for q in range(parts):
            part = rank + U(q)                                           # chunks lo .. hi - 1 of K
            lo, hi = part * nch // U(split), (part + u1) * nch // U(split)
            for i in range(nacc):
                acc[i] = float32(0.0)
            # prologue: entries of chunk lo (own group), then B chunks lo + s and entries lo + s + 1, s < stages - 1
            issue_entries(lo, u0, eb, ev, eo, sh, sh32)
            cp_async_commit()
            for s in range(stages - 1):
                if lo + U(s) < hi:
                    issue_b(lo + U(s), U(s), uk, un, gc, r0, bsh0, bgl0, bgl, bstep, blim, sh, b)
                if lo + U(s + 1) < hi:
                    issue_entries(lo + U(s + 1), U(s + 1), eb, ev, eo, sh, sh32)
                cp_async_commit()
            cp_async_wait(pend_first)                                    # (its own entries of chunk lo)
            scatter(u0, u0, eb, rbz, rbs, sh, sh32)
            cp_async_wait(pend)
            fence_proxy_async()
            cuda.syncthreads()
            ja, jb = u0, u0
            for j0 in range(lo, hi, 2):                                  # steps 1-5, two chunks a turn (the
                uj = U(j0)                                               # fragment sets swap roles)
                ja, jb = step(uj, ja, jb, hi, fb, rbz, rbs, d0, acc, bfb0, bfs0, ev, eo, eb, uk, un, gc, r0, bsh0,
                              bgl0, bgl, bstep, blim, sh, sh32, b)
                if uj + u1 < hi:
                    ja, jb = step(uj + u1, ja, jb, hi, fb, rbz, rbs, d0, acc, bfb1, bfs1, ev, eo, eb, uk, un, gc, r0,
                                  bsh0, bgl0, bgl, bstep, blim, sh, sh32, b)
            wgmma_wait(acc, nacc, 0)
            if split > 1:                                                # this part's partial tile into shared
                cp_async_wait(0)                                         # memory, over the pipeline's buffers
                cuda.syncthreads()                                       # (every warpgroup's wgmma done)
                store_partial(acc, q, t, sa, sh)
        finish(acc, rank, t, tq, nb, row0, col0, um, un, sa, sh, c)     # epilogue: C (split K: the parts summed)

    @cuda.jit
    def ws_kernel(ev, eo, b, c, m, n, k, w, mp):
        """Warp specialised (no split K): threads ``0 .. producers - 1`` run :func:`produce`, the warpgroups after
        them :func:`consume` and write C."""
        t = U(cuda.threadIdx.x)
        row0 = U(cuda.blockIdx.x) * U(bm)
        col0 = U(cuda.blockIdx.y) * U(bn)
        um, un, uk, uw, ump = U(m), U(n), U(k), U(w), U(mp)
        nch = (uk + U(kc - 1)) // U(kc)
        sh = cuda.shared.array(0, float32, alignment=SMEM_ALIGN)
        sh32 = cuda.shared.array(0, uint32, alignment=SMEM_ALIGN)
        sa = U(shared_addr(sh, u0))
        producer = t < U(producers)
        blim = cuda.local.array(nbp, np.uint32)                          # 0. as in kernel, by role
        pt = t if producer else u0
        rbz, rbs, gc, r0, bsh0, bgl0, bgl, bstep, eb = worker_setup(pt, row0, col0, un, uk, uw, ump, sa, ev,
                                                                              eo, sh, sh32, b, blim)
        ct = t - U(producers) if not producer else u0                    # consumer thread (wgmma, C)
        tq, nb, fb, d0 = consumer_setup(ct, sa)
        acc = cuda.local.array(nacc, float32)
        bfb0 = cuda.local.array(nfrag, float32)
        bfs0 = cuda.local.array(nfrag, frag_small)
        bfb1 = cuda.local.array(nfrag, float32)
        bfs1 = cuda.local.array(nfrag, frag_small)
        for i in range(nacc):
            acc[i] = float32(0.0)
        if producer:                                                     # steps 4-5 (copies, scatter)
            produce(u0, nch, rbz, rbs, ev, eo, eb, uk, un, gc, r0, bsh0, bgl0, bgl,
                    bstep, blim, sh, sh32, b)
        else:                                                            # steps 1-3, then the epilogue
            consume(u0, nch, fb, d0, acc, bfb0, bfs0, bfb1, bfs1, sh)
            finish(acc, u0, ct, tq, nb, row0, col0, um, un, sa, sh, c)

    chosen = ws_kernel if producers else kernel
    if SIM:                                                              # (the simulator has no launch bounds)
        return chosen
    return cuda.jit(launch_bounds=(nthreads, min_blocks))(chosen.py_func)


def _check(bm, bn, kc, stages, split, producers):
    if bn not in (64, 128, 256):
        raise ValueError(f"bn: must be 64, 128 or 256 (one, two or four warpgroups), got {bn}")
    if producers not in (0, WG, 2 * WG):
        raise ValueError(f"producers: 0, {WG} or {2 * WG} (one or two producer warpgroups), got {producers}")
    workers = producers or WG * (bn // 64)
    if bm not in (16, 32, 64, 128, 256) or workers % (4 * bm):
        raise ValueError(f"bm: must be 16, 32, 64, 128 or 256 (the wgmma's n) with 4 bm dividing the {workers} threads "
                         f"that build the A tile (four column classes a row), got {bm}")
    if kc % 8 or (kc * bm // workers) % 4:
        raise ValueError(f"kc: must be a multiple of 8 with kc * bm / {workers} a multiple of 4, got {kc}")
    if workers % bn:
        raise ValueError(f"producers: at least bn = {bn} (a thread's B rows 4 apart, sharing their swizzle), "
                         f"got {producers}")
    if kc % (workers // (bn // 4)):
        raise ValueError(f"kc: the B copies need kc a multiple of {workers // (bn // 4)}, got {kc}")
    if stages < (4 if producers else 2):
        raise ValueError(f"stages: at least {4 if producers else 2}{' with producers' if producers else ''}, "
                         f"got {stages}")
    if split not in (1, 2, 4, 8) or (bm // 8) % split:
        raise ValueError(f"split: must be 1, 2, 4 or 8 (K parts a tile, a cluster of that many blocks) and "
                         f"divide bm / 8 = {bm // 8}, got {split}")
    if split > 1 and producers:
        raise ValueError("split, producers: the warp-specialised kernel does not split K (one or the other)")


_CLUSTERED = set()                                     # compiled overloads whose cluster size is set


def _launch_clusters(kernel, args, grid, nthreads, shared, split):
    """``kernel`` on ``grid`` in clusters of ``split`` consecutive blocks along x (one tile's K parts)."""
    from numba import typeof

    compiled = kernel.compile(tuple(typeof(a) for a in args))
    if id(compiled) not in _CLUSTERED:
        require_cluster(compiled, split)
        _CLUSTERED.add(id(compiled))
    cluster_launch(kernel, compiled, args, grid, nthreads, shared, split)


def uspmm(ell, b, **tunables):
    """``C = A @ b`` (float32) on warpgroup MMAs; see the module docstring."""
    dell = prepare(ell)
    bop, order = rhs(b, dell, "b")
    return result(run(dell, bop, order, **tunables), like=bop)


def auto_precision(dell) -> str:
    """The precision ``precision="auto"`` (the default) computes ``dell``'s products in: ``"tf32+bf16"`` where its
    error bound is no looser than 3xTF32's (``error_reduction``: ``2 K' + 137`` against ``3 K' + 13``, from K' = 124
    on) and A's values are not TF32 numbers (:func:`sparsekit.gpu.uspmm_tc.tf32_exact`: 3xTF32 then issues two products
    too, with the smaller split error), else ``"3xtf32"``. Either way the result is within the float32 contract's
    bound, ``error_reduction(K', float32)``. On the H100 at 1024^3 60% "tf32+bf16" takes 30.9 us against 33.7
    (``experiments/results/uspmm_precision.json``)."""
    kprime = dell.host.kprime
    if error_reduction(kprime, np.float32, "tf32+bf16") > error_reduction(kprime, np.float32, "3xtf32"):
        return "3xtf32"
    return "3xtf32" if tf32_exact(dell) else "tf32+bf16"


def supported() -> bool:
    """Whether the current device runs wgmma (compute capability 9.0, compiled for sm_90a); the simulator
    runs the fallbacks of :mod:`sparsekit.gpu.wgmma` and says False, so that ``config="auto"`` keeps its choices there."""
    if SIM or not cuda.is_available():
        return False
    return tuple(cuda.get_current_device().compute_capability) == (9, 0)


def run(dell, bop, order: str, **tunables):
    """The launcher after validation (as :func:`sparsekit.gpu.uspmm_tc.run`)."""
    if order != "C":
        raise ValueError("b: the wgmma kernel needs a C-ordered (row-major) b; "
                         "use sparsekit.gpu.uspmm.uspmm(variant='listing1') for the column-major layout of Eq. 2")
    if dell.dtype != np.float32:
        raise ValueError(f"the wgmma kernel is float32 (3xTF32); got {dell.dtype} (float16: gpu.uspmm_tc)")
    if not SIM and not supported():
        cc = cuda.get_current_device().compute_capability
        raise ValueError(f"the wgmma kernel needs a compute capability 9.0 GPU (sm_90a: H100, H200); this one is "
                         f"{cc[0]}.{cc[1]} (gpu.uspmm_tc runs float32 on any tensor-core GPU)")
    opts = dict(DEFAULTS, **tunables)
    unknown = set(opts) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"tunables: unknown {sorted(unknown)}; expected {sorted(DEFAULTS)}")
    bm, bn, kc, stages, min_blocks, split, producers = (int(opts[x]) for x in ("bm", "bn", "kc", "stages",
                                                                                 "min_blocks", "split", "producers"))
    _check(bm, bn, kc, stages, split, producers)
    if opts["precision"] not in PRECISIONS + ("auto",):
        raise ValueError(f"precision: one of {PRECISIONS + ('auto',)}, got {opts['precision']!r}")
    precision = auto_precision(dell) if opts["precision"] == "auto" else opts["precision"]
    bf16 = precision == "tf32+bf16"
    bdev = bop.dev
    m, n = dell.shape[0], bdev.shape[1]
    k = dell.shape[1]
    c = output((m, n), dell.dtype, like=bop, order="C")
    if m and n:
        nthreads = WG * (bn // 64) + producers
        seg = kc * bm // (producers or nthreads)
        ev, eo = segment_entries(dell, seg, pad=True, split="bf16" if bf16 else True, classes=kc)
        w, mp = 2 * ev.shape[1], eo.shape[1]
        slots = scatter_slots(seg, w)
        kernel = _wgmma_kernel(bm, bn, kc, stages, slots, min_blocks, n % 4 == 0 and aligned(bdev, 4), split,
                               producers, bf16, not bf16 and tf32_exact(dell))
        args = (flat_view(ev), flat_view(eo), flat_view(bdev), c, m, n, k, w, mp)
        shared = shared_bytes(bm, bn, kc, stages, slots, split, producers)
        opt_in(kernel, args, shared)
        if split > 1 and not SIM:
            _launch_clusters(kernel, args, (cdiv(m, bm) * split, cdiv(n, bn)), nthreads, shared, split)
        else:
            _launch(DynamicShared(kernel, shared), (cdiv(m, bm), cdiv(n, bn)), nthreads, args, "bm, bn")
    return c
