"""environment.yml (conda-forge) and pyproject.toml (pip) describe the same environment."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

yaml = pytest.importorskip("yaml", reason="pyyaml is in the test extra")

ROOT = Path(__file__).resolve().parents[1]
# conda-forge names that differ from PyPI names, and packages only one side lists by design.
CONDA_TO_PYPI = {"numba-cuda": "numba-cuda"}
CONDA_ONLY = {"python", "pip"}


def _pyproject() -> dict[str, SpecifierSet]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    reqs = list(data["project"]["dependencies"]) + list(data["project"]["optional-dependencies"]["test"])
    out = {}
    for r in map(Requirement, reqs):
        out[r.name.lower()] = r.specifier
    return out


def _conda() -> tuple[dict[str, SpecifierSet], list[str]]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda, pip = {}, []
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            pip += dep["pip"]
            continue
        name, spec = re.match(r"^([A-Za-z0-9_.\-]+)\s*(.*)$", dep).groups()
        conda[CONDA_TO_PYPI.get(name.lower(), name.lower())] = SpecifierSet(spec.replace(" ", ""))
    return conda, pip


def test_same_packages_on_both_sides():
    py = _pyproject()
    conda, _ = _conda()
    assert set(py) == set(conda) - CONDA_ONLY


def test_same_bounds_on_both_sides():
    py = _pyproject()
    conda, _ = _conda()
    for name, spec in py.items():
        assert conda[name] == spec, f"{name}: pyproject says {spec}, environment.yml says {conda[name]}"


def test_numpy_pinned_below_2_5_while_numba_needs_it():
    spec = _pyproject()["numpy"]
    assert "2.4.9" in spec and "2.5.0" not in spec


def test_conda_env_gets_nvvm_and_the_package_through_pip():
    _, pip = _conda()
    nvvm = [Requirement(p) for p in pip if p.startswith("numba-cuda")]
    assert nvvm and "cu13" in nvvm[0].extras
    assert nvvm[0].specifier == _pyproject()["numba-cuda"]
    assert "-e ." in pip


def test_numba_cuda_bounded_to_the_reviewed_minor_version():
    """sparsekit.numba_compat reads private numba-cuda attributes reviewed against one minor version: pip and
    conda allow that one only (its patch releases), on both sides."""
    from sparsekit.numba_compat import REVIEWED_NUMBA_CUDA

    major, minor = map(int, REVIEWED_NUMBA_CUDA.split("."))
    _, pip = _conda()
    pip_spec = next(Requirement(r).specifier for r in pip if r.startswith("numba-cuda"))
    for spec in (_pyproject()["numba-cuda"], pip_spec):
        assert f"{major}.{minor}.0" in spec and f"{major}.{minor}.9" in spec, spec
        assert f"{major}.{minor + 1}.0" not in spec and f"{major}.{minor - 1}.9" not in spec, spec
