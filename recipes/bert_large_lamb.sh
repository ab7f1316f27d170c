#!/usr/bin/env bash
# BERT-large pretrained with LAMB in two phases (sequence length 128, then 512), at the batch
# sizes and learning rates of NVIDIA's LAMB recipe for BERT (the 64k/32k mixed-batch schedule
# of You et al. 2019, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes"),
# then masked-LM accuracy on a held-out shard set.
#
#   recipes/bert_large_lamb.sh                  one machine with $GPUS GPUs
#   MODE=cluster recipes/bert_large_lamb.sh     on each of $NNODES nodes (same RDZV_ENDPOINT, JOB_ID)
#   DRY_RUN=1 recipes/bert_large_lamb.sh        print the commands only
#
# Settings and where they come from (NVIDIA DeepLearningExamples,
# PyTorch/LanguageModeling/BERT/scripts/run_pretraining.sh at commit af01153):
#   phase 1: 8192 sequences per GPU x 8 GPUs = global batch 65,536, seq 128, lr 6e-3, warmup
#            28.43% of 7,038 steps, 20 predictions per sequence
#   phase 2: 4096 x 8 = global batch 32,768, seq 512, lr 4e-3, warmup 12.8% of 1,563 steps,
#            80 predictions per sequence; it continues from phase 1's weights
#   (the trainer's --max-predictions-per-seq default, 20 per 128 tokens, gives 20 and 80)
#   micro batches: 8192 / 128 accumulation steps = 64 (phase 1), 4096 / 512 = 8 (phase 2)
#   data: Wikipedia + BooksCorpus, 15% masking, NSP (Devlin et al. 2019)
# Phase 1 is 90% of the samples (7,038 x 65,536 against 1,563 x 32,768), as in BERT's original
# schedule (90% of the training at 128: Devlin et al. 2019, appendix A.2). LAMB's beta2 0.999,
# eps 1e-6 and weight decay 0.01 are the trainer's LAMB defaults (train/config.py
# OPTIMIZER_DEFAULTS, NVIDIA's FusedLAMB settings).
#
# Phase 2 is a new run from phase 1's weights (`--init-from`, as NVIDIA's --init_checkpoint):
# a fresh LAMB state, its own warmup and its own schedule over its 1,563 steps. Each phase has
# its own run directory ($RUN/phase1, $RUN/phase2); RESUME=1 continues whichever stopped.
#
# Where this differs from NVIDIA's run, and why:
# - bf16 autocast instead of fp16 with loss scaling (A100/H100 class GPUs; `--precision fp16`
#   is there for V100s).
# - Decay: linear to 0 after the warmup. NVIDIA's scheduler is polynomial (not verified here).
# - Phase 2 reads phase 1's data from its start again (a new run counts samples from 0);
#   NVIDIA's phase 2 reads its own seq-512 files.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DATA=${DATA:-data/shards/bert-wiki-books}   # recipes/corpora.sh
RUN=${RUN:-runs/bert-large-lamb}           # a filesystem every node sees
# A BERT shard set kept out of training (made as in corpora.sh step 3 from other documents)
HELDOUT=${HELDOUT:-data/shards/bert-heldout}
GPUS=${GPUS:-8}                            # per machine / node
NNODES=${NNODES:-32}                       # cluster mode
RDZV_ENDPOINT=${RDZV_ENDPOINT:-node0:29500}
JOB_ID=${JOB_ID:-bert-large-lamb}
PRECISION=${PRECISION:-bf16}

PHASE1_STEPS=7038
PHASE1_BATCH=65536
PHASE2_STEPS=1563
PHASE2_BATCH=32768

COMMON=(--model bert --preset bert-large --data "$DATA" --optimizer lamb --decay linear
  --min-lr 0 --precision "$PRECISION" --save-interval 200 --async-checkpoint)

# phase 1: seq 128 (START_PHASE=2 skips it: to continue a phase 2 that stopped, with RESUME=1)
if [[ "${START_PHASE:-1}" == 1 ]]; then
  launch "$GPUS" train/pretrain.py "${COMMON[@]}" "${RESUME_FLAG[@]}" --out "$RUN/phase1" \
    --seq-len 128 --global-batch "$PHASE1_BATCH" --micro-batch 64 \
    --max-steps "$PHASE1_STEPS" --lr 6e-3 --warmup-steps 2001 # 0.2843 x 7038
fi

# phase 2: seq 512, a new run from phase 1's last checkpoint (its weights only)
launch "$GPUS" train/pretrain.py "${COMMON[@]}" "${RESUME_FLAG[@]}" --out "$RUN/phase2" \
  --init-from "$RUN/phase1" --seq-len 512 --global-batch "$PHASE2_BATCH" --micro-batch 8 \
  --max-steps "$PHASE2_STEPS" --lr 4e-3 --warmup-steps 200 # 0.128 x 1563

# Masked-LM accuracy at the phase-2 length on a shard set no step trained on (one node). The
# validation split of $DATA (--split 969,30,1) is scored during training:
# $RUN/phase{1,2}/metrics.jsonl.
run torchrun --standalone --nproc-per-node "$GPUS" train/evaluate.py \
  --checkpoint "$RUN/phase2" --task bert-mlm --data "$HELDOUT" --seq-len 512 \
  --output "$RUN/eval-mlm.json"
