#!/usr/bin/env bash
# The main job on the corpus shipped in demo/corpus: train a tokenizer, preprocess books and
# Wikipedia into verified shard sets, inspect them, pretrain a tiny GPT from the blend, score it
# on a WikiText-2 test excerpt and let it write a few lines.
# Called by `./dev demo` (after set-up); OUT=DIR to write elsewhere (default out/demo).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-out/demo}
mkdir -p "$OUT"
# Beam's DirectRunner as pipelines.preprocess picks it: these inputs are under 4 MB, so each run
# stays in its own process (--direct_running_mode multi_processing would start one worker per core).

echo "== 1/7 train a byte-level BPE tokenizer on the demo books"
"$PY" -m pipelines.tokenize.train_tokenizer --kind byte-level-bpe --source books \
  --input 'demo/corpus/books/*.txt' --vocab-size 8192 --output "$OUT/tokenizer.json"

echo "== 2/7 preprocess: books and Wikipedia -> clean -> dedup -> tokenize -> shards"
"$PY" -m pipelines.preprocess --source books --input 'demo/corpus/books/*.txt' \
  --output "$OUT/shards/books" --tokenizer "$OUT/tokenizer.json" --append-eod --overwrite
"$PY" -m pipelines.preprocess --source wikipedia --input 'demo/corpus/wikipedia/*' \
  --output "$OUT/shards/wiki" --tokenizer "$OUT/tokenizer.json" --append-eod --overwrite

echo "== 3/7 inspect and verify the shard sets"
for set in books wiki; do
  tools/dump "$OUT/shards/$set"
  tools/dump "$OUT/shards/$set" --verify
done
tools/dump "$OUT/shards/wiki" --doc 0 | head -c 600; echo " ..."

echo "== 4/7 pretrain a tiny GPT on a 50/50 blend of the two sets (CPU)"
rm -rf "$OUT/run"  # the demo's own run: a rerun starts it afresh (the trainer refuses to mix)
"$PY" train/pretrain.py --model gpt --preset gpt-tiny \
  --data 0.5 "$OUT/shards/books" 0.5 "$OUT/shards/wiki" --split 90,10,0 \
  --seq-len 128 --global-batch 16 --micro-batch 8 --max-steps 60 --eval-interval 20 \
  --lr 3e-3 --warmup-steps 10 --out "$OUT/run"

echo "== 5/7 plot the loss curve"
tools/plot "$OUT/run" --out "$OUT/loss.png"

echo "== 6/7 WikiText perplexity on the shipped WikiText-2 test excerpt (3 articles)"
"$PY" train/evaluate.py --checkpoint "$OUT/run" --task wikitext103 \
  --data demo/corpus/wikitext/wiki.test.head.tokens --context 128 --stride 64 \
  --output "$OUT/wikitext.json"

echo "== 7/7 a sample from the tiny model (KV-cache decoding)"
tools/generate "$OUT/run" --prompt "The whale" --max-new-tokens 40 --temperature 0.8 \
  --top-k 40 --seed 1
echo "done: shards in $OUT/shards, run in $OUT/run, curve in $OUT/loss.png," \
  "WikiText result in $OUT/wikitext.json"
