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
    assert [p.name for p in TUTORIALS][:4] == ["01_loop_orders.py", "02_tiling.py", "03_gpu_steps.py",
                                               "04_load_balance.py"]


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_tutorial_runs_quick(path, capsys):
    result = _load(path).main(quick=True)
    assert result
    assert capsys.readouterr().out.strip()
