"""The tests of tests/unit/pipelines/runner/test_pipeline_dataflow.py that start a process or run a Beam pipeline (that file
holds the in-process ones and says what they cover)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from urllib.parse import quote
from urllib.request import Request, urlopen

import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator
from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner

from pipelines.write import LOCK_NAME, MARKER_NAME
from tests.conftest import REPO
from tests.dataflow_fake_gcs import launcher_env
from tests.helpers.pipeline_dataflow import CORPORA, GPT2, dataflow_argv


@pytest.mark.slow
def test_worker_package_builds_like_the_stager_and_installs(tmp_path):
    from apache_beam.runners.portability.stager import Stager

    tarball = Stager._build_setup_package(str(REPO / "pyproject.toml"), str(tmp_path / "stage"))
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(site),
            tarball,
        ],
        check=True,
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    check = (
        "import pipelines.preprocess, pipelines.sources, dataset_format;"
        "from pipelines.sources import SOURCES;"
        "[SOURCES[n] for n in SOURCES];"
        "print(pipelines.preprocess.__file__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith(str(site))  # imported from the package, not the repo


def _extra(name: str) -> list[str]:
    import tomllib

    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["optional-dependencies"][name]


def _build_in(python: Path, out: Path) -> subprocess.CompletedProcess:
    """Build the worker package as Beam's stager does, with `python`'s own setuptools."""
    code = (
        "import sys; from apache_beam.runners.portability.stager import Stager;"
        f"print(Stager._build_setup_package({str(REPO / 'pyproject.toml')!r}, {str(out)!r}))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env)


def _pip_install(python: Path, requirement: str, *flags: str) -> None:
    """pip install from PyPI (or pip's cache); the test is skipped on a machine without either."""
    result = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--retries", "1", "--timeout",
         "20", *flags, requirement], capture_output=True, text=True)
    if result.returncode != 0:
        if "No matching distribution" in result.stderr or "connection" in result.stderr.lower():
            pytest.skip(f"cannot fetch {requirement} (no package index here)")
        raise AssertionError(result.stderr[-2000:])


@pytest.mark.slow
def test_the_worker_package_builds_with_the_dataflow_extras_setuptools(tmp_path):
    """A fresh venv, as a new launcher machine has: its bundled setuptools cannot build the
    worker package (the stager ignores [build-system] requires); with the `dataflow` extra's
    setuptools pin installed, it can. Beam and the rest come from this venv via a .pth placed
    after the fresh venv's own site-packages, so the fresh setuptools is the one imported."""
    import site
    import sysconfig

    (pin,) = [r for r in _extra("dataflow") if r.startswith("setuptools")]
    lowest = pin.split(">=")[1]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    fresh_site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip()
    ours = [p for p in site.getsitepackages() if p.startswith(sys.prefix)] or [
        sysconfig.get_paths()["purelib"]]
    (Path(fresh_site) / "zz-launcher-env.pth").write_text("\n".join(ours) + "\n")
    _pip_install(python, "setuptools<77", "--force-reinstall")
    old = _build_in(python, tmp_path / "old")
    assert old.returncode != 0 and "license" in (old.stdout + old.stderr).lower()
    _pip_install(python, f"setuptools~={lowest}.0")
    new = _build_in(python, tmp_path / "new")
    assert new.returncode == 0, new.stderr[-2000:]
    assert Path(new.stdout.strip().splitlines()[-1]).name.startswith("shardsmith-")


# -- launching as docs/preprocessing.md says, from a fresh venv, against a local fake GCS ---
# The fake GCS server (tests/dataflow_fake_gcs.py) runs on gcp-storage-emulator, installed into
# the launcher venv after the docs' install; only the test needs it.
FAKE_GCS = "gcp-storage-emulator==2026.7.19"
NETWORK_ERRORS = ("No matching distribution", "connection", "Name or service not known",
                  "Temporary failure in name resolution", "Could not find a version")


def _readme_dataflow_command() -> list[str]:
    """The launch command of the docs' Dataflow section, as a user would paste it."""
    readme = (REPO / "docs" / "preprocessing.md").read_text()
    section = readme[readme.index("## Dataflow"):]
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.S)[:1]
    return shlex.split(block.replace("\\\n", " "))


def _pip(python: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True,
                          env=_clean_env())


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith("STORAGE_EMULATOR")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def launcher_venv():
    """A fresh venv with what the docs' Dataflow section installs (`pip install -e
    '.[dataflow]'`, Beam at this venv's version), plus the fake GCS server. Wheels are kept
    in a wheelhouse (~/.cache/shardsmith/dataflow-wheels, or $SHARDSMITH_WHEELHOUSE) so that
    only the first session on a machine downloads them; skipped where PyPI is out of reach."""
    wheelhouse = Path(os.environ.get("SHARDSMITH_WHEELHOUSE")
                      or Path.home() / ".cache" / "shardsmith" / "dataflow-wheels")
    wheelhouse.mkdir(parents=True, exist_ok=True)
    # ~0.9 GB: removed at the end, not left to pytest's retention of its last temp dirs
    with tempfile.TemporaryDirectory(prefix="launcher-venv-") as venv:
        yield _make_launcher_venv(Path(venv), wheelhouse)


