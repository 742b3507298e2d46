"""Stages 1-3: read traces (Parquet, JSONL, CSV, the hub), tokenize them and write the traces Parquet; synthetic samples; appends."""
