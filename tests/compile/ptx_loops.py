"""Where a kernel's hot loop is in its post-LTO PTX, for the compile checks that count what it holds."""
from __future__ import annotations

import re


def mma_loop(ptx: str) -> list[str]:
    """The lines of the longest loop (from the label a backward branch goes to, through that branch) that holds
    an ``mma.sync``: the per-tile or per-group loop of a tensor-core kernel."""
    lines = [x.strip() for x in ptx.splitlines()]
    labels = {m.group(1): i for i, x in enumerate(lines) if (m := re.match(r"^(\$L__\w+):", x))}
    mma = [i for i, x in enumerate(lines) if x.startswith("mma.sync")]
    spans = [(labels[m.group(1)], i) for i, x in enumerate(lines)
             if (m := re.search(r"bra(?:\.uni)?\s+(\$L__\w+);", x)) and labels.get(m.group(1), i) < i]
    lo, hi = max((s for s in spans if any(s[0] <= j <= s[1] for j in mma)), key=lambda s: s[1] - s[0])
    return lines[lo:hi + 1]
