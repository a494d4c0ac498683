"""Thread-block clusters on a real GPU (sparsekit/gpu/cluster.py): what the one-block simulator cannot show."""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def test_cluster_probe_shows_clusters():
    """gpu.cluster.launch runs a kernel in clusters: each block sees rank blockIdx % size, the cluster size,
    and cluster id blockIdx // size (the launch mode is the one gpu.cluster.launch_mode found)."""
    from sparsekit.gpu.cluster import cluster_probe, launch_mode
    print("cluster launch mode:", launch_mode())
    for size in (2, 4, 8, 16):
        got = cluster_probe(128, size)
        b = np.arange(128)
        assert (got[:, 0] == b % size).all() and (got[:, 1] == size).all() and (got[:, 2] == b // size).all(), size
