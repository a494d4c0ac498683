"""Model-zoo layer shapes: derived totals match the architectures' published numbers."""
from __future__ import annotations

from collections import Counter

import pytest

from sparsekit import models
from sparsekit.models import MODELS, SPMM_SUITE, SUITE_MODELS, macs, model, weight_count

# (model, options, published MACs, published weights, relative tolerance, source)
# Our counts: conv/linear weights only (no biases, norms, embeddings) and the GEMMs only
# (no pooling, activations, softmax), so a small tolerance remains where sources count more.
PUBLISHED = [
    ("resnet50", {}, 4.09e9, 25.6e6, 0.01, "torchvision: 4.09 GFLOPS (MACs), 25.6M params"),
    ("mobilenet-v1", {}, 569e6, 4.2e6, 0.01, "Howard et al. 2017, Table 8: 569M mult-adds, 4.2M params"),
    ("convnext-tiny", {}, 4.5e9, 28.6e6, 0.02, "Liu et al. 2022, Table 1: 4.5G FLOPs, 28.6M params"),
    ("swin-tiny", {}, 4.5e9, 28.3e6, 0.02, "Liu et al. 2021, Table 1: 4.5G FLOPs, 28M params"),
    ("deit-small", {}, 4.6e9, 22e6, 0.01, "Touvron et al. 2021, Table 1: 4.6G FLOPs, 22M params"),
    ("mixer-s16", {}, 3.79e9, 18.5e6, 0.01, "timm mixer_s16_224: 3.79 GMACs, 18.5M params"),
    ("efficientnet-b4", {}, 4.2e9, 19e6, 0.05, "Tan & Le 2019, Table 2: 4.2B FLOPs (MACs), 19M params"),
    ("bert-base", {"seq": 128}, 11.2e9, 85e6, 0.01, "BERT-base encoder: ~11.2 GMACs at 128 tokens, "
                                                    "85M non-embedding weights (110M total)"),
]


@pytest.mark.parametrize("name, options, pub_macs, pub_weights, tol, source", PUBLISHED,
                         ids=[p[0] for p in PUBLISHED])
def test_known_totals(name, options, pub_macs, pub_weights, tol, source):
    layers = model(name, batch=1, **options)
    assert macs(layers) == pytest.approx(pub_macs, rel=tol), source
    assert weight_count(layers) == pytest.approx(pub_weights, rel=max(tol, 0.01)), source


def test_exact_hand_counts():
    # ResNet-50 stem: 7x7x3 -> 64 at 112x112; last block conv3 512 -> 2048 at 7x7
    r = model("resnet50")
    assert (r[0].m, r[0].k, r[0].n) == (64, 147, 112 * 112)
    last = [l for l in r if l.name == "layer4.2.conv3"][0]
    assert (last.m, last.k, last.n) == (2048, 512, 49)
    assert sum(1 for l in r if l.kind == "conv") == 53   # stem + 16 blocks x 3 + 4 projections
    # BERT-base linear MACs: 12 layers x seq x (4 d^2 + 2 d ff)
    b = [l for l in model("bert-base", seq=128) if l.weights]
    assert macs(b) == 12 * 128 * (4 * 768 ** 2 + 2 * 768 * 3072)
    # Swin-T stage 1: 64 windows of 49 tokens, 3 heads of 32
    qk = [l for l in model("swin-tiny") if l.name == "layers.0.blocks.0.attn.qk"][0]
    assert (qk.m, qk.k, qk.n, qk.count, qk.weights) == (49, 32, 49, 3 * 64, False)
    # MobileNetV1 depthwise: one 3x3 filter per channel
    dw = model("mobilenet-v1")[1]
    assert (dw.m, dw.k, dw.groups, dw.kind, dw.inputs) == (32, 9, 32, "dwconv", 32 * 112 * 112)


def test_batch_scales_n_and_macs_only():
    for name in MODELS:
        one, four = model(name, batch=1), model(name, batch=4)
        assert weight_count(one) == weight_count(four)
        assert macs(four) == 4 * macs(one)


def test_transformer_big_is_the_uniform_papers_model():
    big = model("transformer-big", tokens=1)
    assert {(l.m, l.k) for l in big if l.weights} == {(1024, 1024), (4096, 1024), (1024, 4096)}


def test_spmm_suite_is_twenty_problems_of_the_derived_models():
    assert [p.number for p in SPMM_SUITE] == list(range(1, 21))
    # 257 instances: RN50 and NLP at 90% and 95%, MobileNetV1 at 90% (slides)
    counts = Counter(p.use_case for p in SPMM_SUITE for _ in range(p.count))
    assert 2 * counts["RN50"] + 2 * counts["NLP"] + counts["MbNetV1"] == 257
    for case, (name, options) in SUITE_MODELS.items():
        derived = Counter((l.m, l.k, l.n) for l in model(name, batch=1, **options) if l.weights)
        for p in (p for p in SPMM_SUITE if p.use_case == case):
            assert (p.m, p.k, p.n) in derived, p
            if case != "RN50":   # the slides' RN50 counts skip some blocks; the others match exactly
                assert derived[(p.m, p.k, p.n)] == p.count, p


def test_bad_names_and_sizes():
    with pytest.raises(ValueError, match="unknown model 'vgg16'; known: resnet50, convnext-tiny"):
        model("vgg16")
    with pytest.raises(ValueError, match="batch: must be >= 1"):
        model("resnet50", batch=0)
    with pytest.raises(TypeError, match="name: expected a model name"):
        model(50)
    with pytest.raises(ValueError, match="size: expected one of base, big"):
        models.transformer(size="huge")
    assert model("ResNet_50") == model("resnet50")
