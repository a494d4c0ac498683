"""A Llama-style decoder stack for end-to-end measurements: RMSNorm, rotary embeddings, multi-head
attention over a static KV cache, SwiGLU; seeded random weights (no embedding or LM head: hidden states
in, hidden states out).

The cache has a fixed length and positions are a device tensor, so one decode step has fixed shapes and
no host sync: it can be compiled with ``torch.compile(fullgraph=True)`` and captured in a CUDA graph.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["DecoderConfig", "Decoder", "LLAMA_8_LAYERS", "TINY", "linear_weight_bytes"]


@dataclass(frozen=True)
class DecoderConfig:
    hidden: int
    ffn: int
    heads: int
    layers: int
    rope_base: float = 10000.0
    eps: float = 1e-5


#: Llama-2/3-7B-sized layers (hidden 4096, FFN 14336, 32 heads), 8 of them.
LLAMA_8_LAYERS = DecoderConfig(hidden=4096, ffn=14336, heads=32, layers=8)
#: The same structure at a size the CPU and the simulator run in seconds.
TINY = DecoderConfig(hidden=64, ffn=160, heads=4, layers=2)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        norm = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (norm * self.weight.float()).to(x.dtype)


def _rotate(x, cos, sin):
    """Rotary embedding on the last axis (pairs: first half with second half)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Block(nn.Module):
    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        h, self.heads, self.head_dim = cfg.hidden, cfg.heads, cfg.hidden // cfg.heads
        self.attn_norm, self.mlp_norm = RMSNorm(h, cfg.eps), RMSNorm(h, cfg.eps)
        self.q, self.k, self.v, self.o = (nn.Linear(h, h, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(h, cfg.ffn, bias=False), nn.Linear(h, cfg.ffn, bias=False)
        self.down = nn.Linear(cfg.ffn, h, bias=False)
        self.k_cache = self.v_cache = None

    def forward(self, x, positions, cos, sin, mask):
        b, t, h = x.shape
        a = self.attn_norm(x)
        q, k, v = (proj(a).view(b, t, self.heads, self.head_dim).transpose(1, 2) for proj in (self.q, self.k, self.v))
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        self.k_cache.index_copy_(2, positions, k)
        self.v_cache.index_copy_(2, positions, v)
        att = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, attn_mask=mask)
        x = x + self.o(att.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))   # (this rank's heads)
        m = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(m)) * self.up(m))


class Decoder(nn.Module):
    """``forward(x, positions)``: ``x`` (batch, tokens, hidden) at cache ``positions`` (tokens,) int64."""

    def __init__(self, cfg: DecoderConfig, seed: int = 0, device=None, dtype=None):
        super().__init__()
        self.cfg = cfg
        with torch.random.fork_rng(devices=[]), torch.device(device or "cpu"):
            torch.manual_seed(seed)                        # (initialised where they live: 8 GB at full size)
            self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers)).to(dtype)
        head_dim = cfg.hidden // cfg.heads
        inv = 1.0 / cfg.rope_base ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device or "cpu")
                                      / head_dim)
        self.register_buffer("inv_freq", inv, persistent=False)

    def allocate_cache(self, batch: int, length: int) -> None:
        """A fresh zeroed KV cache of ``length`` positions for ``batch`` sequences in every block."""
        p = next(self.parameters())
        for blk in self.blocks:
            shape = (batch, blk.heads, length, blk.head_dim)              # (this rank's heads when sharded)
            blk.k_cache = torch.zeros(shape, dtype=p.dtype, device=p.device)
            blk.v_cache = torch.zeros(shape, dtype=p.dtype, device=p.device)

    def forward(self, x, positions):
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        cos, sin = freqs.cos().to(x.dtype), freqs.sin().to(x.dtype)
        length = self.blocks[0].k_cache.shape[2]
        mask = torch.arange(length, device=x.device)[None, :] <= positions[:, None]
        for blk in self.blocks:
            x = blk(x, positions, cos, sin, mask)
        return x


def linear_weight_bytes(model: nn.Module) -> int:
    """Bytes of every linear layer's stored weight (dense ``nn.Linear`` or :class:`SparseLinear`)."""
    from sparsekit.torch.nn import SparseLinear

    total = 0
    for mod in model.modules():
        if isinstance(mod, SparseLinear):
            total += mod.weight_bytes()
        elif isinstance(mod, nn.Linear):
            total += mod.weight.numel() * mod.weight.element_size()
    return total
