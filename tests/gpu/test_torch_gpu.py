"""sparsekit.torch on a real GPU: SparseLinear equals the dense layer with the pruned weight (float16,
bfloat16, float32; the sparse kernels at decode widths, the densified weight beyond; uniform, 2:4 and
unstructured; the TiledBitmap route in detail: test_torch_bitmap_gpu.py), the recorded launches replay bit-identically on torch's current stream, inside a CUDA graph
and under torch.compile(fullgraph=True); gradients equal dense autograd; nothing but the sparse weight is
kept on the device."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="sparsekit.torch needs the optional torch extra")

from sparsekit.torch import SparseLinear, sparsify_  # noqa: E402
from sparsekit.torch.ops import KERNEL_MAX_N, _WEIGHTS, compact_bytes  # noqa: E402

pytestmark = pytest.mark.gpu
EPS = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8, torch.float32: 2.0 ** -24}


def _layer(dtype, sparsity=0.8, out_features=512, in_features=1024, seed=0, pattern="uniform"):
    torch.manual_seed(seed)
    dense = torch.nn.Linear(in_features, out_features, device="cuda").to(dtype)
    return SparseLinear.from_dense(dense, sparsity=sparsity, pattern=pattern)


def _check(got, layer, x):
    """Within float32 accumulation of the exact product, rounded once to the layer's dtype."""
    w = layer.to_dense().weight.double()
    exact = x.double() @ w.T + layer.bias.double()
    bound = (2 * w.shape[1] * 2.0 ** -24 * (x.double().abs() @ w.abs().T)
             + 2 * EPS[x.dtype] * exact.abs() + EPS[x.dtype] * layer.bias.double().abs())
    err = (got.double() - exact).abs()
    assert got.dtype == x.dtype and bool((err <= bound).all()), float((err - bound).max())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n", [1, 3, 8, 16, 17, 64])
@pytest.mark.parametrize("pattern", ["uniform", "2:4", "unstructured"])
def test_layer_equals_pruned_dense(dtype, n, pattern):
    layer = _layer(dtype, pattern=pattern)
    for seed in (1, 2):                                   # the first call records, the second replays
        torch.manual_seed(seed)
        x = torch.randn(n, 1024, device="cuda", dtype=dtype)
        _check(layer(x), layer, x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [1, 8, 64])
def test_replay_is_recorded_and_bit_identical_on_a_side_stream(dtype, n):
    from sparsekit.gpu.spmm_ell_rows import densify_ell_rows, spmm_ell_rows_linear

    layer = _layer(dtype, seed=3)
    x = torch.randn(n, 1024, device="cuda", dtype=dtype)
    layer(x)
    plans = _WEIGHTS[layer.weight_id].plans
    assert plans and all(plan is not None for plan in plans.values())
    x2 = torch.randn(n, 1024, device="cuda", dtype=dtype)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = torch.ops.sparsekit.sparse_linear(x2, layer.values, layer.indices, 1024, layer.weight_id)
    torch.cuda.current_stream().wait_stream(side)
    values = layer.values.detach()
    if n <= KERNEL_MAX_N:
        want = spmm_ell_rows_linear(values, layer.indices, 1024, x2)
    else:
        want = torch.nn.functional.linear(x2, densify_ell_rows(values, layer.indices, 1024))
    assert torch.equal(y, want)


@pytest.mark.parametrize("n", [1, 8])
def test_first_call_on_a_busy_side_stream_reads_its_input_after_the_work_that_writes_it(n):
    """The first call records its launches by running them on torch's current stream: there they follow the
    queued work that writes ``x`` (Numba's default stream is not ordered with torch's side streams), so the
    output is right and the recorded plan passes its check."""
    layer = _layer(torch.bfloat16, out_features=4096, seed=7)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        busy = torch.ones(4096, 4096, device="cuda", dtype=torch.bfloat16)
        for _ in range(20):                                 # a few ms of work queued ahead of x
            busy = busy @ busy * 2.0 ** -12                 # (stays all ones)
        x = busy[:n, :1024] * torch.randn(n, 1024, device="cuda", dtype=torch.bfloat16)
        y = layer(x)
    side.synchronize()
    assert all(plan is not None for plan in _WEIGHTS[layer.weight_id].plans.values())
    _check(y, layer, x)


