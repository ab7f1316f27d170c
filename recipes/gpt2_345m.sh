#!/usr/bin/env bash
# GPT-2 345M (24 layers, hidden 1024, 16 heads, context 1024: GPT-2 medium, Radford et al.
# 2019) trained as Megatron-LM trained its GPT-2 models, then scored on the WikiText-103 test
# set (perplexity) and LAMBADA (last-word accuracy).
#
#   recipes/gpt2_345m.sh                  one machine with $GPUS GPUs (data parallel)
#   MODE=cluster recipes/gpt2_345m.sh     on each of $NNODES nodes (same RDZV_ENDPOINT, JOB_ID)
#   DRY_RUN=1 recipes/gpt2_345m.sh        print the commands only
#
# Settings and where they come from: Shoeybi et al. 2019 (Megatron-LM, arXiv:1909.08053), §4.2:
# sequences of 1024 tokens, batch 512, 300k iterations, lr 1.5e-4 with a 3k-iteration warmup,
# then one cosine cycle over the remaining 297k down to a minimum of 1e-5; Adam with weight
# decay 0.01, gradient clipping at global norm 1.0, dropout 0.1. Adam's betas and epsilon are
# Megatron-LM's argument defaults (0.9, 0.999, 1e-8; arguments.py), not the trainer's 0.95.
# Megatron's own single-GPU example for this model (examples/pretrain_gpt.sh) instead uses
# batch 8, 500k iterations with the decay over 320k and a 1% warmup: not the paper's run.
# The preset's vocabulary is GPT-2's 50,257 padded to a multiple of 128 (50,304), as
# Megatron-LM's --make-vocab-size-divisible-by 128 pads it without tensor parallelism.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DATA=${DATA:-data/shards/gpt2-wiki-web}    # recipes/corpora.sh
RUN=${RUN:-runs/gpt2-345m}                 # a filesystem every node sees
GPUS=${GPUS:-8}                            # per machine / node
NNODES=${NNODES:-8}                        # cluster mode
RDZV_ENDPOINT=${RDZV_ENDPOINT:-node0:29500}
JOB_ID=${JOB_ID:-gpt2-345m}
PRECISION=${PRECISION:-bf16}               # the paper: fp16 with dynamic loss scaling on V100s
WIKITEXT103_TEST=${WIKITEXT103_TEST:-data/eval/wikitext-103/wiki.test.tokens}
LAMBADA_TEST=${LAMBADA_TEST:-data/eval/lambada_test.jsonl}

launch "$GPUS" train/pretrain.py --preset gpt2-355m --data "$DATA" --out "$RUN" \
  --seq-len 1024 --global-batch 512 --micro-batch 8 --max-steps 300000 \
  --optimizer adamw --lr 1.5e-4 --min-lr 1e-5 --warmup-steps 3000 --decay cosine \
  --weight-decay 0.01 --beta2 0.999 --eps 1e-8 --clip-grad 1.0 --dropout 0.1 \
  --precision "$PRECISION" --save-interval 2000 --async-checkpoint "${RESUME_FLAG[@]}"

# Evaluation on one node: sliding 1024-token windows moving by 512 over WikiText-103 test;
# LAMBADA's last word from OpenAI's lambada_test.jsonl.
run torchrun --standalone --nproc-per-node "$GPUS" train/evaluate.py --checkpoint "$RUN" \
  --task wikitext103 --data "$WIKITEXT103_TEST" --context 1024 --stride 512 \
  --output "$RUN/eval-wikitext103.json"
run torchrun --standalone --nproc-per-node "$GPUS" train/evaluate.py --checkpoint "$RUN" \
  --task lambada --data "$LAMBADA_TEST" --output "$RUN/eval-lambada.json"
