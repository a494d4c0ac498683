"""A small NumPy MLP, its training loop, and the two prune/fine-tune schedules of the papers.

The accuracy side of the Sparsity Roofline, at laptop scale: a ReLU MLP trained
with AdamW and a cosine learning-rate schedule with linear warm-up (the
Sparsity Roofline paper's recipe, Appendix A.1, without data augmentation),
pruned with each pattern of :mod:`sparsekit.prune`, and fine-tuned with (base learning rate 3e-3
rather than the paper's 1e-3: tens of epochs here instead of 300)

* :func:`halving_schedule_run` -- "The Sparsity Roofline", Section 3.3: prune to
  50 %, rewind the learning-rate schedule and fine-tune, then raise the
  sparsity by ``(1 - S) / 2`` and repeat, five levels in one run;
* :func:`one_shot_rewind_run` -- "Uniform Sparsity", Section 2.3: prune the
  dense model once to the target and retrain with the full original
  learning-rate schedule (LR rewinding with K = T), mask fixed.

Weights are stored ``(out, in)`` so a layer is the ``m x k`` matrix of the
roofline model (``n`` = batch). The classifier layer is never pruned (common
practice; its 10 rows fit no block larger than 2). Masks are applied after
every optimizer step and to the gradients, so pruned weights stay exactly zero.

>>> data = load_digits_split(seed=0)
>>> net = MLP.init([64, 32, 10], np.random.default_rng(0))
>>> _ = train(net, data, epochs=10, rng=np.random.default_rng(0))
>>> net.accuracy(data.x_test, data.y_test) > 0.8
True
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sparsekit import prune
from sparsekit.checks import check_int, check_sparsity
from sparsekit.roofline import parse_kind

__all__ = ["Data", "MLP", "load_digits_split", "load_mnist1d_split", "DATASETS", "load_dataset", "train", "masks_for", "PATTERNS", "pattern_kind",
           "halving_schedule_run", "one_shot_rewind_run"]


@dataclass(frozen=True)
class Data:
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: int


def load_digits_split(seed: int = 0, test_fraction: float = 0.3) -> Data:
    """scikit-learn's 8x8 digits (1797 images, 10 classes), scaled to [0, 1], stratified split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    xtr, xte, ytr, yte = train_test_split(x, d.target, test_size=test_fraction, random_state=seed,
                                          stratify=d.target)
    return Data(xtr, ytr.astype(np.int64), xte, yte.astype(np.int64), 10)


#: pip package that generates MNIST-1D (an optional extra; Apache-2.0; generated locally, no download).
MNIST1D_PACKAGE = "mnist1d"


def load_mnist1d_split(seed: int = 0, num_samples: int | None = None) -> Data:
    """MNIST-1D (Greydanus & Kobak, 2020): 10 classes of 40-sample 1-D signals, made by the
    ``mnist1d`` package's own generator (``mnist1d.data.make_dataset``) on this machine.

    With the package's default arguments (``num_samples=None``) this is the published
    dataset: 4000 training and 1000 test signals, the generator's own 80/20 split and
    seed 42 (``seed`` does not change the data, only ``num_samples`` does; it is kept for
    the signature the experiments share). The generator is procedural, so nothing is
    downloaded (``mnist1d.data.get_dataset`` would fetch a pickle; it is not used). It
    reseeds NumPy's legacy global generator (``np.random.seed``); the global state is
    restored afterwards. Raises ``ImportError`` naming the package when it is missing.
    """
    try:
        from mnist1d.data import get_dataset_args, make_dataset
    except ImportError as err:
        raise ImportError(f"MNIST-1D needs the optional package {MNIST1D_PACKAGE!r} "
                          f"(pip install {MNIST1D_PACKAGE}): {err}") from err
    args = get_dataset_args()
    if num_samples is not None:
        args.num_samples = check_int(num_samples, "num_samples", minimum=10)
    state = np.random.get_state()
    try:
        d = make_dataset(args)
    finally:
        np.random.set_state(state)
    return Data(d["x"].astype(np.float32), d["y"].astype(np.int64), d["x_test"].astype(np.float32),
                d["y_test"].astype(np.int64), 10)


