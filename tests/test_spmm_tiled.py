"""TiledCSL keeps its invariants, and sparsekit/gpu/spmm_tiled.py equals sparsekit/reference/spmm_tiled.py under the simulator.

Both kernels: rows (``tile = (1, TK)``, CUDA cores) and tiles (``TM >= 16``, tensor cores, the MMA
fallbacks of sparsekit/gpu/mma.py standing in), float16 and bfloat16, ``B`` row-major and the linear-layer form,
``N`` from 1 to 17 (the B copy by 16-byte chunks and element by element; one ``ldmatrix`` of B for two
k-steps at ``N <= 8``), warps of 16 and 32 rows, split K over 1 to 3 blocks, with empty tiles, padding
words and edges that cut tiles.

Tolerance: products of two 16-bit floats are exact in float32; the kernel and the reference add them in
float32 in different orders (each within ``K * u32 * (|A| @ |B|)`` of the exact sum, Higham eq. 3.5), then
each rounds once to the 16-bit dtype (half an ulp of ``|C|`` each) or underflows (the smallest subnormal).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsekit.gpu import spmm_tiled as gt
from sparsekit.reference import spmm_tiled as rt
from sparsekit.formats import CSR, TiledCSL
from spmm_close import assert_half_close as assert_close
from strategies import HALVES, dense_arrays, sparse_halves

BF16 = np.dtype(ml_dtypes.bfloat16)


TILES = [(16, 16), (16, 32), (32, 16), (2, 8), (1, 128)]


@given(w=sparse_halves(), tile=st.sampled_from(TILES))
def test_round_trip(w, tile):
    a = TiledCSL.from_dense(w, tile=tile)
    a.validate(full=True)
    assert a.dtype == w.dtype and a.nnz == np.count_nonzero(w != 0)
    assert (a.to_dense().view(np.uint16) == w.view(np.uint16)).all()
    assert (a.mask() == (w != 0)).all()
    assert (np.diff(a.offsets) % 4 == 0).all()
    assert a.nbytes().total == 4 * a.words.size + a.offsets.nbytes
    csr = CSR.from_dense(w.astype(np.float32)) if w.dtype == BF16 else CSR.from_dense(w)
    if w.dtype == np.float16:
        same = TiledCSL.from_csr(csr, tile=tile)
        assert (same.words == a.words).all() and (same.offsets == a.offsets).all()


def test_from_ell_is_the_row_layout():
    from sparsekit.formats import ELL
    w = np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 4.0]], dtype=np.float16)
    a = TiledCSL.from_ell(ELL.from_dense(w, index_dtype=np.int16))
    assert a.tile == (1, 4) and (a.to_dense() == w).all()
    assert [hex(int(x)) for x in a.words[:2]] == ["0x3c00", "0x24000"]     # 1.0 at column 0, 2.0 at column 2


def test_mask_keeps_explicit_zeros():
    w = np.array([[0.0, 1.0], [2.0, 0.0]], dtype=np.float16)
    mask = np.array([[True, True], [False, False]])
    a = TiledCSL.from_dense(w, mask, tile=(16, 16))
    assert a.nnz == 2 and (a.mask() == mask).all() and (a.to_dense() == np.where(mask, w, 0)).all()


@pytest.mark.parametrize("change, message", [
    (lambda a: (a.words.copy(), a.offsets[:-1].copy()), "offsets: expected shape"),
    (lambda a: (a.words[:-1].copy(), a.offsets.copy()), "offsets: should start at 0 and end"),
    (lambda a: (a.words.astype(np.int64), a.offsets.copy()), "words: dtype"),
])
def test_bad_structure_refused(change, message):
    a = TiledCSL.from_dense(np.eye(20, dtype=np.float16), tile=(16, 16))
    words, offsets = change(a)
    with pytest.raises((ValueError, TypeError), match=message):
        TiledCSL(words, offsets, a.shape, a.tile, a.value_dtype)


def test_full_validation_finds_bad_entries():
    a = TiledCSL.from_dense(np.eye(20, dtype=np.float16), tile=(16, 16))
    outside = a.words.copy()
    outside[a.offsets[3]] = np.uint32((15 * 16 + 15) << 16) | np.uint32(0x3C00)   # row 31 of a 20-row matrix
    with pytest.raises(ValueError, match="outside"):
        TiledCSL(outside, a.offsets, a.shape, a.tile, a.value_dtype).validate(full=True)
    unsorted = a.words.copy()
    unsorted[[0, 1]] = unsorted[[1, 0]]
    with pytest.raises(ValueError, match="ascend"):
        TiledCSL(unsorted, a.offsets, a.shape, a.tile, a.value_dtype).validate(full=True)
    nan = a.words.copy()
    nan[0] = (nan[0] & np.uint32(0xFFFF0000)) | np.uint32(0x7E00)
    with pytest.raises(ValueError, match="finite"):
        TiledCSL(nan, a.offsets, a.shape, a.tile, a.value_dtype).validate(full=True)
    with pytest.raises(ValueError, match="65536"):
        TiledCSL.from_dense(np.eye(4, dtype=np.float16), tile=(256, 256))
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        TiledCSL.from_dense(np.eye(4, dtype=np.float32))
    with pytest.raises(ValueError, match="twice"):
        TiledCSL.from_coords([0, 0], [1, 1], np.ones(2, np.float16), (2, 2))


def run(a, b, linear, **tunables):
    if linear:
        return gt.spmm_tiled_linear(a, np.ascontiguousarray(b.T), **tunables), rt.spmm_tiled_linear(a, b.T)
    return gt.spmm_tiled(a, b, **tunables), rt.spmm_tiled(a, b)


@settings(max_examples=25, deadline=None)
@given(data=st.data(), w=sparse_halves(max_rows=24, max_cols=72), linear=st.booleans(),
       tile=st.sampled_from([(16, 16), (16, 32), (32, 16), None]))
def test_matches_reference(data, w, linear, tile):
    n = data.draw(st.sampled_from([1, 3, 8, 16, 17]) if tile is None else st.sampled_from([1, 5, 8, 16]))
    b = data.draw(dense_arrays((w.shape[1], n), dtype=np.float32)).astype(w.dtype)
    a = TiledCSL.from_dense(w, tile=TiledCSL.row_tile(w.shape[1]) if tile is None else tile)
    tunables = dict(splits=data.draw(st.integers(1, 3)))
    if tile is not None and tile[0] % 32 == 0:
        tunables["rows_per_warp"] = data.draw(st.sampled_from([16, 32]))
    got, want = run(a, b, linear, **tunables)
    if linear:
        got, want = got.T, want.T
    assert_close(got, want, w, b)


@pytest.mark.parametrize("stages, k", [(3, 170), (5, 168)])
def test_pipeline_over_many_tiles(stages, k):
    """Eleven tiles a row of tiles: the copy ring wraps several times; the last tile is cut at K (``K = 168``:
    the linear form's copy by 16-byte chunks zero-fills past ``K``)."""
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((20, k)) * (rng.random((20, k)) < 0.3)).astype(np.float16)
    b = rng.standard_normal((k, 8)).astype(np.float16)
    a = TiledCSL.from_dense(w, tile=(16, 16))
    for linear in (False, True):
        got, want = run(a, b, linear, stages=stages, splits=1)
        assert_close(got.T if linear else got, want.T if linear else want, w, b)


