"""The layout the README describes, checked: one package per stage, SQL beside it, the
connection owned by one module, and a wheel that lists every package."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from specdraft import pipeline
from specdraft.warehouse.sql_files import SQL_DIR

PACKAGE = pipeline.PACKAGE_DIR
ROOT = PACKAGE.parent


def test_only_the_warehouse_module_touches_the_connection():
    """`.con` (the DuckDB connection) outside warehouse/connection.py would run SQL past the file
    headers, the bound parameters and the error messages; tests read through Warehouse.run_text."""
    owner = PACKAGE / "warehouse" / "connection.py"
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in (PACKAGE, ROOT / "tests")
        for path in sorted(folder.rglob("*.py")) if path not in (owner, Path(__file__))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\.con\b(?!fig|text|nect)", line)
    ]
    assert offenders == []


def test_every_sql_folder_belongs_to_a_package():
    packages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    folders = {path.name for path in SQL_DIR.iterdir() if path.is_dir() and path.name != "__pycache__"}
    assert folders and folders <= packages


def test_every_stage_names_a_package():
    packages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert {stage.package for stage in pipeline.STAGES} <= packages


def test_the_wheel_lists_every_package():
    """pyproject.toml names the packages (one of them, specdraft.sql, mapped to sql/): a package
    missing there is missing from the wheel. .ci/wheel_check installs and runs the wheel."""
    if not (ROOT / "pyproject.toml").exists():  # an installed copy, not a checkout
        return
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"specdraft"} | {f"specdraft.{p.parent.name}" for p in PACKAGE.glob("*/__init__.py")}
    # sql/ and each folder of it (their SQL is package data; unlisted, setuptools warns it will drop them)
    sql_folders = {"specdraft." + ".".join(("sql", *p.relative_to(ROOT / "sql").parts))
                   for p in [ROOT / "sql", *(ROOT / "sql").rglob("*")] if p.is_dir() and p.name != "__pycache__"}
    assert listed == found | sql_folders
