"""Numba CUDA kernels, one module per kernel, named as its reference."""
from sparsekit.simulator import fast_shared_arrays, yield_while_polling

yield_while_polling()   # under the CUDA simulator: let the simulated threads run while it polls them
fast_shared_arrays()    # ... and find a shared array's calling line without walking the stack
