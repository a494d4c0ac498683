"""NumPy references: the executable specification of every kernel."""
