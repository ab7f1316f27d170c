"""The tests of tests/unit/train/models/test_models_llama.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO
from tests.helpers.train_runs import PAD_FOR_TP, losses, max_difference, single, torchrun
from tests.shard_fixtures import gpt_documents
from train.config import parse_args
from train.eval.load import load_model
from train.loop import main as train_main
from train.models.llama import Llama

transformers = pytest.importorskip("transformers")

TOL = dict(rtol=1e-5, atol=1e-5)  # the GPT and BERT parity bound (test_models_hf.py)


@pytest.fixture(scope="module")
def llama_run(gpt_shards, tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("llama-run")
    flags = ["--data", gpt_shards, "--out", str(out), "--model", "llama", "--seq-len", "32",
             "--global-batch", "4", "--max-steps", "6", "--split", "90,5,5", "--eval-iters",
             "1", "--no-progress", "--lr", "3e-3", "--warmup-steps", "1"]  # fmt: skip
    summary = train_main(parse_args(flags))
    assert summary["step"] == 6
    return str(out)


def test_a_run_exports_through_tools_convert_and_loads_back(llama_run, tmp_path) -> None:
    """Our checkpoint -> tools/convert checkpoint-to-hf -> LlamaForCausalLM, and that HF
    directory -> load_model: the same logits on Moby-Dick ids both ways."""
    from train import checkpoint as ckpt

    loaded = load_model(llama_run, torch.device("cpu"))
    assert loaded.kind == "llama" and isinstance(loaded.model, Llama)
    assert loaded.model.config.n_kv_head == 2  # the preset's, read back from trainer.pt
    hf_dir = tmp_path / "hf"
    done = subprocess.run(
        [sys.executable, "tools/convert", "checkpoint-to-hf",
         ckpt.latest_checkpoint(llama_run), str(hf_dir)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    hf = transformers.LlamaForCausalLM.from_pretrained(str(hf_dir)).eval()
    assert hf.config.architectures == ["LlamaForCausalLM"]
    ids = torch.tensor([[int(t) for t in d[:32]] for d in gpt_documents(4) if len(d) >= 32][:2])
    with torch.no_grad():
        ours = loaded.model(ids)[0]
        torch.testing.assert_close(hf(ids).logits, ours, **TOL)
        hf.save_pretrained(str(tmp_path / "from-hf"))
        back = load_model(str(tmp_path / "from-hf"), torch.device("cpu"))
        assert back.kind == "llama"
        torch.testing.assert_close(back.model(ids)[0], ours, **TOL)


def test_the_run_trains_and_its_model_generates(llama_run) -> None:
    import json
    import os

    with open(os.path.join(llama_run, "metrics.jsonl")) as f:
        train = [r["loss"] for r in map(json.loads, f) if r["kind"] == "train"]
    assert train[-1] < train[0] - 0.1
    done = subprocess.run(
        [sys.executable, "tools/generate", llama_run, "--prompt", "Call me Ishmael.",
         "--max-new-tokens", "8"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("Call me Ishmael.") and len(done.stdout) > 18


@pytest.fixture(scope="module")
def llama_reference(gpt_shards, tmp_path_factory) -> list[float]:
    """One process, its vocabulary padded as tp=2 pads it (to 256, 128 x tp)."""
    return single(gpt_shards, tmp_path_factory.mktemp("llama-one-process"), "--model", "llama",
                  *PAD_FOR_TP)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    ("layout", "bound"),
    [
        (["--parallel", "ddp", *PAD_FOR_TP], 1e-6),
        (["--parallel", "fsdp", "--activation-checkpointing", "selective", *PAD_FOR_TP], 1e-5),
        (["--parallel", "tp", "--tp", "2", "--sequence-parallel"], 1e-5),
    ],
    ids=["ddp", "fsdp-ac", "tp-sp"],
)
def test_two_ranks_match_one_process(gpt_shards, llama_reference, tmp_path, layout, bound):
    """The tolerances of test_train_distributed.py; tp=2 splits the 4 query and 2 key-value
    heads, the SwiGLU width and the untied head's vocabulary."""
    output = torchrun(gpt_shards, tmp_path, "--model", "llama", *layout)
    assert "llama-tiny" in output
    assert max_difference(losses(tmp_path), llama_reference) < bound
    assert llama_reference[5] < llama_reference[0] - 0.1  # it trains


# The production files outside the family's module and spec that may name it: the registry.
# (Tests may name any family: the preset list, these tests, and the checks every family goes
# through, such as loading HF folders and the planner's counts.)
ALLOWED_OUTSIDE = {
    "train/models/registry.py",
}


# What names the family: its modules, its classes, its name or a preset name as a string
# (not the LLaMA-3 token-file format of dataset_format/interop.py, which is no model).
FAMILY_REFERENCE = re.compile(r"models[./]llama|llama_spec|\bLlama\w*|[\"']llama[\w-]*[\"']")


def test_no_production_file_but_the_registry_names_the_family() -> None:
    """Every production source file (Python, tools, BUILD, configs; not the docs, not the
    tests) that names the family, other than train/models/llama.py and llama_spec.py."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    own = {"train/models/llama.py", "train/models/llama_spec.py"}
    touched = set()
    for path in listed:
        if path in own or path.startswith("tests/") or path.endswith((".md", ".txt", ".json", ".jsonl")):
            continue
        try:
            text = (REPO / path).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        if FAMILY_REFERENCE.search(text):
            touched.add(path)
    assert touched <= ALLOWED_OUTSIDE, sorted(touched - ALLOWED_OUTSIDE)
