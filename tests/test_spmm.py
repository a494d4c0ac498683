"""SpMM references (sparsekit/reference/spmm.py) against the dense product, and the GPU SpMM
kernels (sparsekit/gpu/spmm.py) against the references, under the simulator without a GPU: float32, float16
and (the CSR kernels, plain and staged) bfloat16.

``assert_fp32_accumulated`` is the one tolerance of every kernel that stores
float32, float16 or bfloat16 and accumulates in float32 (sparsekit/gpu/spmm.py, sparsekit/gpu/uspmm.py).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsekit.reference import spmm as ref
from sparsekit.checks import BFLOAT16
from spmm_close import assert_half_close, assert_spmm_close
from strategies import blocked_ell_matrices, coo_matrices, csr_matrices, dense_arrays, ell_matrices

U32 = 2.0 ** -24   # unit roundoff of float32, the accumulation dtype of every GPU kernel here


def assert_fp32_accumulated(got, want: np.ndarray, a_dense: np.ndarray, b: np.ndarray, reduction: int) -> None:
    """``got`` (products and sums in float32, any order, rounded once to its dtype) vs
    ``want`` (float64 sums rounded once to the same dtype).

    A float32 sum of ``reduction`` products errs by at most ``reduction * U32 *
    (|A| @ |B|)`` (Higham, eq. 3.5; float16 x float16 products are exact in
    float32). Both results are then rounded once to the output dtype, each off
    by at most half an ulp there (``u_out * |C|`` each), and by the smallest
    subnormal where the sum underflows. ``reduction`` is the number of stored
    entries per row (K' for ELL, the longest row for CSR/COO).
    """
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    info = ml_dtypes.finfo(want.dtype)                     # (NumPy's finfo has no bfloat16)
    u_out = float(info.eps) / 2
    scale = np.abs(a_dense.astype(np.float64)) @ np.abs(b.astype(np.float64))
    exact = a_dense.astype(np.float64) @ b.astype(np.float64)
    bound = (reduction * U32 * scale + 2 * u_out * np.abs(exact)
             + float(info.smallest_subnormal))
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert (err <= bound).all(), f"max excess error {np.max(err - bound):.3g} (max error {err.max():.3g})"


@st.composite
def rhs_for(draw, a, *, max_n: int = 7):
    """A dense ``b`` (``a.shape[1] x N``) of ``a``'s dtype, N from 1 to ``max_n``."""
    n = draw(st.integers(1, max_n))
    return draw(dense_arrays((a.shape[1], n), dtype=a.dtype))


FORMATS = {
    "csr": (csr_matrices, ref.spmm_csr),
    "coo": (coo_matrices, ref.spmm_coo),
    "blocked_ell": (blocked_ell_matrices, ref.spmm_blocked_ell),
}


@pytest.mark.parametrize("fmt", FORMATS)
@given(data=st.data())
def test_references_equal_dense_product(fmt, data):
    build, spmm = FORMATS[fmt]
    a = data.draw(build())
    b = data.draw(rhs_for(a))
    dense = a.to_dense()
    got = spmm(a, b)
    assert got.dtype == b.dtype and got.flags.c_contiguous
    assert_spmm_close(got, ref.spmm_dense(dense, b), dense, b)


@given(data=st.data())
def test_reference_takes_any_memory_order(data):
    a = data.draw(csr_matrices(dtype=np.float32))
    b = data.draw(rhs_for(a))
    np.testing.assert_array_equal(ref.spmm_csr(a, np.asfortranarray(b)), ref.spmm_csr(a, b))


@given(data=st.data())
def test_uniform_reference_is_a_csr_product(data):
    from sparsekit.reference.uspmm import uspmm
    a = data.draw(ell_matrices())
    b = data.draw(rhs_for(a))
    dense = a.to_dense()
    assert_spmm_close(uspmm(a, b), ref.spmm_csr(a.to_csr(), b), dense, b)


def test_reference_bad_rhs():
    from sparsekit.formats import CSR
    a = CSR.from_dense(np.eye(3, dtype=np.float32))
    with pytest.raises(ValueError, match=r"b: expected shape \(3, \*\)"):
        ref.spmm_csr(a, np.ones((4, 2), np.float32))
    with pytest.raises(TypeError, match="b: dtype must equal"):
        ref.spmm_csr(a, np.ones((3, 2), np.float64))
    with pytest.raises(ValueError, match="b: expected a 2-D array"):
        ref.spmm_csr(a, np.ones(3, np.float32))
    with pytest.raises(TypeError, match="b: expected a numpy.ndarray"):
        ref.spmm_csr(a, [[1.0]] * 3)


# --- GPU kernels (sparsekit/gpu/spmm.py) against the references -------------------------------------------

KERNEL_DTYPES = (np.float32, np.float16)
#: The CSR kernels also take bfloat16 (the COO and BlockedELL kernels refuse it; their default runs it as CSR).
CSR_DTYPES = (*KERNEL_DTYPES, BFLOAT16)


def _longest_row(a) -> int:
    dense_mask = a.mask()
    return int(dense_mask.sum(axis=1).max()) if dense_mask.size else 0


@pytest.mark.parametrize("fmt,tunables", [
    ("csr", {}), ("csr", {"swizzle": True}), ("csr", {"swizzle": True, "cols_per_lane": 2, "warps_per_block": 3}),
    ("coo", {}), ("coo", {"config": None}), ("blocked_ell", {}), ("blocked_ell", {"config": None}),
])
@given(data=st.data())
def test_gpu_kernels_match_reference(fmt, tunables, data):
    """Every format's default (the CSR kernels) in float32, float16 and bfloat16; the COO and BlockedELL kernels
    of ``config=None`` in float32 and float16."""
    from sparsekit.gpu import spmm as gs
    build, spmm_ref = FORMATS[fmt]
    dtype = data.draw(st.sampled_from(CSR_DTYPES if fmt == "csr" or tunables != {"config": None} else KERNEL_DTYPES))
    a = data.draw(build(dtype=dtype, max_size=20))
    b = data.draw(rhs_for(a, max_n=40))
    got = getattr(gs, spmm_ref.__name__)(a, b, **tunables)
    assert got.flags.c_contiguous
    assert_fp32_accumulated(got, spmm_ref(a, b), a.to_dense(), b, reduction=_longest_row(a))


# The staged CSR kernel: split rows (2 warps), several rows per block with vector loads of 4 and
# two column slices per lane, vector loads of 2 with an unroll that does not divide the 32 entries.
STAGED = [
    dict(warps_per_row=2),
    dict(warps_per_row=1, warps_per_block=2, vector=4, cols_per_lane=2, swizzle=True),
    dict(warps_per_row=2, warps_per_block=4, vector=2, unroll=3, swizzle=True),
]


@pytest.mark.parametrize("tunables", STAGED)
@given(data=st.data(), dtype=st.sampled_from(CSR_DTYPES))
def test_gpu_csr_staged_matches_reference(tunables, data, dtype):
    """Few rows (the simulator runs 64-128 threads per row group) but up to 80 columns, so a row
    can be longer than one staged chunk of 32 or 64 entries; N a multiple of the vector width."""
    from sparsekit.gpu import spmm as gs
    from sparsekit.formats import CSR
    from strategies import sparse_dense
    m, k = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 80))
    dense = data.draw(sparse_dense((m, k), dtype=dtype))
    a = CSR.from_dense(dense)
    n = tunables.get("vector", 1) * data.draw(st.integers(1, 9))
    b = data.draw(dense_arrays((k, n), dtype=dtype))
    got = gs.spmm_csr(a, b, **tunables)
    assert got.flags.c_contiguous and got.dtype == b.dtype
    assert_fp32_accumulated(got, ref.spmm_csr(a, b), dense, b, reduction=_longest_row(a))


