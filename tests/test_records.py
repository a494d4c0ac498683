"""Merging a run of part of a sweep into its earlier record (``--merge`` of ``sparsekit bench uspmm-decode``,
``sparsekit bench e2e`` and ``experiments/bench_spmm_unstructured.py``): points measured again replace the old in
place, the rest stay, new points follow; a file that is not such a record is refused before anything runs."""
from __future__ import annotations

import json

import pytest

from sparsekit.experiment import merge_records, read_record

KEY = ("shape", "n")


def test_points_measured_again_replace_the_old_in_place():
    old = [dict(shape="a", n=1, us=5.0), dict(shape="a", n=8, us=9.0), dict(shape="b", n=1, us=7.0)]
    new = [dict(shape="a", n=8, us=8.0), dict(shape="c", n=1, us=3.0)]
    assert merge_records(old, new, KEY) == [old[0], new[0], old[2], new[1]]
    assert merge_records(old, [], KEY) == old and merge_records([], new, KEY) == new


def test_a_point_twice_or_a_record_of_another_kind_is_refused():
    with pytest.raises(ValueError, match="measured .* twice"):
        merge_records([], [dict(shape="a", n=1), dict(shape="a", n=1)], KEY)
    with pytest.raises(ValueError, match="old run has no n field"):
        merge_records([dict(shape="a")], [dict(shape="a", n=1)], KEY)


def test_read_record_takes_a_list_or_an_object_holding_records(tmp_path):
    (tmp_path / "list.json").write_text(json.dumps([dict(shape="a", n=1)]))
    (tmp_path / "object.json").write_text(json.dumps(dict(command="run", records=[dict(shape="a", n=1)])))
    assert read_record(tmp_path / "list.json", KEY, "test") == {"records": [dict(shape="a", n=1)]}
    assert read_record(tmp_path / "object.json", KEY, "test") == dict(command="run", records=[dict(shape="a", n=1)])


@pytest.mark.parametrize("text", ["not json", json.dumps({"command": "run"}), json.dumps([dict(shape="a")]),
                                  json.dumps(dict(records=[1, 2])), json.dumps(3)])
def test_read_record_refuses_what_is_not_one(tmp_path, text):
    (tmp_path / "bad.json").write_text(text)
    with pytest.raises(ValueError, match="bad.json: not a test record"):
        read_record(tmp_path / "bad.json", KEY, "test")


def test_the_decode_benchmark_merges_points_and_commands():
    from sparsekit.bench.uspmm_decode import RECORD_KEY, merged_with

    point = dict(m=4096, k=4096, dtype="float16", sparsity=0.8)
    old = dict(command="sparsekit bench uspmm-decode --shapes 4096x4096",
               records=[dict(point, n=1, ours_us=11.0), dict(point, n=8, ours_us=16.0)])
    records, command = merged_with(old, [dict(point, n=8, ours_us=15.0)], "sparsekit bench uspmm-decode --sparsity 0.8")
    assert [r["ours_us"] for r in records] == [11.0, 15.0] and set(RECORD_KEY) <= set(records[0])
    assert command == "sparsekit bench uspmm-decode --shapes 4096x4096; sparsekit bench uspmm-decode --sparsity 0.8"


@pytest.mark.parametrize("bench", ["e2e", "uspmm-decode"])
def test_the_commands_refuse_a_merge_file_that_does_not_exist(bench, capsys):
    from sparsekit.cli import main

    assert main(["bench", bench, "--merge", "no-such-record.json"]) == 2
    assert "no-such-record.json' is not a file" in capsys.readouterr().err
