"""The live drafter inside the engines people generate with. Each integration is an optional extra
and imports its engine only when imported itself (`import specdraft` never imports torch):

- transformers.py: a CandidateGenerator over a Drafter session and `generate(model, input_ids,
  drafter)`, Hugging Face transformers' assisted generation (`pip install 'specdraft[transformers]'`);
- generate.py: the `specdraft generate` command's stage, a model and its tokenizer loaded with
  transformers, the prompt generated with and without the drafter;
- vllm.py: the drafter as vLLM's `custom_class` speculative proposer (vLLM is never imported);
- sglang.py: a run's train traces as SGLang's NGRAM external corpus (`specdraft export --format
  sglang-corpus`).

Reads a drafter bundle through `specdraft.Drafter` only (specdraft/live); nothing earlier imports it.
"""