def _make_launcher_venv(venv: Path, wheelhouse: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    wanted = [f"{REPO}[dataflow]", f"apache-beam[gcp]=={version('apache-beam')}"]
    # --no-compile: byte-compiling Beam and the Google clients would double the install's time
    offline = ("--no-index", "--find-links", str(wheelhouse), "--no-compile")

    def install() -> subprocess.CompletedProcess:
        first = _pip(python, "install", "-q", *offline, "-e", *wanted)
        return first if first.returncode else _pip(python, "install", "-q", *offline, FAKE_GCS)

    installed = install()
    if installed.returncode:  # a new machine, or new requirements: fill the wheelhouse
        filled = _pip(python, "wheel", "-q", "--retries", "1", "--timeout", "30", "-w",
                      str(wheelhouse), *wanted, FAKE_GCS)
        if filled.returncode:
            if any(e.lower() in filled.stderr.lower() for e in NETWORK_ERRORS):
                pytest.skip("no package index here to build the launcher venv from")
            raise AssertionError(filled.stderr[-3000:])
        for ours in wheelhouse.glob("shardsmith-*.whl"):  # the repo itself is installed -e
            ours.unlink()
        installed = install()
    assert installed.returncode == 0, installed.stderr[-3000:]
    return python


class FakeGCS:
    """tests/dataflow_fake_gcs.py run in the launcher venv; objects read and written over
    GCS's JSON API, so this (Beam-without-GCP) venv needs no client library."""

    def __init__(self, python: Path, root: Path, bucket: str):
        self.bucket = bucket
        port_file = root / "port"
        self.log = root / "server.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [str(python), str(REPO / "tests" / "dataflow_fake_gcs.py"), str(root / "data"),
                 str(port_file), bucket], env=_clean_env(), stdout=log, stderr=log)
        deadline = time.monotonic() + 60
        while not port_file.exists():
            assert self.process.poll() is None and time.monotonic() < deadline, \
                self.log.read_text()[-3000:]
            time.sleep(0.1)
        self.url = f"http://127.0.0.1:{port_file.read_text()}"

    def _object_url(self, name: str, api: str = "") -> str:
        return f"{self.url}{api}/storage/v1/b/{self.bucket}/o/{quote(name, safe='')}"

    def put(self, name: str, data: bytes) -> None:
        url = (f"{self.url}/upload/storage/v1/b/{self.bucket}/o?uploadType=media"
               f"&name={quote(name, safe='')}")
        urlopen(Request(url, data=data, method="POST")).read()

    def get(self, name: str) -> bytes:
        return urlopen(self._object_url(name, "/download") + "?alt=media").read()

    def names(self, prefix: str = "") -> list[str]:
        url = f"{self.url}/storage/v1/b/{self.bucket}/o?prefix={quote(prefix, safe='')}"
        return sorted(item["name"] for item in json.load(urlopen(url)).get("items", []))

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def fake_gcs(launcher_venv, tmp_path_factory):
    """gs://my-bucket (the docs' bucket) holding a real English Wikipedia multistream piece
    (shared corpora) under the name the docs' --input glob matches, and a file it must not."""
    gcs = FakeGCS(launcher_venv, tmp_path_factory.mktemp("gcs"), "my-bucket")
    try:
        dump = (CORPORA / "wikipedia"
                / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
        gcs.put("dumps/enwiki-20240101-pages-articles-multistream1.xml.bz2", dump.read_bytes())
        gcs.put("dumps/enwiki-20240101-pages-articles-multistream-index1.txt.bz2", b"not xml")
        yield gcs
    finally:
        gcs.stop()


def _launch(python: Path, gcs: FakeGCS, tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    """The docs' Dataflow command run from the repository root by the launcher venv's Python,
    with `extra` flags; only the tokenizer path is made absolute (the docs' is relative to a
    checkout of the vocabularies)."""
    command = _readme_dataflow_command()
    assert command[:3] == ["python", "-m", "pipelines.preprocess"], command
    argv = [GPT2 if a == "vocab/gpt2" else a for a in command[3:]]
    tmp.mkdir()
    env = _clean_env(TMPDIR=str(tmp), **launcher_env(int(gcs.url.rsplit(":", 1)[1]),
                                                    str(tmp / "adc.json")))
    return subprocess.run([str(python), "-m", "pipelines.preprocess", *argv, *extra],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def _sdist_members(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read()
                for m in tar.getmembers() if m.isfile()}


def _check_worker_package(data: bytes) -> None:
    """An sdist of this repository's preprocessing code with the SPDX license field, which
    only setuptools>=77 (the dataflow extra's) writes."""
    members = _sdist_members(data)
    assert "pipelines/preprocess.py" in members and "dataset_format/__init__.py" in members
    pkg_info = members["PKG-INFO"].decode()
    assert "Name: shardsmith" in pkg_info and "License-Expression: Apache-2.0" in pkg_info
    assert (REPO / "pipelines" / "preprocess.py").read_bytes() == members[
        "pipelines/preprocess.py"]


@pytest.mark.slow
def test_readmes_dataflow_command_dry_runs_from_a_fresh_venv(launcher_venv, fake_gcs, tmp_path):
    """`--dry_run=True` in Beam 2.77 does everything but talk to Dataflow's service: our
    launcher lists the gs:// inputs, claims the gs:// output and puts the tokenizer there, the
    graph is built, and Beam's stager builds the worker package with the venv's own setuptools
    into a local directory. (It returns before staging anything to GCS: see the next test.)"""
    no_torch = subprocess.run([str(launcher_venv), "-c", "import torch"], capture_output=True)
    assert no_torch.returncode != 0  # the dataflow extra does not pull torch in
    result = _launch(launcher_venv, fake_gcs, tmp_path / "tmp", "--dry_run=True")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "wikipedia: 1 files (1.7 MB) -> gs://my-bucket/shards/enwiki-gpt2" in result.stderr
    shards = fake_gcs.names("shards/enwiki-gpt2/")
    assert {f"shards/enwiki-gpt2/{n}" for n in ("tokenizer.json", MARKER_NAME)} <= set(shards)
    assert f"shards/enwiki-gpt2/{LOCK_NAME}" not in shards  # released when the launcher returned
    (package,) = (tmp_path / "tmp").glob("*/shardsmith-0.1.0.tar.gz")
    _check_worker_package(package.read_bytes())


@pytest.mark.slow
def test_readmes_dataflow_command_stages_the_job_to_gcs(launcher_venv, fake_gcs, tmp_path):
    """With --template_location, Beam goes one step further than a dry run without submitting:
    it stages the worker package and the pipeline proto to --temp_location and writes the job
    description (what it would send to Dataflow) to the template location, all on GCS."""
    from apache_beam.portability import common_urns
    from apache_beam.portability.api import beam_runner_api_pb2

    template = "templates/enwiki-gpt2"
    result = _launch(launcher_venv, fake_gcs, tmp_path / "tmp",
                     f"--template_location=gs://my-bucket/{template}")
    assert result.returncode == 0, result.stderr[-3000:]
    job = json.loads(fake_gcs.get(template))
    assert job["type"] == "JOB_TYPE_BATCH"
    options = job["environment"]["sdkPipelineOptions"]["options"]
    for key, value in {"runner": "DataflowRunner", "project": "my-project",
                       "region": "us-central1", "max_num_workers": 100,
                       "setup_file": "./pyproject.toml", "source": "wikipedia",
                       "output": "gs://my-bucket/shards/enwiki-gpt2", "num_buckets": 64}.items():
        assert options[key] == value, key
    staging = options["staging_location"]
    assert staging.startswith("gs://my-bucket/tmp/")
    prefix = staging.removeprefix("gs://my-bucket/") + "/"
    staged = {n.removeprefix(prefix) for n in fake_gcs.names(prefix)}
    assert {"workflow.tar.gz", "pipeline.pb"} <= staged, staged
    package = fake_gcs.get(prefix + "workflow.tar.gz")
    _check_worker_package(package)

    pipeline = beam_runner_api_pb2.Pipeline.FromString(fake_gcs.get(prefix + "pipeline.pb"))
    stages = {t.unique_name for t in pipeline.components.transforms.values()}
    assert {"ReadSource", "Tokenize", "WriteShards", "Finish"} <= stages, stages
    urls = {}
    for environment in pipeline.components.environments.values():
        for dep in environment.dependencies:
            assert dep.type_urn == common_urns.artifact_types.URL.urn
            payload = beam_runner_api_pb2.ArtifactUrlPayload.FromString(dep.type_payload)
            urls[payload.url] = payload.sha256
    assert urls[f"{staging}/workflow.tar.gz"] == hashlib.sha256(package).hexdigest()


def test_dataflow_validation_names_what_is_missing():
    options = PipelineOptions(dataflow_argv(temp_location="/tmp/local", region=None))
    errors = " ".join(PipelineOptionsValidator(options, DataflowRunner()).validate())
    assert "temp_location" in errors and "region" in errors
