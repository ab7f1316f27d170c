"""Checkpoints as untrusted input and saves that fail: a pickle that would run code (in
``.metadata`` or in a non-tensor entry, with meta.json re-hashed to match) is refused on every
load path with one line and the code never runs; FIFOs and links to /dev/zero are refused
without a hang; a full disk during a save says so in one line, leaves no temporary directory
and keeps the previous checkpoint resumable; stale temporary directories are swept; one-process
saves and loads print no torch warning."""

from __future__ import annotations

import errno
import io
import json
import os
import pickle
import warnings

import pytest
import torch
from torch.distributed.checkpoint import filesystem as dcp_filesystem

from common.safe_io import UnsafeInputError
from tests.helpers.checkpoints import load_path_errors as _every_load_path
from tests.helpers.checkpoints import rehash as _rehash
from tests.helpers.checkpoints import save_step as _save
from tests.helpers.checkpoints import trained_gpt as _trained
from tests.helpers.train_checkpoint_trust import RunsCode
from train import checkpoint as ckpt
from train import checkpoint_io
from train.eval.load import LoadError, load_model
from train.export import main as export_main


def _read_metadata(path: str):
    with open(os.path.join(path, ".metadata"), "rb") as f:
        return pickle.load(f)  # our own just-written test checkpoint


def _write_metadata(path: str, metadata) -> None:
    with open(os.path.join(path, ".metadata"), "wb") as f:
        pickle.dump(metadata, f)
    _rehash(path, ".metadata")


