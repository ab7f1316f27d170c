# A Dataflow worker image with shardsmith and every dependency installed, so workers start
# without pip-installing the worker package (about 63 s a worker start otherwise; README
# "Dataflow"). Build it from the repository root, tag it with the Beam version it matches:
#
#   docker build -f deploy/worker.Dockerfile -t REGION-docker.pkg.dev/PROJECT/REPO/shardsmith-worker:2.77.0 .
#   docker push REGION-docker.pkg.dev/PROJECT/REPO/shardsmith-worker:2.77.0
#
# and launch with --sdk_container_image=<that tag> --sdk_location=container (no --setup_file).
# The base image's Beam and Python must equal the launcher's: Dataflow refuses a mismatch.
ARG BEAM_VERSION=2.77.0
ARG PYTHON_VERSION=3.11
FROM apache/beam_python${PYTHON_VERSION}_sdk:${BEAM_VERSION}

WORKDIR /opt/shardsmith
# Only what the worker package needs: its sources and metadata (no tests, benches or data).
COPY pyproject.toml README.md ./
COPY pipelines ./pipelines
COPY common ./common
COPY dataset_format ./dataset_format
COPY train ./train
# The preprocessing dependencies only (no torch): setuptools>=77 builds the SPDX license field.
RUN pip install --no-cache-dir "setuptools>=77" \
 && pip install --no-cache-dir . \
 && python -c "import pipelines.preprocess, dataset_format; from pipelines.sources import SOURCES; [SOURCES[n] for n in SOURCES]"

# The base image's entry point (/opt/apache/beam/boot) starts the SDK harness: keep it.
