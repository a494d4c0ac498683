"""Tensor parallelism through the GPU kernels: a bfloat16 sparse decoder (hidden 1024) sharded over two
processes (gloo, both on GPU 0: the shards' products run on the GPU kernels, the all-reduce through the host)
gives each rank the unsharded model's output within bfloat16 rounding between shards. The NCCL run over
several GPUs is ``torchrun --nproc-per-node 2 -m sparsekit bench e2e --tp 2``."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch", reason="sparsekit.torch needs the optional torch extra")

from tests.test_torch_parallel import _free_port  # noqa: E402

pytestmark = pytest.mark.gpu


def _worker(rank: int, world: int, port: int, results: str) -> None:
    import torch.distributed as dist

    from sparsekit.torch import sparsify_
    from sparsekit.torch.decoder import Decoder, DecoderConfig
    from sparsekit.torch.parallel import tensor_parallel_

    dist.init_process_group("gloo", rank=rank, world_size=world, init_method=f"tcp://127.0.0.1:{port}")
    try:
        cfg = DecoderConfig(hidden=1024, ffn=2816, heads=8, layers=2)
        whole = sparsify_(Decoder(cfg, seed=3, device="cuda", dtype=torch.bfloat16), sparsity=0.8)
        shard = tensor_parallel_(copy.deepcopy(whole), rank, world)
        torch.manual_seed(1)
        x = torch.randn(1, 8, cfg.hidden, device="cuda", dtype=torch.bfloat16)
        out = []
        for model in (whole, shard):
            model.allocate_cache(1, 9)
            with torch.no_grad():
                out.append(torch.cat([model(x, torch.arange(8, device="cuda")),
                                      model(x[:, -1:], torch.tensor([8], device="cuda"))], dim=1).float())
        torch.save(dict(diff=float((out[0] - out[1]).abs().max()), scale=float(out[0].abs().max())),
                   f"{results}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_sharded_decoder_on_the_gpu_equals_unsharded(tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    for rank in range(2):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        assert got["diff"] <= 5e-2 * got["scale"], got        # bfloat16: each shard's sum rounded, then added
