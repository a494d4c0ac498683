"""``argparse`` ``type=`` functions shared by every ``sparsekit`` command.

Each parses one flag's text and raises ``argparse.ArgumentTypeError`` with the
rule and the value, which argparse prefixes with the flag's name, e.g.
``sparsekit bench spmm: error: argument --repeat: must be an integer >= 1, got '0'``
(exit status 2). A value that passes is in range for the command's handler, so a
user's mistake never reaches NumPy or a kernel as a traceback. Sizes and repeats
have upper bounds too: a huge value would otherwise end in ``MemoryError`` or a
run that never finishes. Bounded sides can still multiply past the machine, so a
command also declares the host memory its flags imply
(:func:`declare_host_memory`), and :func:`sparsekit.cli.main` refuses it before it
allocates when that passes the memory available (:func:`check_host_memory`).

>>> side("3"), seed("0"), sparsity("0.5"), matrix_shape("14336x4096")
(3, 0, 0.5, (14336, 4096))
>>> sparsity("nan")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: must lie in [0, 1), got 'nan'
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


def integer(*, minimum: int | None = None, maximum: int | None = None, multiple_of: int | None = None):
    """A ``type=`` function for an integer in ``[minimum, maximum]`` that ``multiple_of`` divides.

    The message states the minimum and the multiple always and the maximum where the value is not an integer
    or passes it (a user who typed 0 needs the lower bound, not the upper one).

    >>> integer(minimum=1, maximum=8)("9")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be an integer >= 1 and <= 8, got '9'
    """
    def rule(with_maximum: bool) -> str:
        return " and ".join(part for part in (
            f">= {minimum}" if minimum is not None else "",
            f"<= {maximum}" if maximum is not None and with_maximum else "",
            f"a multiple of {multiple_of}" if multiple_of is not None else "") if part)

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        too_large = value is None or (maximum is not None and value > maximum)
        if too_large or (minimum is not None and value < minimum) or (multiple_of is not None and value % multiple_of):
            stated = rule(too_large)
            raise argparse.ArgumentTypeError(f"must be an integer{' ' + stated if stated else ''}, got {text!r}")
        return value

    parse.__name__ = "integer"
    return parse


def names(allowed: tuple[str, ...]):
    """A ``type=`` function for "all" (True), "none" (False) or comma-separated names of ``allowed`` (a tuple).

    >>> names(("compact", "bitmap"))("bitmap,compact")
    ('bitmap', 'compact')
    >>> names(("compact", "bitmap"))("dense")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be all, none or names of compact, bitmap joined by commas, got 'dense'
    """
    def parse(text: str):
        if text in ("all", "none"):
            return text == "all"
        chosen = tuple(name.strip() for name in text.split(","))
        if not all(name in allowed for name in chosen):
            raise argparse.ArgumentTypeError(f"must be all, none or names of {', '.join(allowed)} joined by commas, "
                                             f"got {text!r}")
        return chosen

    parse.__name__ = "names"
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


#: The largest matrix side a command takes (rows, columns, features, batch x sequence): 2**20, above every
#: layer of the models the commands mimic (a vocabulary projection has about 2**17 rows). Each side is bounded
#: alone: a 2**20 x 2**14 float32 matrix (64 GiB) already takes half of a 141 GB GPU; what sides imply together
#: is checked against the host memory (:func:`declare_host_memory`), and the kernels' launchers refuse a
#: product past their 32-bit index limits.
MAX_SIDE = 2**20
#: A matrix side: an integer in [1, MAX_SIDE].
side = integer(minimum=1, maximum=MAX_SIDE)
#: Timed repeats per kernel: medians settle within tens; 1000 repeats of a 10 ms product over a dozen
#: providers already take two minutes.
repeat = integer(minimum=1, maximum=1000)
#: A random seed (NumPy's generators take non-negative integers).
seed = integer(minimum=0)
#: A sparsity: the fraction of zeros, in [0, 1).
sparsity = fraction()



def matrix_shape(text: str) -> tuple[int, int]:
    """``"MxK"`` (or ``"MXK"``) -> ``(M, K)``, each side a :data:`side`."""
    parts = text.lower().split("x")
    try:
        m, k = (side(part) for part in parts)
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(f"must be MxK with each side an integer in 1..{MAX_SIDE} "
                                         f"(e.g. 4096x14336), got {text!r}") from None
    return m, k

def out_folder(text: str) -> str:
    """A folder to write into: absent (it will be made) or an existing folder, not a file."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} exists and is not a folder")
    return text


def record_file(text: str) -> Path:
    """An existing JSON record to merge a run into (``--merge``)."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text!r} is not a file (the JSON record of an earlier run)")
    return path


#: Where Linux states the memory available (``MemAvailable``: free memory plus what the kernel can reclaim).
MEMINFO = Path("/proc/meminfo")


def available_host_bytes() -> tuple[int, str] | None:
    """Bytes of host memory a command may take now, and where the number comes from: ``MemAvailable`` of
    :data:`MEMINFO`, else the machine's physical memory (``os.sysconf`` pages times their size); None where
    neither is known (then nothing is refused)."""
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, f"MemAvailable in {MEMINFO}"
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "physical memory (os.sysconf)"
    except (ValueError, OSError, AttributeError):
        return None


def _size(nbytes: float) -> str:
    """``nbytes`` in binary units: ``512 B``, ``3.0 GiB``, ``4.0 TiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if nbytes < 1024 or unit == "TiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024


def check_host_memory(flags: str, nbytes: int) -> None:
    """Raise ``MemoryError`` when ``nbytes``, the host memory that ``flags`` (as typed: ``--m 1048576 --k
    1048576``) imply, passes :func:`available_host_bytes`; its message is one line naming the flags, the
    estimate and the memory available. Called before anything is allocated.

    >>> check_host_memory("--m 4 --k 4", 128)
    """
    available = available_host_bytes()
    if available is not None and nbytes > available[0]:
        raise MemoryError(f"{flags} need about {_size(nbytes)} of host memory, more than the "
                          f"{_size(available[0])} available ({available[1]})")


@dataclass(frozen=True)
class HostMemory:
    """A command's declared host memory: ``estimate(args)`` bytes (None: not known from the flags alone, the
    handler checks once it knows) set by the flags whose destinations are ``flags``."""
    prog: str
    estimate: Callable[[argparse.Namespace], int | None]
    flags: tuple[str, ...]

    def check(self, args: argparse.Namespace) -> None:
        """:func:`check_host_memory` of the estimate for ``args``, naming the flags as typed."""
        nbytes = self.estimate(args)
        if nbytes is not None:
            typed = [(dest, getattr(args, dest)) for dest in self.flags]
            check_host_memory(" ".join(f"--{dest.replace('_', '-')} {value}" for dest, value in typed
                                       if value is not None), nbytes)


def declare_host_memory(parser: argparse.ArgumentParser, estimate, *flags: str) -> None:
    """Declare that ``parser``'s command holds about ``estimate(args)`` bytes of host memory, implied by the
    flags ``flags`` (destinations); :func:`sparsekit.cli.main` refuses the command before it runs when that
    passes the memory available (exit status 2, one line)."""
    parser.set_defaults(host_memory=HostMemory(parser.prog, estimate, flags))
