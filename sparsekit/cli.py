"""The ``sparsekit`` command line.

``sparsekit info``        backend, device, versions and peak rates
``sparsekit reproduce``   run every registered experiment, write CSV + PNG + REPORT.md
``sparsekit bench NAME``  time one kernel against its baselines (one module a kernel family)

Other top-level commands (``tune``, ``roofline``, ...) come from the modules
of :mod:`sparsekit.commands`. Nothing here imports Numba at module level: the
CUDA simulator switch must be set before Numba is first imported.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import platform
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

from sparsekit.backend import choose_backend
from sparsekit.cli_types import out_folder, seed


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line on stderr (``prog: error: message``, exit status 2);
    sub-command parsers are of the same class."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for mod in ("numpy", "numba", "numba_cuda", "scipy", "matplotlib", "hypothesis", "torch", "cupy"):
        try:
            m = importlib.import_module(mod)
            out[mod] = getattr(m, "__version__", "?")
        except Exception:  # optional packages may be absent or broken: report, do not fail
            out[mod] = "not installed"
    return out


def cmd_info(args) -> int:
    backend = choose_backend()
    from sparsekit import device

    print(f"backend: {backend}")
    info = device.info()
    for key, value in vars(info).items() if hasattr(info, "__dict__") else info._asdict().items():
        print(f"  {key}: {value}")
    print("versions:")
    for k, v in _versions().items():
        print(f"  {k}: {v}")
    peaks = device.peaks_for(info.name) if backend == "gpu" else None
    if peaks is not None:
        print(f"peaks ({info.name}):")
        for key, value in vars(peaks).items():
            print(f"  {key}: {value}")
    else:
        print("peaks: known devices " + ", ".join(device.PEAKS) + " (sparsekit roofline --help)")
    return 0


def _report_header(backend: str, quick: bool, device_name: str) -> str:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    lines = ["# sparsekit reproduce report", ""]
    if backend == "simulator":
        lines += ["> **No GPU was found: every kernel ran on the Numba CUDA simulator at tiny sizes.**",
                  "> Correctness is checked; times are meaningless and GPU-only experiments are skipped.",
                  "> Run on a CUDA machine for the paper-size numbers.", ""]
    lines += [f"- date: {now}", f"- backend: {backend} ({device_name})",
              f"- mode: {'quick' if quick else 'full'}",
              "- versions: " + ", ".join(f"{k} {v}" for k, v in _versions().items()), ""]
    return "\n".join(lines)


def cmd_reproduce(args) -> int:
    backend = choose_backend()
    from tqdm.auto import tqdm

    from sparsekit import device
    from sparsekit.experiment import Context, NotASourceCheckout, discover, markdown_table, slug, write_csv

    try:
        registry = discover()
    except NotASourceCheckout as err:
        print(f"sparsekit reproduce: {err}", file=sys.stderr)
        return 2
    if args.list:
        for exp in registry.values():
            print(f"{exp.name:24s} {exp.title}  [{exp.paper}]" + ("  (GPU only)" if exp.needs_gpu else ""))
        return 0
    unknown = [n for n in (args.only or []) if n not in registry]
    if unknown:
        print(f"--only: unknown experiment(s) {', '.join(unknown)}; known: {', '.join(registry)}", file=sys.stderr)
        return 2
    chosen = [registry[n] for n in args.only] if args.only else list(registry.values())
    quick = args.quick or backend == "simulator"
    if quick:   # small problems launch few blocks on purpose: Numba's low-occupancy warning would only be noise
        import warnings

        from numba.cuda.core.errors import NumbaPerformanceWarning   # (numba-cuda's own, not numba.core's)
        warnings.filterwarnings("ignore", message=".*Grid size .* low occupancy", category=NumbaPerformanceWarning)
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        print(f"--out: cannot make the folder {str(out)!r}: {err.strerror}", file=sys.stderr)
        return 2
    dev_name = device.info().name
    print(f"[reproduce] backend={backend} ({dev_name}), {'quick' if quick else 'full'} mode, "
          f"{len(chosen)} experiment(s) -> {out}/REPORT.md", file=sys.stderr)

    parts = [_report_header(backend, quick, dev_name), "## Contents", ""]
    parts += [f"- [{e.title}](#{slug(e.name)}) — {e.paper}" for e in chosen] + [""]
    failed = []
    for exp in tqdm(chosen, desc="experiments", dynamic_ncols=True, disable=None):
        parts.append(f'<a id="{slug(exp.name)}"></a>\n\n## {exp.title}\n\n_Source: {exp.paper}; '
                     f"experiment `{exp.name}`._\n")
        if exp.needs_gpu and backend != "gpu":
            parts.append("_Skipped: needs a GPU._\n")
            continue
        exp_dir = out / exp.name
        exp_dir.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        try:
            section = exp.run(Context(quick=quick, backend=backend, out_dir=exp_dir, seed=args.seed))
        except Exception:
            failed.append(exp.name)
            parts.append("**FAILED**:\n\n```\n" + traceback.format_exc() + "```\n")
            print(f"[reproduce] {exp.name} FAILED:\n{traceback.format_exc()}", file=sys.stderr)
            continue
        parts.append(section.text.strip() + "\n" if section.text else "")
        for table in section.tables:
            name = table.csv_name or f"{slug(table.caption)}.csv"
            write_csv(table.records, exp_dir / name)
            parts.append(f"**{table.caption}** ([csv]({exp.name}/{name}))\n\n{markdown_table(table.records)}\n")
        for fig in section.figures:
            parts.append(f"![{fig}]({exp.name}/{fig})\n")
        elapsed = time.perf_counter() - start
        parts.append(f"_Ran in {elapsed:.1f} s._\n")
        print(f"[reproduce] {exp.name}: {elapsed:.1f} s", file=sys.stderr)
        # Written after every experiment, so an interrupted run still leaves a report of what finished.
        (out / "REPORT.md").write_text("\n".join(parts))
    (out / "REPORT.md").write_text("\n".join(parts))
    print(f"[reproduce] wrote {out / 'REPORT.md'}" + (f"; FAILED: {', '.join(failed)}" if failed else ""),
          file=sys.stderr)
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sparsekit", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="GPU kernels for sparse neural networks (Numba CUDA), each beside its NumPy reference.",
        epilog="examples:\n"
               "  sparsekit info\n"
               "  sparsekit reproduce --quick              # every experiment -> reproduce-out/REPORT.md\n"
               "  sparsekit reproduce --list\n"
               "  sparsekit bench uspmm --m 1024 --k 1024 --n 1024 --sparsity 0.6 --dtype float32\n"
               "  sparsekit roofline --model resnet50 --pattern 2:4 --device h100")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("info", help="backend, device, versions and peak rates")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("reproduce", help="run the registered experiments and write REPORT.md")
    p.add_argument("--quick", action="store_true",
                   help="tiny sizes (always on without a GPU, where the CUDA simulator runs)")
    p.add_argument("--only", nargs="+", metavar="NAME", help="run only these experiments (see --list)")
    p.add_argument("--out", type=out_folder, default="reproduce-out", help="output folder (default: %(default)s)")
    p.add_argument("--seed", type=seed, default=0, help="random seed for every experiment (default: %(default)s)")
    p.add_argument("--list", action="store_true", help="list the registered experiments and exit")
    p.set_defaults(func=cmd_reproduce)

    bench = sub.add_parser("bench", help="time one kernel against its baselines")
    bench_sub = bench.add_subparsers(dest="bench_target", metavar="KERNEL")
    bench_sub.required = True

    import sparsekit.commands as commands

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"sparsekit.commands.{info.name}")
        if hasattr(module, "add_commands"):
            module.add_commands(sub)
        if hasattr(module, "add_bench"):
            module.add_bench(bench_sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` and return its exit status: 0 for ``--help``, 2 for a usage error (one line on
    stderr, printed by the parser) or for flags that imply more host memory than is available (one line,
    before the command allocates: :func:`sparsekit.cli_types.declare_host_memory`), else the command's."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:
        return stop.code
    declared = getattr(args, "host_memory", None)
    if declared is not None:
        try:
            declared.check(args)
        except MemoryError as refusal:
            print(f"{declared.prog}: error: {refusal}", file=sys.stderr)
            return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
