"""sparsekit: GPU kernels for sparse neural networks, each beside its NumPy reference.

Library surface: :mod:`sparsekit.formats`, :mod:`sparsekit.prune`,
:mod:`sparsekit.arrays`, :mod:`sparsekit.device`, :mod:`sparsekit.timing`,
:mod:`sparsekit.cli`. Kernels live in the top-level packages ``reference``
(NumPy specifications), ``gpu`` (Numba CUDA) and ``cpu`` (Numba CPU).
"""
__version__ = "0.1.0"