@pytest.mark.parametrize("rows_per_warp, n, linear", [(32, 8, True), (16, 24, False), (32, 40, True)])
def test_tiles_of_64(rows_per_warp, n, linear):
    """A 64 x 64 tile (the decode-shape default): two warps of 32 rows or four of 16, one ldmatrix of B for two
    k-steps (N = 8) or for two n-blocks; split K over two blocks; the sink row past the tile takes the padding."""
    rng = np.random.default_rng(rows_per_warp + n)
    w = (rng.standard_normal((70, 136)) * (rng.random((70, 136)) < 0.2)).astype(BF16)
    b = rng.standard_normal((136, n)).astype(BF16)
    a = TiledCSL.from_dense(w, tile=(64, 64))
    assert ((a.words >> np.uint32(16)) == a.sink).any()              # some tiles end in padding words
    got, want = run(a, b, linear, rows_per_warp=rows_per_warp, splits=2)
    assert_close(got.T if linear else got, want.T if linear else want, w, b)


def test_rows_wider_than_a_warp():
    """N = 40: the row kernel's lanes write columns j and j + 32 of C."""
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((5, 24)) * (rng.random((5, 24)) < 0.5)).astype(np.float16)
    b = rng.standard_normal((24, 40)).astype(np.float16)
    a = TiledCSL.from_dense(w, tile=TiledCSL.row_tile(24))
    for linear in (False, True):
        got, want = run(a, b, linear)
        assert_close(got.T if linear else got, want.T if linear else want, w, b)


def test_prepared_weight_is_reused():
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((18, 40)) * (rng.random((18, 40)) < 0.5)).astype(BF16)
    dev = gt.prepare(TiledCSL.from_dense(w, tile=TiledCSL.row_tile(40)))
    for n in (1, 4):
        b = rng.standard_normal((40, n)).astype(BF16)
        assert_close(gt.spmm_tiled(dev, b), rt.spmm_tiled(dev.host, b), w, b)


