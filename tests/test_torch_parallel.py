"""Tensor parallelism of sparse layers on the CPU: column shards reassemble the layer, row shards' partial
products sum to its product, and a sparse decoder sharded over 2 gloo processes gives each rank the
unsharded model's output."""
from __future__ import annotations

import copy
import socket

import pytest

torch = pytest.importorskip("torch", reason="sparsekit.torch needs the optional torch extra")

from sparsekit.torch import SparseLinear, sparsify_  # noqa: E402
from sparsekit.torch.decoder import Decoder, DecoderConfig  # noqa: E402
from sparsekit.torch.parallel import RowParallel, shard_columns, shard_rows, tensor_parallel_  # noqa: E402

CFG = DecoderConfig(hidden=64, ffn=160, heads=4, layers=2)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("pattern", ["uniform", "unstructured"])
def test_shards_reassemble_the_layer(world, pattern):
    torch.manual_seed(0)
    layer = SparseLinear.from_dense(torch.nn.Linear(64, 32), pattern=pattern, sparsity=0.7)
    x = torch.randn(5, 64)
    columns = [shard_columns(layer, r, world) for r in range(world)]
    assert torch.equal(torch.cat([c.to_dense().weight for c in columns]), layer.to_dense().weight)
    torch.testing.assert_close(torch.cat([c(x) for c in columns], dim=1), layer(x))
    rows = [shard_rows(layer, r, world) for r in range(world)]
    cols = layer.indices.long() & 0xFFFF
    for r, s in enumerate(rows):                                            # padded to the shard's longest row
        longest = int(((cols >= r * 64 // world) & (cols < (r + 1) * 64 // world)).sum(1).max())
        assert s.values.shape[1] == max(8, -(-longest // 8) * 8)
    assert torch.equal(torch.cat([s.to_dense().weight for s in rows], dim=1), layer.to_dense().weight)
    part = 64 // world
    partial = sum(s(x[:, r * part:(r + 1) * part]) for r, s in enumerate(rows))
    torch.testing.assert_close(partial + layer.bias, layer(x), rtol=1e-5, atol=1e-5)
    layer.inference_copies = ("compact",)                                # a shard keeps its layer's choice
    assert shard_columns(layer, 0, world).inference_copies == shard_rows(layer, 0, world).inference_copies == {"compact"}


def test_dense_layers_shard_too_and_bad_splits_are_refused():
    dense = torch.nn.Linear(8, 6)
    assert torch.equal(shard_columns(dense, 1, 2).weight, dense.weight[3:])
    assert torch.equal(shard_rows(dense, 1, 2).weight, dense.weight[:, 4:]) and shard_rows(dense, 1, 2).bias is None
    with pytest.raises(ValueError, match="does not split evenly"):
        shard_columns(dense, 0, 4)
    with pytest.raises(ValueError, match="rank: must be in 0..1"):
        shard_rows(dense, 2, 2)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sharded_run(rank: int, world: int, port: int, results: str, cfg=CFG, device: str = "cpu",
                dtype: str = "float32") -> None:
    """One gloo rank: a sparse decoder and its shard for this rank, a prefill and a decode step each; saves
    ``{diff, scale, pads, reduce_us}`` (their largest difference, the output's scale, the row shards' padding,
    the time of an all-reduce of two rows by :func:`sparsekit.torch.bench.all_reduce_us`)."""
    import torch.distributed as dist

    from sparsekit.torch.bench import all_reduce_us

    dist.init_process_group("gloo", rank=rank, world_size=world, init_method=f"tcp://127.0.0.1:{port}")
    try:
        whole = sparsify_(Decoder(cfg, seed=3, device=device, dtype=getattr(torch, dtype)), sparsity=0.7)
        shard = tensor_parallel_(copy.deepcopy(whole), rank, world)
        torch.manual_seed(1)
        x = torch.randn(2, 6, cfg.hidden, device=device, dtype=getattr(torch, dtype))
        out = []
        for model in (whole, shard):
            model.allocate_cache(2, 7)
            with torch.no_grad():
                prefill = model(x, torch.arange(6, device=device))
                step = model(x[:, -1:], torch.tensor([6], device=device))
            out.append(torch.cat([prefill, step], dim=1).float())
        pads = [m.padding for m in shard.modules() if isinstance(m, RowParallel)]
        reduce_us = all_reduce_us((2, cfg.hidden), getattr(torch, dtype), device, calls=3)
        torch.save(dict(diff=float((out[0] - out[1]).abs().max()), scale=float(out[0].abs().max()), pads=pads,
                        reduce_us=reduce_us), f"{results}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
def test_decoder_over_gloo_ranks_equals_unsharded(world, tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(sharded_run, args=(world, _free_port(), str(tmp_path)), nprocs=world, join=True)
    for rank in range(world):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        assert got["diff"] <= 1e-5 * got["scale"], got                    # float32: sums in another order
        assert len(got["pads"]) == 2 * CFG.layers and all(p >= 0 for p in got["pads"])
        assert got["reduce_us"] > 0                                        # the all-reduce timer ran on both
