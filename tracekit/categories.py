"""GPU activity categories (tracekit/categories.toml) and the SQL macros every connection gets.

`install(con)` runs tracekit/macros.sql on a DuckDB connection and fills its
`tk_category_rules` table: the [[category]] tables of a tracekit.toml in the working directory
first, then the built-in ones, in file order (first match wins).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import Path

import duckdb

from tracekit.config import read_config
from tracekit.errors import ConfigError
from tracekit.store.literals import row_literal, string_literal


@dataclass(frozen=True)
class CategoryRule:
    """Kernels whose name (target 'kernel') or launching op (target 'op') matches `pattern`
    fall in `category`, unless an earlier rule matched."""

    category: str
    target: str
    pattern: str


def parse_categories(text: str, source: str) -> list[CategoryRule]:
    """The [[category]] tables of a TOML text, in order."""
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as e:  # (RecursionError: deep nesting)
        raise ConfigError(f"{source}: not valid TOML ({e})") from None
    tables = data.get("category", [])
    if not isinstance(tables, list):
        raise ConfigError(f"{source}: [[category]] must be an array of tables")
    rules = []
    for i, t in enumerate(tables, 1):
        name = t.get("name") if isinstance(t, dict) else None
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{source}: category #{i} needs a name")
        for target in ("kernel", "op"):
            pattern = t.get(target)
            if pattern is None:
                continue
            if not isinstance(pattern, str):
                raise ConfigError(f"{source}: category {name!r}: {target} must be a regex string")
            try:
                re.compile(pattern)
            except re.error as e:
                raise ConfigError(
                    f"{source}: category {name!r}: bad regular expression {pattern!r} ({e})"
                ) from None
            rules.append(CategoryRule(name.strip(), target, pattern))
    return rules


@cache
def builtin_rules() -> tuple[CategoryRule, ...]:
    text = files("tracekit").joinpath("categories.toml").read_text()
    return tuple(parse_categories(text, "tracekit/categories.toml"))


def user_rules(directory: Path | None = None) -> list[CategoryRule]:
    """[[category]] tables of tracekit.toml in `directory` (default: the working directory)."""
    found = read_config(directory)
    return parse_categories(*found) if found else []


@cache
def macros_sql() -> str:
    """The text of tracekit/macros.sql (DuckDB; tracekit.spark_sql expands it for Spark)."""
    return files("tracekit").joinpath("macros.sql").read_text()


def install(con: duckdb.DuckDBPyConnection, rules: list[CategoryRule] | None = None) -> None:
    """Create tracekit's SQL macros on `con` and fill tk_category_rules."""
    con.execute(macros_sql())
    if rules is None:
        rules = user_rules() + list(builtin_rules())
    con.execute("DELETE FROM tk_category_rules")
    if rules:
        # Literals, not bound parameters (tracekit.store.literals): this runs on every
        # connection.
        rows = ", ".join(
            row_literal((i, r.category, r.target, r.pattern)) for i, r in enumerate(rules)
        )
        con.execute(f"INSERT INTO tk_category_rules VALUES {rows}")
        con.execute(rule_matches_macro(rules))


def rule_matches_macro(rules: list[CategoryRule]) -> str:
    """tracekit/macros.sql's tk_rule_matches with each rule's pattern a constant (DuckDB
    compiles a constant pattern once a query, one read from tk_category_rules once a row).
    The ELSE branch is the macro's own definition, for rows the rules given here do not hold."""
    branches = "".join(
        f"\n    WHEN {i} THEN regexp_matches(text, {string_literal(r.pattern)}, 'i')"
        for i, r in enumerate(rules)
    )
    return (
        "CREATE OR REPLACE TEMP MACRO tk_rule_matches(text, priority, pattern) AS\n"
        f"CASE priority{branches}\n    ELSE regexp_matches(text, pattern, 'i') END"
    )
