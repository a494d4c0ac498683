"""Thread-block clusters (sm_90): rank, loads from a peer block's shared memory, barrier, launch.

Numba (numba-cuda 0.30) has no cluster launch and no cluster intrinsics. The
launch side: :func:`sparsekit.device.require_cluster` sets the kernel's
required cluster dimensions (``CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH``,
height and depth 1), and :func:`launch` launches it in clusters: through
Numba's own launch if that honours the attribute, else through Numba's
argument packing and a ``cuda.core`` ``LaunchConfig`` with ``cluster`` set
(:func:`launch_mode` finds out once per process with :func:`cluster_probe`;
on the H100, numba-cuda 0.30.4, Numba's own launch works once width, height
and depth are all set: a width alone made every launch fail with
``CUDA_ERROR_INVALID_CLUSTER_SIZE``). The device side is inline PTX:

* :func:`cluster_rank`: ``%cluster_ctarank``, this block's rank in its cluster;
* :func:`ld_cluster`: ``mapa.shared::cluster`` + ``ld.shared::cluster``: a 32-bit word at a
  shared-window byte address of the block of rank ``rank`` (a split-K reduction's loads);
* :func:`cluster_sync`: ``barrier.cluster.arrive.release`` +
  ``barrier.cluster.wait.acquire``: every thread of every block of the
  cluster has arrived, and the stores before the arrival are visible
  after the wait;
* :func:`cluster_probe`: a kernel that records rank, cluster size and cluster
  id of every block, to verify on a GPU that a launch really runs in clusters.

Under the CUDA simulator (one block at a time, no clusters) a cluster has one
block: the rank is 0, a load from any rank reads this
block's shared memory (a kernel that simulates several ranks in one block keeps them at
different addresses) and the cluster barrier is the block barrier.
"""
from __future__ import annotations

import numpy as np
from numba import config, cuda, typeof

from sparsekit.numba_compat import core_stream, kernel_function, pack_arguments

__all__ = ["cluster_rank", "cluster_size", "cluster_sync", "ld_cluster", "cluster_probe", "launch", "launch_mode"]

if config.ENABLE_CUDASIM:
    def cluster_rank():
        """This block's rank in its cluster (simulator: clusters of one block)."""
        return 0

    def cluster_size():
        """Blocks in this block's cluster (simulator: 1)."""
        return 1

    def _cluster_id():
        return 0

    @cuda.jit(device=True)
    def cluster_sync():
        """Simulator: the cluster is this block, so its barrier is the block barrier."""
        cuda.syncthreads()

    def ld_cluster(array, addr, rank):
        """The element of a 32-bit shared ``array`` at byte offset ``addr`` (simulator: of this block)."""
        return array[int(addr) // array.dtype.itemsize]

else:
    from llvmlite import ir
    from numba import types
    from numba.core.errors import TypingError
    from numba.cuda.extending import intrinsic

    def _sreg(name, reg):
        def typer(typingctx):
            def codegen(context, builder, sig, args):
                asm = ir.InlineAsm(ir.FunctionType(ir.IntType(32), []), f"mov.u32 $0, {reg};", "=r")
                return builder.call(asm, [])
            return types.int32(), codegen
        typer.__name__ = typer.__qualname__ = name
        return intrinsic(typer)

    #: ``%cluster_ctarank``: this block's rank in its cluster (0 .. size - 1).
    cluster_rank = _sreg("cluster_rank", "%cluster_ctarank")
    #: ``%cluster_nctarank``: blocks in this block's cluster.
    cluster_size = _sreg("cluster_size", "%cluster_nctarank")
    _cluster_id = _sreg("_cluster_id", "%clusterid.x")

    @intrinsic
    def cluster_sync(typingctx):
        """Cluster barrier: arrive (release) then wait (acquire); side-effecting with a memory clobber."""
        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []),
                               "barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;", "~{memory}",
                               side_effect=True)
            builder.call(asm, [])
            return context.get_dummy_value()
        return types.void(), codegen

    @intrinsic
    def ld_cluster(typingctx, array, addr, rank):
        """The element of a 32-bit shared ``array`` at shared-window byte address ``addr`` (as
        :func:`sparsekit.gpu.mma.shared_addr` gives) in the cluster's block of rank ``rank``: ``mapa.shared::cluster``
        then ``ld.shared::cluster.b32``; volatile, so it stays after the cluster barrier before it."""
        if not (isinstance(array, types.Array) and array.ndim == 1 and array.dtype.bitwidth == 32
                and isinstance(addr, types.Integer) and isinstance(rank, types.Integer)):
            raise TypingError(f"ld_cluster: expected a 1-D 32-bit shared array, an integer address and rank, "
                              f"got {array}, {addr}, {rank}")
        sig = array.dtype(array, addr, rank)

        def codegen(context, builder, sig, args):
            i32 = ir.IntType(32)
            a, r = (context.cast(builder, v, t, types.uint32) for v, t in zip(args[1:], sig.args[1:]))
            asm = ir.InlineAsm(ir.FunctionType(i32, [i32, i32]),
                               "{\n\t.reg .b32 %ra;\n\tmapa.shared::cluster.u32 %ra, $1, $2;\n\t"
                               "ld.shared::cluster.b32 $0, [%ra];\n\t}", "=r,r,r", side_effect=True)
            return builder.bitcast(builder.call(asm, [a, r]), context.get_value_type(sig.return_type))
        return sig, codegen


