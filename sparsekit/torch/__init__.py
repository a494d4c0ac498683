"""sparsekit in PyTorch models (the optional ``torch`` extra: ``pip install -e '.[torch]'``).

:func:`sparsify_` replaces a model's ``nn.Linear`` layers in place with :class:`SparseLinear` (uniform
sparsity or 2:4, both stored as ELL rows: the kept values and their columns); :func:`sparsify_tiled_` with
:class:`TiledSparseLinear` (:mod:`sparsekit.torch.tiled`: a TiledCSL weight of any pattern, float16 or
bfloat16, on :mod:`gpu.spmm_tiled`). The product is the custom
op ``torch.ops.sparsekit.uspmm_linear``: traceable by ``torch.compile(fullgraph=True)`` (fake kernel),
differentiable (the input's gradient and the kept weights' gradient), on CUDA the library's USpMM with
its launches replayed through the driver (:mod:`sparsekit.launch`) on torch's current stream, so it can
be captured in a CUDA graph; on the CPU torch ops on the densified weight.

>>> import torch
>>> from sparsekit.torch import sparsify_
>>> model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.SiLU(), torch.nn.Linear(128, 64))
>>> model = sparsify_(model, sparsity=0.8)
>>> model[0]
SparseLinear(in_features=64, out_features=128, kept=13, bias=True)
>>> model(torch.randn(4, 64)).shape
torch.Size([4, 64])
"""
from sparsekit.torch.nn import PATTERNS, SparseLinear, sparsify_
from sparsekit.torch.ops import uspmm_linear
from sparsekit.torch.tiled import TiledSparseLinear, sparsify_tiled_

__all__ = ["SparseLinear", "sparsify_", "uspmm_linear", "PATTERNS", "TiledSparseLinear", "sparsify_tiled_"]
