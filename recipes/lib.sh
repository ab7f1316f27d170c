# Sourced by every recipe. `run CMD ARG...` runs one command of the recipe; with DRY_RUN=1 it
# prints the command instead (one line, shell-quoted, variables expanded), so a recipe can be
# read and checked without its inputs: tests/test_recipes.py parses every printed command with
# the real command-line parsers.
#
# MODE=local (default): one machine, local paths, Beam's local runner, torchrun --standalone.
# MODE=cluster: Dataflow for the pipelines, a multi-node torchrun job for training (run the
# training recipe on every node with the same RDZV_ENDPOINT and JOB_ID).

MODE=${MODE:-local}
case "$MODE" in
  local | cluster) ;;
  *) echo "MODE must be local or cluster, got '$MODE'" >&2; exit 2 ;;
esac
PYTHON=${PYTHON:-python}
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
    run torchrun --nnodes "$NNODES" --nproc-per-node "$nproc" \
      --rdzv-backend c10d --rdzv-endpoint "$RDZV_ENDPOINT" --rdzv-id "$JOB_ID" "$@"
  else
    run torchrun --standalone --nproc-per-node "$nproc" "$@"
  fi
}
