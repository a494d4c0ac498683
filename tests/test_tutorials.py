"""Every tutorial runs, at toy size, and its own checks pass (so the tutorials never rot)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

TUTORIALS = sorted((Path(__file__).resolve().parents[1] / "tutorials").glob("[0-9][0-9]_*.py"))


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"tutorial_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_there_are_tutorials():
    assert [p.name for p in TUTORIALS][:5] == ["00_quickstart.py", "01_loop_orders.py", "02_tiling.py",
                                               "03_gpu_steps.py", "04_load_balance.py"]


def test_readme_shows_the_quickstart_as_it_runs():
    """The README's example is the quick start's code between its markers, line for line."""
    import textwrap
    root = Path(__file__).resolve().parents[1]
    source = (root / "tutorials" / "00_quickstart.py").read_text()
    snippet = textwrap.dedent(source.split("# quickstart-begin\n")[1].split("    # quickstart-end")[0])
    assert f"```python\n{snippet}```" in (root / "README.md").read_text()


#: Tutorials that need an optional extra, by file name.
NEEDS = {"07_pytorch_layer.py": "torch"}


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_tutorial_runs_quick(path, capsys):
    if path.name in NEEDS:
        pytest.importorskip(NEEDS[path.name], reason=f"{path.name} needs the optional {NEEDS[path.name]} extra")
    result = _load(path).main(quick=True)
    assert result
    assert capsys.readouterr().out.strip()


def test_tensor_core_tutorial_quotes_measured_table():
    """Tutorial 06 prints H100 timings only by quoting experiments/results/uspmm_tc.md: the table and
    the columns it picks must still be there (else it would print "table not found")."""
    tut = _load(next(p for p in TUTORIALS if p.name == "06_tensor_cores.py"))
    table = tut.quoted_timings()
    assert len(table) > 1
    assert all(any(h.startswith(c) for h in table[0]) for c in tut.QUOTED_COLUMNS)


def test_tensor_core_tutorial_quotes_measured_errors():
    """Tutorial 06's step 4 quotes the H100's float32 errors from experiments/results/uspmm_precision.json:
    the rows of its problem must be there, both wgmma precisions among them."""
    tut = _load(next(p for p in TUTORIALS if p.name == "06_tensor_cores.py"))
    rows = tut.quoted_errors()
    assert {(r["kernel"], r["precision"]) for r in rows} >= {("wgmma", "3xtf32"), ("wgmma", "tf32+bf16")}


def test_bitmap_tutorial_quotes_measured_table():
    """Tutorial 08 prints H200 timings only by quoting experiments/results/spmm_bitmap.md: the table with its
    columns, every timed cell as "us (speedup x)", the copy bandwidth and the two sentences on the other sparse
    kernels must still be there (else it would print "table not found" or leave them out)."""
    tut = _load(next(p for p in TUTORIALS if p.name == "08_bitmap_decode.py"))
    table = tut.quoted_table()
    assert len(table) > 1 and tuple(table[0][:len(tut.TABLE_HEADER)]) == tut.TABLE_HEADER
    points = tut.measured(table)
    assert len(points) == (len(table) - 1) * sum(h.startswith("N = ") for h in table[0])
    assert tut.copy_bandwidth() is not None
    sentences = tut.quoted_sentences()
    assert [s[:len(start)] for s, start in zip(sentences, tut.SPARSE_SENTENCES)] == list(tut.SPARSE_SENTENCES)
    assert all(s.endswith(".") for s in sentences)


def test_bitmap_tutorial_claims_hold_for_the_quoted_table():
    """What tutorial 08's step 5 says of the H200 table: slower than dense cuBLAS at every point, and from 50 % to
    90 % the time falls far less than the bytes (the decode costs the same whatever a cell keeps)."""
    tut = _load(next(p for p in TUTORIALS if p.name == "08_bitmap_decode.py"))
    points = tut.measured(tut.quoted_table())
    assert all(p["speedup"] < 1 for p in points)
    for p50 in (p for p in points if p["sparsity"] == 0.5):
        p90 = next(p for p in points if (p["shape"], p["n"], p["sparsity"]) == (p50["shape"], p50["n"], 0.9))
        assert p90["us"] / p50["us"] > 2 * p90["bytes"] / p50["bytes"]