def test_bad_operands_refused():
    a = TiledCSL.from_dense(np.eye(16, dtype=np.float16), tile=(16, 16))
    with pytest.raises(ValueError, match=r"b: expected shape \(16, N\)"):
        gt.spmm_tiled(a, np.ones((15, 2), np.float16))
    with pytest.raises(TypeError, match="b: dtype"):
        gt.spmm_tiled(a, np.ones((16, 2), np.float32))
    with pytest.raises(ValueError, match="N = 65"):
        gt.spmm_tiled(a, np.ones((16, 65), np.float16))
    with pytest.raises(ValueError, match=r"x: expected shape \(N, 16\)"):
        gt.spmm_tiled_linear(a, np.ones((2, 15), np.float16))
    with pytest.raises(ValueError, match="splits"):
        gt.spmm_tiled(a, np.ones((16, 2), np.float16), splits=0)
    with pytest.raises(ValueError, match="rows_per_warp"):
        gt.spmm_tiled(a, np.ones((16, 2), np.float16), rows_per_warp=32)      # more than the tile's 16 rows
    with pytest.raises(ValueError, match="a.tile"):
        gt.prepare(TiledCSL.from_dense(np.eye(16, dtype=np.float16), tile=(24, 16)))
    with pytest.raises(ValueError, match="span the columns"):
        gt.prepare(TiledCSL.from_dense(np.eye(16, dtype=np.float16), tile=(1, 8)))
    with pytest.raises(TypeError, match="TiledCSL"):
        gt.prepare(np.eye(4))


@pytest.mark.parametrize("dtype, n, decode", [(np.float16, 1, True), (np.float16, 16, True), (np.float16, 17, False),
                                              (BF16, 1, True), (BF16, 48, True), (np.float32, 1, False)])
def test_uspmm_auto_routes_small_n_to_the_decode_path(dtype, n, decode):
    from sparsekit.tune import heuristic
    assert (heuristic(512, 1024, n, 205, np.dtype(dtype), "C").get("variant") == "decode") == decode


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_uspmm_decode_variant_equals_the_reference(dtype, monkeypatch):
    """``sparsekit.gpu.uspmm.uspmm`` on the decode path: a uniform ELL, its rows as TiledCSL and the row kernel; at N = 1
    its rows as compact ELL rows and sparsekit/gpu/spmm_ell_compact.py (75 %), or as padded ELL rows and
    sparsekit/gpu/spmm_ell_rows.py (90 %: at most an eighth of K a row, padded to 8)."""
    from sparsekit.gpu import uspmm as gpu_uspmm
    from sparsekit.gpu.uspmm import uspmm
    from sparsekit.reference.uspmm import uspmm as reference
    from sparsekit.formats import ELL
    from sparsekit.prune import uniform
    rng = np.random.default_rng(5)
    w = rng.standard_normal((20, 48)).astype(np.float32)
    mask = uniform(w, 0.75)
    ell = ELL.from_dense(np.where(mask, w, 0).astype(dtype), mask, index_dtype=np.int16)
    b = rng.standard_normal((48, 5)).astype(dtype)
    assert_close(uspmm(ell, b, variant="decode"), reference(ell, b), ell.to_dense(), b)
    bf = np.asfortranarray(b)                                       # column-major B: the linear form
    got = uspmm(ell, bf, variant="decode")
    assert got.flags.f_contiguous
    assert_close(np.ascontiguousarray(got), reference(ell, b), ell.to_dense(), b)
    assert_close(uspmm(ell, b, config="auto"), reference(ell, b), ell.to_dense(), b)
    w90 = rng.standard_normal((20, 128)).astype(np.float32)
    mask90 = uniform(w90, 0.9)                                      # 13 of 128 a row (16 padded): ELL rows at N = 1
    ell90 = ELL.from_dense(np.where(mask90, w90, 0).astype(dtype), mask90, index_dtype=np.int16)
    x90 = rng.standard_normal((128, 1)).astype(dtype)
    for weight, x, unused in ((ell, b[:, :1], "spmm_ell_rows_linear"), (ell90, x90, "spmm_ell_compact_linear")):
        with monkeypatch.context() as patch:
            patch.setattr(gpu_uspmm, unused, lambda *args, name=unused: pytest.fail(f"N = 1 took {name}"))
            for vector in (x.copy(), np.asfortranarray(x)):           # N = 1, either order
                got = uspmm(weight, vector, config="auto")
                assert got.shape == (20, 1)
                assert_close(got, reference(weight, np.ascontiguousarray(vector)), weight.to_dense(), vector)
    if dtype == BF16:
        with pytest.raises(ValueError, match="bfloat16 runs on the decode and bitmap kernels only"):
            uspmm(ell, b, variant="direct")


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_uspmm_bitmap_variant_equals_the_reference(dtype):
    """``sparsekit.gpu.uspmm.uspmm(variant="bitmap")``: the uniform weight's entries as a TiledBitmap on tensor cores,
    either order of B; past N = 64 refused by name."""
    from sparsekit.formats import ELL
    from sparsekit.gpu.uspmm import prepare, uspmm
    from sparsekit.prune import uniform
    from sparsekit.reference.uspmm import uspmm as reference
    rng = np.random.default_rng(6)
    w = rng.standard_normal((40, 96)).astype(np.float32)
    mask = uniform(w, 0.7)
    ell = ELL.from_dense(np.where(mask, w, 0).astype(dtype), mask, index_dtype=np.int16)
    dell = prepare(ell)
    b = rng.standard_normal((96, 12)).astype(dtype)
    assert_close(uspmm(dell, b, variant="bitmap"), reference(ell, b), ell.to_dense(), b)
    got = uspmm(dell, np.asfortranarray(b), variant="bitmap")
    assert got.flags.f_contiguous
    assert_close(np.ascontiguousarray(got), reference(ell, b), ell.to_dense(), b)
    with pytest.raises(ValueError, match="N = 65 with the bitmap kernel"):
        uspmm(dell, np.zeros((96, 65), dtype), variant="bitmap")
    assert_close(uspmm(dell, b, variant="bitmap", rows=2, slices=1, splits=3, stages=8), reference(ell, b),
                 ell.to_dense(), b)                       # the kernel's tunables pass through
    with pytest.raises(TypeError, match=r"variant='bitmap' takes only \['rows', 'slices', 'splits', 'stages'\], "
                                        r"got \['kc'\]"):
        uspmm(dell, b, variant="bitmap", kc=64)
    with pytest.raises(TypeError, match=r"variant='decode' takes no tunables, got \['splits'\]"):
        uspmm(dell, b, variant="decode", splits=2)


