"""specdraft: the seed's non-neural speculative-drafting benchmark as a DuckDB warehouse."""

__version__ = "0.1.0"


def __getattr__(name: str):
    # `from specdraft import Drafter` (and specdraft.open), imported on first use (the CLI's startup stays light)
    if name == "Drafter":
        from specdraft.live.drafter import Drafter

        return Drafter
    if name == "open":  # specdraft.open(warehouse): a read-only handle for notebooks
        from specdraft.warehouse.notebook import open_warehouse

        return open_warehouse
    raise AttributeError(f"module 'specdraft' has no attribute {name!r}")
