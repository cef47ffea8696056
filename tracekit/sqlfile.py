"""One grammar for every `.sql` file tracekit ships, and its one loader (the aiosql convention).

A file is a header of comment lines saying what the file is, then named blocks:

    -- name: stage_summary                 a block starts; names are unique in the file
    -- returns: one row per stage: ...     what it returns (required for queries/)
    -- param: $trace_id INTEGER text       a DuckDB `$name` parameter, bound by the caller
    -- default: $trace_id 1                its default
    -- splice: @kind_case text             text the caller splices in (an identifier or a
                                           CASE built from data: never a value)
    -- per_trace: why                      (queries/) run once per trace, never in the
                                           one-statement form over many (tracekit.sql.over_traces)
    -- any other comment line              the block's description
    SELECT ...                             the block's SQL, up to the next `-- name:` line

Checked when loaded, with the file and line: SQL before the first block, a duplicate or
malformed name, a malformed param/default/splice line, a `$param` or `@splice` used and not
declared or declared and not used. queries/ (tracekit.sql), the store's derive steps
(tracekit.store.derive), the Kineto mapper (tracekit.ingest.kineto) and the macros every
connection gets (tracekit.categories, docs/schema.md's macro table) are all read through here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

_NAME = re.compile(r"^--\s*name:\s*(.*?)\s*$")
_IDENT = re.compile(r"^[A-Za-z_]\w*$")
_PARAM_USE = re.compile(r"(?<![\w$:])\$([A-Za-z_]\w*)")
_SPLICE_USE = re.compile(r"(?<![\w@])@([A-Za-z_]\w*)")
_KEYS = ("returns", "param", "default", "splice", "per_trace")


class SqlFileError(Exception):
    """A shipped .sql file breaks the grammar: a packaging bug, named with file and line."""


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    description: str
    default: str | None = None


@dataclass(frozen=True)
class Block:
    """One named block of a .sql file."""

    name: str
    sql: str
    returns: str
    description: str
    params: tuple[Param, ...]
    splices: tuple[tuple[str, str], ...]  # (name, description)
    source: str  # "file:line" of its `-- name:` line
    summary: str = ""  # the description's first line (what a catalogue lists)
    per_trace: str = ""  # why the block runs once per trace ("": it may run over many at once)

    def spliced(self, **values: str) -> str:
        """The SQL with the given `@name`s replaced (each must be declared; others stay)."""
        undeclared = set(values) - {name for name, _ in self.splices}
        if undeclared:
            raise SqlFileError(f"{self.source}: no splice {sorted(undeclared)[0]!r}")
        return _SPLICE_USE.sub(lambda m: values.get(m.group(1), m.group(0)), self.sql)


@dataclass(frozen=True)
class SqlFile:
    source: str
    description: str  # the file's header comment, as text
    blocks: tuple[Block, ...]

    def __getitem__(self, name: str) -> Block:
        for block in self.blocks:
            if block.name == name:
                return block
        raise KeyError(f"{self.source}: no block {name!r}")

    @property
    def sql(self) -> str:
        """Every block's SQL, in file order (a script to run whole)."""
        return "\n".join(b.sql for b in self.blocks)


def code_only(sql: str) -> str:
    """`sql` without comments, its string literals emptied: where parameters can be."""
    # One left-to-right pass: a quote inside a comment ("the chain's") or "--" inside a string
    # is then just text.
    return re.sub(r"'(?:[^']|'')*'|--[^\n]*",
                  lambda m: "''" if m.group(0).startswith("'") else "", sql)  # fmt: skip


def parse(text: str, source: str) -> SqlFile:
    """Parse and check one file's text; `source` names it in errors."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if _NAME.match(line)]
    if not starts:
        raise SqlFileError(f"{source}:1: no `-- name:` block")
    head = lines[: starts[0]]
    for i, line in enumerate(head):
        if line.strip() and not line.lstrip().startswith("--"):
            raise SqlFileError(f"{source}:{i + 1}: SQL before the first `-- name:` line")
    blocks: list[Block] = []
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        block = _block(lines, start, end, source)
        if any(b.name == block.name for b in blocks):
            raise SqlFileError(f"{block.source}: duplicate name {block.name!r}")
        blocks.append(block)
    description = " ".join(line.strip().removeprefix("--").strip() for line in head).strip()
    return SqlFile(source, description, tuple(blocks))


def _block(lines: list[str], start: int, end: int, source: str) -> Block:
    where = f"{source}:{start + 1}"
    name = _NAME.match(lines[start]).group(1)  # type: ignore[union-attr]
    if not _IDENT.match(name):
        raise SqlFileError(f"{where}: block name {name!r} is not an identifier")
    meta: dict[str, str] = {}
    params: list[Param] = []
    defaults: dict[str, str] = {}
    splices: list[tuple[str, str]] = []
    description: list[str] = []
    body = start + 1
    for i in range(start + 1, end):
        stripped = lines[i].strip()
        if stripped and not stripped.startswith("--"):
            break
        body = i + 1
        content = stripped[2:].strip()
        key, sep, value = content.partition(":")
        key, value = key.strip().lower(), value.strip()
        at = f"{source}:{i + 1}"
        if not sep or key not in _KEYS:
            if content:
                description.append(content)
        elif key in ("returns", "per_trace"):
            if not value:
                raise SqlFileError(f"{at}: empty {key} line (want: -- {key}: text)")
            meta[key] = value
        elif key == "param":
            m = re.fullmatch(r"\$([A-Za-z_]\w*)\s+(\w+)\s*(.*)", value)
            if not m:
                raise SqlFileError(f"{at}: malformed param line (want: $name TYPE text)")
            params.append(Param(m.group(1), m.group(2).upper(), m.group(3).strip()))
        elif key == "default":
            m = re.fullmatch(r"\$([A-Za-z_]\w*)\s+(.+)", value)
            if not m:
                raise SqlFileError(f"{at}: malformed default line (want: $name VALUE)")
            defaults[m.group(1)] = m.group(2).strip()
        else:
            m = re.fullmatch(r"@([A-Za-z_]\w*)\s*(.*)", value)
            if not m:
                raise SqlFileError(f"{at}: malformed splice line (want: @name text)")
            splices.append((m.group(1), m.group(2).strip()))
    sql = "\n".join(lines[body:end]).strip() + "\n"
    code = code_only(sql)
    _same(where, "$", set(_PARAM_USE.findall(code)), {p.name for p in params})
    _same(where, "@", set(_SPLICE_USE.findall(code)), {s for s, _ in splices})
    for extra in sorted(set(defaults) - {p.name for p in params}):
        raise SqlFileError(f"{where}: default for undeclared ${extra}")
    params = [Param(p.name, p.type, p.description, defaults.get(p.name)) for p in params]
    return Block(name, sql, meta.get("returns", ""), " ".join(description), tuple(params),
                 tuple(splices), where, description[0] if description else "",
                 meta.get("per_trace", ""))  # fmt: skip


def _same(where: str, sigil: str, used: set[str], declared: set[str]) -> None:
    for name in sorted(used - declared):
        raise SqlFileError(f"{where}: {sigil}{name} used but not declared")
    for name in sorted(declared - used):
        raise SqlFileError(f"{where}: {sigil}{name} declared but not used")


@cache
def load(package: str, filename: str) -> SqlFile:
    """A .sql file shipped in `package` (e.g. load("tracekit.store", "derive.sql"))."""
    text = files(package).joinpath(filename).read_text()
    return parse(text, f"{package.replace('.', '/')}/{filename}")