def test_a_metadata_pickle_that_runs_code_is_refused_everywhere(gpt_checkpoint, tmp_path, capsys):
    marker = tmp_path / "ran"
    with open(os.path.join(gpt_checkpoint, ".metadata"), "wb") as f:
        pickle.dump(RunsCode(str(marker)), f)
    _rehash(gpt_checkpoint, ".metadata")
    for message in _every_load_path(gpt_checkpoint, tmp_path):
        assert "\n" not in message
        assert "posix.system" in message and "refused" in message, message
    assert export_main(["torch", gpt_checkpoint, str(tmp_path / "out.pt")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "posix.system" in err
    assert not marker.exists() and not (tmp_path / "out.pt").exists()


def test_a_non_tensor_entry_that_runs_code_is_refused(gpt_checkpoint, tmp_path):
    """DCP itself loads non-tensor entries (an optimizer's lr) with weights_only=False: point
    one at a pickle that runs code, appended to the data file, everything re-hashed."""
    marker = tmp_path / "ran"
    data_file = os.path.join(gpt_checkpoint, "__0_0.distcp")
    blob = io.BytesIO()
    torch.save(RunsCode(str(marker)), blob)
    offset = os.path.getsize(data_file)
    with open(data_file, "ab") as f:
        f.write(blob.getvalue())
    _rehash(gpt_checkpoint, "__0_0.distcp")
    metadata = _read_metadata(gpt_checkpoint)
    index = next(i for i in metadata.storage_data if i.fqn.endswith("param_groups.0.lr"))
    info = metadata.storage_data[index]
    info.offset, info.length = offset, len(blob.getvalue())
    _write_metadata(gpt_checkpoint, metadata)
    with pytest.raises(ckpt.CheckpointError, match="cannot be loaded safely") as caught:
        ckpt.load_dcp(gpt_checkpoint, {}, checkpoint_io.SafeFullLoadPlanner())
    assert "\n" not in str(caught.value) and "param_groups.0.lr" in str(caught.value)
    assert export_main(["torch", gpt_checkpoint, str(tmp_path / "out.pt")]) == 1
    assert not marker.exists()


@pytest.mark.parametrize(
    "edit, fault",
    [
        (lambda info: setattr(info, "relative_path", "../../../etc/passwd"), "not a data file"),
        (lambda info: setattr(info, "offset", 1 << 40), "lies outside __0_0.distcp"),
        (lambda info: setattr(info, "transform_descriptors", ["zstd"]), "asks for transforms"),
    ],
)
def test_metadata_pointing_outside_the_checkpoint_is_refused(gpt_checkpoint, edit, fault):
    metadata = _read_metadata(gpt_checkpoint)
    edit(next(iter(metadata.storage_data.values())))
    _write_metadata(gpt_checkpoint, metadata)
    with pytest.raises(ckpt.CheckpointError, match=fault):
        ckpt.load_checkpoint(gpt_checkpoint, *_trained(seed=1))


def test_a_tensor_larger_than_the_checkpoint_and_a_huge_list_index_are_refused(gpt_checkpoint):
    metadata = _read_metadata(gpt_checkpoint)
    metadata.state_dict_metadata["model.wte.weight"].size = torch.Size([1 << 30, 1 << 20])
    _write_metadata(gpt_checkpoint, metadata)
    with pytest.raises(ckpt.CheckpointError, match="claims more bytes"):
        ckpt.load_dcp(gpt_checkpoint, {}, checkpoint_io.SafeFullLoadPlanner())
    metadata = _read_metadata(gpt_checkpoint)
    metadata.state_dict_metadata["model.wte.weight"].size = torch.Size([128, 64])
    key = next(iter(metadata.planner_data))
    metadata.planner_data[key] = ("optimizer", "param_groups", 10**12, "lr")
    _write_metadata(gpt_checkpoint, metadata)
    with pytest.raises(ckpt.CheckpointError, match="small indices"):
        ckpt.load_dcp(gpt_checkpoint, {}, checkpoint_io.SafeFullLoadPlanner())


def test_the_restricted_unpickler_reads_real_metadata_and_refuses_the_rest(gpt_checkpoint):
    with open(os.path.join(gpt_checkpoint, ".metadata"), "rb") as f:
        real = f.read()
    parsed = checkpoint_io.parse_metadata(real, "m")
    assert (
        parsed.state_dict_metadata.keys()
        == _read_metadata(gpt_checkpoint).state_dict_metadata.keys()
    )
    # BUILD on a class object would set attributes on torch's own class for the whole process
    on_class = b"\x80\x02ctorch.distributed.checkpoint.metadata\nStorageMeta\nN}U\x01xK\x01s\x86b."
    for data, fault in [
        (pickle.dumps(RunsCode("/nonexistent/x")), "posix.system"),
        (on_class, "sets attributes on a class"),
        (b"\x80\x04\x8c\x01x\x94Q.", "BINPERSID opcode"),
        (pickle.dumps([1, 2]), "holds a list"),
        (real[: len(real) // 2], "not DCP metadata"),
    ]:
        with pytest.raises(UnsafeInputError, match=fault) as caught:
            checkpoint_io.parse_metadata(data, "m")
        assert "\n" not in str(caught.value)
    assert not hasattr(torch.distributed.checkpoint.metadata.StorageMeta, "x")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_meta_json_listing_a_fifo_or_a_link_to_dev_zero_is_refused_without_a_hang(
    gpt_checkpoint, kind
):
    target = os.path.join(gpt_checkpoint, "trainer.pt")
    os.remove(target)
    if kind == "fifo":
        os.mkfifo(target)
    else:
        os.symlink("/dev/zero", target)
    meta_path = os.path.join(gpt_checkpoint, "meta.json")
    meta = json.loads(open(meta_path).read())
    meta["files"]["trainer.pt"]["bytes"] = 0
    open(meta_path, "w").write(json.dumps(meta))
    word = "a FIFO" if kind == "fifo" else "a character device"
    with pytest.raises(ckpt.CheckpointError, match=f"trainer.pt is {word}, not a regular file"):
        ckpt.verify_checkpoint(gpt_checkpoint)
    os.remove(target)
    os.mkfifo(meta_path + ".fifo")
    os.replace(meta_path + ".fifo", meta_path)
    with pytest.raises(ckpt.CheckpointError, match="meta.json is a FIFO"):
        ckpt.verify_checkpoint(gpt_checkpoint)
    assert ckpt.saved_run_id(gpt_checkpoint) is None


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_during_the_shards_is_one_line_and_keeps_the_last_checkpoint(
    tmp_path, monkeypatch
):
    model, optimizer = _trained()
    first = _save(tmp_path, 1, model, optimizer)
    monkeypatch.setattr(dcp_filesystem, "_write_item", _disk_full)
    with pytest.raises(ckpt.CheckpointError) as caught:
        _save(tmp_path, 2, model, optimizer)
    message = str(caught.value)
    assert "\n" not in message
    assert "step 2 not saved (no space left on device)" in message and first in message
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["step-00000001"]
    monkeypatch.undo()
    assert ckpt.latest_checkpoint(str(tmp_path)) == first
    assert ckpt.load_checkpoint(first, *_trained(seed=1))["step"] == 1


def test_a_full_disk_while_committing_is_one_line_and_keeps_the_last_checkpoint(
    tmp_path, monkeypatch
):
    model, optimizer = _trained()
    first = _save(tmp_path, 1, model, optimizer)
    monkeypatch.setattr(ckpt, "_write_json_synced", _disk_full)
    with pytest.raises(ckpt.CheckpointError, match=r"step 2 not saved \(no space left"):
        _save(tmp_path, 2, model, optimizer)
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["step-00000001"]
    assert ckpt.load_checkpoint(first, *_trained(seed=1))["step"] == 1


def test_stale_temporary_directories_are_swept(tmp_path):
    model, optimizer = _trained()
    stale = tmp_path / "checkpoints" / ".tmp-step-00000005"
    os.makedirs(stale)
    (stale / "__0_0.distcp").write_bytes(b"x" * 1000)
    (tmp_path / "checkpoints" / ".tmp-notes").mkdir()  # not ours by name: left alone
    assert ckpt.sweep_stale_saves(str(tmp_path)) == [".tmp-step-00000005"]
    assert not stale.exists() and (tmp_path / "checkpoints" / ".tmp-notes").exists()
    os.makedirs(stale)  # a kill again; the next save sweeps it first
    _save(tmp_path, 6, model, optimizer)
    assert sorted(os.listdir(tmp_path / "checkpoints")) == [".tmp-notes", "step-00000006"]
    assert ckpt.sweep_stale_saves(str(tmp_path / "nothing")) == []


def test_one_process_save_and_load_print_no_torch_warning(tmp_path):
    model, optimizer = _trained()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        path = _save(tmp_path, 1, model, optimizer)
        ckpt.load_checkpoint(path, *_trained(seed=1))
    # exactly that warning is silenced, nothing else
    with pytest.warns(UserWarning, match="another warning"):
        with checkpoint_io.single_process_quiet():
            warnings.warn(
                "torch.distributed is disabled, unavailable or uninitialized, x", stacklevel=1
            )
            warnings.warn("another warning", stacklevel=1)


def test_hf_export_writes_only_a_folder_of_its_own(gpt_checkpoint, tmp_path, capsys):
    """checkpoint-to-hf OUT follows the shared output-folder rule: a folder of a user's files
    is refused untouched; an earlier export is replaced only with --overwrite."""
    pytest.importorskip("transformers")
    users = tmp_path / "users"
    users.mkdir()
    (users / "config.json").write_text("the user's own\n")
    assert export_main(["hf", gpt_checkpoint, str(users), "--no-tokenizer"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not empty and was not written by this tool" in err
    assert os.listdir(users) == ["config.json"]
    assert (users / "config.json").read_text() == "the user's own\n"
    out = tmp_path / "hf"
    assert export_main(["hf", gpt_checkpoint, str(out), "--no-tokenizer"]) == 0
    assert {"config.json", "model.safetensors", "shardsmith.json"} <= set(os.listdir(out))
    assert export_main(["hf", gpt_checkpoint, str(out), "--no-tokenizer"]) == 1
    assert "--overwrite" in capsys.readouterr().err
    assert export_main(["hf", gpt_checkpoint, str(out), "--overwrite", "--no-tokenizer"]) == 0


def test_hf_export_of_a_run_without_a_tokenizer_needs_no_tokenizer_or_one(
    gpt_checkpoint, tmp_path, capsys
):
    """A run that records no tokenizer exported to a folder AutoTokenizer cannot load was exit
    0 with a note: it is one line naming both ways out, and nothing left in OUT."""
    pytest.importorskip("transformers")
    out = tmp_path / "hf"
    assert export_main(["hf", gpt_checkpoint, str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "records no tokenizer" in err
    assert "--tokenizer FILE" in err and "--no-tokenizer" in err
    assert not (out / "model.safetensors").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("edit, fault", [
    ({"n_layer": 100_000}, "n_layer=100,000"),
    ({"n_embd": 1 << 20, "n_head": 1}, "n_embd=1,048,576"),
    ({"vocab_size": 10**12}, "vocab_size=1,000,000,000,000"),
    ({"n_positions": 10**9}, "n_positions=1,000,000,000"),
    ({"n_head": 7}, "n_head 7 does not divide n_embd 64"),
    ({"n_layer": "many"}, "n_layer is 'many', not a positive integer"),
])
def test_an_hf_config_larger_than_its_weights_is_refused_before_building(
    gpt_checkpoint, tmp_path, edit, fault
):
    """Issue 27.5: config.json asking for 100,000 layers beside a real model's weights kept
    evaluate and generate building a model for minutes; it is one line before anything is
    built."""
    pytest.importorskip("transformers")
    out = tmp_path / "hf"
    assert export_main(["hf", gpt_checkpoint, str(out), "--no-tokenizer"]) == 0
    assert load_model(str(out), torch.device("cpu")).kind == "gpt"
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, **edit}))
    with pytest.raises(LoadError) as caught:
        load_model(str(out), torch.device("cpu"))
    message = str(caught.value)
    assert "\n" not in message and fault in message and "config.json" in message


def test_a_run_start_sweeps_the_saves_a_killed_run_left(tmp_path, capsys):
    """The trainer's --out claim (rank 0, at start) removes .tmp-step-* left by a SIGKILL."""
    from train.config import parse_args
    from train.resume import claim_run_directory

    out = str(tmp_path / "run")
    claim_run_directory(parse_args(["--data", "x", "--out", out]), False, True).release()
    os.makedirs(os.path.join(out, "checkpoints", ".tmp-step-00000009"))
    resumed = parse_args(["--data", "x", "--out", out, "--resume"])
    claim_run_directory(resumed, True, True).release()
    assert os.listdir(os.path.join(out, "checkpoints")) == []
    assert "unfinished checkpoint saves of an earlier run: .tmp-step-00000009" in (
        capsys.readouterr().out
    )


def test_a_full_disk_before_the_first_byte_is_one_line(tmp_path, monkeypatch):
    """Even the temporary directory cannot be made: one line, nothing left behind."""
    model, optimizer = _trained()
    real_makedirs = os.makedirs

    def makedirs(path, *args, **kwargs):
        if ".tmp-step-" in str(path):
            _disk_full()
        return real_makedirs(path, *args, **kwargs)

    monkeypatch.setattr(ckpt.os, "makedirs", makedirs)
    with pytest.raises(ckpt.CheckpointError, match=r"step 1 not saved \(no space left on device\)"):
        _save(tmp_path, 1, model, optimizer)
    assert os.listdir(tmp_path / "checkpoints") == []


def test_export_to_a_directory_or_a_full_disk_is_one_line_and_leaves_nothing(
    gpt_checkpoint, tmp_path, capsys, monkeypatch
):
    target = tmp_path / "a-folder"
    target.mkdir()
    assert export_main(["torch", gpt_checkpoint, str(target)]) == 1
    assert "is a directory" in capsys.readouterr().err and os.listdir(target) == []
    from train import export

    monkeypatch.setattr(export.torch, "save", _disk_full)
    assert export_main(["torch", gpt_checkpoint, str(tmp_path / "out.pt")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err
    assert not [name for name in os.listdir(tmp_path) if name.startswith("out.pt")]