@given(data=st.data())
def test_gpu_csr_bfloat16_past_64_columns_runs_the_staged_choice(data):
    """bfloat16 with N > 64 (past the tile-local rows' kernel) on the staged kernel with the automatic tunables
    (what ``config="auto"`` runs where padded ELL would pad too much): its bits widened exactly and each sum
    rounded once to nearest even."""
    from sparsekit.gpu import spmm as gs
    from sparsekit.formats import CSR
    from strategies import sparse_dense
    m, k = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 40))
    dense = data.draw(sparse_dense((m, k), dtype=BFLOAT16))
    a = CSR.from_dense(dense)
    b = data.draw(dense_arrays((k, 68), dtype=BFLOAT16))
    got = gs.spmm_csr(a, b, **gs.staged_tunables(a, 68))
    assert got.dtype == BFLOAT16
    assert_fp32_accumulated(got, ref.spmm_csr(a, b), dense, b, reduction=_longest_row(a))


def test_staged_tunables_follow_the_rule():
    """One warp per row while the launch is large or rows are short; split long rows of small
    launches (2048 x 512 at 90%: 51 per row; 2048 warps at N = 256 with vector loads: not split; at
    N = 49 without: 2 warps per row)."""
    from sparsekit.bench.spmm import suite_matrix
    from sparsekit.gpu import spmm as gs
    csr, _, _ = suite_matrix(2048, 512, 8, 0.9)
    assert gs.staged_tunables(csr, 256) == dict(swizzle=True, warps_per_row=1, warps_per_block=4, vector=4,
                                                cols_per_lane=2)
    assert gs.staged_tunables(csr, 49)["warps_per_row"] == 2
    csr, _, _ = suite_matrix(512, 2048, 8, 0.9)         # 205 per row, 512 warps: 4 a row with vector loads
    assert gs.staged_tunables(csr, 256)["warps_per_row"] == 4
    csr, _, _ = suite_matrix(512, 2048, 8, 0.9)         # 205 per row, 512 warps at N = 49
    assert gs.staged_tunables(csr, 49)["warps_per_row"] == 8 and gs.staged_tunables(csr, 49)["vector"] == 1
    assert gs.staged_tunables(csr, 49)["warps_per_block"] == 8
    csr, _, _ = suite_matrix(64, 32, 8, 0.9)            # 3 per row: never split
    assert gs.staged_tunables(csr, 12544)["warps_per_row"] == 1
    with pytest.raises(TypeError, match="csr: expected a sparsekit.formats.CSR"):
        gs.staged_tunables(np.eye(3), 4)


