"""The tensor-core USpMM compiles for sm_80 and sm_90 offline, and the PTX shows what it relies on:

* ``mma.sync`` (m16n8k16 f16 with f32 accumulation; bfloat16 the m16n8k16 bf16 one, with
  ``C`` rounded by ``cvt.rn.bf16x2.f32``; m16n8k8 TF32 and ``cvt.rna.tf32.f32`` for
  float32), none of it through a stack: no ``.local`` in the post-LTO PTX, 0 bytes of spill in
  ptxas's report (the accumulators and fragments stay in registers);
* B tiles and staged entries copied by ``cp.async`` (16 bytes, no registers) with a commit and a
  wait per K chunk; A fragments read with 32-bit shared loads (``ld.shared.u32``, half2 words),
  float16 B fragments with ``ldmatrix...trans``; one ``bar.sync`` per K chunk plus two in the
  prologue;
* K groups (``kgroups > 1``): the same, one barrier more after the K loop, across which groups
  ``1 ..`` store their float32 sums to shared memory and group 0 loads them; ``kgroups = 1``
  compiles to the kernel without groups (the loop bounds of ``UNSPLIT_LOOP``).
"""
from __future__ import annotations

import functools
import re

import pytest
from numba import types

from sparsekit.gpu import uspmm_tc as tc
from sparsekit import offline
from sparsekit.checks import BFLOAT16

CCS = [(8, 0), (9, 0)]
VALUE_TYPES = {"float16": types.float16, "float32": types.float32}
#: The 16-bit dtypes; the element type a kernel's arrays have (bfloat16: its uint16 bits, as the launcher passes it).
HALVES = ("float16", "bfloat16")
KERNEL_TYPES = dict(VALUE_TYPES, bfloat16=types.uint16)
MMA16 = {"float16": "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
         "bfloat16": "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"}


def kernel_args(dtype: str):
    vt = KERNEL_TYPES[dtype]
    return (types.Array(vt, 1, "C"), types.Array(types.uint8, 1, "C"), types.Array(vt, 1, "C"), types.Array(vt, 2, "C"),
            types.Array(types.float32, 3, "C"), types.Array(types.int32, 1, "C"),
            types.int64, types.int64, types.int64, types.int64, types.int64, types.int64, types.int64)


@functools.cache
def build(dtype: str, cfg: tuple, cc, slots: int = 0, vec: bool = True, ksplit: bool = False,
          kgroups: int = 1, exact_a: bool = False) -> offline.Build:
    """(post-LTO PTX, ptxas report) of one setting, with its launch bounds (``slots``: scattered per
    chunk; ``vec``: B by 16-byte copies, else element by element; ``ksplit``: the K-split kernel;
    ``kgroups``: K groups, always the dynamic-shared-memory kernel, as the launcher builds it;
    ``exact_a``: a TF32-exact A, two MMAs instead of three)."""
    kernel = tc._tc_kernel(*cfg[:5], dtype in HALVES, 1, stages_of(cfg), dynamic(dtype, cfg) or kgroups > 1, slots,
                           vec, ksplit, kgroups, exact_a=exact_a, bf16=dtype == "bfloat16")
    return offline.build(kernel, kernel_args(dtype), cc)


def stages_of(cfg: tuple) -> int:
    return cfg[5] if len(cfg) > 5 else 3


def dynamic(dtype: str, cfg: tuple) -> bool:
    """Whether the launcher takes the dynamic-shared-memory path for this setting (past 48 KB)."""
    return tc.shared_bytes(*cfg[:3], dtype in HALVES, stages_of(cfg), 32 * cfg[3] * cfg[4]) > tc.STATIC_LIMIT


def default_cfg(dtype: str) -> tuple:
    d = tc.DEFAULTS[BFLOAT16 if dtype == "bfloat16" else __import__("numpy").dtype(dtype)]
    return d["bm"], d["bn"], d["kc"], d["warps_m"], d["warps_n"], d["stages"]


