"""2:4 sparsifier at the edge of its 32-bit addressing: the largest float16 weight it takes (2**32 elements,
8 GiB) is sparsified right in its first rows, the rows whose offsets pass 2**31, and its last rows; one row
block more is refused before anything is allocated."""
from __future__ import annotations

import numpy as np
import pytest

from sparsekit.reference import sparsify24 as ref

pytestmark = pytest.mark.gpu
SIDE = 65536            # SIDE x SIDE float16 = 2**32 elements, gpu.sparsify24.MAX_ELEMENTS[16]


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def test_largest_float16_weight_is_right_past_2_to_the_31_elements():
    torch = _torch()
    if torch is None:
        pytest.skip("needs PyTorch with CUDA (to fill 8 GiB on the device)")
    from numba import cuda

    from sparsekit.gpu import sparsify24 as gpu

    assert gpu.MAX_ELEMENTS[16] == SIDE * SIDE
    w = torch.randn(SIDE, SIDE, device="cuda", dtype=torch.float16, generator=torch.Generator("cuda").manual_seed(0))
    out = gpu.sparsify24(cuda.as_cuda_array(w))
    # rows 0.., 32768.. (their element offsets pass 2**31) and the last 32 (offsets up to 2**32 - 1)
    for r0 in (0, SIDE // 2, SIDE - 32):
        want = ref.sparsify24(w[r0:r0 + 32].cpu().numpy())
        assert np.array_equal(out.tile_masks[r0 // 4:r0 // 4 + 8].copy_to_host(), want.tile_masks), r0
        got = out.packed[r0:r0 + 32].copy_to_host()
        assert np.array_equal(got.view(np.uint16), want.packed.view(np.uint16)), r0
    del out, w
    torch.cuda.empty_cache()


def test_one_row_block_more_is_refused_before_allocating():
    torch = _torch()
    if torch is None:
        pytest.skip("needs PyTorch with CUDA")
    from numba import cuda

    from sparsekit.gpu import sparsify24 as gpu

    w = torch.empty(SIDE + 32, SIDE, device="cuda", dtype=torch.float16)
    free = torch.cuda.mem_get_info()[0]
    with pytest.raises(ValueError, match="w: a float16 weight may have at most 4294967296 elements"):
        gpu.prepare(cuda.as_cuda_array(w))
    assert torch.cuda.mem_get_info()[0] >= free - (64 << 20)
