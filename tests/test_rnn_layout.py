"""sparsekit.rnn_layout: padding, split, Algorithm 1, 16-bit packing, the bank-conflict analyzer."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparsekit import prune
from sparsekit.rnn_layout import (ConflictReport, RNNLayout, balance, bank_aware, bank_conflicts, pack_indices16,
                                  split, thread_packed_indices, unpack_indices16, wavefronts)
from tests import strategies as sks

TPRS = st.sampled_from([1, 2, 4, 8, 16, 32])


# -- balance: <index, value> rows padded with <index, 0> ---------------------------

@given(data=st.data(), tpr=TPRS)
def test_balance_round_trips_and_pads(data, tpr):
    shape = data.draw(sks.shapes_2d(max_size=24))
    dense = data.draw(sks.sparse_dense(shape, dtype=np.float32))
    lay = balance(dense, tpr=tpr)
    mask = dense != 0
    assert np.array_equal(lay.to_dense(), dense)
    assert lay.nnz == int(mask.sum())
    assert lay.kpad % tpr == 0 and lay.kpad - tpr < max(int(mask.sum(axis=1).max()), 0) + 1
    counts = mask.sum(axis=1)
    for r in range(shape[0]):                       # pairs in ascending column order, then padding
        assert np.array_equal(lay.indices[r, :counts[r]], np.flatnonzero(mask[r]))
        assert not lay.values[r, counts[r]:].any()
    assert lay.waste == pytest.approx(1 - lay.nnz / lay.values.size if lay.values.size else 0.0)


def test_balance_row_balanced_mask_wastes_only_rounding():
    rng = np.random.default_rng(0)
    u = rng.standard_normal((64, 320)).astype(np.float32)
    lay = balance(u, prune.row_balanced(u, 0.9), tpr=32)
    assert lay.kpad == 32 and lay.waste == 0.0                   # 32 per row, a multiple of tpr
    unbalanced = balance(u, prune.magnitude(u, 0.9), tpr=32)    # the paper's "roughly 20%" case
    assert unbalanced.waste > 0.15


def test_balance_keeps_explicit_zero_and_empty_rows():
    u = np.array([[0.0, 0.0, 0.0], [0.0, 5.0, 0.0]], dtype=np.float32)
    mask = np.array([[False, False, False], [True, True, False]])
    lay = balance(u, mask, tpr=1)
    assert lay.nnz == 2 and lay.kpad == 2
    assert lay.indices[1].tolist() == [0, 1] and lay.values[1].tolist() == [0.0, 5.0]
    assert not lay.values[0].any()


def test_balance_errors():
    with pytest.raises(ValueError, match="tpr: must be a power of two"):
        balance(np.eye(4, dtype=np.float32), tpr=3)
    with pytest.raises(ValueError, match="index_dtype: int16 cannot hold column 40000"):
        balance(np.zeros((1, 40001), dtype=np.float32), index_dtype=np.int16)
    with pytest.raises(TypeError, match="mask: dtype"):
        balance(np.eye(4, dtype=np.float32), np.eye(4))
    with pytest.raises(ValueError, match="u: must be finite"):
        balance(np.full((2, 2), np.nan, dtype=np.float32))


@pytest.mark.parametrize("field, bad, exc, match", [
    ("indices", -1, ValueError, r"indices: indices must lie in \[0, 4\), found -1"),
    ("indices", 4, ValueError, r"indices: indices must lie in \[0, 4\), found 4"),
    ("indices", 99, ValueError, r"indices: indices must lie in \[0, 4\), found 99"),
    ("values", np.nan, ValueError, "values: must be finite"),
    ("values", -np.inf, ValueError, "values: must be finite"),
    ("nnz", -1, ValueError, "nnz: must be >= 0"),
    ("nnz", 9, ValueError, "nnz: must be <= 8"),
    ("nnz", 1.5, TypeError, "nnz: expected an integer"),
    ("tpr", 3, ValueError, "tpr: must be a power of two"),
    ("shape", (4,), ValueError, "shape: expected a"),
    ("shape", (4, -1), ValueError, r"shape\[1\]: must be >= 0"),
    ("indices_dtype", np.int64, TypeError, "indices: dtype"),
])
def test_layout_refuses_what_a_kernel_would_misread(field, bad, exc, match):
    """A hand-built or edited layout is checked in full: a bad index would read outside h (shared memory on a GPU),
    a NaN would spread through every state."""
    good = balance(2 * np.eye(4, dtype=np.float32), tpr=2)          # kpad 2: 8 slots, nnz 4
    values, indices, fields = good.values.copy(), good.indices.copy(), {}
    if field == "indices":
        indices[1, 1] = bad
    elif field == "values":
        values[2, 0] = bad
    elif field == "indices_dtype":
        indices = indices.astype(bad)
    else:
        fields[field] = bad
    with pytest.raises(exc, match=match):
        RNNLayout(values, indices, **{"shape": good.shape, "tpr": good.tpr, "nnz": good.nnz, **fields})


def test_layout_edited_after_construction_is_refused_before_launch():
    from sparsekit.gpu.persistent_rnn import PersistentRNN

    lay = balance((np.eye(8, dtype=np.float32) + 0.25) / 8, tpr=4)
    lay.indices[3, 0] = -1                         # the arrays stay writable; the launcher checks again
    with pytest.raises(ValueError, match=r"indices: indices must lie in \[0, 8\), found -1"):
        PersistentRNN(lay, 4, rows_per_block=8)


# -- split --------------------------------------------------------------------

def test_thread_slots_stride_by_tpr():
    lay = balance(np.ones((2, 12), dtype=np.float32), tpr=4)
    assert lay.npt == 3 and lay.thread_slots(1).tolist() == [1, 5, 9]


def test_split_counts():
    sp = split(1792, 16, 14)
    assert (sp.threads_per_block, sp.blocks, sp.warps_per_block) == (224, 128, 7)
    assert split(5, 1, 32).blocks == 1
    with pytest.raises(ValueError, match="multiple of 32"):
        split(100, 8, 3)


# -- bank-aware layout: Appendix A, Algorithm 1 ------------------------------------

@given(data=st.data(), tpr=TPRS, width=st.sampled_from([4, 8, 16]))
def test_bank_aware_is_a_per_row_permutation(data, tpr, width):
    shape = data.draw(sks.shapes_2d(max_size=40))
    dense = data.draw(sks.sparse_dense(shape, dtype=np.float32))
    lay = balance(dense, tpr=tpr)
    ba = bank_aware(lay, width=width)
    assert ba.bank_aware and ba.kpad == lay.kpad and ba.nnz == lay.nnz
    assert np.array_equal(ba.to_dense(), dense)
    for r in range(shape[0]):
        real = lay.values[r] != 0
        got = sorted(zip(ba.indices[r][ba.values[r] != 0].tolist(), ba.values[r][ba.values[r] != 0].tolist()))
        assert got == sorted(zip(lay.indices[r][real].tolist(), lay.values[r][real].tolist()))
    assert ba.indices.size == 0 or (ba.indices.min() >= 0 and ba.indices.max() < shape[1])


def test_bank_aware_places_one_pair_per_bank_when_it_can():
    """A row holding one index of every bank: slot p gets the index in bank p (tpr = 32, rot = 0)."""
    cols = np.random.default_rng(1).permutation(32) + 32 * np.arange(32) % 64   # banks 0..31, shuffled
    u = np.zeros((1, 128), dtype=np.float32)
    u[0, cols] = np.arange(1, 33)
    ba = bank_aware(balance(u, tpr=32))
    assert (ba.indices[0] % 32).tolist() == list(range(32))


def test_bank_aware_overflow_goes_to_next_bank():
    """Listing line `index_t++`: a second index in bank 0 takes bank 1's slot when bank 0 is full."""
    u = np.zeros((1, 64), dtype=np.float32)
    u[0, [0, 32]] = [1.0, 2.0]                      # both in bank 0, a row of 2 slots (tpr = 2)
    ba = bank_aware(balance(u, tpr=2))
    assert ba.indices[0].tolist() == [0, 32] and ba.values[0].tolist() == [1.0, 2.0]


