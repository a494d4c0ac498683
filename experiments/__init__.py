"""One module per paper figure or table; each defines ``EXPERIMENT``.

See :mod:`sparsekit.experiment` for the contract; ``sparsekit reproduce``
discovers every module here.
"""