# every cc x dtype (bfloat16 included) with the default tiling; at sm_90 a float32 tiling of 4 x 2 warps (several warps per row
# segment) and two float16 ones past 48 KB (dynamic shared memory: 8 warps kc 32, 16 warps). The kernel reads
# the ELL through segment_entries, the same arrays whatever the ELL's index dtype. (Four more tilings were
# compiled here before; the K-split and K-group tests below build the routed settings.)
BUILDS = ([(cc, dt, default_cfg(dt)) for cc in CCS for dt in KERNEL_TYPES]
          + [((9, 0), "float32", (128, 64, 8, 4, 2)),
             ((9, 0), "float16", (64, 128, 32, 2, 4, 4)), ((9, 0), "float16", (128, 128, 32, 4, 4, 4))])


@pytest.mark.parametrize("cc,dtype,cfg", BUILDS, ids=str)
def test_compiles_to_mma_in_registers(cc, dtype, cfg):
    assert tc._check_tunables(dtype in HALVES, *cfg[:5], 1, *cfg[5:])       # a setting the launcher accepts
    stages = stages_of(cfg)
    ptx, report = build(dtype, cfg, cc)
    if dynamic(dtype, cfg):                                                  # one extern buffer, no static
        assert ".extern .shared .align 16" in ptx and not re.search(r"\d+ bytes smem", report), report
    else:
        assert ".extern .shared" not in ptx
    assert f".target sm_{cc[0]}{cc[1]}" in ptx
    if dtype in HALVES:
        assert MMA16[dtype] in ptx
        assert re.search(r"ld\.shared\.u32\s", ptx)                          # half2 (bf16x2) fragment words
        assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx
        assert ("cvt.rn.bf16x2.f32" in ptx) == (dtype == "bfloat16")         # C rounded to nearest even
    else:
        assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ptx
        assert "cvt.rna.tf32.f32" in ptx                                     # the 3xTF32 split
    assert "cp.async.cg.shared.global" in ptx and "cp.async.commit_group" in ptx
    assert f"cp.async.wait_group {stages - 2}" in ptx
    assert ".local" not in ptx
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    assert spills and all(a == "0" and b == "0" for a, b in spills), report
    assert len(re.findall(r"\bbar\.sync\b", ptx)) == 3                       # prologue 2, loop 1


def loop_body(ptx: str, ksplit: bool = False, kgroups: int = 1) -> list[str]:
    """The PTX instructions of one K chunk: between the main loop's ``bar.sync`` and the one before
    (the last two; with a K split, :func:`sparsekit.gpu.uspmm.split_sum`'s two barriers follow; with K groups,
    the groups' sum's one)."""
    lines = [x.strip() for x in ptx.splitlines()]
    bars = [i for i, x in enumerate(lines) if x.startswith("bar.sync")]
    last = len(bars) - 1 - (2 if ksplit else 0) - (1 if kgroups > 1 else 0)
    return [x for x in lines[bars[last - 1] + 1:bars[last]]
            if x and not x.startswith(("//", "$", "{", "}", ".")) and not x.endswith(":")]


@pytest.mark.parametrize("dtype", list(VALUE_TYPES))
def test_loop_has_no_signed_index_arithmetic(dtype):
    """The K loop indexes with unsigned integers: no ``shr.s64`` (Numba's negative-index wraparound
    and signed division fix-ups start with one), and a 64-bit add count that the signed version
    exceeded (float16 default, sm_90, static count of the loop body: 293 ``add.s64`` signed, with the
    element-wise B path in the loop; here without it)."""
    body = loop_body(build(dtype, default_cfg(dtype), (9, 0)).ptx)
    assert not [x for x in body if x.startswith("shr.s64")]
    assert sum(x.startswith("add.s64") for x in body) < 200


@pytest.mark.parametrize("dtype", list(VALUE_TYPES))
def test_element_wise_b_kernel(dtype):
    """B rows off 16-byte boundaries (odd N) take a kernel of their own: plain global loads of B and
    no cp.async for it, no spills; the 16-byte kernel has no global loads in its K loop."""
    ptx, report = build(dtype, default_cfg(dtype), (9, 0), vec=False)
    assert re.search(r"ld\.global\.(u16|f32)", "\n".join(loop_body(ptx)))
    assert offline.usage(report).spill_store_bytes == 0
    assert not [x for x in loop_body(build(dtype, default_cfg(dtype), (9, 0)).ptx) if x.startswith("ld.global")]


