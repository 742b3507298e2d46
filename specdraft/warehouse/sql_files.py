"""The SQL files: one statement each, with a header naming the table it makes.

    -- out: exact_continuations
    -- grain: ctx_len, ctx_hash, rank
    -- reads: context_keys, prefix_hashes
    -- params: $draft_len BIGINT, $top_k BIGINT

Files are named after their `out` table and live in sql/<package>/, beside the Python package
that runs them (specdraft/<package>/).

Parameters are bound by the engine ($name), except where SQL cannot take a value: a column name
or one column per context length. There a line holds `{name}`, and `SqlFile.expanded` writes the
integer parameter `name` into it, or, when the parameter is a list of integers, repeats the line
once per item:

    (c1 - lag(c1, {ctx_len}) over w) as key_{ctx_len},   -- with ctx_len = [4, 8]: two lines
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from specdraft.errors import SpecdraftError


def _sql_dir() -> Path:
    """The SQL files as installed: the package specdraft.sql, which pyproject.toml maps to the
    top-level sql/ (a checkout or an editable install reads sql/ itself, a wheel its copy)."""
    root = resources.files("specdraft.sql")
    if not isinstance(root, Path):  # a zipped install: the files are not on disk
        raise SpecdraftError(f"{root}: specdraft's SQL files must be installed as files, not zipped")
    return root


SQL_DIR = _sql_dir()
HEADER_LINE = re.compile(r"^--\s*(out|grain|reads|params):\s*(.*)$")
PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class SqlFile:
    """One statement from sql/, with its parsed header."""

    name: str  # its path under sql/ without .sql: "tables/position_keys"
    path: Path
    text: str
    out: str
    grain: str
    reads: tuple[str, ...]
    params: tuple[str, ...]

    @property
    def used_params(self) -> tuple[str, ...]:
        body = "\n".join(line for line in self.text.splitlines() if not line.lstrip().startswith("--"))
        return tuple(sorted(set(PARAM.findall(body)) | set(PLACEHOLDER.findall(body))))

    def expanded(self, params: dict) -> SqlFile:
        """The statement with its `{name}` placeholders written out from `params` (see the module
        docstring); a file without placeholders is returned as it is."""
        if "{" not in self.text:
            return self
        lines = []
        for line in self.text.splitlines():
            names = set(PLACEHOLDER.findall(line)) if not line.lstrip().startswith("--") else set()
            if not names:
                lines.append(line)
                continue
            if len(names) > 1:
                raise SpecdraftError(f"{self.path.name}: one placeholder per line, got {sorted(names)}")
            (name,) = names
            values = params.get(name)
            items = values if isinstance(values, list | tuple) else [values]
            if not items or not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
                raise SpecdraftError(f"{self.path.name}: {{{name}}} needs an integer or a list of integers, "
                                     f"got {values!r}")
            lines += [line.replace(f"{{{name}}}", str(v)) for v in items]
        return replace(self, text="\n".join(lines) + "\n")

    def with_values(self, params: dict) -> SqlFile:
        """The statement with its `$name` parameters written in as SQL literals, for a view: DuckDB
        keeps a view's text, with no values bound to it. Booleans, integers, floats and strings, and
        lists of them.

        >>> replace(load_sql("drafters/recent_copy_candidates"), text="select $n, $on, $s, $l").with_values(
        ...     {"n": 16, "on": True, "s": "it's", "l": [4, 8]}).text.strip()
        "select 16, true, 'it''s', [4, 8]"
        """

        def literal(match: re.Match) -> str:
            name = match.group(1)
            if name not in params:
                raise SpecdraftError(f"{self.path.name}: no value for ${name}")
            return written(name, params[name])

        def written(name: str, value) -> str:
            if isinstance(value, list | tuple):
                return "[" + ", ".join(written(name, item) for item in value) + "]"
            if isinstance(value, bool):
                return "true" if value else "false"
            if isinstance(value, int | float):
                return repr(value)
            if isinstance(value, str):
                return "'" + value.replace("'", "''") + "'"
            raise SpecdraftError(f"{self.path.name}: ${name} must be booleans, numbers or strings in a view, "
                                 f"got {value!r}")

        lines = [line if line.lstrip().startswith("--") else PARAM.sub(literal, line) for line in self.text.splitlines()]
        return replace(self, text="\n".join(lines) + "\n")


def load_sql(name: str) -> SqlFile:
    """Load `sql/<name>.sql` and parse its header."""
    path = SQL_DIR / f"{name}.sql"
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecdraftError(f"{path}: cannot read SQL file ({exc.strerror})") from exc
    header: dict[str, str] = {}
    for line in text.splitlines():
        match = HEADER_LINE.match(line.strip())
        if match:
            header[match.group(1)] = match.group(2).strip()
    params = tuple(sorted(PARAM.findall(header.get("params", ""))))
    reads = tuple(x.strip() for x in header.get("reads", "").split(",") if x.strip())
    return SqlFile(name, path, text, header.get("out", ""), header.get("grain", ""), reads, params)


def all_sql_names() -> list[str]:
    return sorted(str(p.relative_to(SQL_DIR).with_suffix("")) for p in SQL_DIR.rglob("*.sql"))
