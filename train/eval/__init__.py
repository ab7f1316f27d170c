"""Evaluation of trained models: WikiText perplexity, LAMBADA, BERT masked LM
(``python train/evaluate.py``; see :mod:`train.eval.run`)."""
