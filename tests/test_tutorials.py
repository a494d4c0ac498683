"""Every tutorial runs, at toy size, and its own checks pass (so the tutorials never rot)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
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


def _bitmap_tutorial():
    return _load(next(p for p in TUTORIALS if p.name == "08_bitmap_decode.py"))


def test_bitmap_tutorial_quotes_measured_table():
    """Tutorial 08 prints H200 timings only by quoting experiments/results/spmm_bitmap.md: the table with its
    columns, every timed cell as "us (speedup x)", the copy bandwidth and the two sentences on the other sparse
    kernels must still be there (else it would print "table not found" or leave them out)."""
    tut = _bitmap_tutorial()
    table = tut.quoted_table()
    assert len(table) > 1 and tuple(table[0][:len(tut.TABLE_HEADER)]) == tut.TABLE_HEADER
    points = tut.measured(table)
    assert len(points) == (len(table) - 1) * sum(h.startswith("N = ") for h in table[0])
    assert tut.copy_bandwidth() is not None
    sentences = tut.quoted_sentences()
    assert [s[:len(start)] for s, start in zip(sentences, tut.SPARSE_SENTENCES)] == list(tut.SPARSE_SENTENCES)
    assert all(s.endswith(".") for s in sentences)


def test_bitmap_tutorial_reads_the_quoted_table():
    """What tutorial 08's step 5 computes from the H200 table holds together: each speedup is a time of the row's
    dense range over the kernel's time (to the table's rounding), the bytes fall as the sparsity rises, the kernel
    reads its bytes no faster than the measured copy bandwidth, and the count of points faster than dense is the
    table's."""
    tut = _bitmap_tutorial()
    table = tut.quoted_table()
    dense_range = {(row[0], row[1]): [float(v) for v in row[3].split("-")] for row in table[1:]}
    points = tut.measured(table)
    for p in points:
        low, high = dense_range[p["shape"], f"{100 * p['sparsity']:.0f} %"]
        slack = 0.005 * p["us"] + 0.05 * p["speedup"]          # speedup to 2 decimals, time to 0.1 us
        assert low - slack <= p["speedup"] * p["us"] <= high + slack, p
    for shape in {p["shape"] for p in points}:
        by_sparsity = sorted({(p["sparsity"], p["bytes"]) for p in points if p["shape"] == shape})
        assert all(b1 > b2 for (_, b1), (_, b2) in zip(by_sparsity, by_sparsity[1:])), by_sparsity
    got = tut.report_measured(tut.byte_counts(64, 64, (0.5,)))
    assert got["points"] == len(points) and got["faster"] == sum(p["speedup"] > 1 for p in points)
    assert got["bandwidth_used"] and all(0 < used <= 1 for used in got["bandwidth_used"])


def test_bitmap_tutorial_bytes_are_the_quoted_tables():
    """The table's "bytes / dense" is what TiledBitmap.nbytes gives at the table's sparsities (step 1's count, the
    same weight at a smaller shape): the timings quoted are of this layout."""
    tut = _bitmap_tutorial()
    points = tut.measured(tut.quoted_table())
    sizes = tut.byte_counts(256, 512, sorted({p["sparsity"] for p in points}))
    assert tut.table_bytes_match(sizes, points), [(p["sparsity"], p["bytes"]) for p in points]


def test_bitmap_tutorial_step5_takes_a_page_without_its_parts(tmp_path, capsys):
    """Step 5 runs on whatever of the results page there is: no page, or a table without the sentences and the
    copy bandwidth; a table whose bytes are not this layout's is said to be so."""
    tut = _bitmap_tutorial()
    sizes = tut.byte_counts(64, 64, (0.5, 0.9))
    assert tut.report_measured(sizes, tmp_path / "absent.md") == {"quoted_rows": 0}
    assert "table not found" in capsys.readouterr().out
    page = tmp_path / "table_only.md"
    timed = " | 22.9 (0.77x) | 28.4 (0.63x) | 31.9 (0.57x) | 60.3 (0.28x) |"
    page.write_text("\n".join(["| " + " | ".join(tut.TABLE_HEADER) + " |", "|---" * 8 + "|",
                               "| 4096x4096 | 50 % | 0.61 | 17.1-18.2" + timed,
                               "| 4096x4096 | 90 % | 0.21 | 17.1-18.2" + timed, ""]))
    got = tut.report_measured(sizes, page)
    assert (got["quoted_rows"], got["points"], got["quoted_sentences"], got["bandwidth_used"]) == (3, 8, 0, [])
    assert got["same_layout"] is False and len(got["falls"]) == 4
    assert "are not this layout's" in capsys.readouterr().out


@pytest.mark.parametrize("density", [0.0, 0.3, 0.7, 1.0])
def test_bitmap_tutorial_decodes_every_lane(density):
    """Tutorial 08's decode by hand, for every lane and cell of every fragment of a weight whose edges cut its last
    fragments (empty, sparse and full cells, pairs with one weight kept): the cells' words start where the popcounts
    of the earlier cells' bitmaps say, a lane's word after the pairs of the lanes below it, a register is nonzero
    exactly where its bit is set (a stored pair keeps a weight), the record is as long as its popcounts say, and
    the 32 lanes' registers give back the dense blocks."""
    from sparsekit.formats import TiledBitmap

    tut = _bitmap_tutorial()
    rng = np.random.default_rng(round(10 * density))
    dense = np.where(rng.random((24, 40)) < density, rng.standard_normal((24, 40)), 0).astype(np.float16)
    b = TiledBitmap.from_dense(dense)
    padded = np.zeros((32, 64), np.float16)
    padded[:24, :40] = dense
    steps = b.grid[1]
    for f, masks in enumerate(b.masks()):
        first = 4 * int(b.offsets[f]) + 4
        for cell, mask in enumerate(int(m) for m in masks):
            for lane in range(32):
                d = tut.decode_lane(b, f, lane, cell)
                assert (d["mask"], d["first"]) == (mask, first)
                assert d["index"] == first + bin(mask % (1 << lane)).count("1")
                assert (d["register"] != 0) == bool(mask >> lane & 1)
            first += bin(mask).count("1")
        pairs = first - 4 * int(b.offsets[f]) - 4
        assert int(b.offsets[f + 1] - b.offsets[f]) == 1 + -(-pairs // 4)
        block = tut.fragment_block(padded, f // steps, f % steps)
        assert (tut.assemble_fragment(b, f) == block.view(np.uint16)).all()