def test_bank_aware_rotation_by_row():
    """tpr = 8: row r's slot p is read by lane (8 r + p) % 32, so it wants bank (8 r + p) % 32."""
    u = np.zeros((4, 64), dtype=np.float32)
    for r in range(4):
        u[r, [(8 * r + p) % 32 for p in range(8)]] = 1.0
    ba = bank_aware(balance(u, tpr=8))
    for r in range(4):
        assert (ba.indices[r] % 32).tolist() == [(8 * r + p) % 32 for p in range(8)]
    rep = bank_conflicts(ba, batch=1, scheme="naive", rows_per_block=4)
    assert rep.penalty == 0.0


def test_table1_penalty_ordering_at_layer_1152():
    """Table 1 (layer 1152, batch 4, density 10%): naive > wide loads > bank-aware (paper: 1.3, 1.0, 0.3).

    float32 activations, one warp per row (tpr = 32) as in the paper's Figure 1.
    """
    rng = np.random.default_rng(0)
    u = rng.standard_normal((1152, 1152)).astype(np.float32)
    lay = balance(u, prune.row_balanced(u, 0.9), tpr=32)
    naive = bank_conflicts(lay, batch=4, scheme="naive", rows_per_block=8)
    wide = bank_conflicts(lay, batch=4, scheme="wide", rows_per_block=8)
    aware = bank_conflicts(bank_aware(lay, width=16), batch=4, scheme="wide", rows_per_block=8)
    assert naive.penalty > wide.penalty > aware.penalty
    assert aware.penalty < 0.5 and naive.penalty > 1.5
    assert wide.requests * 4 == naive.requests          # one v4 load replaces four scalar loads


