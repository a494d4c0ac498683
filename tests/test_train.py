"""The NumPy MLP, its training loop, the pattern masks and the two fine-tuning schedules."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from sparsekit import prune, train
from sparsekit.train import MLP, masks_for


@pytest.fixture(scope="module")
def data():
    return train.load_digits_split(seed=0)


def test_gradients_match_finite_differences():
    rng = np.random.default_rng(0)
    net = MLP.init([5, 7, 3], rng, dtype=np.float64)
    x, y = rng.standard_normal((4, 5)), np.array([0, 2, 1, 2])
    _, gw, gb = net.gradients(x, y)
    eps = 1e-6   # float64 central differences: truncation ~eps^2, rounding ~1e-16/eps
    for params, grads in ((net.weights, gw), (net.biases, gb)):
        for p, g in zip(params, grads):
            num = np.zeros_like(p)
            for idx in np.ndindex(p.shape):
                old = p[idx]
                p[idx] = old + eps
                up = net.gradients(x, y)[0]
                p[idx] = old - eps
                down = net.gradients(x, y)[0]
                p[idx] = old
                num[idx] = (up - down) / (2 * eps)
            np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-8)


def test_training_learns_digits_and_keeps_pruned_weights_zero(data):
    rng = np.random.default_rng(0)
    net = MLP.init([64, 64, 10], rng)
    masks = masks_for("unstructured", net.weights, 0.8)
    net.set_masks(masks)
    losses = train.train(net, data, epochs=8, rng=rng, lr=1e-2)
    assert losses[-1] < losses[0]
    assert net.accuracy(data.x_test, data.y_test) > 0.85
    assert masks[1] is None and not net.weights[0][~masks[0]].any()
    assert train.achieved_sparsity(net) == pytest.approx(0.8, abs=1 / 64)


@pytest.mark.parametrize("pattern", train.PATTERNS)
def test_masks_have_the_pattern(pattern):
    rng = np.random.default_rng(1)
    ws = [rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32),
          rng.standard_normal((10, 64)).astype(np.float32)]
    masks = masks_for(pattern, ws, 0.75)
    assert masks[-1] is None and len(masks) == 3
    kept = sum(int(m.sum()) for m in masks[:2])
    if ":" in pattern and pattern[0].isdigit():
        n, m = (int(v) for v in pattern.split(":"))
        for mk in masks[:2]:
            assert (mk.reshape(64, 64 // m, m).sum(axis=2) == n).all()
    else:
        assert kept == pytest.approx(0.25 * 2 * 64 * 64, rel=0.1)
    if pattern in ("uniform", "row-balanced"):
        for mk in masks[:2]:
            assert len(set(mk.sum(axis=1))) == 1
    if pattern.startswith(("block:", "blocked-uniform:")):
        b = int(pattern.split(":")[1])
        for mk in masks[:2]:
            blocks = mk.reshape(64 // b, b, 64 // b, b)
            assert (blocks.all(axis=(1, 3)) == blocks.any(axis=(1, 3))).all()   # whole blocks
            if pattern.startswith("blocked-uniform:"):
                assert len(set(blocks.any(axis=(1, 3)).sum(axis=1))) == 1


def test_global_patterns_match_the_pruners():
    rng = np.random.default_rng(2)
    ws = [rng.standard_normal((16, 8)), rng.standard_normal((16, 16)), rng.standard_normal((4, 16))]
    got = masks_for("unstructured", ws, 0.6)
    want = prune.magnitude_global({"fc0": ws[0], "fc1": ws[1]}, 0.6)
    assert all((g == w).all() for g, w in zip(got[:2], want.values()))


def test_halving_schedule_levels_and_nested_masks(data):
    rng = np.random.default_rng(0)
    dense = MLP.init([64, 32, 10], rng)
    train.train(dense, data, epochs=2, rng=rng)
    points = train.halving_schedule_run(dense, data, "unstructured", epochs=1, rng=rng)
    assert [p.target for p in points] == [0.5, 0.75, 0.875, 0.9375, 0.96875]
    assert [p.sparsity for p in points] == pytest.approx([p.target for p in points], abs=1e-3)
    assert dense.masks[0].all()   # the dense model is not touched
    nm = train.halving_schedule_run(dense, data, "2:8", epochs=1, rng=rng)
    assert len(nm) == 1 and nm[0].target == 0.75 and nm[0].sparsity == 0.75


def test_one_shot_rewind_starts_from_the_dense_model(data):
    rng = np.random.default_rng(0)
    dense = MLP.init([64, 32, 10], rng)
    train.train(dense, data, epochs=2, rng=rng)
    p = train.one_shot_rewind_run(dense, data, "uniform", 0.5, epochs=2, rng=rng)
    assert p.schedule == "one-shot" and p.sparsity == pytest.approx(0.5, abs=1 / 32)
    assert p.densities[-1] == 1.0 and 0 < p.accuracy <= 1


def test_cosine_schedule_shape():
    lrs = [train.cosine_lr(s, 100, base=1e-3, warmup=10, minimum=1e-5) for s in range(100)]
    assert lrs[9] == pytest.approx(1e-3) and lrs[0] == pytest.approx(1e-4)
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))
    assert train.cosine_lr(100, 100, base=1e-3, warmup=10, minimum=1e-5) == pytest.approx(1e-5)


def test_bad_input():
    ws = [np.ones((8, 8)), np.ones((2, 8))]
    with pytest.raises(ValueError, match="unknown pattern 'diagonal'"):
        masks_for("diagonal", ws, 0.5)
    with pytest.raises(ValueError, match=r"sparsity: must lie in \[0, 1\)"):
        masks_for("unstructured", ws, 1.0)
    with pytest.raises(ValueError, match="sizes: need at least inputs and outputs"):
        MLP.init([4], np.random.default_rng(0))
    assert train.pattern_kind("blocked-uniform:4") == "blocked-ell:4" and train.pattern_kind("block:8") == "bsr:8"


def test_accuracy_experiment_runs_in_quick_mode(tmp_path):
    """The registered experiment at toy size (CI keeps it from rotting; < 60 s on 2 cores)."""
    from experiments.accuracy import EXPERIMENT
    from sparsekit.experiment import Context

    sec = EXPERIMENT.run(Context(quick=True, backend="simulator", out_dir=tmp_path))
    assert all((tmp_path / f).exists() for f in sec.figures) and len(sec.figures) == 3
    halving = sec.tables[1].records
    assert {r["pattern"] for r in halving} == set(train.PATTERNS)
    assert all(r["SoL_speedup_H100_b1"] > 0 for r in halving)
    assert "Does uniform track unstructured?" in sec.text


needs_mnist1d = pytest.mark.skipif(
    importlib.util.find_spec(train.MNIST1D_PACKAGE) is None,
    reason=f"optional package {train.MNIST1D_PACKAGE!r} (MNIST-1D generator) is not installed")


@needs_mnist1d
def test_mnist1d_is_the_published_split_and_leaves_numpy_seed_alone():
    np.random.seed(123)
    before = np.random.random()
    np.random.seed(123)
    d = train.load_dataset("mnist1d")
    assert np.random.random() == before          # the generator's np.random.seed is undone
    assert d.x_train.shape == (4000, 40) and d.x_test.shape == (1000, 40) and d.classes == 10
    assert d.x_train.dtype == np.float32 and set(np.unique(d.y_test)) == set(range(10))
    again = train.load_mnist1d_split()
    assert np.array_equal(d.x_train, again.x_train) and np.array_equal(d.y_test, again.y_test)
    small = train.load_mnist1d_split(num_samples=200)
    assert small.x_train.shape == (160, 40) and small.x_test.shape == (40, 40)


def test_missing_mnist1d_is_an_import_error_naming_the_package(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "mnist1d", None)
    monkeypatch.setitem(sys.modules, "mnist1d.data", None)
    with pytest.raises(ImportError, match="optional package 'mnist1d'"):
        train.load_mnist1d_split()
    with pytest.raises(ValueError, match="unknown dataset 'mnist'; known: digits, mnist1d"):
        train.load_dataset("mnist")


def test_first_dense_keeps_the_input_layer_and_prunes_the_rest():
    rng = np.random.default_rng(3)
    ws = [rng.standard_normal(s).astype(np.float32) for s in ((32, 40), (32, 32), (32, 32), (10, 32))]
    for pattern in ("unstructured", "block:16", "2:16"):
        masks = masks_for(pattern, ws, 0.75, first_dense=True)
        assert masks[0] is None and masks[-1] is None and all(m.mean() < 1 for m in masks[1:3])
    net = MLP.init([40, 32, 32, 32, 10], rng)
    net.set_masks(masks_for("uniform", net.weights, 0.75, first_dense=True))
    assert train.achieved_sparsity(net, first_dense=True) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="first_dense: a 2-layer MLP"):
        masks_for("uniform", ws[:2], 0.5, first_dense=True)


@pytest.mark.parametrize("have_mnist1d", [True, False])
def test_full_mode_adds_mnist1d_or_says_why_not(tmp_path, monkeypatch, have_mnist1d):
    """run() in full mode: digits, then MNIST-1D (or a note naming the missing package), at toy size."""
    import sys

    from experiments import accuracy
    from sparsekit.experiment import Context

    if have_mnist1d and importlib.util.find_spec(train.MNIST1D_PACKAGE) is None:
        pytest.skip(f"optional package {train.MNIST1D_PACKAGE!r} (MNIST-1D generator) is not installed")
    if not have_mnist1d:
        monkeypatch.setitem(sys.modules, "mnist1d", None)
        monkeypatch.setitem(sys.modules, "mnist1d.data", None)
    tiny = dict(pretrain=1, round_epochs=1, one_shot=(0.9,), seeds=(0,))
    monkeypatch.setattr(accuracy, "_config", lambda quick, dataset="digits": dict(
        tiny, sizes=[40, 32, 32, 10] if dataset == "mnist1d" else [64, 32, 32, 10], first_dense=dataset == "mnist1d"))
    sec = accuracy.run(Context(quick=False, backend="simulator", out_dir=tmp_path))
    if have_mnist1d:
        assert sec.title.startswith("Accuracy of each sparsity pattern on digits and mnist1d")
        assert sec.figures[3:] == ["sparsity_roofline_mnist1d.png", "task_error_one_shot_mnist1d.png",
                                   "halving_accuracy_by_pattern_mnist1d.png"]
        assert all((tmp_path / f).stat().st_size > 0 for f in sec.figures)
        assert [t.csv_name for t in sec.tables[3:]] == ["one_shot_summary_mnist1d.csv", "halving_mnist1d.csv",
                                                       "one_shot_runs_mnist1d.csv"]
        assert {r["pattern"] for r in sec.tables[4].records} == set(train.PATTERNS)
        assert "### mnist1d" in sec.text and "1000 test 1-D signals" in sec.text
    else:
        assert len(sec.figures) == 3 and "**MNIST-1D skipped**" in sec.text and "'mnist1d'" in sec.text
