"""common/storage.py: the one scheme rule (is a path local, Beam's or fsspec's) and the one atomic
write (a temporary of our naming in the same folder, renamed into place), in-process.

The writes use real text (a book from ../shared/corpora) and real shard sets built from it; the
last test reads the production sources with ast so that a hand-rolled rename elsewhere fails.
"""

from __future__ import annotations

import ast
import errno
import json
import os
import re

import numpy as np
import pytest

from common import storage
from common.output_dir import MARKER_NAME, OutputError, claim_output_folder
from tests.conftest import CORPORA, REPO

BOOK = CORPORA / "books" / "11-0.txt"  # Alice's Adventures in Wonderland (Gutenberg)


def _book_text() -> str:
    return BOOK.read_text(encoding="utf-8")


# -- the scheme rule ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "url", "remote", "backend", "local"),
    [
        ("/data/corpus.jsonl", False, False, storage.LOCAL, "/data/corpus.jsonl"),
        ("data/corpus.jsonl", False, False, storage.LOCAL, "data/corpus.jsonl"),
        ("", False, False, storage.LOCAL, ""),
        ("file:///tmp/set", True, False, storage.LOCAL, "/tmp/set"),
        ("gs://bucket/x", True, True, storage.BEAM, None),
        ("s3://bucket/a/b.parquet", True, True, storage.BEAM, None),
        ("hdfs://namenode/x", True, True, storage.BEAM, None),
        ("memory://set", True, True, storage.FSSPEC, None),
        ("https://host/urls.txt", True, True, storage.FSSPEC, None),
        # an fsspec chain: the cache layer in front of gs:// is fsspec's, not Beam's
        ("simplecache::gs://bucket/x", True, True, storage.FSSPEC, None),
        # Windows-ish: a drive letter is no scheme
        ("C:\\data\\corpus.txt", False, False, storage.LOCAL, "C:\\data\\corpus.txt"),
        ("C://data/corpus.txt", False, False, storage.LOCAL, "C://data/corpus.txt"),
        # odd local names: '://' further on is part of a file name, not a scheme
        ("out/gs://x", False, False, storage.LOCAL, "out/gs://x"),
        ("./s3://bucket", False, False, storage.LOCAL, "./s3://bucket"),
        (" gs://bucket", False, False, storage.LOCAL, " gs://bucket"),
        ("1ab://x", False, False, storage.LOCAL, "1ab://x"),
    ],
)
def test_the_scheme_rule(path, url, remote, backend, local):
    assert storage.is_url(path) is url
    assert storage.is_remote(path) is remote
    assert storage.backend(path) == backend
    assert storage.local_path(path) == local


def test_a_folder_is_served_by_the_rules_backend_and_normalized(tmp_path):
    """OutputDir, the pipelines' folder on any storage, follows the rule: a local path that
    holds '://' further on is a local folder (not an fsspec URL), normalized as one."""
    from pipelines.output import OutputDir

    folder = OutputDir(f"{tmp_path}/out/gs://x")
    assert folder.is_local and folder.url == f"{tmp_path}/out/gs:/x"
    folder.write_bytes("a.txt", b"written")
    assert (tmp_path / "out" / "gs:" / "x" / "a.txt").read_bytes() == b"written"
    assert OutputDir(f"file://{tmp_path}/set/").url == f"{tmp_path}/set"
    assert OutputDir("gs://bucket/set/").url == "gs://bucket/set"
    assert OutputDir("gs://bucket/set").backend == storage.BEAM
    assert OutputDir("memory://set").backend == storage.FSSPEC


def test_parent_and_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert storage.parent_and_name("gs://bucket/dir/tok.json") == ("gs://bucket/dir", "tok.json")
    assert storage.parent_and_name("memory://dir/sub/") == ("memory://dir", "sub")
    assert storage.parent_and_name("rel/tok.json") == (str(tmp_path / "rel"), "tok.json")
    assert storage.parent_and_name("tok.json") == (str(tmp_path), "tok.json")


# -- the atomic write --------------------------------------------------------------------------
def test_an_atomic_write_leaves_the_file_and_no_temporary(tmp_path):
    text = _book_text()
    path = tmp_path / "book.txt"
    storage.write_text_atomic(str(path), text)
    assert os.listdir(tmp_path) == ["book.txt"]
    assert path.read_text(encoding="utf-8") == text
    storage.write_lines_atomic(str(path), text.splitlines(keepends=True)[:100], sync=False)
    assert os.listdir(tmp_path) == ["book.txt"]
    assert path.read_text(encoding="utf-8") == "".join(text.splitlines(keepends=True)[:100])


