"""sparsekit: GPU kernels for sparse neural networks, each beside its NumPy reference.

Library surface: :mod:`sparsekit.formats`, :mod:`sparsekit.prune`,
:mod:`sparsekit.arrays`, :mod:`sparsekit.device`, :mod:`sparsekit.timing`,
:mod:`sparsekit.cli`; ``sparsekit.spmm(a, b)`` multiplies any sparse format on the GPU by its best
kernel (:mod:`sparsekit.api`). Kernels live in the top-level packages ``reference``
(NumPy specifications), ``gpu`` (Numba CUDA) and ``cpu`` (Numba CPU).
"""
__version__ = "0.1.0"


def __getattr__(name):
    # ``sparsekit.spmm`` loads the kernels on first use, so importing the core (formats, prune) stays light
    if name == "spmm":
        from sparsekit.api import spmm
        return spmm
    raise AttributeError(f"module 'sparsekit' has no attribute {name!r}")
