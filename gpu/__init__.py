"""Numba CUDA kernels, one module per kernel, named as its reference."""
from sparsekit.numba_patches import fast_lowering
from sparsekit.simulator import fast_block_manager, fast_shared_arrays

fast_lowering()         # on the GPU path: Numba's lowering without its quadratic scan of long blocks
fast_block_manager()    # under the CUDA simulator: sleep until the simulated threads need the block manager
fast_shared_arrays()    # ... and find a shared array's calling line without walking the stack
