"""The wgmma USpMM and the wgmma probe compile for sm_90a offline, and the PTX shows what they rely on:

* ``.target sm_90a`` (numba-cuda compiles a cc 9.0 kernel for it; ``wgmma`` exists nowhere else);
* per K chunk three ``wgmma.mma_async...m64n{bm}k8.f32.tf32.tf32`` for every 8 columns (the 3xTF32
  terms; two for a TF32-exact A), one commit, ``wgmma.wait_group 1`` (the previous chunk's group; the current
  one runs on) and
  ``fence.proxy.async.shared::cta`` before the chunk's barrier; the loop takes two chunks (two fragment
  sets), so the unrolled body holds twice that;
* shared memory in the loop through byte addresses (``ld.shared.b32``, ``ld.shared.v4.b32``,
  ``st.shared.v4.b32``), B and the entries by ``cp.async`` (a thread's 4 offset bytes by ``cp.async.ca``);
* the default setting's 16 warps stay within 128 registers (its launch bounds): one block an SM.
"""
from __future__ import annotations

import functools
import re

import pytest
from numba import types

import mma_probes
from sparsekit.gpu import uspmm_wgmma as wg
from sparsekit import offline

SM90A = (9, 0, "a")
ARGS = (types.Array(types.float32, 1, "C"), types.Array(types.uint32, 1, "C"), types.Array(types.float32, 1, "C"),
        types.Array(types.float32, 2, "C"), types.int64, types.int64, types.int64, types.int64, types.int64)


@functools.cache
def build(bm: int, bn: int, kc: int, stages: int, slots: int, vec: bool = True) -> offline.Build:
    return offline.build(wg._wgmma_kernel(bm, bn, kc, stages, slots, 1, vec), ARGS, SM90A)


# the default; a small one-warpgroup setting, with B by 16-byte copies and by plain loads (N % 4 != 0)
SETTINGS = [(wg.DEFAULTS["bm"], wg.DEFAULTS["bn"], wg.DEFAULTS["kc"], wg.DEFAULTS["stages"], 4, True),
            (32, 64, 16, 4, 4, True), (32, 64, 16, 4, 4, False)]


