#!/usr/bin/env bash
# GPU training speed, side by side with Hugging Face transformers, on one GPU: gpt2-124m,
# bert-large seq 128 (bf16, fp16), gpt2-355m, bert-large seq 512 (bf16, fp16), each ours then
# HF's at the same batch, precision, optimizer and compile setting, after a bf16 matmul
# ceiling; 4 minutes on one H200 (2026-12-04, most of it compilation). See bench/bench_gpu.py.
#
#   bench/gpu.sh            writes the table, row by row, to $OUT/gpu.md when $OUT is set
#                           (device runner), else bench/results/gpu.md
#   bench/gpu.sh --smoke    the same code path on CPU with tiny models (what the tests run;
#                           table to $OUT/gpu.md or $TMPDIR/gpu-smoke.md)
#   PYTHON=/path/python bench/gpu.sh   a Python whose torch has CUDA (default: .venv if its
#                           torch sees a GPU, else python3)
# Extra flags go to bench/bench_gpu.py (--cases, --steps, --warmup, --profile DIR, --no-hf, ...).
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
