"""Tensor parallelism through the GPU kernels: a bfloat16 sparse decoder (hidden 1024) sharded over two
processes (gloo, both on GPU 0: the shards' products run on the GPU kernels, the all-reduce through the host)
gives each rank the unsharded model's output within bfloat16 rounding between shards. The NCCL run over
several GPUs is ``torchrun --nproc-per-node 2 -m sparsekit bench e2e --tp 2``."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="sparsekit.torch needs the optional torch extra")

from sparsekit.torch.decoder import DecoderConfig  # noqa: E402
from tests.test_torch_parallel import _free_port, sharded_run  # noqa: E402

pytestmark = pytest.mark.gpu


def test_sharded_decoder_on_the_gpu_equals_unsharded(tmp_path):
    import torch.multiprocessing as mp

    cfg = DecoderConfig(hidden=1024, ffn=2816, heads=8, layers=2)
    mp.spawn(sharded_run, args=(2, _free_port(), str(tmp_path), cfg, "cuda", "bfloat16"), nprocs=2, join=True)
    for rank in range(2):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        assert got["diff"] <= 5e-2 * got["scale"], got        # bfloat16: each shard's sum rounded, then added
