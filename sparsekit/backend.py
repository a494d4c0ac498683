"""Which backend runs the kernels: the GPU when a CUDA device answers, else the CUDA simulator.

Numba reads ``NUMBA_ENABLE_CUDASIM`` once, at its first import, so the choice
must be made before anything imports ``numba.cuda``; the GPU probe therefore
runs in a child process. Used by the CLI, the test runner and the tutorials.
"""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

#: What the child process runs: exit status 0 when Numba finds a CUDA device.
PROBE = "from numba import cuda; import sys; sys.exit(0 if cuda.is_available() else 1)"
#: Seconds the probe may take (importing Numba and asking the driver takes a few); a hung driver is no GPU.
PROBE_TIMEOUT_S = 60.0


def gpu_present(timeout: float = PROBE_TIMEOUT_S) -> bool:
    """True when a CUDA driver and device answer (checked in a child process) within ``timeout`` seconds; a probe
    that does not answer in time is killed, counts as no GPU and warns."""
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    try:
        return subprocess.run([sys.executable, "-c", PROBE], env=env, timeout=timeout,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    except subprocess.TimeoutExpired:
        warnings.warn(f"gpu_present: the CUDA probe gave no answer within {timeout:g} s (a hung driver?); "
                      f"using the CUDA simulator", RuntimeWarning, stacklevel=2)
        return False


def choose_backend() -> str:
    """Return ``"gpu"``, or switch this process to the simulator and return ``"simulator"``; then install
    sparsekit's numba-cuda replacements for that backend (:func:`sparsekit.numba_patches.install_all`).

    Call it before the first import of ``numba.cuda``; an explicit
    ``NUMBA_ENABLE_CUDASIM=1`` is respected.
    """
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        backend = "simulator"
    elif gpu_present():
        backend = "gpu"
    else:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        backend = "simulator"
    from sparsekit.numba_patches import install_all    # (imports Numba: after the switch)

    install_all()
    return backend
