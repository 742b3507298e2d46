"""Every sql/ file: a header naming what it makes, and the parameters it declares are the ones it uses."""

from __future__ import annotations

import re

import pytest

from specdraft.tables import hashing
from specdraft.warehouse.sql_files import SQL_DIR, all_sql_names, load_sql

NAMES = all_sql_names()


def test_there_are_sql_files():
    assert len(NAMES) >= 15


@pytest.mark.parametrize("name", NAMES)
def test_header(name):
    sql = load_sql(name)
    assert sql.out, f"{name}: no '-- out:' line"
    assert sql.grain, f"{name}: no '-- grain:' line"
    assert sql.reads, f"{name}: no '-- reads:' line"
    stem = name.rsplit("/", 1)[-1]
    assert stem == sql.out or stem == f"{sql.out}_start", f"{name}: file named after another table ({sql.out})"


@pytest.mark.parametrize("name", NAMES)
def test_declared_params_are_used_params(name):
    sql = load_sql(name)
    assert sql.params == sql.used_params, name


def test_position_keys_use_the_python_hash_constants():
    # The primes are bound parameters (tables.hashing.hash_params); the packing shift is spelled out.
    text = (SQL_DIR / "tables" / "position_keys.sql").read_text()
    body = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
    assert {int(x) for x in re.findall(r"\b\d{9,}\b", body)} == {hashing.SHIFT}
    assert {"p1", "p2"} <= set(load_sql("tables/position_keys").used_params)
    assert set(hashing.hash_params()) == {"p1", "p2"}


@pytest.mark.parametrize("debug", [False, True])
def test_a_failing_sql_file_names_itself_and_under_debug_shows_everything(tmp_path, monkeypatch, debug):
    """One line naming the file; under --debug, the statement as run and DuckDB's whole error, its
    LINE and caret included (a maintainer can see which line of which file failed)."""
    from specdraft.errors import SpecdraftError
    from specdraft.warehouse import sql_files
    from specdraft.warehouse.connection import Warehouse

    broken = tmp_path / "sql" / "tables"
    broken.mkdir(parents=True)
    (broken / "typo.sql").write_text("-- out: typo\n-- grain: x\n-- reads: nothing\n-- params: (none)\n"
                                     "select 1 as x\nfrom range(3)\nwehre x > 1\n")
    monkeypatch.setattr(sql_files, "SQL_DIR", tmp_path / "sql")
    with Warehouse(tmp_path / "wh", dataset="empty", debug=debug) as wh, pytest.raises(SpecdraftError) as failed:
        wh.query("tables/typo")
    message = str(failed.value)
    assert message.startswith("tables/typo.sql: ")
    if not debug:
        assert "\n" not in message and "syntax error" in message
        return
    assert "error executing the following SQL for table typo" in message
    assert "select 1 as x\nfrom range(3)\nwehre x > 1" in message
    assert "LINE 7: wehre x > 1" in message and "^" in message


def test_placeholders_write_integers_and_repeat_lines_for_lists(tmp_path):
    from specdraft.errors import SpecdraftError
    from specdraft.warehouse.sql_files import SqlFile

    text = "-- out: t\n-- params: $n INTEGER, $ks INTEGER[]\nselect\n    x_{ks} as k_{ks},\n    $n + {n} as n\nfrom t\n"
    sql = SqlFile("t", tmp_path / "t.sql", text, "t", "", (), ("n", "ks"))
    assert sql.used_params == ("ks", "n")
    assert sql.expanded({"n": 3, "ks": [4, 8]}).text == (
        "-- out: t\n-- params: $n INTEGER, $ks INTEGER[]\nselect\n    x_4 as k_4,\n    x_8 as k_8,\n"
        "    $n + 3 as n\nfrom t\n")
    assert sql.expanded({"n": 3, "ks": [4]}).used_params == ("n",)  # what is left to bind
    for bad in ({"n": "1; drop table t", "ks": [4]}, {"n": 3, "ks": []}, {"n": 3}, {"n": True, "ks": [4]}):
        with pytest.raises(SpecdraftError, match=r"t.sql: \{(n|ks)\} needs an integer"):
            sql.expanded(bad)
