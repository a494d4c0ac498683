"""Numba CUDA kernels, one module per kernel, named as its reference."""
from sparsekit.simulator import fast_block_manager, fast_shared_arrays

fast_block_manager()    # under the CUDA simulator: sleep until the simulated threads need the block manager
fast_shared_arrays()    # ... and find a shared array's calling line without walking the stack
