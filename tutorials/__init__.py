"""Executable walk-throughs of the teaching track."""
