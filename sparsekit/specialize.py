"""SparseRT-style code specialisation on the CPU: a kernel with the nonzeros baked in.

SparseRT (the course slides' "Code Generation" and "Analysis" sections,
../shared/papers/spmm-course-slides.txt) compiles one kernel per sparse
matrix: the positions and values of the nonzeros become instruction
operands, so the kernel reads no index arrays at all. The price is
compilation per matrix, and code that grows with ``nnz``: the slides note
that as ``M`` and ``K`` grow the instruction (constant) cache runs out and the
advantage fades.

Here the same idea on the CPU: :func:`generate_source` writes Python source
whose body is, for every non-empty row ``i``,

.. code-block:: python

    for j in range(n):
        c[i, j] = v0 * b[k0, j] + v1 * b[k1, j] + ...     # constants v*, k*

and :func:`specialize` compiles it with Numba (timed) into a
:class:`Specialized` kernel that equals :func:`sparsekit.reference.spmm.spmm_csr` for
that one matrix. :func:`compare` measures compile time and run time against
the generic CSR kernel (``sparsekit.cpu.spmm.spmm_csr``) and the number of calls after
which specialisation has paid for its compilation.

>>> import numpy as np
>>> from sparsekit.formats import CSR
>>> a = CSR.from_dense(np.array([[0.0, 2.0], [0.0, 0.0], [1.0, -3.0]]))
>>> print(generate_source(a))
def spmm_specialized(b, c):
    n = b.shape[1]
    for j in range(n):  # row 0: 1 nonzeros
        c[0, j] = C(2.0) * b[1, j]
    for j in range(n):  # row 2: 2 nonzeros
        c[2, j] = C(1.0) * b[0, j] + C(-3.0) * b[1, j]
>>> spec = specialize(a)
>>> spec(np.array([[1.0, 1.0], [10.0, 20.0]]))
array([[ 20.,  40.],
       [  0.,   0.],
       [-29., -59.]])
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from numba import njit, types

from sparsekit.reference.spmm import check_rhs
from sparsekit.bench.spmm import wall_time
from sparsekit.checks import check_int

__all__ = ["generate_source", "specialize", "Specialized", "compare", "TERMS_PER_STATEMENT"]

#: Terms per generated statement; longer rows continue with ``+=`` (keeps statements short).
TERMS_PER_STATEMENT = 16
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_NAME = "spmm_specialized"


def _check_csr(csr):
    for attr in ("indptr", "indices", "data", "shape"):
        if not hasattr(csr, attr):
            raise TypeError(f"csr: expected a CSR matrix (indptr, indices, data, shape), "
                            f"got {type(csr).__name__} without '{attr}'")
    if np.dtype(csr.data.dtype) not in _DTYPES:
        raise TypeError(f"csr: values must be float32 or float64 (Numba's CPU backend), got {csr.data.dtype}")


def generate_source(csr) -> str:
    """Python source of ``spmm_specialized(b, c)``: ``c[i, :] = sum of baked value * b[baked col, :]``.

    Values appear as ``C(literal)`` where ``C`` is the value dtype (``float``
    literals are exact: ``repr`` round-trips float32 and float64). Empty rows
    get no code (``c`` arrives zeroed).
    """
    _check_csr(csr)
    lines = [f"def {_NAME}(b, c):", "    n = b.shape[1]"]
    indptr = np.asarray(csr.indptr)
    for i in range(int(csr.shape[0])):
        start, end = int(indptr[i]), int(indptr[i + 1])
        if start == end:
            continue
        lines.append(f"    for j in range(n):  # row {i}: {end - start} nonzeros")
        terms = [f"C({float(csr.data[p])!r}) * b[{int(csr.indices[p])}, j]" for p in range(start, end)]
        for s in range(0, len(terms), TERMS_PER_STATEMENT):
            op = "=" if s == 0 else "+="
            lines.append(f"        c[{i}, j] {op} " + " + ".join(terms[s:s + TERMS_PER_STATEMENT]))
    return "\n".join(lines)


@dataclass(frozen=True)
class Specialized:
    """A compiled kernel for one sparse matrix; call it with ``b`` to get ``C = A @ b``."""

    shape: tuple
    dtype: np.dtype
    nnz: int
    source_lines: int
    compile_s: float
    kernel: object

    def __call__(self, b: np.ndarray) -> np.ndarray:
        check_rhs(b, shape=self.shape, dtype=self.dtype)
        if not b.flags.c_contiguous:
            raise ValueError("b: the specialised kernel is compiled for a C-contiguous b; "
                             "pass numpy.ascontiguousarray(b)")
        c = np.zeros((self.shape[0], b.shape[1]), dtype=self.dtype)
        self.kernel(b, c)
        return c

    def __repr__(self) -> str:
        return (f"<Specialized shape={self.shape} nnz={self.nnz} dtype={self.dtype} "
                f"lines={self.source_lines} compile={self.compile_s:.3f}s>")


def specialize(csr) -> Specialized:
    """Generate, then compile (eagerly, timed) the kernel for ``csr`` with Numba."""
    src = generate_source(csr)
    dtype = np.dtype(csr.data.dtype)
    scalar = types.float32 if dtype == np.float32 else types.float64
    namespace = {"C": np.float32 if dtype == np.float32 else np.float64}
    t0 = time.perf_counter()
    exec(compile(src, f"<specialized {csr.shape} nnz={int(csr.indptr[-1])}>", "exec"), namespace)
    mat = types.Array(scalar, 2, "C")
    kernel = njit((mat, mat), cache=False)(namespace[_NAME])   # a signature compiles now
    compile_s = time.perf_counter() - t0
    return Specialized(tuple(int(x) for x in csr.shape), dtype, int(csr.indptr[-1]),
                       src.count("\n") + 1, compile_s, kernel)


def compare(csr, b: np.ndarray, *, repeat: int = 10) -> dict:
    """Compile time and run time of the specialised kernel vs ``sparsekit.cpu.spmm.spmm_csr`` (rowwise, serial).

    Returns a record: ``compile_s``, ``specialized_s``, ``generic_s``,
    ``speedup`` (generic / specialised), ``break_even_calls`` (compile time over
    the time saved per call; ``inf`` when it never pays) and ``max_abs_diff``
    between the two results.
    """
    from sparsekit.cpu.spmm import spmm_csr

    repeat = check_int(repeat, "repeat", minimum=1)
    spec = specialize(csr)
    t_spec = wall_time(lambda: spec(b), repeat)[0]
    t_gen = wall_time(lambda: spmm_csr(csr, b), repeat)[0]
    saved = t_gen - t_spec
    return {"M": spec.shape[0], "K": spec.shape[1], "N": int(b.shape[1]), "nnz": spec.nnz,
            "lines": spec.source_lines, "compile_s": spec.compile_s, "specialized_s": t_spec,
            "generic_s": t_gen, "speedup": t_gen / t_spec if t_spec else float("inf"),
            "break_even_calls": spec.compile_s / saved if saved > 0 else float("inf"),
            "max_abs_diff": float(np.max(np.abs(spec(b) - spmm_csr(csr, b)), initial=0.0))}
