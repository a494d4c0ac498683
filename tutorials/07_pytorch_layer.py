"""Tutorial 7: sparse linear layers inside a PyTorch model.

What you will learn
-------------------
1. ``sparsekit.torch.sparsify_`` replaces a model's ``nn.Linear`` layers with ``SparseLinear``: each row
   keeps its largest weights (uniform sparsity), stored as padded ELL rows, the kept values and their
   16-bit columns (``sparsekit/reference/spmm_ell_rows.py``): 4 bytes a kept weight against 2 a dense one, so 80 %
   sparsity stores 0.4 of the dense bytes;
2. the sparse model computes what the dense model with the pruned weights computes (float32 accumulation);
3. ``torch.compile(fullgraph=True)`` traces it with no graph break: the product is a custom op
   (``torch.ops.sparsekit.sparse_linear``) with a fake kernel;
4. fine-tuning keeps the pattern: gradients reach the kept values only;
5. on a GPU, the decode-sized product is bound by reading the weight: one row of ``x`` without autograd runs
   ``sparsekit/gpu/spmm_ell_compact.py`` on a copy of the rows at 3.25 bytes a kept weight (below 87.5 %
   sparsity; ``sparsekit/gpu/spmm_ell_rows.py`` on the rows otherwise), and a whole decoder runs faster than
   dense at batch 1: the measured table is quoted from ``experiments/results/torch_decoder.md``.

Steps 1-4 run on the CPU (PyTorch is the optional ``torch`` extra: ``pip install -e '.[torch]'``).

Run it: ``python tutorials/07_pytorch_layer.py`` (``--quick`` for toy sizes).
"""
from __future__ import annotations

import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "experiments" / "results" / "torch_decoder.md"
#: The line of RESULTS that heads the quoted table.
RESULTS_MARKER = "| mode | phase | batch | tokens | dense tokens/s |"


def quoted_table() -> str:
    """The end-to-end table of the measured record (header, rule and rows)."""
    lines = RESULTS.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(RESULTS_MARKER))
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))
    return "\n".join(lines[start:end])


def main(quick: bool = False) -> bool:
    import torch

    from sparsekit.torch import SparseLinear, sparsify_

    hidden = 64 if quick else 512
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(hidden, 4 * hidden), torch.nn.SiLU(),
                                torch.nn.Linear(4 * hidden, hidden)).to(torch.bfloat16)
    dense = [m.weight.numel() * m.weight.element_size() for m in model if isinstance(m, torch.nn.Linear)]

    print("1. sparsify_ at 80 %: every nn.Linear becomes a SparseLinear")
    sparsify_(model, sparsity=0.8)
    for layer, dense_bytes in zip((m for m in model if isinstance(m, SparseLinear)), dense):
        print(f"   {layer}: {layer.weight_bytes()} bytes stored, {layer.weight_bytes() / dense_bytes:.2f} of "
              f"the dense weight (rows padded to a multiple of 8 entries)")

    print("2. the same output as the dense model with the pruned weights")
    pruned = torch.nn.Sequential(model[0].to_dense(), model[1], model[2].to_dense())
    x = torch.randn(4, hidden, dtype=torch.bfloat16)
    with torch.no_grad():
        want = pruned(x).float()
        difference = float((model(x).float() - want).abs().max() / want.abs().max())
    print(f"   largest difference {difference:.1e} of the output's scale (bfloat16 roundings in another order)")
    assert difference < 2e-2

    print("3. torch.compile(fullgraph=True) traces it with no graph break")
    explained = torch._dynamo.explain(model)(x)
    print(f"   graphs {explained.graph_count}, graph breaks {explained.graph_break_count}")
    assert explained.graph_break_count == 0

    print("4. a fine-tuning step keeps the pattern")
    before = model[0].to_dense().weight != 0
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(x).float().square().mean().backward()
    optimizer.step()
    after = model[0].to_dense().weight != 0
    print(f"   new nonzeros after the step: {int((after & ~before).sum())}")
    assert not (after & ~before).any()

    print(f"5. on the H200, an 8-layer Llama-style decoder, tokens/s over dense ({RESULTS.name}):")
    print(quoted_table())
    return True


if __name__ == "__main__":
    sys.exit(0 if main(quick="--quick" in sys.argv) else 1)
