"""specdraft: the seed's non-neural speculative-drafting benchmark as a DuckDB warehouse."""

__version__ = "0.1.0"