def test_scatter_is_pipelined_with_the_mmas():
    """In one K chunk of the float16 default, the next A tile's staged slots (offset and value) are
    read into registers first, with no branch among the loads (a store may alias later loads, so
    loads after a store would wait for it); its stores come after the copies are issued, a quarter
    after each of the 4 K steps' 8 MMAs. Fewer scattered slots (``slots``), fewer loads and stores."""
    for slots in (0, 8):
        body = loop_body(build("float16", default_cfg("float16"), (9, 0), slots).ptx)
        want = slots or 16
        commit = body.index("cp.async.commit_group;")
        loads = [i for i, x in enumerate(body) if x.startswith(("ld.shared.u8", "ld.shared.u16"))]
        assert len(loads) == 2 * want and max(loads) < commit
        assert not any(x.startswith(("bra", "@")) for x in body[loads[0]:loads[-1]])
        runs = []                                            # [kind, count] of consecutive MMAs / stores
        for x in body[commit:]:
            kind = "mma" if x.startswith("mma.sync") else "st" if x.startswith("st.shared.u16") else None
            if kind and runs and runs[-1][0] == kind:
                runs[-1][1] += 1
            elif kind:
                runs.append([kind, 1])
        assert runs == [["mma", 8], ["st", want // 4]] * 4


#: PTX instructions of one K chunk of the unsplit defaults (sm_90, static count of :func:`loop_body`)
#: when the K split was added (float32: 427 then, 415 with A split at the scatter):
#: the split must not add code to the unsplit loop.
UNSPLIT_LOOP = {"float16": 495, "float32": 415}


@pytest.mark.parametrize("cc", CCS, ids=str)
@pytest.mark.parametrize("dtype", list(VALUE_TYPES))
def test_k_split_kernel(dtype, cc):
    """The K-split kernel of the defaults: MMAs in registers without spills; the ticket
    (``atom.global.add``), the partials' float32 stores and split_sum's two barriers after the loop; each
    partial's ``mtiles x ntiles x 4`` loads of the split sum in one branch-free stretch;
    its K loop within 10% of the unsplit one (the chunk range only moves the block's views of B and
    the entries), and the unsplit kernel's loop no longer than when the split was added."""
    ptx, report = build(dtype, default_cfg(dtype), cc, ksplit=True)
    mma = "m16n8k16.row.col.f32.f16.f16.f32" if dtype == "float16" else "m16n8k8.row.col.f32.tf32.tf32.f32"
    assert f"mma.sync.aligned.{mma}" in ptx and ".local" not in ptx
    assert offline.usage(report).spill_store_bytes == 0
    assert re.search(r"atom\.global\.add\.u32|atom\.global\.add\.s32", ptx)
    assert "st.global.f32" in ptx
    cfg = default_cfg(dtype)                                                   # a partial's loads, issued together
    assert offline.longest_branch_free_loads(ptx) == (cfg[0] // cfg[3] // 16) * (cfg[1] // cfg[4] // 8) * 4
    assert len(re.findall(r"\bbar\.sync\b", ptx)) == 5                       # prologue 2, loop 1, split_sum 2
    split_loop = loop_body(ptx, ksplit=True)
    plain_loop = loop_body(build(dtype, default_cfg(dtype), cc).ptx)
    assert sum(x.startswith("mma.sync") for x in split_loop) == sum(x.startswith("mma.sync") for x in plain_loop)
    assert len(split_loop) <= 1.1 * len(plain_loop)
    if cc == (9, 0):
        assert len(plain_loop) <= UNSPLIT_LOOP[dtype]


@pytest.mark.parametrize("slots", [0, 4])
def test_float32_splits_a_once_at_the_scatter(slots):
    """The float32 default (sm_90, its ``min_blocks=2``), A split in the kernel. In the K loop's text (its K steps
    unrolled or, as the compiler now leaves them, one step's code), per K step: ``cvt.rna`` only for the small parts of
    the B fragments (one per B value; the big part by integer arithmetic, :func:`sparsekit.gpu.mma.to_tf32_finite`)
    and of the step's share of the scattered slots (one a slot); the A fragments from the big and small tiles as
    they are, by ``ldmatrix`` (two an MMA tile, no 32-bit loads); each slot stored twice (big, small); three MMAs
    a tile. At most 128 registers (two blocks an SM), no spills."""
    cfg = default_cfg("float32")
    d = tc.DEFAULTS[__import__("numpy").dtype("float32")]
    kernel = tc._tc_kernel(*cfg[:5], False, d["min_blocks"], cfg[5], dynamic("float32", cfg), slots)
    ptx, report = offline.build(kernel, kernel_args("float32"), (9, 0))
    body = loop_body(ptx)
    nslots = slots or d["kc"] * d["bm"] // (32 * d["warps_m"] * d["warps_n"])
    ntiles, mtiles = d["bn"] // d["warps_n"] // 8, d["bm"] // d["warps_m"] // 16
    gks = d["kc"] // 8
    per_ks = -(-nslots // gks)                                             # slots stored after each K step

    def count(prefix):
        return sum(x.startswith(prefix) for x in body)
    steps = count("mma.sync") // (3 * mtiles * ntiles)
    assert steps in (1, gks) and count("mma.sync") == 3 * mtiles * ntiles * steps
    assert count("cvt.rna.tf32.f32") == steps * (2 * ntiles + per_ks)
    # (a TF32 value goes to the MMA or the tile as its 32 bits: ldmatrix, u32 stores)
    assert count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") == steps * 2 * mtiles
    assert count("ld.shared.u32") == 0
    assert count("st.shared.u32") == steps * 2 * per_ks
    use = offline.usage(report)
    assert use.registers <= 128 and use.spill_store_bytes == 0 and use.stack_bytes == 0, report


#: K-group settings (sm_90, launch bounds of one block an SM): float32 64 x 128 kc 32 with 8 warps of 64 x 64
#: in four groups (one K step a group per chunk; the fastest at 1024^3 among the K groups of
#: experiments/results/uspmm_tc.md, 238 registers), the same with a K split (its split sum once spilled:
#: 255 registers, 348 bytes of spill stores) and, with a K split, 2 x 2 warps of 32 x 64 in two
#: groups; float16 64 x 128 kc 64 with 8 warps of 64 x 32 in two groups.
KGROUP_BUILDS = [("float32", (64, 128, 32, 1, 2, 4), 4, False), ("float32", (64, 128, 32, 1, 2, 4), 4, True),
                 ("float32", (64, 128, 32, 2, 2, 3), 2, True), ("float16", (64, 128, 64, 1, 4, 4), 2, False)]


@pytest.mark.parametrize("dtype,cfg,kgroups,ksplit", KGROUP_BUILDS, ids=str)
def test_k_groups_kernel(dtype, cfg, kgroups, ksplit):
    """MMAs in registers (no ``.local``, no spills) from one dynamic buffer; one barrier more than
    without groups: before it, groups ``1 ..`` store their ``mtiles x ntiles x 4`` float32 sums
    (``st.shared.f32``), after it group 0 loads ``kgroups - 1`` times as many (``ld.shared.f32``) and
    adds them (``add.f32``, no fused multiply-add: the sum is a fixed sequence of float32 additions)."""
    assert tc._check_tunables(dtype == "float16", *cfg[:5], 1, cfg[5], 1, kgroups)
    ptx, report = build(dtype, cfg, (9, 0), ksplit=ksplit, kgroups=kgroups)
    mma = "m16n8k16.row.col.f32.f16.f16.f32" if dtype == "float16" else "m16n8k8.row.col.f32.tf32.tf32.f32"
    assert f"mma.sync.aligned.{mma}" in ptx and ".extern .shared .align 16" in ptx
    assert ".local" not in ptx
    use = offline.usage(report)
    assert use.spill_store_bytes == 0 and use.stack_bytes == 0, report
    lines = [x.strip() for x in ptx.splitlines()]
    bars = [i for i, x in enumerate(lines) if x.startswith("bar.sync")]
    assert len(bars) == 3 + 1 + (2 if ksplit else 0)                          # prologue 2, loop 1, groups 1
    before, after = lines[bars[2] + 1:bars[3]], lines[bars[3] + 1:]
    frag = (cfg[0] // cfg[3] // 16) * (cfg[1] // cfg[4] // 8) * 4               # a thread's float32 sums
    assert sum(x.startswith("st.shared.f32") for x in before) == frag
    # group 0's loads: frag per other group, unrolled (two groups) or in a loop over the groups (four: 128 loads
    # in the PTX, run three times), each followed by its addition
    loads = sum(x.startswith("ld.shared.f32") for x in after)
    assert loads % frag == 0 and frag <= loads <= (kgroups - 1) * frag
    assert sum(x.startswith("add.f32") or x.startswith("add.rn.f32") for x in after) >= loads
    assert not [x for x in after if x.startswith("fma")]
    assert len(loop_body(ptx, ksplit, kgroups)) > 0
    if ksplit:                                                                 # a partial's loads, issued together
        assert offline.longest_branch_free_loads(ptx) == frag                          # (they were one at a time before)


def test_tf32_exact_a_issues_two_mmas_where_three_were():
    """``exact_a`` (a TF32-exact A) on the routed float32 one-wave setting: in the K loop two MMAs a tile and
    K step where the 3xTF32 kernel issues three (``a_small b_big`` left out) and one ``ldmatrix`` a 16-row tile
    where it issues two (the small tile is not read); no spills."""
    cfg, kgroups = (64, 128, 32, 1, 2, 4), 4
    three = loop_body(build("float32", cfg, (9, 0), kgroups=kgroups).ptx, kgroups=kgroups)
    ptx, report = build("float32", cfg, (9, 0), kgroups=kgroups, exact_a=True)
    two = loop_body(ptx, kgroups=kgroups)

    def mmas(body):
        return sum(x.startswith("mma.sync.aligned.m16n8k8") for x in body)
    assert 3 * mmas(two) == 2 * mmas(three) > 0

    def ldmatrix(body):
        return sum(x.startswith("ldmatrix.sync.aligned.m8n8.x4.shared.b16") for x in body)
    assert 2 * ldmatrix(two) == ldmatrix(three) > 0
    use = offline.usage(report)
    assert use.spill_store_bytes == 0 and use.stack_bytes == 0, report


@pytest.mark.parametrize("ksplit", [False, True])
def test_bfloat16_is_the_float16_kernel_with_the_bf16_mma(ksplit):
    """bfloat16 (sm_90, the default tiling; alone and with a K split, whose last block stores ``C``): the K loop
    issues float16's MMAs (of the bf16 type), shared loads and stores, ldmatrix, copies and barriers, one for one,
    in no more instructions (A and B move as 16-bit bits either way; float16 builds its zero by ``cvt.rn.f16.f64``,
    two instructions bfloat16 does without); ``C`` is rounded by ``cvt.rn.bf16x2.f32``, one a pair of columns (no
    float16 conversion left); no ``.local``, no spills."""
    cfg = default_cfg("bfloat16")
    assert cfg == default_cfg("float16")
    ptx, report = build("bfloat16", cfg, (9, 0), ksplit=ksplit)
    half_ptx = build("float16", cfg, (9, 0), ksplit=ksplit).ptx
    assert ".local" not in ptx and MMA16["float16"] not in ptx
    use = offline.usage(report)
    assert use.spill_store_bytes == 0 and use.stack_bytes == 0, report
    loop, half_loop = loop_body(ptx, ksplit), loop_body(half_ptx, ksplit)

    def count(body, prefix):
        return sum(x.startswith(prefix) for x in body)
    assert count(loop, MMA16["bfloat16"]) == count(half_loop, MMA16["float16"]) > 0
    for prefix in ("ld.shared", "st.shared", "ldmatrix", "cp.async", "bar.sync", "ld.global"):
        assert count(loop, prefix) == count(half_loop, prefix), prefix
    assert len(loop) <= len(half_loop)
    assert "cvt.rn.f16.f32" not in ptx and "cvt.rn.f16.f32" in half_ptx
    pairs = (cfg[0] // cfg[3] // 16) * (cfg[1] // cfg[4] // 8) * 2        # a thread's C fragment rows
    assert ptx.count("cvt.rn.bf16x2.f32") == pairs
