#!/usr/bin/env bash
# The three 2019 corpora -> the two training shard sets of the recipes:
#   shards/bert-wiki-books   Wikipedia + books, WordPiece, one sequence per sentence (BERT)
#   shards/gpt2-wiki-web     Wikipedia + web text, GPT-2 BPE, EOD-terminated documents (GPT-2 345M
#                            and Megatron 8.3B)
# Duplicates are removed across the sources of each set, and every document loses its 13-gram
# overlaps with the WikiText-103 and LAMBADA test text, before tokenizing.
#
#   recipes/corpora.sh                  one machine (Beam's local runner, one worker per core)
#   MODE=cluster recipes/corpora.sh     Dataflow (set PROJECT, REGION, BUCKET below or in the env)
#   DRY_RUN=1 recipes/corpora.sh        print the commands only
#
# Which source goes into which set follows the papers: BERT (Devlin et al. 2019, §3.1) and
# NVIDIA's LAMB recipe train on BooksCorpus + English Wikipedia; Megatron-LM (Shoeybi et al.
# 2019, §4.1) excludes BooksCorpus from its GPT-2 data "as it overlaps with LAMBADA".
# So Wikipedia is cleaned once and deduplicated in both sets.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# -- inputs (paths relative to the repository root, or URLs in cluster mode) -------------------
if [[ "$MODE" == cluster ]]; then
  PROJECT=${PROJECT:-my-project}
  REGION=${REGION:-us-central1}
  BUCKET=${BUCKET:-gs://my-bucket}
  ROOT=$BUCKET
else
  ROOT=${ROOT:-data}
fi
# English Wikipedia multistream dump with its index beside it (split into byte ranges per worker)
WIKI_DUMP=${WIKI_DUMP:-$ROOT/raw/enwiki-pages-articles-multistream.xml.bz2}
# BooksCorpus-style books: one plain-text book per file (or tars of them)
BOOKS=${BOOKS:-$ROOT/raw/books/*.txt}
# OpenWebText release: the .xz subsets of its tar
WEB=${WEB:-$ROOT/raw/openwebtext/*.xz}
# Evaluation text to decontaminate against (the test sets the evaluation recipes score)
WIKITEXT103_TEST=${WIKITEXT103_TEST:-$ROOT/eval/wikitext-103/wiki.test.tokens}
LAMBADA_TEST=${LAMBADA_TEST:-$ROOT/eval/lambada_test.jsonl}
# Tokenizers: GPT-2's vocab.json + merges.txt directory; BERT-large uncased WordPiece vocab.txt
GPT2_VOCAB=${GPT2_VOCAB:-vocab/gpt2}
BERT_VOCAB=${BERT_VOCAB:-vocab/bert-large-uncased/vocab.txt}
WORK=${WORK:-$ROOT/work}
SHARDS=${SHARDS:-$ROOT/shards}

BEAM=()
if [[ "$MODE" == cluster ]]; then
  # Workers install this repository from pyproject.toml (README, "Dataflow").
  BEAM=(--runner DataflowRunner --project "$PROJECT" --region "$REGION"
    --temp_location "$BUCKET/tmp" --setup_file ./pyproject.toml
    --max_num_workers "${MAX_WORKERS:-100}")
fi

# -- 1. read and clean each source once ----------------------------------------------------------
# --write-cleaned keeps the cleaned documents as Parquet for the cross-source dedup below. The
# file names say which sets use the source, so that one glob selects each set's inputs. The
# shards these runs also write (GPT-2 tokens, not deduplicated) are not used by the recipes.
run $PYTHON -m pipelines.preprocess --source wikipedia --input "$WIKI_DUMP" \
  --output "$WORK/cleaned-shards/wikipedia" --tokenizer "$GPT2_VOCAB" --append-eod \
  --no-dedup --write-cleaned "$WORK/cleaned/bert+gpt-wikipedia" "${BEAM[@]}"
run $PYTHON -m pipelines.preprocess --source books --input "$BOOKS" \
  --output "$WORK/cleaned-shards/books" --tokenizer "$GPT2_VOCAB" --append-eod \
  --no-dedup --write-cleaned "$WORK/cleaned/bert-books" "${BEAM[@]}"
run $PYTHON -m pipelines.preprocess --source webtext --input "$WEB" \
  --output "$WORK/cleaned-shards/webtext" --tokenizer "$GPT2_VOCAB" --append-eod \
  --no-dedup --write-cleaned "$WORK/cleaned/gpt-webtext" "${BEAM[@]}"

# -- 2. deduplicate across the sources of each set, decontaminate --------------------------------
# Within a duplicate group the Wikipedia copy is kept. BERT: the default 0.8 Jaccard threshold
# (NVIDIA's BERT data preparation does not deduplicate; this is our choice). GPT: Megatron-LM
# removed duplicates above Jaccard 0.7 (§4.1); 20 bands x 6 rows put the LSH S-curve's midpoint
# at (1/20)^(1/6) = 0.61, so a pair at 0.7 becomes a candidate with probability
# 1 - (1 - 0.7^6)^20 = 0.92 (the default 14 x 8 does that at 0.8); candidates are then verified
# by their exact Jaccard.
run $PYTHON -m pipelines.dedup --input "$WORK/cleaned/*bert*-*.parquet" \
  --output "$WORK/deduped/bert" --keep-rejects \
  --dedup-scope all --dedup-source-priority wikipedia,books \
  --decontaminate "$WIKITEXT103_TEST" "$LAMBADA_TEST" "${BEAM[@]}"
run $PYTHON -m pipelines.dedup --input "$WORK/cleaned/*gpt*-*.parquet" \
  --output "$WORK/deduped/gpt" --keep-rejects \
  --dedup-scope all --dedup-source-priority wikipedia,webtext \
  --dedup-threshold 0.7 --dedup-bands 20 --dedup-rows 6 \
  --decontaminate "$WIKITEXT103_TEST" "$LAMBADA_TEST" "${BEAM[@]}"

# -- 3. tokenize the kept documents into the training sets ---------------------------------------
run $PYTHON -m pipelines.preprocess --source parquet --input "$WORK/deduped/bert/documents-*.parquet" \
  --output "$SHARDS/bert-wiki-books" --tokenizer "$BERT_VOCAB" --split-sentences \
  --no-dedup "${BEAM[@]}"
# Megatron-LM drops every document under 128 tokens from its aggregate (§4.1); the parquet
# source keeps all by default, so the rule is asked for here.
run $PYTHON -m pipelines.preprocess --source parquet --input "$WORK/deduped/gpt/documents-*.parquet" \
  --output "$SHARDS/gpt2-wiki-web" --tokenizer "$GPT2_VOCAB" --append-eod --min-tokens 128 \
  --no-dedup "${BEAM[@]}"
