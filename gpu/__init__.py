"""Numba CUDA kernels, one module per kernel, named as its reference."""
from sparsekit.simulator import yield_while_polling

yield_while_polling()   # under the CUDA simulator: let the simulated threads run while it polls them