# -- 16-bit index packing -------------------------------------------------------

@given(idx=st.lists(st.integers(0, 65535), min_size=0, max_size=20).map(lambda v: v[:len(v) // 2 * 2]))
def test_pack_indices16_round_trip(idx):
    a = np.array(idx, dtype=np.int32).reshape(1, -1)
    packed = pack_indices16(a)
    assert packed.dtype == np.uint32 and packed.shape == (1, a.shape[1] // 2)
    assert np.array_equal(unpack_indices16(packed), a)


def test_pack_indices16_layout_and_errors():
    assert pack_indices16(np.array([1, 2], dtype=np.int16)).tolist() == [1 | (2 << 16)]
    with pytest.raises(ValueError, match="even length"):
        pack_indices16(np.array([1, 2, 3], dtype=np.int32))
    with pytest.raises(ValueError, match="found 70000"):
        pack_indices16(np.array([1, 70000], dtype=np.int32))


@given(rows=st.integers(1, 6), npt=st.integers(1, 5), tpr=st.sampled_from([1, 2, 4]), seed=st.integers(0, 99))
def test_thread_packed_indices_hold_each_threads_pairs_in_order(rows, npt, tpr, seed):
    """Word lane + m * tpr of a row packs that thread's pairs 2m (low half) and 2m + 1 (high half)."""
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((rows, 300)).astype(np.float32)
    u[:, rng.permutation(300)[npt * tpr:]] = 0
    lay = balance(u, tpr=tpr)
    assert lay.npt == npt
    packed = thread_packed_indices(lay)
    assert packed.dtype == np.uint32 and packed.shape == (rows, -(-npt // 2) * tpr)
    halves = unpack_indices16(packed)                      # [row, 2 * (lane + m * tpr) + half]
    for lane in range(tpr):
        for i in range(npt):
            m, half = divmod(i, 2)
            assert np.array_equal(halves[:, 2 * (lane + m * tpr) + half], lay.indices[:, lane + i * tpr])
    if npt % 2:                                            # the unused high half of the last word is 0
        assert (halves[:, 2 * (np.arange(tpr) + (npt // 2) * tpr) + 1] == 0).all()


# -- the analyzer on hand-made access patterns ------------------------------------

def test_wavefronts_hand_made_patterns():
    lanes = np.arange(32)
    assert wavefronts(lanes * 4, 4) == (1, 1)                       # 32 consecutive words
    assert wavefronts(np.zeros(32, dtype=int), 4) == (1, 1)         # broadcast of one word
    assert wavefronts(lanes * 128, 4) == (32, 1)                    # every lane in bank 0
    assert wavefronts(lanes % 2 * 128, 4) == (2, 1)                 # two words of bank 0
    assert wavefronts(lanes * 2, 2) == (1, 1)                       # 16-bit: two lanes per word
    assert wavefronts(lanes * 16, 16) == (4, 4)                     # v4: quarter-warps, conflict-free
    assert wavefronts(lanes % 8 * 16 + lanes // 8 * 512, 16) == (4, 4)
    # phase 0 reads two 16-byte chunks on banks 0-3 (bytes 0 and 128): 2 wavefronts there, 1 in each other phase
    assert wavefronts(np.where(lanes < 8, lanes % 2 * 128, lanes * 16), 16) == (5, 4)
    assert wavefronts(lanes * 8, 8) == (2, 2)                       # 64-bit: half-warps
    assert wavefronts(np.r_[0, 128, -np.ones(30, dtype=int)], 4) == (2, 1)  # inactive lanes ignored
    assert wavefronts([], 4) == (0, 1)


def test_wavefronts_errors():
    with pytest.raises(ValueError, match="width: must be 1, 2, 4, 8 or 16"):
        wavefronts([0], 12)
    with pytest.raises(ValueError, match="aligned to width=16"):
        wavefronts([8], 16)
    with pytest.raises(ValueError, match="at most 32 lanes"):
        wavefronts(np.zeros(33, dtype=int), 4)


def test_bank_conflicts_hand_made_layout():
    """Two rows of 32 slots (tpr = 32): row 0 reads columns 0..31 (conflict-free), row 1 only bank 0."""
    u = np.zeros((2, 1024), dtype=np.float32)
    u[0, :32] = 1.0
    u[1, np.arange(32) * 32] = 1.0
    lay = balance(u, tpr=32)
    naive = bank_conflicts(lay, batch=1, scheme="naive", rows_per_block=2)
    assert isinstance(naive, ConflictReport)
    assert (naive.requests, naive.wavefronts, naive.ideal) == (2, 1 + 32, 2)
    assert naive.penalty == pytest.approx(31 / 2)
    aware = bank_conflicts(bank_aware(lay), batch=1, scheme="naive", rows_per_block=2)
    assert aware.wavefronts == naive.wavefronts        # all 32 of row 1 are in bank 0: nothing to gain
    wide = bank_conflicts(lay, batch=4, scheme="wide", rows_per_block=2)
    assert wide.ideal == 8 and wide.wavefronts == 4 + 4 * 8   # row 1: 8 lanes per quarter on one bank group


def test_bank_conflicts_errors():
    lay = balance(np.eye(32, dtype=np.float32), tpr=1)
    with pytest.raises(ValueError, match="scheme: expected 'naive' or 'wide'"):
        bank_conflicts(lay, batch=4, scheme="v2", rows_per_block=32)
    with pytest.raises(ValueError, match="batch: a wide load of batch \\* itemsize = 12 bytes"):
        bank_conflicts(lay, batch=3, scheme="wide", rows_per_block=32)
