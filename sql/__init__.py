"""specdraft's SQL, one statement per file (see specdraft/warehouse.py). Installed as the package
`specdraft.sql` (pyproject.toml maps it here), so code finds it through importlib.resources."""