@pytest.mark.parametrize("dtype, n, sparsity, variant", [
    (np.float16, 8, 0.5, "bitmap"), (np.float16, 8, 0.8, "decode"), (np.float16, 1, 0.5, "decode"),
    (np.float16, 32, 0.7, "bitmap"), (np.float16, 32, 0.3, "tensor_core"), (BF16, 64, 0.3, "bitmap"),
    (BF16, 65, 0.7, "tensor_core"), (np.float32, 16, 0.7, None)])
def test_uspmm_auto_routes_llama_shapes_to_the_bitmap_kernel(dtype, n, sparsity, variant):
    """At 4096^2 (the measured shape): TiledBitmap from N = 8 to 64, the row kernel at N = 8 from 75 % and below
    N = 8, float16's tensor-core kernel above half density past N = 16; float32 never."""
    from sparsekit.tune import heuristic
    got = heuristic(4096, 4096, n, round((1 - sparsity) * 4096), np.dtype(dtype), "C").get("variant")
    assert got == variant if variant else got not in ("bitmap", "decode")


def test_one_entry_point_for_every_format():
    """``sparsekit.spmm`` sends each format to its kernel; the result is the product either way."""
    import sparsekit
    from sparsekit.formats import COO, ELL, BlockedELL, TiledBitmap
    rng = np.random.default_rng(2)
    blocks = np.array([[1, 1, 0, 0], [0, 1, 0, 1], [1, 0, 1, 0], [0, 0, 1, 1]])     # two 2x2 blocks a block row
    w = (np.kron(blocks, np.ones((2, 2))) * rng.standard_normal((8, 8))).astype(np.float16)
    b = rng.standard_normal((8, 3)).astype(np.float16)
    for a in (TiledCSL.from_dense(w, tile=(16, 16)), TiledBitmap.from_dense(w), CSR.from_dense(w), COO.from_dense(w),
              BlockedELL.from_dense(w, block=2), ELL.from_dense(w)):
        dense = a.to_dense().astype(np.float32)
        assert_close(sparsekit.spmm(a, b), (dense @ b.astype(np.float32)).astype(np.float16), dense, b)
    with pytest.raises(TypeError, match="expected a sparse matrix"):
        sparsekit.spmm(np.eye(3), b)


def test_bfloat16_csr_runs_on_the_row_kernel():
    from sparsekit.gpu import spmm as gs
    from sparsekit.formats import COO
    rng = np.random.default_rng(4)
    w = (rng.standard_normal((12, 30)) * (rng.random((12, 30)) < 0.3)).astype(BF16)
    b = rng.standard_normal((30, 3)).astype(BF16)
    got = gs.spmm_csr(CSR.from_dense(w), b)
    assert got.dtype == BF16
    assert_close(got, rt.spmm_tiled(TiledCSL.from_dense(w, tile=(16, 16)), b), w, b)
    with pytest.raises(TypeError, match="COO kernels take float32 or float16"):
        gs.spmm_coo(COO.from_dense(w), b, config=None)
