"""Reference recurrences of "Sparse Persistent RNNs" (Zhu, Pool et al.): the executable specification.

The paper's Eq. 2: the input projection ``W x_t + b`` has no dependency across
time, so it is computed for every step by one GEMM beforehand and called
``b'_t``; what remains sequential is

    h_t = g(U h_{t-1} + b'_t),      t = 1 .. T                         (Eq. 2)

``sparsekit/gpu/persistent_rnn.py`` computes the same recurrence in one persistent launch
and equals :func:`rnn_forward` (and :func:`lstm_forward` for the LSTM of the
paper's Appendix B).

Precision, as the kernels do it: products and sums are formed in float64 here
(float32 in the kernels), and the state ``h_t`` is rounded to the dtype of
``b_prime`` after every step, because the kernels store ``h_t`` in that dtype
and read it back for step ``t + 1``. A float16 run therefore matches the
kernel to within accumulation error, not within float16 rounding of a float64
trajectory.

Shapes (batch ``B``, hidden size ``H``, steps ``T``):

* ``u``: ``(H, H)`` recurrent weight (``(4H, H)`` for the LSTM, gates in
  PyTorch's order i, f, g, o): a NumPy array, a ``scipy.sparse`` matrix, or
  any object with ``to_dense()`` (the ``sparsekit.formats`` classes and
  ``sparsekit.rnn_layout.RNNLayout``).
* ``b_prime``: ``(T, B, H)`` (``(T, B, 4H)`` for the LSTM), ``b'_t = W x_t + b``.
* ``h0``: ``(B, H)`` initial state (and ``c0`` for the LSTM).
* the result: every step's state, ``(T, B, H)``; ``result[t]`` is ``h_{t+1}``.

>>> import numpy as np
>>> u = np.array([[0.0, 0.5], [0.25, 0.0]], dtype=np.float32)
>>> bp = np.zeros((2, 1, 2), dtype=np.float32)
>>> h = rnn_forward(u, bp, np.array([[1.0, 1.0]], dtype=np.float32), 2, activation="relu")
>>> h[:, 0].tolist()
[[0.5, 0.25], [0.125, 0.125]]
"""
from __future__ import annotations

import numpy as np

from sparsekit.checks import FLOAT_DTYPES, check_array, check_int

__all__ = ["ACTIVATIONS", "rnn_forward", "lstm_forward", "dense_weight", "tolerance", "lstm_tolerance"]

#: Elementwise activations ``g`` of Eq. 2 the kernels implement.
ACTIVATIONS = {
    "tanh": np.tanh,
    "relu": lambda a: np.maximum(a, 0.0),
}


def dense_weight(u, name: str = "u") -> np.ndarray:
    """``u`` as a dense NumPy array (from NumPy, ``scipy.sparse`` or ``to_dense()``)."""
    if hasattr(u, "to_dense"):
        u = u.to_dense()
    elif hasattr(u, "toarray"):
        u = u.toarray()
    return check_array(u, name, ndim=2, finite=True)


def _check_activation(activation: str) -> None:
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation: expected one of {sorted(ACTIVATIONS)}, got {activation!r}")


def _check_inputs(u, b_prime, h0, steps, rows_per_unit: int):
    u = dense_weight(u)
    h = u.shape[1]
    if u.shape[0] != rows_per_unit * h:
        raise ValueError(f"u: expected shape ({rows_per_unit * h}, {h}) for hidden size {h}, got {u.shape}")
    steps = check_int(steps, "steps", minimum=0)
    b_prime = check_array(b_prime, "b_prime", ndim=3, dtypes=FLOAT_DTYPES,
                          shape=(None, None, rows_per_unit * h), finite=True)
    if b_prime.shape[0] < steps:
        raise ValueError(f"b_prime: needs at least steps={steps} timesteps, got shape {b_prime.shape}")
    batch = b_prime.shape[1]
    h0 = check_array(h0, "h0", ndim=2, dtypes=(b_prime.dtype,), shape=(batch, h), finite=True)
    return u, b_prime, h0, steps


def rnn_forward(u, b_prime: np.ndarray, h0: np.ndarray, steps: int, activation: str = "tanh") -> np.ndarray:
    """Every state of ``h_t = g(U h_{t-1} + b'_t)`` for ``t = 1..steps`` (Eq. 2).

    Returns a ``(steps, B, H)`` array of ``b_prime.dtype``; ``h_t`` is rounded
    to that dtype after each step (see the module docstring).
    """
    _check_activation(activation)
    u, b_prime, h0, steps = _check_inputs(u, b_prime, h0, steps, 1)
    g = ACTIVATIONS[activation]
    u64 = u.astype(np.float64)
    out = np.empty((steps,) + h0.shape, dtype=b_prime.dtype)
    h = h0
    for t in range(steps):
        a = h.astype(np.float64) @ u64.T + b_prime[t].astype(np.float64)   # (B, H): U h_{t-1} + b'_t
        h = g(a).astype(b_prime.dtype)
        out[t] = h
    return out