def test_a_write_that_fails_midway_keeps_the_old_file_and_removes_its_temporary(tmp_path):
    text = _book_text()
    path = tmp_path / "book.txt"
    path.write_text("the earlier version\n", encoding="utf-8")
    seen = []

    def half_then_fail(f):
        seen.append(f.name)
        f.write(text[: len(text) // 2].encode("utf-8"))
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        storage.write_atomic_with(str(path), half_then_fail)
    assert os.listdir(tmp_path) == ["book.txt"]
    assert path.read_text(encoding="utf-8") == "the earlier version\n"
    # the temporary was in the same folder (a rename never crosses filesystems), of our naming
    assert os.path.dirname(seen[0]) == str(tmp_path)
    assert storage.base_name(os.path.basename(seen[0])) == "book.txt"
    with pytest.raises(KeyboardInterrupt):  # an interrupt too: BaseException
        storage.write_atomic_to(str(path), lambda tmp: (open(tmp, "wb").close(), _interrupt()))
    assert os.listdir(tmp_path) == ["book.txt"]


def _interrupt():
    raise KeyboardInterrupt


def test_a_manifest_whose_sync_fails_leaves_the_earlier_one_and_no_temporary(tmp_path, monkeypatch):
    """A disk full at the manifest's fsync: the set keeps its earlier manifest (the completion
    mark) and the folder holds nothing else (manifest.json.tmp-<pid> once stayed)."""
    from dataset_format.indexed import IndexedDatasetWriter
    from dataset_format.manifest import MANIFEST_NAME, Manifest, write_shard_set_manifest

    writer = IndexedDatasetWriter(str(tmp_path / "shard-00000"), np.uint16)
    for paragraph in _book_text().split("\n\n")[:200]:
        writer.add_document([np.frombuffer(paragraph.encode("utf-8"), dtype=np.uint8)])
    info = writer.finalize()
    write_shard_set_manifest(str(tmp_path), [info], dtype="uint16", sequence_unit="document")
    before = (tmp_path / MANIFEST_NAME).read_bytes()
    manifest = Manifest.read(str(tmp_path))

    def disk_full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    manifest.source["rewritten"] = True
    with pytest.raises(OSError, match="No space left"):
        manifest.write(str(tmp_path))
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == [MANIFEST_NAME, "shard-00000.bin", "shard-00000.idx"]
    assert (tmp_path / MANIFEST_NAME).read_bytes() == before


def test_an_evaluation_report_that_cannot_be_written_leaves_the_earlier_one(tmp_path):
    """A report whose text cannot be encoded (a lone surrogate) is refused whole: the earlier
    report stays and no temporary is left beside it (report.json.tmp-<pid> once stayed)."""
    from train.eval.run import write_report

    path = tmp_path / "report.json"
    write_report(str(path), json.dumps({"task": "wikitext", "text": _book_text()[:500]}))
    before = path.read_bytes()
    with pytest.raises(UnicodeEncodeError):
        write_report(str(path), '{"task": "wikitext", "text": "\ud800"}')
    assert os.listdir(tmp_path) == ["report.json"]
    assert path.read_bytes() == before


def test_a_torch_file_written_through_its_temporary_does_not_depend_on_the_temporarys_name(tmp_path):
    """torch.save names the archive inside after the file's stem: written by name through a
    temporary `model.pt.tmp-<suffix>`, the archive is `model.pt/` whatever the suffix, so a
    train/export.py output is byte-identical from run to run (and to one written through
    `model.pt.tmp-<pid>`)."""
    import zipfile

    import torch

    state = {"embedding": torch.arange(4096, dtype=torch.float32).reshape(64, 64)}
    (tmp_path / "by-pid").mkdir()
    torch.save(state, str(tmp_path / "by-pid" / "model.pt.tmp-48213"))
    storage.write_atomic_to(str(tmp_path / "model.pt"), lambda tmp: torch.save(state, tmp))
    assert sorted(os.listdir(tmp_path)) == ["by-pid", "model.pt"]
    by_pid = (tmp_path / "by-pid" / "model.pt.tmp-48213").read_bytes()
    assert (tmp_path / "model.pt").read_bytes() == by_pid
    names = zipfile.ZipFile(tmp_path / "model.pt").namelist()
    assert "model.pt/data.pkl" in names
    loaded = torch.load(tmp_path / "model.pt", weights_only=True)
    assert torch.equal(loaded["embedding"], state["embedding"])


# -- the ownership rule counts our temporaries as their final names -------------------------------
def _left_by_a_killed_write(path) -> str:
    """The temporary name a write of `path` uses, as a write killed after opening it leaves it."""
    names = []

    def killed(f):
        names.append(f.name)
        f.write(b"half a record")
        raise KeyboardInterrupt  # the write stops here; its cleanup removes the file

    with pytest.raises(KeyboardInterrupt):
        storage.write_atomic_with(str(path), killed)
    with open(names[0], "wb") as f:  # as SIGKILL would have left it: no cleanup ran
        f.write(b"half a record")
    return os.path.basename(names[0])


def test_a_temporary_left_by_a_killed_write_does_not_block_resume(tmp_path):
    run = tmp_path / "run"
    with claim_output_folder(run, tool="pretrain") as out:
        out.record("metrics.jsonl", "checkpoints/")
        out.write_json("config.json", {"seed": 7})
    strays = [
        _left_by_a_killed_write(run / "metrics.jsonl"),
        _left_by_a_killed_write(run / "config.json"),
        "metrics.jsonl.tmp-48213",  # a temporary named by a process id
    ]
    os.makedirs(run / "checkpoints" / ".tmp-step-00000005")  # the checkpoint's own, recorded folder
    assert all(re.fullmatch(r"(metrics\.jsonl|config\.json)\.tmp-[0-9a-f]+", s) for s in strays)
    with claim_output_folder(run, tool="pretrain", resume=True) as out:
        assert set(out.files) == {"metrics.jsonl", "checkpoints/", "config.json"}
    # a temporary of a name the run never recorded is not ours
    stray = _left_by_a_killed_write(run / "notes.txt")
    with pytest.raises(OutputError, match=re.escape(stray)):
        claim_output_folder(run, tool="pretrain", resume=True)


def test_a_pipeline_output_with_a_killed_writes_temporary_is_claimed_again(tmp_path):
    """preprocess's claim of its own unfinished OUTPUT removes our temporaries of its files."""
    from pipelines.output import claim_output

    out = tmp_path / "set"
    claim_output(str(out), run_id="first").release()
    stray = _left_by_a_killed_write(out / "shard-00000-00000.bin")
    claim = claim_output(str(out), run_id="second")
    claim.release()
    assert stray not in os.listdir(out) and MARKER_NAME in os.listdir(out)


# -- one place renames ---------------------------------------------------------------------------
PRODUCTION = ("common", "dataset_format", "pipelines", "train", "tools")
# pipelines/runner/beam_worker.py renames to claim a standby worker and publish its socket:
# claims between processes, not writes of a file's content.
MAY_RENAME = {"common/storage.py", "pipelines/runner/beam_worker.py"}


def rename_call_sites(source: str) -> int:
    """Calls of os.replace/os.rename in `source` (also `from os import replace` ones)."""
    tree = ast.parse(source)
    from_os = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "os"
        for alias in node.names
        if alias.name in ("replace", "rename")
    }
    os_names = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name == "os"
    }
    count = 0
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in ("replace", "rename"):
            count += isinstance(func.value, ast.Name) and func.value.id in os_names
        elif isinstance(func, ast.Name):
            count += func.id in from_os
    return count


def test_rename_call_sites_are_counted():
    assert rename_call_sites("import os\nos.replace(a, b)\nos.rename(a, b)\n") == 2
    assert rename_call_sites("import os as o\no.replace(a, b)\n") == 1
    assert rename_call_sites("from os import replace as r\nr(a, b)\n") == 1
    assert rename_call_sites("import os\ntext.replace('a', 'b')\n") == 0


def test_only_the_storage_module_renames_what_the_project_writes():
    found = {}
    for top in PRODUCTION:
        for path in sorted((REPO / top).rglob("*.py")):
            count = rename_call_sites(path.read_text(encoding="utf-8"))
            if count:
                found[path.relative_to(REPO).as_posix()] = count
    assert "common/storage.py" in found  # the walk reads the sources it should
    hand_rolled = sorted(set(found) - MAY_RENAME)
    assert not hand_rolled, f"write through common.storage (write_atomic*, replace): {hand_rolled}"
    assert len(found) <= 2
