"""train.config: the command line, and one-line errors for settings that cannot work."""

from __future__ import annotations

import pytest

from train.config import TrainConfig, parse_args


def test_flags_map_to_fields():
    config = parse_args(
        [
            "--data",
            "0.3",
            "wiki/",
            "0.7",
            "web/",
            "--model",
            "bert",
            "--max-steps",
            "5",
            "--global-batch",
            "16",
            "--micro-batch",
            "4",
            "--seq-len",
            "64",
            "--lr",
            "1e-3",
            "--min-lr",
            "1e-5",
            "--warmup-steps",
            "2",
            "--decay",
            "linear",
            "--weight-decay",
            "0.01",
            "--optimizer",
            "lamb",
            "--clip-grad",
            "0",
            "--precision",
            "fp16",
            "--out",
            "runs/x",
            "--resume",
            "--save-interval",
            "2",
            "--eval-interval",
            "3",
            "--eval-iters",
            "1",
            "--split",
            "98,1,1",
            "--seed",
            "9",
            "--parallel",
            "tp",
            "--tp",
            "2",
            "--compile",
            "--peak-tflops",
            "100",
            "--device",
            "cpu",
            "--skip-outliers",
            "5",
            "--log-interval",
            "1",
            "--no-decay-embeddings",
        ]
    )
    assert config.data == ["0.3", "wiki/", "0.7", "web/"]
    assert (config.model, config.max_steps, config.global_batch, config.micro_batch) == (
        "bert",
        5,
        16,
        4,
    )
    assert (config.optimizer, config.precision, config.parallel, config.tp) == (
        "lamb",
        "fp16",
        "tp",
        2,
    )
    assert config.resume and config.compile and not config.decay_embeddings
    assert config.skip_outliers == 5.0 and config.peak_tflops == 100.0
    assert TrainConfig.from_dict(config.to_dict()) == config


def test_every_flag_defaults_to_its_field_and_every_field_has_a_flag():
    """The parser takes its defaults from TrainConfig (OptionGroup): no second copy."""
    import dataclasses

    from train.config import build_parser

    assert parse_args(["--data", "shards/"]) == TrainConfig(data=["shards/"])
    dests = {a.dest for a in build_parser()._actions} - {"help"}
    assert dests == {f.name for f in dataclasses.fields(TrainConfig)}


def test_defaults_train_a_tiny_model_on_cpu():
    config = parse_args(["--data", "shards/"])
    assert config.preset is None and config.model is None  # resolved to gpt / gpt-tiny later
    assert config.device == "auto" and config.parallel == "ddp" and config.tp == 1
    assert config.precision is None  # bf16 on CUDA, fp32 on CPU


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--max-steps", "0"], "--max-steps must be positive"),
        (["--micro-batch", "-1"], "--micro-batch must be positive"),
        (["--lr", "0"], "--lr must be positive"),
        (["--lr", "1e-3", "--min-lr", "1e-2"], "--min-lr must be in"),
        (["--tp", "2"], "--tp 2 needs --parallel tp"),
        (["--dropout", "1.5"], "--dropout must be in"),
        (["--warmup-steps", "-3"], "--warmup-steps must be >= 0"),
    ],
)
def test_invalid_settings_exit_with_one_line(argv, message):
    with pytest.raises(SystemExit) as excinfo:
        parse_args(["--data", "x/", *argv])
    text = str(excinfo.value.code)
    assert message in text and "\n" not in text and text.startswith("error: ")


# -- each flag is its TrainConfig field's declaration (common.option_fields) -----------
POSITIVE_FLAGS = [
    "--vocab-size", "--seq-len", "--make-vocab-size-divisible-by", "--max-steps",
    "--global-batch", "--micro-batch", "--lr", "--decay-steps", "--outlier-window",
    "--max-consecutive-skips", "--tp", "--dist-timeout", "--peak-tflops", "--stop-at",
    "--keep-checkpoints", "--log-interval",
]  # fmt: skip
NON_NEGATIVE_FLAGS = [
    "--num-workers", "--warmup-steps", "--weight-decay", "--clip-grad", "--skip-outliers",
    "--ac-every", "--save-interval", "--eval-interval", "--eval-iters",
]  # fmt: skip


def error_of(argv: list[str]) -> str:
    with pytest.raises(SystemExit) as excinfo:
        parse_args(["--data", "x/", *argv])
    return str(excinfo.value.code)


@pytest.mark.parametrize("flag", POSITIVE_FLAGS)
def test_positive_settings(flag):
    assert error_of([flag, "0"]) in (
        f"error: {flag} must be positive, got {v}" for v in ("0", "0.0")
    )
    parse_args(["--data", "x/", flag, "1"])


@pytest.mark.parametrize("flag", NON_NEGATIVE_FLAGS)
def test_non_negative_settings(flag):
    assert error_of([flag, "-1"]) in (
        f"error: {flag} must be >= 0, got {v}" for v in ("-1", "-1.0")
    )
    parse_args(["--data", "x/", flag, "0"])


@pytest.mark.parametrize("flag", ["--lr", "--dist-timeout", "--clip-grad", "--skip-outliers"])
def test_nan_is_refused(flag):
    """NaN passed `value <= 0` and reached the optimizer or the process group."""
    assert error_of([flag, "nan"]).startswith(f"error: {flag} must be")


def test_choices_hold_on_the_command_line_and_in_a_saved_config(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--data", "x/", "--model", "mamba"])
    assert "argument --model: invalid choice: 'mamba'" in capsys.readouterr().err
    saved = parse_args(["--data", "x/"]).to_dict()
    for field, value, choices in [
        ("model", "mamba", "gpt, bert, llama"),
        ("optimizer", "sgd", "adamw, lamb"),
        ("decay", "step", "cosine, linear"),
        ("device", "tpu", "auto, cpu, cuda"),
        ("precision", "fp8", "fp32, bf16, fp16"),
        ("parallel", "pp", "ddp, fsdp, tp"),
        ("activation_checkpointing", "some", "none, full, selective"),
    ]:
        flag = "--" + field.replace("_", "-")
        with pytest.raises(SystemExit) as excinfo:
            TrainConfig.from_dict({**saved, field: value})
        assert str(excinfo.value.code) == f"error: {flag} must be one of {choices}, got {value!r}"


def test_types_switches_and_help_come_from_the_fields(capsys):
    from train.config import build_parser

    with pytest.raises(SystemExit):
        parse_args(["--data", "x/", "--seq-len", "64.5"])  # int | None: an int
    config = parse_args(
        ["--data", "x/", "--no-save", "--no-progress", "--eod-mask-loss", "--dropout", "0.1"]
    )
    assert (config.save, config.progress, config.eod_mask_loss, config.dropout) == (
        False, False, True, 0.1,
    )  # fmt: skip
    text = " ".join(build_parser().format_help().split("options:")[1].split())
    assert (
        "--global-batch GLOBAL_BATCH samples per optimizer step, over all data-parallel "
        "ranks (default: 8)" in text
    )
    assert "--optimizer {adamw,lamb} --lr LR peak learning rate (default: 0.0006)" in text
    assert "--dist-timeout MINUTES how long a collective may wait" in text
    assert "run directory: --out RUN run directory: checkpoints/ and metrics.jsonl" in text