def _sigmoid(a: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-a))


def lstm_forward(u, b_prime: np.ndarray, h0: np.ndarray, c0: np.ndarray, steps: int):
    """Every state of a standard LSTM whose input projection is precomputed in ``b_prime``.

    ``u`` is ``(4H, H)`` with gate blocks i, f, g, o (PyTorch's order);
    ``b_prime[t]`` is ``(B, 4H)``. Per step::

        z = U h_{t-1} + b'_t
        i, f, o = sigmoid(z_i), sigmoid(z_f), sigmoid(z_o);  g = tanh(z_g)
        c_t = f * c_{t-1} + i * g;   h_t = o * tanh(c_t)

    Returns ``(h, c)``, each ``(steps, B, H)`` of ``b_prime.dtype`` (both
    rounded to it after every step, as the kernel stores them).
    """
    u, b_prime, h0, steps = _check_inputs(u, b_prime, h0, steps, 4)
    c0 = check_array(c0, "c0", dtypes=(b_prime.dtype,), shape=h0.shape, finite=True)
    hid = h0.shape[1]
    u64 = u.astype(np.float64)
    hs = np.empty((steps,) + h0.shape, dtype=b_prime.dtype)
    cs = np.empty_like(hs)
    h, c = h0, c0
    for t in range(steps):
        z = h.astype(np.float64) @ u64.T + b_prime[t].astype(np.float64)
        i, f, g, o = (z[:, k * hid:(k + 1) * hid] for k in range(4))
        c = (_sigmoid(f) * c.astype(np.float64) + _sigmoid(i) * np.tanh(g)).astype(b_prime.dtype)
        h = (_sigmoid(o) * np.tanh(c.astype(np.float64))).astype(b_prime.dtype)
        hs[t], cs[t] = h, c
    return hs, cs


#: Unit roundoff of the dtype the state h_t is stored in.
_STORE_U = {np.dtype(np.float16): 2.0 ** -11, np.dtype(np.float32): 2.0 ** -24}


def tolerance(dtype, k: int) -> float:
    """Max |kernel - rnn_forward| over any number of steps, ``k`` slots per row, float32 accumulation.

    Valid when every row's |U| sum is <= 1/2 and |b'| <= 1 (the tests and
    benchmarks scale their weights so): then |pre-activation| <= 2, and since
    tanh and relu are 1-Lipschitz an error in h_{t-1} shrinks by 1/2 per step,
    so the error after any number of steps is at most twice the error made in
    one step. One step: float32 accumulation of k + 1 terms of size <= 2
    (float64 here), libm tanh error (<= 2 float32 ulp), and rounding of
    |h| <= 2 to its storage dtype (kernel and reference may round to
    neighbouring values, so it counts twice). The last factor 2 is headroom
    on these constants.
    """
    one_step = (k + 1) * 2.0 ** -23 * 2 + 2 * 2.0 ** -23 + 2 * _STORE_U[np.dtype(dtype)] * 2
    return 2 * 2 * one_step


def lstm_tolerance(dtype, k: int, steps: int) -> float:
    """Max |kernel - lstm_forward| (h and c) after ``steps`` steps, ``k`` slots per gate row.

    Valid when every gate row's |U| sum is <= 1/2, |b'| <= 1, |h0|, |c0| <= 1.
    Then |z| <= 2 and |c_t| <= 1 + t. One step adds to the error of c: the
    float32 sums of the four gates (k + 1 terms of size <= 2), times the
    gates' slopes (sigmoid' <= 1/4, tanh' <= 1) and |c|; libm's expf/tanhf
    (a few float32 ulp); and rounding c and h to the storage dtype (twice,
    as in :func:`tolerance`); the previous error passes through f <= 1 and
    through z (slope <= 1/2 x 2 gates' worth), so it can grow by at most 2x
    per step. A run of ``steps`` is bounded by 2**steps x one step: meant for
    the few steps of the simulator tests. Doubled for headroom.
    """
    c_max = 1.0 + steps
    accum = (k + 1) * 2.0 ** -23 * 2
    one_step = accum * (c_max / 4 + 2) + 8 * 2.0 ** -23 * c_max + 2 * _STORE_U[np.dtype(dtype)] * c_max * 2
    return 2 * (2.0 ** steps) * one_step
