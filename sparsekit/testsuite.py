"""Run one part of the test suite in its own process (``./dev test`` runs both).

``sim``     property, format, pruner and CLI tests. Without a GPU the kernels run
            on the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``); with one they run
            on the GPU, the ``gpu``-marked tests run too (``simulator``-marked ones
            skip), and the ``timing`` tests run last, alone on the device.
``compile`` offline compile checks of every kernel and dtype for sm_80 and sm_90.

The simulator switch is read once per process, hence two processes.
"""
from __future__ import annotations

import os
import subprocess
import sys

from sparsekit.backend import gpu_present


def _cores() -> int:
    """The cores this process may run on (as pytest-xdist's ``-n auto`` counts them without psutil)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("sim", "compile"):
        print(__doc__)
        return 2
    part, extra = argv[0], argv[1:]
    env = dict(os.environ)
    env.setdefault("HYPOTHESIS_PROFILE", "ci")
    # One BLAS / OpenMP thread a worker: the workers already take every core (simulator part on the
    # 2-core machine: 218 -> 211 s).
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    # Compile checks: one worker per core (CI has 2), NVVM- and front-end-bound. Simulator: one more worker
    # than cores, because a simulated block leaves its core idle between its Python threads' hand-overs
    # (2 cores: 2 workers 211 s with 17% of the cores idle, 3 workers 174 s).
    workers = os.environ.get("SPARSEKIT_TEST_WORKERS")
    pytest = [sys.executable, "-m", "pytest", "-q"]
    parallel = [*pytest, "-n", workers or "auto"]
    if part == "compile":
        env.pop("NUMBA_ENABLE_CUDASIM", None)
        # loadfile: each module runs on one worker, so its tests share their builds (one front end for sm_80
        # and sm_90, the modules' cached builds); handed out in collection order, longest module first
        # (tests/compile/conftest.py). Per test, a build shared by tests on both workers ran twice: 585
        # worker-seconds against 525 in one process. (loadgroup's xdist_group marks had no
        # effect with pytest 9.2: xdist 3.8 renames the test ids through an attribute pytest no longer reads.)
        return subprocess.run([*parallel, "tests/compile", "-m", "compile", "--dist", "loadfile",
                               "--no-loadscope-reorder", *extra], env=env).returncode
    # worksteal: idle workers take queued tests from busy ones (a few long simulator tests
    # left one of CI's two workers idle at the end with the default distribution)
    tests = ["tests", "--ignore=tests/compile", "--dist", "worksteal"]
    if not gpu_present():
        env["NUMBA_ENABLE_CUDASIM"] = "1"
        print("[testsuite] no GPU: kernels run on the CUDA simulator", flush=True)
        simulated = [*pytest, "-n", workers or str(_cores() + 1)]
        return subprocess.run([*simulated, *tests, "-m", "not compile", *extra], env=env).returncode
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    print("[testsuite] GPU found: kernels run on the GPU, gpu tests enabled, timing tests last", flush=True)
    # Tests that time kernels would share the device with every other worker's launches (late spins,
    # low bandwidth): they run after the parallel part, in one process.
    shared = subprocess.run([*parallel, *tests, "-m", "not compile and not timing", *extra], env=env).returncode
    alone = subprocess.run([*pytest, "-p", "no:xdist", *tests[:2], "-m", "timing", *extra], env=env).returncode
    no_timing_tests = alone == 5                  # pytest's "no tests collected": extra arguments left out tests/gpu
    return shared or (0 if no_timing_tests else alone)


if __name__ == "__main__":
    sys.exit(main())
