#!/usr/bin/env bash
# GPU benchmark of the trainer: tokens/s and MFU of GPT-2 124M and 355M, bf16, torch.compile,
# plus gpt2-355m with FSDP2 + full activation checkpointing, and TP+SP (tp=2: two GPUs),
# one GPU, synthetic data; < 5 minutes on an A100/H100/H200 (most of it compilation).
#
#   bench/gpu.sh            writes the table to $OUT/gpu.md when $OUT is set (device runner),
#                           else bench/results/gpu.md
#   bench/gpu.sh --smoke    the same code path on CPU with a tiny model (what the tests run;
#                           table to $OUT/gpu.md or $TMPDIR/gpu-smoke.md)
#   PYTHON=/path/python bench/gpu.sh   a Python whose torch has CUDA (default: .venv if its
#                           torch sees a GPU, else python3)
# Extra flags go to bench/bench_gpu.py (--presets, --steps, --warmup, --micro-batch, ...).
set -euo pipefail
cd "$(dirname "$0")/.."

smoke=0
for arg in "$@"; do [[ "$arg" == "--smoke" ]] && smoke=1; done

pick_python() {
  if [[ -n "${PYTHON:-}" ]]; then echo "$PYTHON"; return; fi
  if [[ -x .venv/bin/python ]]; then
    if [[ $smoke == 1 ]] || .venv/bin/python -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
      echo .venv/bin/python; return
    fi
  fi
  echo python3
}
PY=$(pick_python)
"$PY" -c 'import torch, numpy' 2>/dev/null || { echo "error: $PY cannot import torch and numpy" >&2; exit 1; }

if [[ -n "${OUT:-}" ]]; then
  result="$OUT/gpu.md"
elif [[ $smoke == 1 ]]; then
  result="${TMPDIR:-/tmp}/gpu-smoke.md"  # a smoke run never overwrites the committed table
else
  result=bench/results/gpu.md
fi
if [[ $smoke == 0 ]]; then
  "$PY" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' \
    || { echo "error: $PY's torch sees no CUDA device (run with --smoke on CPU)" >&2; exit 1; }
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
# One process: OMP threads for the data loader side only; inductor caches stay in /tmp.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
exec "$PY" bench/bench_gpu.py --out "$result" "$@"