def test_gpu_csr_swizzle_order():
    """Swizzle launches rows longest first; rows of equal length keep their order."""
    from sparsekit.gpu import spmm as gs
    from sparsekit.formats import CSR
    mask = np.zeros((4, 5), bool)
    mask[0, :1] = mask[1, :4] = mask[2, :1] = mask[3, :3] = True
    dev = gs.prepare(CSR.from_dense(np.ones((4, 5), np.float32), mask), CSR)
    np.testing.assert_array_equal(dev.swizzle().copy_to_host(), [1, 3, 0, 2])


def test_gpu_bad_input():
    from sparsekit.gpu import spmm as gs
    from sparsekit.formats import COO, CSR
    a = CSR.from_dense(np.eye(3, dtype=np.float32))
    with pytest.raises(ValueError, match=r"b: expected shape \(3, \*\)"):
        gs.spmm_csr(a, np.ones((2, 2), np.float32))
    with pytest.raises(TypeError, match=r"b: dtype must be one of \(float32\)"):
        gs.spmm_csr(a, np.ones((3, 2), np.float16))
    with pytest.raises(ValueError, match="b: expected a C-contiguous array"):
        gs.spmm_csr(a, np.asfortranarray(np.ones((3, 2), np.float32)))
    with pytest.raises(TypeError, match="a: expected a sparsekit.formats.COO"):
        gs.spmm_coo(a, np.ones((3, 2), np.float32))
    bad = CSR(a.indptr, np.array([0, 1, 3], a.indices.dtype), a.data, a.shape)
    with pytest.raises(ValueError, match=r"indices"):
        gs.spmm_csr(bad, np.ones((3, 2), np.float32))
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        gs.spmm_coo(COO.from_dense(np.eye(3)), np.ones((3, 2)))
    with pytest.raises(ValueError, match=r"vector: the columns of b \(2\) must be divisible by vector \(4\)"):
        gs.spmm_csr(a, np.ones((3, 2), np.float32), vector=4)
    with pytest.raises(ValueError, match="vector: must be one of"):
        gs.spmm_csr(a, np.ones((3, 4), np.float32), vector=3)
    with pytest.raises(ValueError, match=r"warps_per_block: must be a multiple of warps_per_row \(8\), got 4"):
        gs.spmm_csr(a, np.ones((3, 4), np.float32), warps_per_row=8)


def test_spmm_csr_default_is_the_staged_choice(monkeypatch):
    """``spmm_csr(a, b)`` runs :func:`sparsekit.gpu.spmm.staged_tunables`' choice; any explicit tunable or
    ``config=None`` the plain kernel with what was given."""
    from sparsekit.gpu import spmm as gs
    from sparsekit.formats import CSR
    seen = []
    real = gs._spmm_csr
    monkeypatch.setattr(gs, "_spmm_csr", lambda dev, bop, **kw: seen.append(kw) or real(dev, bop, **kw))
    a = CSR.from_dense(np.arange(1, 13, dtype=np.float32).reshape(3, 4))
    b = np.ones((4, 8), np.float32)
    want = a.to_dense() @ b
    for call in (dict(), dict(config=None), dict(swizzle=True)):
        np.testing.assert_allclose(gs.spmm_csr(a, b, **call), want)
    staged = dict(gs.PLAIN, **gs.staged_tunables(a, 8))
    assert seen == [staged, gs.PLAIN, dict(gs.PLAIN, swizzle=True)]
    with pytest.raises(TypeError, match="unknown tunable"):
        gs.spmm_csr(a, b, warps=2)


