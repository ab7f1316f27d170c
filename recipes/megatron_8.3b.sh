#!/usr/bin/env bash
# Megatron-LM's 8.3B GPT-2 (72 layers, hidden 3072, 24 heads, context 1024) in its layout:
# 8-way tensor parallelism inside a node x data parallelism over the nodes (64 nodes of 8 GPUs =
# 512 GPUs in the paper), then WikiText-103 perplexity and LAMBADA accuracy.
#
#   MODE=cluster recipes/megatron_8.3b.sh   on each of $NNODES nodes (same RDZV_ENDPOINT, JOB_ID)
#   recipes/megatron_8.3b.sh                one machine of 8 GPUs: the same run, 64x longer
#   DRY_RUN=1 recipes/megatron_8.3b.sh      print the commands only
#
# Settings and where they come from: Shoeybi et al. 2019 (Megatron-LM, arXiv:1909.08053).
# - Model: the 8.3B they trained has 24 attention heads (preset megatron-8.3b-24h; the scaling
#   study's table lists 32 heads of 96 dims: preset megatron-8.3b). Same FLOPs per token.
#   Vocabulary 50,257 padded to 51,200 (a multiple of 128 x 8: --make-vocab-size-divisible-by
#   128 with --tp 8 gives the same).
# - Layout: "8-way model and 64-way data parallelism across 512 GPUs" (Megatron-LM README, 2019;
#   the paper's abstract: 512 GPUs). Here the
#   data-parallel dimension is FSDP2 (train/parallel), which shards the optimizer state Megatron
#   replicated.
# - Training (§4.2, the same for all their GPT-2 models): sequences of 1024, batch 512, 300k
#   iterations, lr 1.5e-4, 3k warmup iterations, cosine decay to a minimum of 1e-5, weight decay
#   0.01, clipping 1.0, dropout 0.1, activation checkpointing after every transformer layer
#   (--activation-checkpointing full). Adam's betas and epsilon: Megatron-LM's argument
#   defaults (0.9, 0.999, 1e-8).
# - Data: their aggregate of Wikipedia, CC-Stories, RealNews and OpenWebText (174 GB after
#   dedup, §4.1); recipes/corpora.sh builds the Wikipedia + OpenWebText part of it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DATA=${DATA:-data/shards/gpt2-wiki-web}    # recipes/corpora.sh
RUN=${RUN:-runs/megatron-8.3b}             # a filesystem every node sees
GPUS=${GPUS:-8}                            # per node: the tensor-parallel group
NNODES=${NNODES:-64}                       # cluster mode: the data-parallel degree
RDZV_ENDPOINT=${RDZV_ENDPOINT:-node0:29500}
JOB_ID=${JOB_ID:-megatron-8.3b}
PRECISION=${PRECISION:-bf16}               # the paper: fp16 with dynamic loss scaling on V100s
WIKITEXT103_TEST=${WIKITEXT103_TEST:-data/eval/wikitext-103/wiki.test.tokens}
LAMBADA_TEST=${LAMBADA_TEST:-data/eval/lambada_test.jsonl}

# 512 sequences a step: 8 per data-parallel rank on 64 nodes; on one machine the same 8 per
# micro-batch, accumulated 64 times.
launch "$GPUS" train/pretrain.py --preset megatron-8.3b-24h --data "$DATA" --out "$RUN" \
  --parallel tp --tp 8 --activation-checkpointing full \
  --seq-len 1024 --global-batch 512 --micro-batch 8 --max-steps 300000 \
  --optimizer adamw --lr 1.5e-4 --min-lr 1e-5 --warmup-steps 3000 --decay cosine \
  --weight-decay 0.01 --beta2 0.999 --eps 1e-8 --clip-grad 1.0 --dropout 0.1 \
  --precision "$PRECISION" --save-interval 1000 --async-checkpoint --dist-timeout 30 \
  "${RESUME_FLAG[@]}"

# Evaluation on one node: train/evaluate.py loads the run's latest checkpoint whole, whatever
# layout trained it.
run torchrun --standalone --nproc-per-node "$GPUS" train/evaluate.py --checkpoint "$RUN" \
  --task wikitext103 --data "$WIKITEXT103_TEST" --context 1024 --stride 512 \
  --output "$RUN/eval-wikitext103.json"
run torchrun --standalone --nproc-per-node "$GPUS" train/evaluate.py --checkpoint "$RUN" \
  --task lambada --data "$LAMBADA_TEST" --output "$RUN/eval-lambada.json"
