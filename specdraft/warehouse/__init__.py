"""The warehouse: the DuckDB connection and the sql/ files it runs, the writer lock, the catalog of datasets and the analysts' SQL."""
