# Sourced by every recipe. `run CMD ARG...` runs one command of the recipe; with DRY_RUN=1 it
# prints the command instead (one line, shell-quoted, variables expanded), so a recipe can be
# read and checked without its inputs: tests/test_recipes.py parses every printed command with
# the real command-line parsers.
#
# MODE=local (default): one machine, local paths, Beam's local runner, torchrun --standalone.
# MODE=cluster: Dataflow for the pipelines, a multi-node torchrun job for training (run the
# training recipe on every node with the same RDZV_ENDPOINT and JOB_ID).
# RESUME=1: a training recipe continues its run from the last checkpoint (a new job on a run
# directory that has checkpoints is refused without it).

MODE=${MODE:-local}
case "$MODE" in
  local | cluster) ;;
  *) echo "MODE must be local or cluster, got '$MODE'" >&2; exit 2 ;;
esac
PYTHON=${PYTHON:-python}
RESUME_FLAG=()
if [[ "${RESUME:-0}" == 1 ]]; then
  RESUME_FLAG=(--resume)
fi
# Commands are run from the repository root, as in README.md.
cd "$(dirname "${BASH_SOURCE[0]}")/.."

run() {
  if [[ "${DRY_RUN:-0}" == 1 ]]; then
    printf '%q ' "$@"
    printf '\n'
  else
    printf '+ %s\n' "$*" >&2
    "$@"
  fi
}

# The launcher of a training or evaluation job on this machine, or one node of the cluster:
# `launch NPROC SCRIPT ARG...`.
launch() {
  local nproc=$1
  shift
  if [[ "$MODE" == cluster ]]; then
    # A failed rank restarts the job on every node, which then resumes from its last
    # checkpoint by itself (README, Training: "Checkpoints").
    run torchrun --nnodes "$NNODES" --nproc-per-node "$nproc" \
      --rdzv-backend c10d --rdzv-endpoint "$RDZV_ENDPOINT" --rdzv-id "$JOB_ID" \
      --max-restarts "${MAX_RESTARTS:-3}" "$@"
  else
    run torchrun --standalone --nproc-per-node "$nproc" "$@"
  fi
}