@cuda.jit
def _probe(out):
    """out[block] = (rank, cluster size, cluster id) of every block."""
    b = cuda.blockIdx.x
    if cuda.threadIdx.x == 0 and b < out.shape[0]:
        out[b, 0] = cluster_rank()
        out[b, 1] = cluster_size()
        out[b, 2] = _cluster_id()


def cluster_probe(blocks: int, size: int, mode: str | None = None) -> np.ndarray:
    """Launch a probe of ``blocks`` blocks in clusters of ``size`` (GPU only; ``mode`` as :func:`launch`);
    returns ``(blocks, 3)`` int32: each block's rank, cluster size and cluster id as the hardware sees them
    (-1 where a block did not run)."""
    from sparsekit.device import require_cluster
    out = cuda.to_device(np.full((blocks, 3), -1, dtype=np.int32))
    compiled = _probe.compile((typeof(out),))
    require_cluster(compiled, size)
    launch(_probe, compiled, (out,), blocks, 32, 0, size, mode=mode)
    return out.copy_to_host()


def _expected(blocks: int, size: int) -> np.ndarray:
    b = np.arange(blocks)
    return np.stack([b % size, np.full(blocks, size), b // size], axis=1).astype(np.int32)


_MODE = []


def launch_mode() -> str:
    """How this process launches a kernel in clusters, found once with :func:`cluster_probe` (8 blocks in
    clusters of 2): ``"attribute"`` (Numba's launch honours the required cluster dimensions), ``"clusters"``
    (a ``cuda.core`` ``LaunchConfig`` with ``cluster``, its ``grid`` counting clusters) or ``"blocks"``
    (the same, ``grid`` counting blocks). Raises ``RuntimeError`` if none runs the probe as clusters."""
    if not _MODE:
        tried = []
        for mode in ("attribute", "clusters", "blocks"):
            try:
                got = cluster_probe(8, 2, mode)
            except Exception as e:  # a launch the driver refuses: try the next way
                tried.append(f"{mode}: {type(e).__name__}: {e}"[:200])
                continue
            if (got == _expected(8, 2)).all():
                _MODE.append(mode)
                break
            tried.append(f"{mode}: probe saw {got.tolist()}")
        else:
            raise RuntimeError("cluster launch: no way of launching worked here: " + "; ".join(tried))
    return _MODE[0]


def launch(dispatcher, compiled, args, blocks, threads: int, shared: int, size: int, mode: str | None = None):
    """Launch ``compiled`` (an overload of ``dispatcher`` for ``args``' types, cluster dimensions already set
    by :func:`sparsekit.device.require_cluster`) as ``blocks`` blocks (an int, or a grid tuple whose x is a
    multiple of ``size``) of ``threads`` in clusters of ``size`` consecutive blocks along x, with ``shared``
    bytes of dynamic shared memory, on the default stream. ``mode``: see :func:`launch_mode` (default: the one
    found for this process)."""
    mode = mode or launch_mode()
    if mode == "attribute":
        dispatcher[blocks, threads, 0, shared](*args)
        return
    from cuda.core import LaunchConfig
    from cuda.core import launch as core_launch

    stream = core_stream(0)
    kernelargs, writebacks = pack_arguments(compiled, args, stream)
    grid = tuple(blocks) if isinstance(blocks, tuple) else (blocks,)
    if mode == "clusters":
        grid = (grid[0] // size,) + grid[1:]
    config = LaunchConfig(grid=grid, cluster=size, block=threads, shmem_size=shared)
    core_launch(stream, config, kernel_function(compiled).kernel, *kernelargs)
    for writeback in writebacks:
        writeback()
