"""Sub-commands of the ``sparsekit`` command line, one module a kernel family, discovered by :mod:`sparsekit.cli`.

A module here may define either or both of:

``add_commands(subparsers)``
    add top-level commands (``sparsekit tune``, ``sparsekit roofline``);
``add_bench(bench_subparsers)``
    add ``sparsekit bench <NAME>`` commands.

Each parser it adds calls ``set_defaults(func=handler)``; ``handler(args)``
returns the exit status. Give every argument a ``help=`` string.

Import Numba, ``gpu`` and :mod:`sparsekit.bench` modules inside the handlers,
not at module level: the CLI decides on the CUDA simulator after parsing, and
Numba reads that switch once, at its first import. The benchmarks a command runs
live in :mod:`sparsekit.bench` (the experiments build on them; a command never
imports an experiment).
"""