@pytest.mark.parametrize("bm,bn,kc,stages,slots,vec", SETTINGS)
def test_kernel_issues_wgmma_asynchronously(bm, bn, kc, stages, slots, vec):
    ptx = build(bm, bn, kc, stages, slots, vec).ptx
    assert ".target sm_90a" in ptx
    mmas = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k8\.f32\.tf32\.tf32", ptx)
    assert mmas and set(mmas) == {str(bm)}
    assert len(mmas) == 2 * 3 * (kc // 8)                       # two chunks a loop turn, 3 terms per 8 columns
    assert ptx.count("wgmma.commit_group.sync.aligned") == 2
    assert ptx.count("wgmma.wait_group.sync.aligned 1;") == 2
    assert ptx.count("wgmma.wait_group.sync.aligned 0;") == 1   # before the epilogue
    assert ptx.count("fence.proxy.async.shared::cta") >= 3      # prologue + each chunk
    for op in ("ld.shared.b32", "ld.shared.v4.b32", "st.shared.v4.b32", "st.shared.b32", "cp.async.cg.shared.global",
               "cp.async.ca.shared.global"):
        assert op in ptx, op
    assert re.search(r"cp\.async\.ca\.shared\.global \[[^]]+\], \[[^]]+\], 4,", ptx)   # 4 slots: 4 offset bytes
    b_loads = len(re.findall(r"ld\.global(\.nc)?\.(f32|u32|b32)", ptx))   # B by plain loads (4 a piece)
    assert (b_loads > 0) != vec


def test_default_fits_its_launch_bounds():
    d = wg.DEFAULTS
    report = build(d["bm"], d["bn"], d["kc"], d["stages"], 4).report
    assert offline.usage(report).registers <= 65536 // (128 * d["bn"] // 64)


def test_probe_compiles_for_sm_90a():
    ptx = offline.lto_ptx(mma_probes.wgmma_probe, (types.Array(types.float32, 1, "C"),) * 3, SM90A)
    assert ".target sm_90a" in ptx
    assert ptx.count(f"wgmma.mma_async.sync.aligned.m64n{mma_probes.PROBE_N}k8.f32.tf32.tf32") == 1


@functools.cache
def build_split(bm: int, bn: int, kc: int, stages: int, slots: int, min_blocks: int, split: int,
                producers: int = 0, bf16: bool = False, exact_a: bool = False) -> offline.Build:
    return offline.build(wg._wgmma_kernel(bm, bn, kc, stages, slots, min_blocks, True, split, producers, bf16,
                                          exact_a), ARGS, SM90A)


@pytest.mark.parametrize("name", ["WGMMA_QUARTER"])
def test_split_k_reduces_through_the_cluster(name):
    """A routed split setting (``WGMMA_QUARTER``: two blocks an SM, the tightest register budget; ``WGMMA_HALF``
    and the other split settings run the same reduction code, at real sizes in tests/gpu): the same K loop (wgmma count), then every accumulator of every part read
    through distributed shared memory (``mapa`` + ``ld.shared::cluster``: bm / 2 accumulators a thread, of
    which a part reads its 1 / split share from each of the split blocks, i.e. bm / 2 loads), between two cluster
    barriers; registers within the launch bounds (``min_blocks`` blocks an SM), no spills."""
    from sparsekit import tune
    d = dict(wg.DEFAULTS, **getattr(tune, name))
    b = build_split(d["bm"], d["bn"], d["kc"], d["stages"], 4, d["min_blocks"], d["split"])
    ptx = b.ptx
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k8", ptx)) == 2 * 3 * (d["kc"] // 8)
    assert ptx.count("ld.shared::cluster.b32") == ptx.count("mapa.shared::cluster.u32") == d["bm"] // 2
    assert ptx.count("barrier.cluster.arrive.release") == ptx.count("barrier.cluster.wait.acquire") == 2
    use = offline.usage(b.report)
    assert use.registers <= 65536 // (128 * d["bn"] // 64 * d["min_blocks"])
    assert use.spill_store_bytes == 0 and use.spill_load_bytes == 0


def test_warp_specialised_hands_over_through_named_barriers():
    """The routed one-wave setting (``sparsekit.tune.WGMMA_WAVE``): the consumers' loop holds the wgmmas of one
    chunk in each of its two fragment-set branches; producers and consumers meet at named barriers only
    (``bar.sync`` at the full and the empty one; ``bar.arrive`` at the full and the empty one; no barrier among
    the producers: each scatters only the entries it copied), a warp barrier between a warp's zeroes and its
    scatter, no cluster barrier; its 512 threads (two producer and two consumer warpgroups) within 128 registers (one
    block an SM), no spills."""
    from sparsekit import tune
    d = dict(wg.DEFAULTS, **tune.WGMMA_WAVE)
    b = build_split(d["bm"], d["bn"], d["kc"], d["stages"], 8, d["min_blocks"], 1, d["producers"])
    ptx = b.ptx
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k8", ptx)) == 2 * 3 * (d["kc"] // 8)
    assert len(re.findall(r"\bbar\.sync\b", ptx)) == 2 and len(re.findall(r"\bbar\.arrive\b", ptx)) == 2
    assert "bar.warp.sync" in ptx
    assert "barrier.cluster" not in ptx and "fence.proxy.async.shared::cta" in ptx
    use = offline.usage(b.report)
    assert use.registers <= 65536 // (128 * d["bn"] // 64 + d["producers"])
    assert use.spill_store_bytes == 0 and use.spill_load_bytes == 0


@pytest.mark.parametrize("name,slots", [("WGMMA_WAVE", 8), ("WGMMA_LARGE", 4), ("WGMMA_QUARTER", 4)])
def test_bf16_corrections_issue_one_tf32_and_one_bf16_wgmma_per_8_columns(name, slots):
    """``precision="tf32+bf16"`` (what the default ``"auto"`` runs from K' = 124 on) at the one-wave setting, the
    large-grid one and the split one of the tightest register budget (two blocks an SM): per 8 columns of a chunk
    one TF32 wgmma (big x big) and one bf16 m64nNk16 wgmma (both corrections over K-interleaved pairs), B's pairs
    packed by ``cvt.rn.bf16x2.f32`` (one a fragment register: 4 a k8 step), the scatter unchanged (the same 32-bit
    stores); within the launch bounds, no spills (128 x 256: no more than the 3xTF32 kernel's, which has 128
    registers a thread at 512 threads and spills a few bytes, ``experiments/results/uspmm_wgmma.md``)."""
    from sparsekit import tune
    d = dict(wg.DEFAULTS, **getattr(tune, name))
    b = build_split(d["bm"], d["bn"], d["kc"], d["stages"], slots, d["min_blocks"], d["split"], d["producers"], True)
    ptx = b.ptx
    for kind in (r"k8\.f32\.tf32\.tf32", r"k16\.f32\.bf16\.bf16"):  # (two chunks a loop turn)
        assert len(re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{d['bm']}{kind}", ptx)) == 2 * d["kc"] // 8
    assert ptx.count("cvt.rn.bf16x2.f32") == 2 * 4 * (d["kc"] // 8)
    assert ptx.count("cvt.rna.tf32.f32") == 0                   # (the small parts are no longer TF32)
    use = offline.usage(b.report)
    assert use.registers <= 65536 // ((128 * d["bn"] // 64 + d["producers"]) * d["min_blocks"])
    spills = (0, 0)
    if name == "WGMMA_LARGE":                                   # (the default setting: build() is its 3xTF32 kernel)
        three = offline.usage(build(d["bm"], d["bn"], d["kc"], d["stages"], slots).report)
        spills = (three.spill_store_bytes, three.spill_load_bytes)
    assert use.spill_store_bytes <= spills[0] and use.spill_load_bytes <= spills[1]


def test_tf32_exact_a_issues_two_tf32_wgmma_per_8_columns():
    """A TF32-exact A (``exact_a``) at the one-wave setting: per 8 columns of a chunk two TF32 wgmma (``b_small
    a_big``, ``b_big a_big``; ``b_big a_small`` is all zeros and left out), none on the small A tile's descriptor;
    within the launch bounds, no spills."""
    from sparsekit import tune
    d = dict(wg.DEFAULTS, **tune.WGMMA_WAVE)
    b = build_split(d["bm"], d["bn"], d["kc"], d["stages"], 8, d["min_blocks"], 1, d["producers"], False, True)
    assert len(re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{d['bm']}k8\.f32\.tf32\.tf32", b.ptx)) == \
        2 * 2 * (d["kc"] // 8)                                  # two chunks a loop turn, 2 terms per 8 columns
    use = offline.usage(b.report)
    assert use.registers <= 65536 // (128 * d["bn"] // 64 + d["producers"])
    assert use.spill_store_bytes == 0 and use.spill_load_bytes == 0
