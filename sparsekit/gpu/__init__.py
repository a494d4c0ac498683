"""Numba CUDA kernels, one module per kernel, named as its reference.

Importing this package changes nothing outside it. sparsekit's reviewed replacements of slow numba-cuda internals
(Numba's lowering without its quadratic scan of long blocks; under the CUDA simulator a block manager that sleeps
until its threads need it, and shared arrays found without a walk of the stack, under a lock) are installed by
one explicit call, :func:`sparsekit.numba_patches.install_all`: :func:`sparsekit.backend.choose_backend` makes it
(the CLI and the tutorials choose their backend first), so do the test suite and :mod:`sparsekit.offline`; a program
of your own may make it once before its first kernel.
"""
