"""common.output_dir: the ownership rule every folder-writing command uses."""

from __future__ import annotations

import json
import os

import pytest

from common.output_dir import (
    MARKER_NAME,
    Marker,
    OutputError,
    claim_output_folder,
    foreign_entries,
    parse_marker,
)


def _tree(root) -> dict[str, bytes]:
    return {
        os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), "rb").read()
        for d, _, files in os.walk(root) for f in files
    }  # fmt: skip


def test_a_new_folder_is_claimed_and_what_is_written_is_recorded(tmp_path):
    with claim_output_folder(tmp_path / "run", tool="pretrain") as out:
        out.write_json("config.json", {"lr": 1})
        os.makedirs(out.record("step-000010/"))
        with open(out.record("metrics.jsonl"), "w") as f:
            f.write("{}\n")
        out.finish()
    marker = json.loads((tmp_path / "run" / MARKER_NAME).read_text())
    assert marker["tool"] == "pretrain" and marker["state"] == "finished"
    assert marker["files"] == ["config.json", "metrics.jsonl", "step-000010/"]
    assert json.loads((tmp_path / "run" / "config.json").read_text()) == {"lr": 1}


def test_a_folder_of_user_files_is_refused_and_left_untouched(tmp_path):
    (tmp_path / "stats.json").write_text("the user's own\n")
    (tmp_path / "notes").mkdir()
    before = _tree(tmp_path)
    with pytest.raises(
        OutputError,
        match=r"not empty and was not written by this tool.*"
        r"notes/, stats\.json.*choose an empty or new --out$",
    ):
        claim_output_folder(tmp_path, tool="pretrain", flag="--out")
    assert _tree(tmp_path) == before and not (tmp_path / MARKER_NAME).exists()


def test_a_file_beside_our_own_is_refused_even_inside_a_folder_listed_file_by_file(tmp_path):
    with claim_output_folder(tmp_path, tool="evaluate") as out:
        out.write_text("results/wikitext.json", "{}")
    (tmp_path / "results" / "mine.txt").write_text("a user's file")
    with pytest.raises(OutputError, match=r"previous run did not write \(results/mine\.txt\)"):
        claim_output_folder(tmp_path, tool="evaluate", overwrite=True)
    assert (tmp_path / "results" / "mine.txt").exists()


def test_an_earlier_output_needs_overwrite_or_resume(tmp_path):
    with claim_output_folder(tmp_path, tool="pretrain") as out:
        out.write_text("a.txt", "1")
        out.write_text("deep/er/b.txt", "2")
    with pytest.raises(OutputError, match="earlier pretrain output.*--overwrite"):
        claim_output_folder(tmp_path, tool="pretrain")
    with claim_output_folder(tmp_path, tool="pretrain", resume=True) as out:
        assert set(out.files) == {"a.txt", "deep/er/b.txt"} and (tmp_path / "a.txt").exists()
    claim_output_folder(tmp_path, tool="pretrain", overwrite=True).release()
    assert sorted(os.listdir(tmp_path)) == [MARKER_NAME]  # emptied folders go too


def test_another_tools_folder_is_refused(tmp_path):
    claim_output_folder(tmp_path, tool="preprocess").release()
    with pytest.raises(OutputError, match="holds the output of preprocess, not of pretrain"):
        claim_output_folder(tmp_path, tool="pretrain", overwrite=True)


def test_a_file_a_link_or_a_marker_we_did_not_write_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="exists and is not a directory"):
        claim_output_folder(tmp_path / "file", tool="t")
    linked = tmp_path / "linked"
    linked.mkdir()
    os.symlink("/etc/passwd", linked / "stats.json")
    with pytest.raises(OutputError, match="symbolic link"):
        claim_output_folder(linked, tool="t")
    forged = tmp_path / "forged"
    forged.mkdir()
    (forged / MARKER_NAME).write_text('{"written_by": "shardsmith", "files": ["../../etc"]}')
    with pytest.raises(OutputError, match="names outside its folder"):
        claim_output_folder(forged, tool="preprocess", overwrite=True)
    (forged / MARKER_NAME).write_text("[" * 100_000)
    with pytest.raises(OutputError, match="not a marker this tool wrote"):
        claim_output_folder(forged, tool="preprocess")


def test_the_core_rule_on_a_listing():
    marker = Marker("dedup", "r1", "finished", ("documents/", "stats.json"))
    entries = ["stats.json", "stats.json.tmp-0123456789ab", "documents/x.parquet", "mine.txt",
               MARKER_NAME]  # fmt: skip
    assert foreign_entries(marker, entries, tool="dedup", where="d") == ["mine.txt"]
    assert foreign_entries(None, ["a"], tool="dedup", where="d") == ["a"]
    assert foreign_entries(marker, ["x-1"], tool="dedup", where="d",
                           may_hold=lambda n: n.startswith("x-")) == []  # fmt: skip
    legacy = parse_marker(b'{"written_by": "shardsmith", "run_id": "a", "state": "running"}', "m")
    assert legacy.tool == "preprocess" and legacy.files == ()
    assert parse_marker(marker.encode(), "m") == marker