#: Data sets the accuracy experiments can use: name -> loader(seed) -> :class:`Data`.
DATASETS = {"digits": load_digits_split, "mnist1d": load_mnist1d_split}


def load_dataset(name: str, seed: int = 0) -> Data:
    """The :class:`Data` of ``name`` (one of :data:`DATASETS`)."""
    if name not in DATASETS:
        raise ValueError(f"name: unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    return DATASETS[name](seed=seed)


@dataclass
class MLP:
    """ReLU MLP; ``weights[i]`` is ``(out, in)`` (float32 unless built otherwise)."""

    weights: list
    biases: list
    masks: list = field(default_factory=list)   #: one bool mask per weight (all True = dense)

    @classmethod
    def init(cls, sizes, rng: np.random.Generator, dtype=np.float32) -> "MLP":
        """He-normal weights, zero biases; ``sizes = [inputs, hidden..., classes]``."""
        sizes = [check_int(s, "sizes", minimum=1) for s in sizes]
        if len(sizes) < 2:
            raise ValueError(f"sizes: need at least inputs and outputs, got {sizes}")
        ws = [(rng.standard_normal((o, i)) * math.sqrt(2.0 / i)).astype(dtype)
              for i, o in zip(sizes[:-1], sizes[1:])]
        return cls(ws, [np.zeros(o, dtype) for o in sizes[1:]], [np.ones(w.shape, bool) for w in ws])

    def copy(self) -> "MLP":
        return MLP([w.copy() for w in self.weights], [b.copy() for b in self.biases],
                   [m.copy() for m in self.masks])

    def set_masks(self, masks) -> None:
        """Install masks (``None`` = keep the layer dense) and zero the pruned weights."""
        if len(masks) != len(self.weights):
            raise ValueError(f"masks: expected {len(self.weights)}, got {len(masks)}")
        self.masks = [np.ones(w.shape, bool) if m is None else np.asarray(m, bool)
                      for w, m in zip(self.weights, masks)]
        for w, m in zip(self.weights, self.masks):
            if m.shape != w.shape:
                raise ValueError(f"masks: shape {m.shape} does not match weight {w.shape}")
            w *= m

    def logits(self, x: np.ndarray) -> np.ndarray:
        h = x
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            h = h @ w.T + b
            if i < len(self.weights) - 1:
                h = np.maximum(h, 0.0)
        return h

    def accuracy(self, x: np.ndarray, y: np.ndarray) -> float:
        return float(np.mean(self.logits(x).argmax(axis=1) == y))

    def gradients(self, x: np.ndarray, y: np.ndarray):
        """Mean softmax cross-entropy and its gradients (weights, biases)."""
        acts = [x]
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            z = acts[-1] @ w.T + b
            acts.append(np.maximum(z, 0.0) if i < len(self.weights) - 1 else z)
        z = acts[-1] - acts[-1].max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        loss = float(-np.mean(np.log(p[np.arange(len(y)), y] + 1e-12)))
        delta = p
        delta[np.arange(len(y)), y] -= 1.0
        delta /= len(y)
        gw, gb = [None] * len(self.weights), [None] * len(self.weights)
        for i in range(len(self.weights) - 1, -1, -1):
            gw[i] = delta.T @ acts[i]
            gb[i] = delta.sum(axis=0)
            if i:
                delta = (delta @ self.weights[i]) * (acts[i] > 0)
        return loss, gw, gb


def cosine_lr(step: int, total: int, *, base: float, warmup: int, minimum: float) -> float:
    """Linear warm-up from 0, then cosine decay to ``minimum`` (paper's Table 2 shape)."""
    if step < warmup:
        return base * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return minimum + 0.5 * (base - minimum) * (1.0 + math.cos(math.pi * min(1.0, t)))


def train(net: MLP, data: Data, *, epochs: int, rng: np.random.Generator, lr: float = 3e-3,
          weight_decay: float = 0.05, batch_size: int = 64, warmup_fraction: float = 0.1,
          min_lr: float = 1e-5) -> list[float]:
    """AdamW with a fresh cosine schedule over ``epochs`` (a call = one LR rewind).

    Gradients of pruned weights are masked and the masks re-applied after each
    step. Returns the mean loss per epoch.
    """
    epochs = check_int(epochs, "epochs", minimum=1)
    # these matrices are far too small for threaded BLAS: one thread is ~8x faster on a
    # shared 2-core machine (threadpoolctl ships with scikit-learn, which loads the data)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        return _train(net, data, epochs, rng, lr, weight_decay, batch_size, warmup_fraction, min_lr)


def _train(net, data, epochs, rng, lr, weight_decay, batch_size, warmup_fraction, min_lr) -> list[float]:
    n = len(data.y_train)
    steps_per_epoch = -(-n // batch_size)
    total = epochs * steps_per_epoch
    warmup = max(1, int(warmup_fraction * total))
    params = net.weights + net.biases
    m1 = [np.zeros_like(p) for p in params]
    m2 = [np.zeros_like(p) for p in params]
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    step, losses = 0, []
    for _ in range(epochs):
        order = rng.permutation(n)
        epoch_loss = 0.0
        for start in range(0, n, batch_size):
            idx = order[start:start + batch_size]
            loss, gw, gb = net.gradients(data.x_train[idx], data.y_train[idx])
            epoch_loss += loss * len(idx)
            gw = [g * mk for g, mk in zip(gw, net.masks)]
            rate = cosine_lr(step, total, base=lr, warmup=warmup, minimum=min_lr)
            step += 1
            for j, (p, g) in enumerate(zip(params, gw + gb)):
                m1[j] = beta1 * m1[j] + (1 - beta1) * g
                m2[j] = beta2 * m2[j] + (1 - beta2) * g * g
                mhat = m1[j] / (1 - beta1 ** step)
                vhat = m2[j] / (1 - beta2 ** step)
                if j < len(net.weights):
                    p *= (1.0 - rate * weight_decay)   # decoupled weight decay on weights only
                p -= (rate * mhat / (np.sqrt(vhat) + eps)).astype(p.dtype)
            for w, mk in zip(net.weights, net.masks):
                w *= mk
        losses.append(epoch_loss / n)
    return losses


# ----------------------------------------------------------------------------- patterns

#: The accuracy study's patterns: unstructured global magnitude, uniform (global threshold),
#: row-balanced, blocked-uniform 2 and 4, blocks 2..32, N:M 1:4, 2:4, 2:8, 2:16.
PATTERNS = ("unstructured", "uniform", "row-balanced", "blocked-uniform:2", "blocked-uniform:4",
            "block:2", "block:4", "block:8", "block:16", "block:32", "1:4", "2:4", "2:8", "2:16")


def pattern_kind(pattern: str) -> str:
    """The roofline format that stores ``pattern`` (unstructured -> csr, uniform/row-balanced -> ell,
    blocked-uniform:b -> blocked-ell:b, block:b -> bsr:b, N:M -> N:M)."""
    if pattern in ("uniform", "row-balanced"):
        return "ell"
    if pattern.startswith("blocked-uniform:"):
        return "blocked-ell:" + pattern.split(":")[1]
    if pattern.startswith("block:"):
        return "bsr:" + pattern.split(":")[1]
    if pattern == "unstructured":
        return "csr"
    try:
        kind, _ = parse_kind(pattern)
    except (ValueError, TypeError):
        kind = None
    if kind != "nm":
        raise ValueError(f"pattern: unknown pattern {pattern!r}; known: {', '.join(PATTERNS)} (any N:M)")
    return pattern


def is_nm(pattern: str) -> bool:
    return pattern_kind(pattern) == pattern and ":" in pattern


def _pruned_range(count: int, first_dense: bool) -> range:
    """Indices of the pruned layers: all but the classifier (and the input layer if ``first_dense``)."""
    first = 1 if first_dense else 0
    if count - 1 <= first:
        raise ValueError(f"first_dense: a {count}-layer MLP keeping its {'input and ' if first_dense else ''}"
                         f"classifier layers dense has no layer left to prune")
    return range(first, count - 1)


def masks_for(pattern: str, weights: list, sparsity: float | None, *, first_dense: bool = False) -> list:
    """Masks for the prunable weights (all but the last); ``None`` for the classifier.

    ``unstructured`` and ``uniform`` use ONE global threshold over the pruned
    layers (the papers' global magnitude pruning); the other patterns prune each
    layer to ``sparsity``. N:M ignores ``sparsity`` (it is fixed at 1 - N/M).
    ``first_dense`` also keeps the input layer dense (common practice for a first
    layer; MNIST-1D's 40 inputs fit no 16-wide block or N:M group); it gets ``None``.
    """
    idx = _pruned_range(len(weights), first_dense)
    pruned = {f"fc{i}": weights[i] for i in idx}
    head = [None] * idx.start
    kind = pattern_kind(pattern)
    if is_nm(pattern):
        keep, width = (int(v) for v in pattern.split(":"))
        out = [prune.n_m(w, keep, width) for w in pruned.values()]
        return head + out + [None]
    s = check_sparsity(sparsity)
    if pattern == "unstructured":
        out = list(prune.magnitude_global(pruned, s).values())
    elif pattern == "uniform":
        out = list(prune.uniform_global(pruned, s).values())
    elif pattern == "row-balanced":
        out = [prune.row_balanced(w, s) for w in pruned.values()]
    elif kind.startswith("blocked-ell:"):
        b = int(kind.split(":")[1])
        out = [prune.blocked_uniform(w, s, b) for w in pruned.values()]
    else:
        b = int(kind.split(":")[1])
        out = [prune.block(w, s, (b, b)) for w in pruned.values()]
    return head + out + [None]


def achieved_sparsity(net: MLP, *, first_dense: bool = False) -> float:
    """Fraction of zeros over the pruned layers (all but the classifier, and the input layer
    if ``first_dense``)."""
    masks = [net.masks[i] for i in _pruned_range(len(net.masks), first_dense)]
    return 1.0 - sum(int(m.sum()) for m in masks) / sum(m.size for m in masks)


@dataclass(frozen=True)
class Point:
    """One fine-tuned model: pattern, target and achieved sparsity, test accuracy, its masks."""

    pattern: str
    schedule: str
    target: float
    sparsity: float
    accuracy: float
    densities: tuple   #: kept fraction per layer (1.0 for the dense classifier)


def _point(net: MLP, data: Data, pattern: str, schedule: str, target: float, first_dense: bool) -> Point:
    return Point(pattern, schedule, target, achieved_sparsity(net, first_dense=first_dense),
                 net.accuracy(data.x_test, data.y_test), tuple(float(m.mean()) for m in net.masks))


def halving_schedule_run(dense: MLP, data: Data, pattern: str, *, epochs: int, rng: np.random.Generator,
                         rounds: int = 5, first_dense: bool = False, **train_args) -> list[Point]:
    """The Sparsity Roofline's schedule: 50 %, then ``S += (1 - S) / 2`` per round, LR rewound each time.

    Each round prunes the current (already sparse, fine-tuned) weights to the
    next level and fine-tunes for ``epochs`` with a fresh learning-rate
    schedule. N:M patterns have one fixed level: one round. ``first_dense``: see :func:`masks_for`.
    """
    net = dense.copy()
    levels = [None] if is_nm(pattern) else prune.halving_schedule(rounds, 0.5)
    points = []
    for s in levels:
        net.set_masks(masks_for(pattern, net.weights, s, first_dense=first_dense))
        train(net, data, epochs=epochs, rng=rng, **train_args)
        points.append(_point(net, data, pattern, "halving", 1.0 - _nm_density(pattern) if s is None else s,
                             first_dense))
    return points


def one_shot_rewind_run(dense: MLP, data: Data, pattern: str, sparsity: float | None, *, epochs: int,
                        rng: np.random.Generator, first_dense: bool = False, **train_args) -> Point:
    """Uniform Sparsity's LR rewinding: prune the dense model once, retrain with the full schedule."""
    net = dense.copy()
    net.set_masks(masks_for(pattern, net.weights, sparsity, first_dense=first_dense))
    train(net, data, epochs=epochs, rng=rng, **train_args)
    return _point(net, data, pattern, "one-shot", 1.0 - _nm_density(pattern) if sparsity is None else sparsity,
                  first_dense)


def _nm_density(pattern: str) -> float:
    keep, width = (int(v) for v in pattern.split(":"))
    return keep / width