def test_a_product_whose_launches_were_not_recorded_runs_eagerly_and_is_refused_in_a_capture():
    """A product without a plan (its recording failed its check) runs its launches on torch's stream; inside a
    CUDA graph capture it raises instead of running outside the graph (a replay would return a stale output)."""
    layer = _layer(torch.float16, seed=8)
    x = torch.randn(1, 1024, device="cuda", dtype=torch.float16)
    layer(x)
    plans = _WEIGHTS[layer.weight_id].plans
    for key in plans:
        plans[key] = None
    _check(layer(x), layer, x)
    with pytest.raises(RuntimeError, match="could not be recorded"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            layer(x)


def test_only_the_sparse_weight_stays_on_the_device():
    """After decode and prefill calls, torch's allocator holds the layer's values, indices and bias and, once x
    of one row ran without autograd, its compact rows (13/16 of the rows' bytes) only (nothing dense); besides them
    the layer keeps the staged x^T (a few KB) and, once x of 9-32 rows ran (to 64 on larger weights), the weight's
    TiledBitmap (about as many bytes as the rows at 80 %)."""
    warm = torch.ones(65, 64, device="cuda", dtype=torch.bfloat16)
    torch.nn.functional.linear(warm, warm)            # cuBLAS's workspace (32 MiB on sm_90, torch's allocator) first
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    layer = _layer(torch.bfloat16, sparsity=0.8, out_features=4096, in_features=4096, seed=6)
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated() - before
    dense_bytes = 4096 * 4096 * 2
    rows_bytes = layer.weight_bytes()
    assert rows_bytes <= 0.41 * dense_bytes                            # 4 bytes a kept weight, 20 % kept
    with torch.no_grad():
        for n in (1, 8, 16, 64, 65):
            layer(torch.randn(n, 4096, device="cuda", dtype=torch.bfloat16))
    torch.cuda.synchronize()
    compact = compact_bytes(layer.weight_id)
    assert compact == rows_bytes * 13 // 16                           # 3.25 bytes a slot, as many slots
    # torch's allocator gives a tensor past 1 MiB a whole block when less than 1 MiB of it would be left over:
    # up to 1 MiB counted more for each of the compact rows' three tensors (the dense weight would be 32 MiB)
    assert torch.cuda.memory_allocated() - before <= (held + compact) * 1.01 + 3 * 2**20
    copies = layer.weight_bytes() - rows_bytes - compact                # the TiledBitmap
    assert 0.30 * dense_bytes <= copies <= 0.43 * dense_bytes


@pytest.mark.parametrize("dtype, n, grad, route", [(torch.float16, 1, True, "rows"),
                                                   (torch.bfloat16, 1, False, "compact"),
                                                   (torch.bfloat16, 16, False, "bitmap")])
def test_cuda_graph_capture_and_replay(dtype, n, grad, route):
    layer = _layer(dtype, sparsity=0.7, seed=4)
    static_x = torch.randn(n, 1024, device="cuda", dtype=dtype)
    with torch.set_grad_enabled(grad):
        layer(static_x)                                    # record (and build the bitmap) outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = layer(static_x)
        fresh = torch.randn(n, 1024, device="cuda", dtype=dtype)
        static_x.copy_(fresh)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_y, layer(fresh))
    assert {key[0] for key in _WEIGHTS[layer.weight_id].plans} == {route}


@pytest.mark.parametrize("n", [4, 32])
def test_compile_fullgraph_matches_eager(n):
    model = torch.nn.Sequential(torch.nn.Linear(1024, 512, bias=False), torch.nn.Linear(512, 256, bias=False))
    model = sparsify_(model.to("cuda", torch.bfloat16), sparsity=0.7)
    x = torch.randn(n, 1024, device="cuda", dtype=torch.bfloat16)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        assert torch.equal(compiled(x), model(x))          # the same kernels on the same inputs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gradients_equal_dense_autograd(dtype):
    layer = _layer(dtype, sparsity=0.7, seed=5)
    dense = layer.to_dense()
    x = torch.randn(16, 1024, device="cuda", dtype=dtype, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    layer(x).float().square().sum().backward()
    dense(x2).float().square().sum().backward()
    want = torch.nn.functional.pad(dense.weight.grad, (0, 1)).gather(1, layer.indices.long() & 0xFFFF)
    for got, ref in ((x.grad, x2.grad), (layer.values.grad, want)):
        if dtype == torch.float32:
            torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-3)
        else:
            # bfloat16: the two forward outputs differ by at most one rounding (2**-8 relative), the gradient's
            # float32 sums carry that difference and add one rounding more: a few 2**-8 of the largest gradient
            err = float((got.float() - ref.float()).abs().max())
            assert err <= 8 * 2.0 ** -8 * float(ref.float().abs().max()), err


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_decoder_agrees_with_pruned_dense_and_graph_replay_equals_eager(dtype):
    import copy

    from sparsekit.torch.bench import TOLERANCE, agreement
    from sparsekit.torch.decoder import Decoder, DecoderConfig

    cfg = DecoderConfig(hidden=1024, ffn=2816, heads=8, layers=2)
    dense = Decoder(cfg, device="cuda", dtype=dtype).eval()
    sparse = sparsify_(copy.deepcopy(dense), sparsity=0.8)
    assert agreement(dense, sparse) <= TOLERANCE[dtype]
    sparse.allocate_cache(8, 32)
    x = torch.randn(8, 1, cfg.hidden, device="cuda", dtype=dtype)
    pos = torch.tensor([5], device="cuda")
    with torch.no_grad():
        eager = sparse(x, pos).clone()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static = sparse(x, pos)
        graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static, eager)


@pytest.mark.parametrize("pattern", ["uniform", "unstructured"])
def test_cuda_rows_are_stored_in_the_reference_gather_order(pattern):
    """On CUDA the layer orders its rows with the device kernel: the same order as the reference's on the rows
    in column order (the same layer built on the CPU and sorted back)."""
    import numpy as np

    from sparsekit.reference.spmm_ell_rows import bank_balanced

    layer = _layer(torch.bfloat16, pattern=pattern, out_features=300, in_features=4096)
    cols = layer.indices.long() & 0xFFFF
    by_column = torch.argsort(cols, dim=1, stable=True)
    values = layer.values.detach().gather(1, by_column).view(torch.int16).cpu().numpy()
    indices = layer.indices.gather(1, by_column).cpu().numpy()
    want_values, want_indices = bank_balanced(values, indices, 4096)
    assert np.array_equal(layer.indices.cpu().numpy(), want_indices)
    assert np.array_equal(layer.values.detach().view(torch.int16).cpu().numpy(), want_values)
