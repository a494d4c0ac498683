"""``argparse`` ``type=`` functions shared by every ``sparsekit`` command.

Each parses one flag's text and raises ``argparse.ArgumentTypeError`` with the
rule and the value, which argparse prefixes with the flag's name, e.g.
``sparsekit bench spmm: error: argument --repeat: must be an integer >= 1, got '0'``
(exit status 2). A value that passes is in range for the command's handler, so a
user's mistake never reaches NumPy or a kernel as a traceback.

>>> positive("3"), seed("0"), sparsity("0.5")
(3, 0, 0.5)
>>> sparsity("nan")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: must lie in [0, 1), got 'nan'
"""
from __future__ import annotations

import argparse
from pathlib import Path


def integer(*, minimum: int | None = None, maximum: int | None = None, multiple_of: int | None = None):
    """A ``type=`` function for an integer in ``[minimum, maximum]`` that ``multiple_of`` divides."""
    rule = " and ".join(part for part in (
        f">= {minimum}" if minimum is not None else "", f"<= {maximum}" if maximum is not None else "",
        f"a multiple of {multiple_of}" if multiple_of is not None else "") if part)

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or (minimum is not None and value < minimum) or (maximum is not None and value > maximum) \
                or (multiple_of is not None and value % multiple_of):
            raise argparse.ArgumentTypeError(f"must be an integer{' ' + rule if rule else ''}, got {text!r}")
        return value

    parse.__name__ = "integer"
    return parse


def fraction(*, closed: bool = False):
    """A ``type=`` function for a finite number in [0, 1) (``closed``: [0, 1]); NaN and Inf are refused."""
    interval = "[0, 1]" if closed else "[0, 1)"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not (0.0 <= value <= 1.0 if closed else 0.0 <= value < 1.0):     # (NaN fails both)
            raise argparse.ArgumentTypeError(f"must lie in {interval}, got {text!r}")
        return value

    parse.__name__ = "fraction"
    return parse


#: A count that must be at least 1 (sizes, repeats, batch).
positive = integer(minimum=1)
#: A random seed (NumPy's generators take non-negative integers).
seed = integer(minimum=0)
#: A sparsity: the fraction of zeros, in [0, 1).
sparsity = fraction()


def out_folder(text: str) -> str:
    """A folder to write into: absent (it will be made) or an existing folder, not a file."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} exists and is not a folder")
    return text
