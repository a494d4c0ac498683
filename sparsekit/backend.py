"""Which backend runs the kernels: the GPU when a CUDA device answers, else the CUDA simulator.

Numba reads ``NUMBA_ENABLE_CUDASIM`` once, at its first import, so the choice
must be made before anything imports ``numba.cuda``; the GPU probe therefore
runs in a child process. Used by the CLI, the test runner and the tutorials.
"""
from __future__ import annotations

import os
import subprocess
import sys


def gpu_present() -> bool:
    """True when a CUDA driver and device answer (checked in a child process)."""
    probe = "from numba import cuda; import sys; sys.exit(0 if cuda.is_available() else 1)"
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    return subprocess.run([sys.executable, "-c", probe], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def choose_backend() -> str:
    """Return ``"gpu"``, or switch this process to the simulator and return ``"simulator"``.

    Call it before the first import of ``numba.cuda``; an explicit
    ``NUMBA_ENABLE_CUDASIM=1`` is respected.
    """
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return "simulator"
    if gpu_present():
        return "gpu"
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    return "simulator"
