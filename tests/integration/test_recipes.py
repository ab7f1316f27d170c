"""recipes/: every command the recipes run parses with the real command-line parsers, the runs
they describe are the ones recipes/SCALING.md prices, and SCALING.md is what
recipes/make_scaling.py writes from the committed bench results.

The commands come from the recipes themselves: with DRY_RUN=1 each recipe prints the commands
it would run, variables expanded, in both modes (one machine, and Dataflow + a multi-node
torchrun job). Nothing is run and no input is needed.
"""

from __future__ import annotations

import shlex
import subprocess

import pytest
import torch
from apache_beam.options.pipeline_options import PipelineOptions
from torch.distributed.run import get_args_parser as torchrun_parser

from pipelines.dedup.__main__ import build_parser as dedup_parser
from pipelines.dedup.config import DedupConfig
from pipelines.options import PreprocessConfig, PreprocessOptions
from pipelines.preprocess import build_parser as beam_parser
from pipelines.runner.runners import unknown_arguments
from tests.helpers.recipes import RECIPE_FILES, RECIPES, make_scaling
from train.build import model_positions, resolve_config
from train.config import parse_args as pretrain_args
from train.eval.run import build_parser as evaluate_parser
from train.runtime import Runtime

MODES = ("local", "cluster")


def dry_run(recipe: str, mode: str, **env: str) -> list[list[str]]:
    """The commands `recipe` runs in `mode` (and the variables `env`), as argv lists."""
    result = subprocess.run(
        ["bash", str(RECIPES / recipe)],
        env={"PATH": "/usr/bin:/bin", "DRY_RUN": "1", "MODE": mode, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, f"{recipe} (MODE={mode}) failed: {result.stderr}"
    commands = [shlex.split(line) for line in result.stdout.splitlines() if line.strip()]
    assert commands, f"{recipe} printed no command"
    return commands


@pytest.fixture(scope="module")
def commands() -> dict[tuple[str, str], list[list[str]]]:
    return {(r, m): dry_run(r, m) for r in RECIPE_FILES for m in MODES}


def test_a_bad_mode_is_one_line_error():
    result = subprocess.run(
        ["bash", str(RECIPES / "corpora.sh")],
        env={"PATH": "/usr/bin:/bin", "DRY_RUN": "1", "MODE": "dataflow"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "MODE must be local or cluster, got 'dataflow'"


def _beam_unknown(args: list[str]) -> list[str]:
    """Flags of `args` that no Beam option class (ours excluded) knows."""
    beam_only = [c for c in PipelineOptions.__subclasses__() if c is not PreprocessOptions]
    _, unknown = beam_parser(beam_only).parse_known_args(args)
    return [a for a in unknown if a.startswith("-")]


def check_preprocess(args: list[str]) -> None:
    assert unknown_arguments(args) == [], f"unknown flags in preprocess {args}"
    PreprocessConfig.from_options(PipelineOptions(args))  # raises on a missing/bad option


def check_dedup(args: list[str]) -> None:
    namespace, beam_args = dedup_parser().parse_known_args(args)
    DedupConfig.from_args(namespace)
    # The dedup CLI hands what it does not know to Beam, which would drop a misspelt flag.
    assert _beam_unknown(beam_args) == [], f"unknown flags in dedup {args}"


def check_torchrun(argv: list[str], mode: str) -> tuple[str, list[str], int]:
    """The script and its arguments; the world size; the launcher's own flags checked."""
    parsed = torchrun_parser().parse_args(argv)
    nproc = int(parsed.nproc_per_node)
    if mode == "cluster" and parsed.training_script == "train/pretrain.py":
        assert int(parsed.nnodes) > 1 and parsed.rdzv_backend == "c10d"
        assert parsed.rdzv_endpoint and parsed.rdzv_id != "none"
        return parsed.training_script, parsed.training_script_args, int(parsed.nnodes) * nproc
    assert parsed.standalone, "one-machine jobs run under torchrun --standalone"
    return parsed.training_script, parsed.training_script_args, nproc


def pretrain_runs(commands: list[list[str]], mode: str) -> list[tuple[object, int]]:
    runs = []
    for argv in commands:
        if argv[0] == "torchrun":
            script, args, world = check_torchrun(argv[1:], mode)
            if script == "train/pretrain.py":
                runs.append((pretrain_args(args), world))
    return runs


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("recipe", RECIPE_FILES)
def test_recipe_commands_parse(commands, recipe, mode):
    for argv in commands[(recipe, mode)]:
        if argv[:3] == ["python", "-m", "pipelines.preprocess"]:
            check_preprocess(argv[3:])
            assert ("--runner" in argv) == (mode == "cluster")
            if mode == "cluster":
                assert argv[argv.index("--runner") + 1] == "DataflowRunner"
        elif argv[:3] == ["python", "-m", "pipelines.dedup"]:
            check_dedup(argv[3:])
            assert ("--runner" in argv) == (mode == "cluster")
        elif argv[0] == "torchrun":
            script, args, world = check_torchrun(argv[1:], mode)
            if script == "train/pretrain.py":
                config = pretrain_args(args)  # exits on a bad flag or value
                # The trainer's own resolution on this many GPUs: batch over the ranks, sequence
                # length against the model's positions, warmup within the decay horizon.
                assert world % config.tp == 0
                runtime = Runtime(
                    rank=0,
                    world_size=world,
                    local_rank=0,
                    device=torch.device("cuda"),
                    mesh=None,
                    dp_rank=0,
                    dp_size=world // config.tp,
                    tp=config.tp,
                )
                resolve_config(config, runtime, model_positions)
            elif script == "train/evaluate.py":
                evaluate_parser().parse_args(args)
            else:
                pytest.fail(f"{recipe}: torchrun of an unknown script {script}")
        else:
            pytest.fail(f"{recipe}: a command this test cannot check: {shlex.join(argv)}")


@pytest.mark.parametrize("mode", MODES)
def test_recipes_train_what_the_sheet_prices(commands, mode):
    """Each pretrain command's preset, sequence length, batch and steps trained equal a run of
    make_scaling.RUNS, and each GPT layout one the sheet sizes; and a resumed phase has samples
    left to draw (the trainer refuses a run whose --max-steps x --global-batch is below the
    samples already consumed)."""
    trained = []
    layouts = {
        (name, layout.tp, layout.dp, layout.micro_batch, layout.activation_checkpointing,
         layout.parallel)
        for name, _, layout in make_scaling.LAYOUTS
    }  # fmt: skip
    for recipe in RECIPE_FILES:
        done = consumed = 0
        for config, world in pretrain_runs(commands[(recipe, mode)], mode):
            start = done if config.resume else 0
            consumed = consumed if config.resume else 0
            end = config.stop_at or config.max_steps
            steps = end - start
            assert steps > 0
            consumed += steps * config.global_batch
            assert consumed <= config.max_steps * config.global_batch, (
                f"{recipe}: {consumed} samples consumed by the end, but the run spans "
                f"{config.max_steps} x {config.global_batch}"
            )
            trained.append((recipe, config.preset, config.seq_len, config.global_batch, steps))
            done = end
            if config.model != "bert":  # the sheet sizes GPT layouts' memory (train.plan)
                run = next(r for r in make_scaling.RUNS if r.preset == config.preset)
                dp_state = "fsdp" if config.parallel == "tp" else config.parallel
                layout = (run.name, config.tp, world // config.tp, config.micro_batch,
                          config.activation_checkpointing, dp_state)  # fmt: skip
                assert layout in layouts, f"{recipe} ({mode}): {layout} is not in the sheet"
    expected = [(r.recipe, r.preset, r.seq_len, r.global_batch, r.steps) for r in make_scaling.RUNS]
    assert sorted(trained) == sorted(expected)


@pytest.mark.parametrize("mode", MODES)
def test_resume_continues_every_training_command(mode):
    """RESUME=1 continues a stopped run (a new job on a run with checkpoints is refused);
    START_PHASE=2 goes straight to BERT's phase 2."""
    for recipe in {run.recipe for run in make_scaling.RUNS}:
        resumed = pretrain_runs(dry_run(recipe, mode, RESUME="1"), mode)
        assert resumed and all(config.resume for config, _ in resumed), recipe
    phases = pretrain_runs(dry_run("bert_large_lamb.sh", mode, START_PHASE="2", RESUME="1"), mode)
    assert [config.seq_len for config, _ in phases] == [512]


@pytest.mark.parametrize("mode", MODES)
def test_bert_phase_two_is_a_new_run_from_phase_one(mode):
    """NVIDIA's LAMB recipe: 90% of the samples at 128 tokens, then a new run at 512 from
    phase 1's weights with its own 12.8% warmup and schedule (not phase 1's run resumed)."""
    (one, _), (two, _) = pretrain_runs(dry_run("bert_large_lamb.sh", mode), mode)
    assert (one.seq_len, two.seq_len) == (128, 512)
    assert two.init_from == one.out and two.out != one.out and not two.resume
    assert (two.max_steps, two.warmup_steps, two.stop_at) == (1563, 200, None)
    samples = [one.max_steps * one.global_batch, two.max_steps * two.global_batch]
    assert samples[0] / sum(samples) == pytest.approx(0.9, abs=0.005)
