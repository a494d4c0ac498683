"""2:4 tile sparsifier on a real GPU: real shapes against the reference and PyTorch, repeats identical.

The same checks ran through ``experiments/bench_sparsify24.py --check`` on the H100
(experiments/results/sparsify24.md); these are their pytest form.
"""
from __future__ import annotations

import numpy as np
import pytest

from sparsekit.reference import sparsify24 as ref

pytestmark = pytest.mark.gpu
FIELDS = ("tile_masks", "packed", "meta", "packed_t", "meta_t")
OPTIONS = [("greedy", "index"), ("greedy", "torch"), ("optimal", "index"), ("optimal_full", "index")]


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


# every option, dtype and shape (each kernel compiles in seconds since gpu.sparsify24._pick)
CASES = [(m, t, d, s) for m, t in OPTIONS for d in (np.float16, np.float32) for s in ((1024, 512), (96, 2048))]


@pytest.mark.parametrize("method,ties,dtype,shape", CASES)
def test_real_shapes_equal_reference_and_repeat_bit_identical(method, ties, dtype, shape):
    from numba import cuda
    from sparsekit.gpu import sparsify24 as gpu
    w = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    want = ref.sparsify24(w, method=method, ties=ties)
    dev = cuda.to_device(w)
    first = gpu.sparsify24(dev, method=method, ties=ties)
    second = gpu.sparsify24(dev, method=method, ties=ties)
    for f in FIELDS:
        a, b = getattr(first, f).copy_to_host(), getattr(second, f).copy_to_host()
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), f
        assert np.array_equal(a.view(np.uint8), getattr(want, f).view(np.uint8)), f


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_device_input_is_an_error(value):
    from numba import cuda
    from sparsekit.gpu import sparsify24 as gpu
    w = np.ones((256, 256), np.float16)
    w[200, 3] = value
    with pytest.raises(ValueError, match="must be finite"):
        gpu.sparsify24(cuda.to_device(w))


@pytest.mark.parametrize("shape", [(128, 128), (4096, 1024), (1024, 4096)])
def test_masks_and_packing_equal_pytorch_tile_sparsifier(shape):
    torch = _torch()
    if torch is None:
        pytest.skip("needs PyTorch with CUDA (the baseline being compared)")
    from numba import cuda
    from sparsekit.gpu import sparsify24 as gpu
    m, k = shape
    w = torch.randn(m, k, device="cuda", dtype=torch.float16, generator=torch.Generator("cuda").manual_seed(0))
    packed, meta, packed_t, meta_t, tmasks = torch._sparse_semi_structured_tile(
        w, algorithm="largest_abs_values_greedy", use_cutlass=True)
    ours = gpu.sparsify24(cuda.as_cuda_array(w), ties="torch")
    # PyTorch's per-thread (a, b, c, d) masks of each 8x8 block -> (M/4, K/4)
    t = tmasks.view(torch.int16).reshape(m // 8, k // 8, 4).cpu().numpy().view(np.uint16)
    want = np.empty((m // 4, k // 4), np.uint16)
    want[0::2, 0::2], want[0::2, 1::2], want[1::2, 0::2], want[1::2, 1::2] = (t[:, :, i] for i in range(4))
    assert np.array_equal(ours.tile_masks.copy_to_host(), want)
    assert np.array_equal(ours.packed.copy_to_host().view(np.uint16), packed.cpu().numpy().view(np.uint16))
    assert np.array_equal(ours.packed_t.copy_to_host().view(np.uint16), packed_t.cpu().numpy().view(np.uint16))
    # metadata: compare the nibbles of every row group keeping 2 (PyTorch leaves the filler of a
    # group keeping fewer uninitialised)
    mask = ref.mask_from_tiles(want)
    for ours_meta, theirs, rows, cols, msk in ((ours.meta, meta, m, k, mask), (ours.meta_t, meta_t, k, m, mask.T)):
        flat_t = theirs.permute(2, 0, 1).contiguous().reshape(-1).cpu().numpy().view(np.uint16)
        flat_o = ours_meta.copy_to_host().reshape(-1).view(np.uint16)
        off = ref.meta_offsets(rows, cols)
        nib = [((f[off].astype(np.int64)[:, :, None] >> (4 * np.arange(4))) & 15).reshape(rows, cols // 4)
               for f in (flat_o, flat_t)]
        two = msk.reshape(rows, cols // 4, 4).sum(axis=2) == 2
        assert np.array_equal(nib[0][two], nib[1][two])


def test_torch_tensor_in_gives_torch_tensors_out():
    torch = _torch()
    if torch is None:
        pytest.skip("needs PyTorch with CUDA")
    from sparsekit.gpu import sparsify24 as gpu
    w = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    s = gpu.sparsify24(w)
    assert isinstance(s.packed, torch.Tensor) and s.packed.shape == (64, 32) and s.meta.shape == (64, 4)
    assert s.packed.data_ptr() != w.data_ptr()


def test_misaligned_fp16_device_input_is_an_error():
    torch = _torch()
    if torch is None:
        pytest.skip("needs PyTorch with CUDA (an offset view of a device buffer)")
    from sparsekit.gpu import sparsify24 as gpu
    w = torch.zeros(64 * 64 + 1, device="cuda", dtype=torch.float16)[1:].view(64, 64)   # 2 bytes off
    with pytest.raises(ValueError, match="16-byte boundary"):
        gpu.sparsify24(w)


@pytest.mark.timing
def test_bench_command_times(capsys):
    """``sparsekit bench sparsify24`` on a GPU: the masks' quality, the copy bandwidth and a timed row per
    kernel (its no-GPU form: tests/test_sparsify24.py)."""
    from sparsekit import cli
    assert cli.main(["bench", "sparsify24", "--m", "128", "--k", "128", "--repeat", "3"]) == 0
    out = capsys.readouterr().out
    assert "optimal_full" in out and "copy bandwidth" in out and "no timings" not in out
