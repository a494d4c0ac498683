"""GEMM/SpMM layer shapes of common networks, derived from their architecture definitions.

Every layer becomes one matrix product ``C (m x n) = W (m x k) @ X (k x n)``:

* a linear layer on ``T`` tokens: ``m = out_features``, ``k = in_features``,
  ``n = batch * T``;
* a convolution through im2col: ``m = out_channels``,
  ``k = in_channels / groups * kh * kw``, ``n = batch * output positions``;
  a depthwise one has ``groups = channels`` (``m = C``, ``k = kh * kw``) and
  ``inputs`` = the feature map's size (what it reads instead of a ``k x n`` matrix);
* attention's activation products (``Q K^T`` and ``A V``, per head and window)
  are layers with ``weights=False``: they cost time but there is nothing to prune.

The builders below loop over the stages and blocks of each architecture as its
paper (and the torchvision/timm reference code) defines them; nothing is a typed
table of shapes. :func:`model` builds one by name; :data:`MODELS` lists them.
MACs (multiply-adds) are ``sum(m * k * n * count)``; FLOPs are twice that.

>>> layers = model("resnet50", batch=1)
>>> round(macs(layers) / 1e9, 2)           # torchvision: 4.09 GMACs ("GFLOPS") at 224x224
4.09
>>> layers[0]
Layer(name='conv1', m=64, k=147, n=12544, count=1, groups=1, weights=True, kind='conv', inputs=None)

The 20-problem DL SpMM suite of the course slides (Sputnik/SparseRT study,
Table 1: ResNet-50, Transformer and MobileNetV1 at batch 1) is :data:`SPMM_SUITE`;
the tests check that every problem is a layer these builders derive.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from sparsekit.checks import check_int

__all__ = ["Layer", "SuiteProblem", "MODELS", "SPMM_SUITE", "model", "macs", "weight_count",
           "resnet50", "mobilenet_v1", "efficientnet_b4", "convnext_tiny", "swin_tiny", "deit_small",
           "mixer_s16", "bert_base", "transformer"]


@dataclass(frozen=True)
class Layer:
    """One GEMM of a network: ``C (m x n) = W (m x k) @ X (k x n)``, ``count`` times."""

    name: str
    m: int
    k: int
    n: int
    count: int = 1          #: identical products (attention heads x windows x batch)
    groups: int = 1         #: grouped conv (depthwise: groups = m)
    weights: bool = True    #: False for activation x activation products
    kind: str = "linear"    #: "conv", "dwconv", "linear", "attention"
    inputs: int | None = None   #: elements of X read, where not k * n (depthwise: the feature map)

    @property
    def macs(self) -> int:
        return self.m * self.k * self.n * self.count


def macs(layers) -> int:
    """Multiply-adds of all layers."""
    return sum(l.macs for l in layers)


def weight_count(layers) -> int:
    """Weights of all layers that have them (biases and norms not included)."""
    return sum(l.m * l.k * l.count for l in layers if l.weights)


def _conv_out(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


class _Net:
    """Tracks the feature map (channels, height, width) while layers are appended."""

    def __init__(self, channels: int, size: int, batch: int):
        self.c, self.h, self.w, self.batch = channels, size, size, batch
        self.layers: list[Layer] = []

    def conv(self, name: str, out: int, kernel: int, stride: int = 1, padding: int | None = None,
             groups: int = 1) -> None:
        pad = kernel // 2 if padding is None else padding
        h, w = _conv_out(self.h, kernel, stride, pad), _conv_out(self.w, kernel, stride, pad)
        depthwise = groups == self.c and groups > 1
        # a depthwise conv's im2col matrix is never formed: it reads its feature map once
        inputs = self.batch * self.c * self.h * self.w if depthwise else None
        self.layers.append(Layer(name, out, self.c // groups * kernel * kernel, self.batch * h * w,
                                 groups=groups, kind="dwconv" if depthwise else "conv", inputs=inputs))
        self.c, self.h, self.w = out, h, w

    def tokens_linear(self, name: str, out: int, tokens: int, k: int | None = None) -> None:
        """A linear layer applied to ``tokens`` positions per sample (feature map unchanged)."""
        self.layers.append(Layer(name, out, self.c if k is None else k, self.batch * tokens))

    def attention(self, name: str, tokens: int, head_dim: int, heads: int, windows: int = 1) -> None:
        count = heads * windows * self.batch
        self.layers.append(Layer(f"{name}.qk", tokens, head_dim, tokens, count, weights=False, kind="attention"))
        self.layers.append(Layer(f"{name}.av", tokens, tokens, head_dim, count, weights=False, kind="attention"))

    def pool(self, size: int = 1) -> None:
        self.h = self.w = size

    def fc(self, name: str, out: int) -> None:
        self.layers.append(Layer(name, out, self.c, self.batch))
        self.c = out


# ----------------------------------------------------------------------------- CNNs

def resnet50(batch: int = 1, image: int = 224, classes: int = 1000) -> list[Layer]:
    """ResNet-50 v1.5 (torchvision): stride in the 3x3 conv of each bottleneck (He et al., 2016)."""
    net = _Net(3, image, batch)
    net.conv("conv1", 64, 7, stride=2, padding=3)
    net.h, net.w = _conv_out(net.h, 3, 2, 1), _conv_out(net.w, 3, 2, 1)   # 3x3/2 max-pool
    for stage, (width, blocks, stride) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3), (1, 2, 2, 2)), 1):
        for b in range(blocks):
            s = stride if b == 0 else 1
            cin, h, w = net.c, net.h, net.w
            name = f"layer{stage}.{b}"
            net.conv(f"{name}.conv1", width, 1)
            net.conv(f"{name}.conv2", width, 3, stride=s)
            net.conv(f"{name}.conv3", 4 * width, 1)
            if b == 0:   # projection shortcut on the block's input
                out = (net.c, net.h, net.w)
                net.c, net.h, net.w = cin, h, w
                net.conv(f"{name}.downsample", 4 * width, 1, stride=s)
                net.c, net.h, net.w = out
    net.pool()
    net.fc("fc", classes)
    return net.layers


def mobilenet_v1(batch: int = 1, image: int = 224, classes: int = 1000, width: float = 1.0) -> list[Layer]:
    """MobileNetV1 (Howard et al., 2017, Table 1): a 3x3 conv, 13 depthwise-separable blocks, FC."""
    c = lambda ch: int(ch * width)   # noqa: E731  (the paper's width multiplier alpha)
    net = _Net(3, image, batch)
    net.conv("conv0", c(32), 3, stride=2)
    plan = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
    for i, (out, stride) in enumerate(plan, 1):
        net.conv(f"block{i}.dw", net.c, 3, stride=stride, groups=net.c)
        net.conv(f"block{i}.pw", c(out), 1)
    net.pool()
    net.fc("fc", classes)
    return net.layers


def _round_filters(channels: float, width: float, divisor: int = 8) -> int:
    """EfficientNet's channel rounding (official ``round_filters``)."""
    c = channels * width
    new = max(divisor, int(c + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * c else new


def efficientnet_b4(batch: int = 1, image: int = 380, classes: int = 1000) -> list[Layer]:
    """EfficientNet-B4 (Tan & Le, 2019): the B0 MBConv plan scaled by width 1.4, depth 1.8, 380 px.

    MBConv = 1x1 expansion (ratio 6), depthwise kxk, squeeze-and-excitation (0.25
    of the block's input channels, on the pooled 1x1 map), 1x1 projection.
    """
    width, depth = 1.4, 1.8
    b0 = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
          (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]
    net = _Net(3, image, batch)
    net.conv("stem", _round_filters(32, width), 3, stride=2)
    for stage, (expand, kernel, stride, _, out, repeats) in enumerate(b0):
        for r in range(math.ceil(depth * repeats)):
            name, cin = f"blocks.{stage}.{r}", net.c
            s = stride if r == 0 else 1
            if expand != 1:
                net.conv(f"{name}.expand", cin * expand, 1)
            net.conv(f"{name}.dw", net.c, kernel, stride=s, groups=net.c)
            mid, h, w = net.c, net.h, net.w
            squeeze = max(1, int(cin * 0.25))
            net.layers.append(Layer(f"{name}.se.reduce", squeeze, mid, batch, kind="conv"))
            net.layers.append(Layer(f"{name}.se.expand", mid, squeeze, batch, kind="conv"))
            net.conv(f"{name}.project", _round_filters(out, width), 1)
    net.conv("head", _round_filters(1280, width), 1)
    net.pool()
    net.fc("classifier", classes)
    return net.layers


def convnext_tiny(batch: int = 1, image: int = 224, classes: int = 1000) -> list[Layer]:
    """ConvNeXt-T (Liu et al., 2022): 4x4/4 stem, stages (3, 3, 9, 3) x (96, 192, 384, 768),
    blocks of 7x7 depthwise conv + 1x1 MLP (ratio 4), 2x2/2 downsampling convs."""
    net = _Net(3, image, batch)
    net.conv("stem", 96, 4, stride=4, padding=0)
    for stage, (dim, depth) in enumerate(zip((96, 192, 384, 768), (3, 3, 9, 3))):
        if stage:
            net.conv(f"downsample{stage}", dim, 2, stride=2, padding=0)
        for b in range(depth):
            name = f"stages.{stage}.{b}"
            net.conv(f"{name}.dwconv", dim, 7, groups=dim)
            tokens = net.h * net.w
            net.tokens_linear(f"{name}.pwconv1", 4 * dim, tokens)
            net.tokens_linear(f"{name}.pwconv2", dim, tokens, k=4 * dim)
    net.pool()
    net.fc("head", classes)
    return net.layers


# ----------------------------------------------------------------------------- transformers

def _encoder_block(net: _Net, name: str, tokens: int, dim: int, heads: int, mlp: int,
                   windows: int = 1, window_tokens: int | None = None) -> None:
    """Pre-norm ViT block: qkv, attention (per window), proj, MLP fc1/fc2; ``net.c == dim``."""
    net.tokens_linear(f"{name}.attn.qkv", 3 * dim, tokens)
    net.attention(f"{name}.attn", window_tokens or tokens, dim // heads, heads, windows)
    net.tokens_linear(f"{name}.attn.proj", dim, tokens)
    net.tokens_linear(f"{name}.mlp.fc1", mlp, tokens)
    net.tokens_linear(f"{name}.mlp.fc2", dim, tokens, k=mlp)


def deit_small(batch: int = 1, image: int = 224, classes: int = 1000) -> list[Layer]:
    """DeiT-S (Touvron et al., 2021) = ViT-S/16: 16x16 patches + class token, 12 blocks, dim 384, 6 heads."""
    net = _Net(3, image, batch)
    net.conv("patch_embed", 384, 16, stride=16, padding=0)
    tokens = net.h * net.w + 1
    for b in range(12):
        _encoder_block(net, f"blocks.{b}", tokens, 384, 6, 4 * 384)
    net.fc("head", classes)   # on the class token
    return net.layers


def swin_tiny(batch: int = 1, image: int = 224, classes: int = 1000) -> list[Layer]:
    """Swin-T (Liu et al., 2021): 4x4 patches, stages (2, 2, 6, 2) x (96, 192, 384, 768), heads
    (3, 6, 12, 24), 7x7 windows, patch merging (2x2 concat -> linear 4C -> 2C) between stages."""
    window = 7
    net = _Net(3, image, batch)
    net.conv("patch_embed", 96, 4, stride=4, padding=0)
    for stage, (dim, depth, heads) in enumerate(zip((96, 192, 384, 768), (2, 2, 6, 2), (3, 6, 12, 24))):
        if stage:
            net.h, net.w = net.h // 2, net.w // 2
            net.tokens_linear(f"layers.{stage - 1}.downsample", dim, net.h * net.w, k=4 * net.c)
            net.c = dim
        tokens = net.h * net.w
        win = min(window, net.h)
        windows = (net.h // win) * (net.w // win)
        for b in range(depth):
            _encoder_block(net, f"layers.{stage}.blocks.{b}", tokens, dim, heads, 4 * dim,
                           windows=windows, window_tokens=win * win)
    net.fc("head", classes)   # after global average pooling
    return net.layers


def mixer_s16(batch: int = 1, image: int = 224, classes: int = 1000) -> list[Layer]:
    """MLP-Mixer-S/16 (Tolstikhin et al., 2021): 8 layers, C=512, token MLP 256, channel MLP 2048."""
    dim, depth, token_mlp, channel_mlp = 512, 8, 256, 2048
    net = _Net(3, image, batch)
    net.conv("stem", dim, 16, stride=16, padding=0)
    tokens = net.h * net.w
    for b in range(depth):
        name = f"blocks.{b}"
        # token mixing acts on the transposed (tokens x channels) table: n = channels
        net.layers.append(Layer(f"{name}.mlp_tokens.fc1", token_mlp, tokens, batch * dim))
        net.layers.append(Layer(f"{name}.mlp_tokens.fc2", tokens, token_mlp, batch * dim))
        net.tokens_linear(f"{name}.mlp_channels.fc1", channel_mlp, tokens)
        net.tokens_linear(f"{name}.mlp_channels.fc2", dim, tokens, k=channel_mlp)
    net.fc("head", classes)
    return net.layers


def bert_base(batch: int = 1, seq: int = 128) -> list[Layer]:
    """BERT-base encoder (Devlin et al., 2019): 12 layers, hidden 768, 12 heads, FFN 3072, ``seq`` tokens."""
    return _transformer_stack(batch, seq, dim=768, ff=3072, heads=12, encoder=12, decoder=0, prefix="encoder")


def transformer(batch: int = 1, tokens: int = 256, size: str = "base") -> list[Layer]:
    """The Transformer (Vaswani et al., 2017), 6 encoder + 6 decoder layers; ``size`` "base"
    (d 512, FFN 2048, 8 heads) or "big" (d 1024, FFN 4096, 16 heads). Source and target both
    hold ``tokens`` tokens; the decoder has self- and cross-attention."""
    dims = {"base": (512, 2048, 8), "big": (1024, 4096, 16)}
    if size not in dims:
        raise ValueError(f"size: expected one of {', '.join(dims)}, got {size!r}")
    dim, ff, heads = dims[size]
    return _transformer_stack(batch, tokens, dim=dim, ff=ff, heads=heads, encoder=6, decoder=6, prefix="")


def _transformer_stack(batch, tokens, *, dim, ff, heads, encoder, decoder, prefix) -> list[Layer]:
    batch = check_int(batch, "batch", minimum=1)
    tokens = check_int(tokens, "tokens", minimum=1)
    net = _Net(dim, 1, batch)

    def attention(name):
        for proj in ("q", "k", "v"):
            net.tokens_linear(f"{name}.{proj}", dim, tokens)
        net.attention(name, tokens, dim // heads, heads)
        net.tokens_linear(f"{name}.o", dim, tokens)

    def ffn(name):
        net.tokens_linear(f"{name}.ffn1", ff, tokens)
        net.tokens_linear(f"{name}.ffn2", dim, tokens, k=ff)

    for i in range(encoder):
        name = f"{prefix or 'encoder'}.{i}"
        attention(f"{name}.self")
        ffn(name)
    for i in range(decoder):
        name = f"decoder.{i}"
        attention(f"{name}.self")
        attention(f"{name}.cross")
        ffn(name)
    return net.layers


# ----------------------------------------------------------------------------- registry

#: name -> builder(batch=..., **options)
MODELS: dict[str, Callable[..., list[Layer]]] = {
    "resnet50": resnet50,
    "convnext-tiny": convnext_tiny,
    "swin-tiny": swin_tiny,
    "deit-small": deit_small,
    "efficientnet-b4": efficientnet_b4,
    "mixer-s16": mixer_s16,
    "mobilenet-v1": mobilenet_v1,
    "transformer": transformer,
    "transformer-big": lambda batch=1, tokens=256: transformer(batch, tokens, size="big"),
    "bert-base": bert_base,
}


def model(name: str, batch: int = 1, **options) -> list[Layer]:
    """Layers of model ``name`` (see :data:`MODELS`; ``-``/``_`` and case are ignored) at ``batch``."""
    if not isinstance(name, str):
        raise TypeError(f"name: expected a model name, got {type(name).__name__}")
    key = name.lower().replace("_", "-")
    aliases = {"convnext-t": "convnext-tiny", "swin-t": "swin-tiny", "deit-s": "deit-small",
               "mixer-s": "mixer-s16", "mlp-mixer-s": "mixer-s16", "mobilenetv1": "mobilenet-v1",
               "efficientnetb4": "efficientnet-b4", "bert": "bert-base", "transformer-base": "transformer",
               "resnet-50": "resnet50"}
    key = aliases.get(key, key)
    if key not in MODELS:
        raise ValueError(f"name: unknown model {name!r}; known: {', '.join(MODELS)}")
    return MODELS[key](batch=check_int(batch, "batch", minimum=1), **options)


# ----------------------------------------------------------------------------- SpMM suite

@dataclass(frozen=True)
class SuiteProblem:
    """One problem of the DL SpMM suite (course slides, Table 1)."""

    number: int
    m: int
    k: int
    n: int
    use_case: str    #: "RN50", "NLP" (Transformer) or "MbNetV1"
    count: int       #: occurrences in the network, as the slides give them


#: The 20 SpMM problems of the course slides' Table 1 (Sputnik / SparseRT study), at
#: batch 1; benchmarked there at 90% and 95% sparsity (MobileNetV1 at 90% only).
SPMM_SUITE: tuple[SuiteProblem, ...] = tuple(SuiteProblem(*row) for row in (
    (1, 64, 256, 3136, "RN50", 2), (2, 256, 64, 3136, "RN50", 2), (3, 128, 512, 784, "RN50", 3),
    (4, 512, 128, 784, "RN50", 3), (5, 256, 1024, 196, "RN50", 5), (6, 1024, 256, 196, "RN50", 5),
    (7, 512, 2048, 49, "RN50", 3), (8, 2048, 512, 49, "RN50", 3),
    (9, 2048, 512, 256, "NLP", 12), (10, 512, 2048, 256, "NLP", 12), (11, 512, 512, 256, "NLP", 72),
    (12, 64, 32, 12544, "MbNetV1", 1), (13, 128, 64, 3136, "MbNetV1", 1), (14, 128, 128, 3136, "MbNetV1", 1),
    (15, 256, 128, 784, "MbNetV1", 1), (16, 256, 256, 784, "MbNetV1", 1), (17, 512, 256, 196, "MbNetV1", 1),
    (18, 512, 512, 196, "MbNetV1", 5), (19, 1024, 512, 49, "MbNetV1", 1), (20, 1024, 1024, 49, "MbNetV1", 1),
))

#: The suite's use cases and the derived model each comes from (batch 1; Transformer at 256 tokens).
SUITE_MODELS = {"RN50": ("resnet50", {}), "NLP": ("transformer", {"tokens": 256}), "MbNetV1": ("mobilenet-v1", {})}