def test_auto_route_follows_the_rule():
    """``spmm_csr(config="auto")``: half precision up to N = 64 on tensor cores (TiledBitmap), the TiledCSL row
    kernel at N <= 8 under a quarter of the entries kept; wider, the rows padded to ELL where the padding is at
    most ELL_MAX_PADDING of the entries; float32 and the rest on the staged CSR kernel."""
    from sparsekit.formats import CSR
    from sparsekit.gpu import spmm as gs
    rng = np.random.default_rng(0)
    w = rng.standard_normal((32, 64)).astype(np.float16)
    sparse = gs.prepare(CSR.from_dense(np.where(rng.random(w.shape) < 0.1, w, 0)), CSR)
    half = gs.prepare(CSR.from_dense(np.where(rng.random(w.shape) < 0.5, w, 0)), CSR)
    wide = gs.prepare(CSR.from_dense(np.where(rng.random(w.shape) < 0.1, w, 0).astype(BFLOAT16)), CSR)
    single = gs.prepare(CSR.from_dense(np.where(rng.random(w.shape) < 0.1, w, 0).astype(np.float32)), CSR)
    assert [gs.auto_route(sparse, n) for n in (1, 8, 9, 64, 65)] == ["rows", "rows", "bitmap", "bitmap", "staged"]
    assert [gs.auto_route(half, n) for n in (1, 8, 64)] == ["bitmap"] * 3
    assert gs.auto_route(wide, 8) == "rows" and gs.auto_route(single, 8) == "staged"
    even = np.zeros(w.shape, bool)
    even[:, ::4] = True                                   # 16 a row
    even[:4, 1] = True                                    # 17 in four rows: 1 - 16.125 / 17 of padding
    assert sparse.padding() > gs.ELL_MAX_PADDING and gs.auto_route(sparse, 65) == "staged"
    for dtype, route in ((np.float16, "ell"), (BFLOAT16, "ell"), (np.float32, "staged")):
        dev = gs.prepare(CSR.from_dense(w.astype(dtype), even), CSR)
        assert dev.padding() == pytest.approx(1 - 16.125 / 17) and gs.auto_route(dev, 65) == route


@settings(max_examples=6, deadline=None)
@given(data=st.data(), dtype=st.sampled_from([np.float16, BFLOAT16]))
def test_the_padded_ell_route_equals_the_reference(data, dtype):
    """Past N = 64 in half precision, rows of nearly equal length run as padded ELL through ``uspmm`` and equal the
    CSR reference within float32 sums and one rounding."""
    from sparsekit.formats import CSR
    from sparsekit.gpu import spmm as gs
    reference = ref.spmm_csr
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    m, k, n = data.draw(st.integers(1, 40)), data.draw(st.integers(16, 96)), data.draw(st.integers(65, 80))
    keep = data.draw(st.integers(4, 12))                 # one entry more pads at most 1 / 5
    mask = np.zeros((m, k), bool)
    for r in range(m):                                    # keep or keep + 1 entries a row: little padding
        mask[r, rng.choice(k, keep + int(rng.random() < 0.2), replace=False)] = True
    a = CSR.from_dense(np.where(mask, rng.standard_normal((m, k)), 0).astype(dtype), mask)
    b = rng.standard_normal((k, n)).astype(dtype)
    dev = gs.prepare(a, CSR)
    assert gs.auto_route(dev, n) == "ell"
    assert_half_close(gs.spmm_csr(dev, b), reference(a, b), a.to_dense(), b)
    with pytest.raises(ValueError, match="b: expected a C-contiguous array"):
        gs.spmm_csr(dev, np.asfortranarray(b))            # refused as the staged kernel refuses it


# --- spmm_coo and spmm_blocked_ell: config="auto" runs the CSR kernels on the same stored entries -----------

@given(a=st.one_of(coo_matrices(dtype=np.float32), coo_matrices(dtype=np.float16, index_dtype=np.int16),
                   blocked_ell_matrices(dtype=np.float32), blocked_ell_matrices(dtype=BFLOAT16)))
def test_as_csr_keeps_every_stored_entry(a):
    """:func:`sparsekit.gpu.spmm.as_csr` (built without a dense copy) stores what ``to_csr`` does, explicit zeros
    and their signs included."""
    from sparsekit.gpu import spmm as gs
    got, want = gs.as_csr(a).host, a.to_csr()
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.data.view(np.uint8), want.data.view(np.uint8))


