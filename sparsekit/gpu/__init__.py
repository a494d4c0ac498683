"""Numba CUDA kernels, one module per kernel, named as its reference.

Importing this package installs sparsekit's reviewed replacements of slow numba-cuda internals
(:func:`sparsekit.numba_patches.install_all`): Numba's lowering without its quadratic scan of long blocks, and,
under the CUDA simulator, a block manager that sleeps until its threads need it and shared arrays found without
a walk of the stack. They change compile and simulation time, never a result; each is installed only over the
numba-cuda source it was reviewed against (another version warns once and keeps its own code), and
``SPARSEKIT_NUMBA_PATCHES=0`` keeps numba-cuda's own code throughout. :mod:`sparsekit.numba_patches` says why
here: every launcher compiles its kernels lazily, and importing this package is the step they all share.
"""
from sparsekit.numba_patches import install_all

install_all()
