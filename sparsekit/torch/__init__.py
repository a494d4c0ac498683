"""sparsekit in PyTorch models (the optional ``torch`` extra: ``pip install -e '.[torch]'``).

:func:`sparsify_` replaces a model's ``nn.Linear`` layers in place with :class:`SparseLinear`: the weight
pruned (uniform sparsity, 2:4 or unstructured) and stored as its kept entries only, 4 bytes a kept weight
in float16/bfloat16. The product is the custom op ``torch.ops.sparsekit.sparse_linear``: traceable by
``torch.compile(fullgraph=True)`` (fake kernel), differentiable (the input's gradient and the kept
weights' gradient); without autograd, ``torch.ops.sparsekit.sparse_linear_inference`` (no autograd kernel to
pass through); on CUDA a memory-bound sparse kernel at decode widths and dense GEMM on the weight
densified for the call beyond, its launches replayed through the driver (:mod:`sparsekit.launch`) on
torch's current stream, so it can be captured in a CUDA graph; on the CPU torch ops on the densified weight.

>>> import torch
>>> from sparsekit.torch import sparsify_
>>> model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.SiLU(), torch.nn.Linear(128, 64))
>>> model = sparsify_(model, sparsity=0.8)
>>> model[0]
SparseLinear(in_features=64, out_features=128, width=16, bias=True)
>>> model(torch.randn(4, 64)).shape
torch.Size([4, 64])
"""
from sparsekit.torch.nn import PATTERNS, SparseLinear, sparsify_
from sparsekit.torch.ops import sparse_linear, sparse_linear_inference

__all__ = ["SparseLinear", "sparsify_", "sparse_linear", "sparse_linear_inference", "PATTERNS"]
