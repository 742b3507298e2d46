"""The live drafter inside the engines people generate with (transformers, vLLM, SGLang)."""
