"""Stage 4: the n-gram and backoff count tables, built in DuckDB or on Spark from the same sql/tables files, or updated after an append."""