@pytest.mark.parametrize("fmt", ["coo", "blocked_ell"])
def test_auto_runs_spmm_csr_on_the_csr_built_once(fmt, monkeypatch):
    """The default call hands :func:`spmm_csr` (with its own ``config="auto"``) the CSR kept on the prepared
    matrix, built on the first call only, and gives bit-identical results call after call; ``config=None``
    runs the format's own kernel."""
    from sparsekit.formats import COO, BlockedELL
    from sparsekit.gpu import spmm as gs
    rng = np.random.default_rng(1)
    w = rng.standard_normal((8, 12)).astype(np.float32)
    mask = np.kron(np.array([[1, 0, 1], [0, 1, 1]], bool), np.ones((4, 4), bool)) & (rng.random(w.shape) < 0.7)
    a = COO.from_dense(w, mask) if fmt == "coo" else BlockedELL.from_dense(w, mask, block=4)
    b = rng.standard_normal((12, 5)).astype(np.float32)
    prepared = gs.prepare(a, type(a))
    built, seen = [], []
    real_build, real_csr = gs._csr_of, gs.spmm_csr
    monkeypatch.setattr(gs, "_csr_of", lambda host: built.append(host) or real_build(host))
    monkeypatch.setattr(gs, "spmm_csr", lambda csr, rhs, **kw: seen.append((csr, kw)) or real_csr(csr, rhs, **kw))
    spmm = getattr(gs, "spmm_" + fmt)
    first, second = spmm(prepared, b), spmm(prepared, b, config="auto")
    assert built == [a] and len(seen) == 2
    assert seen[0][0] is seen[1][0] is gs.as_csr(prepared) and seen[0][1] == seen[1][1] == {}
    np.testing.assert_array_equal(first.view(np.uint32), second.view(np.uint32))
    own = spmm(prepared, b, config=None)
    assert len(seen) == 2
    assert_fp32_accumulated(first, getattr(ref, "spmm_" + fmt)(a, b), w * mask, b, reduction=int(mask.sum(1).max()))
    assert_fp32_accumulated(own, getattr(ref, "spmm_" + fmt)(a, b), w * mask, b, reduction=int(mask.sum(1).max()))


@pytest.mark.parametrize("fmt", ["coo", "blocked_ell"])
def test_config_refused_unless_auto_or_none(fmt):
    """A ``config`` other than ``"auto"``/None is a ``ValueError`` naming it; the format's own kernel
    (``config=None``) refuses bfloat16, which the default takes; ``as_csr`` takes COO and BlockedELL only."""
    from sparsekit.formats import COO, CSR, BlockedELL
    from sparsekit.gpu import spmm as gs
    w = np.ones((4, 4), np.float32)
    build = (lambda x: COO.from_dense(x)) if fmt == "coo" else (lambda x: BlockedELL.from_dense(x, block=2))
    spmm = getattr(gs, "spmm_" + fmt)
    b = np.ones((4, 3), np.float32)
    for bad in ("Auto", "fast", 1, True, np.array(["auto"])):
        with pytest.raises(ValueError, match=r"config: must be 'auto' or None, got"):
            spmm(build(w), b, config=bad)
    name = "COO" if fmt == "coo" else "BlockedELL"
    with pytest.raises(TypeError, match=f"a: {name} kernels take float32 or float16 \\(config=None\\), got bfloat16"):
        spmm(build(w.astype(BFLOAT16)), b.astype(BFLOAT16), config=None)
    assert spmm(build(w.astype(BFLOAT16)), b.astype(BFLOAT16)).dtype == BFLOAT16
    with pytest.raises(TypeError, match="a: expected a sparsekit.formats.COO or BlockedELL"):
        gs.as_csr(CSR.from_dense(w))


def test_single_entry_point_passes_config_through():
    """``sparsekit.spmm`` runs each format's default, and ``config=None`` reaches the format's own kernel."""
    from sparsekit.api import spmm
    from sparsekit.formats import COO, BlockedELL
    w = np.arange(16, dtype=np.float32).reshape(4, 4)
    b = np.ones((4, 2), np.float32)
    for a in (COO.from_dense(w), BlockedELL.from_dense(w, block=2)):
        for config in ("auto", None):
            np.testing.assert_array_equal(spmm(a, b, config=config), w @ b)
        np.testing.assert_array_equal(spmm(a, b), w @ b)
        with pytest.raises(ValueError, match="config: must be"):
            spmm(a, b, config="best")
