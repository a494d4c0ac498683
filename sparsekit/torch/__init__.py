"""sparsekit in PyTorch models (the optional ``torch`` extra): :class:`SparseLinear`, :func:`sparsify_`
and the custom op ``torch.ops.sparsekit.uspmm_linear`` (traceable by ``torch.compile(fullgraph=True)``,
differentiable, capturable in CUDA graphs)."""
from sparsekit.torch.nn import PATTERNS, SparseLinear, sparsify_
from sparsekit.torch.ops import uspmm_linear

__all__ = ["SparseLinear", "sparsify_", "uspmm_linear", "PATTERNS"]
