"""Serving structures (tracekit/serving_structures.toml): which Python frames, NVTX/user ranges
or ops mean which stage, for the ways serving code is written (HF pipelines, handlers, LLM
engine steps, diffusers pipelines, torch.compile).

derive.sql reads them from the temp table `_structure_rules` that `install` fills: a trace with
no tracekit stage and no --stage rule takes its stages from the first structure it matches.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import Path

import duckdb

from tracekit.config import read_config
from tracekit.errors import ConfigError
from tracekit.store.literals import row_literal

_KINDS = ("python", "range", "cpu_op")
_STEPS = ("prefill", "decode", "generation")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class StructureStage:
    """Events of `kinds` whose name matches `pattern` (and not `exclude`) are stage `stage` of
    structure `structure` (optionally one range per `span` event, from its first hit to its
    last; optionally an engine `step` whose batch size `batch` reads from the name, or
    "generation" steps: the model forwards inside each `within` event)."""

    structure: str
    title: str
    stage: str
    pattern: str
    exclude: str | None
    kinds: tuple[str, ...]
    span: str | None
    step: str | None
    within: str | None
    batch: str | None
    required: bool
    request: str | None = None  # the structure's request calls (regex), if it names them


def _regex(value: object, what: str, source: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{source}: {what} must be a non-empty regex string")
    try:
        re.compile(value)
    except re.error as e:
        raise ConfigError(f"{source}: {what}: bad regular expression {value!r} ({e})") from None
    return value


def parse_structures(text: str, source: str) -> list[StructureStage]:
    """The [[structure]] tables of a TOML text, in order, one row per stage."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{source}: not valid TOML ({e})") from None
    tables = data.get("structure", [])
    if not isinstance(tables, list):
        raise ConfigError(f"{source}: [[structure]] must be an array of tables")
    out: list[StructureStage] = []
    for i, t in enumerate(tables, 1):
        name = t.get("name") if isinstance(t, dict) else None
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(f"{source}: structure #{i} needs a plain name")
        title = t.get("title", name)
        stages = t.get("stage", [])
        if not isinstance(title, str) or not isinstance(stages, list) or not stages:
            raise ConfigError(f"{source}: structure {name!r} needs [[structure.stage]] tables")
        requires = t.get("requires")
        if requires is not None and not (
            isinstance(requires, list) and all(isinstance(r, str) for r in requires)
        ):
            raise ConfigError(f"{source}: structure {name!r}: requires must list stage names")
        for s in stages:
            where = f"structure {name!r}"
            stage = s.get("stage") if isinstance(s, dict) else None
            if not isinstance(stage, str) or not _NAME.match(stage) or stage == "request":
                raise ConfigError(f"{source}: {where}: each stage needs a plain `stage` name")
            kinds = s.get("kinds", list(_KINDS))
            if not isinstance(kinds, list) or not kinds or any(k not in _KINDS for k in kinds):
                raise ConfigError(f"{source}: {where}: kinds must list some of {_KINDS}")
            step = s.get("step")
            if step is not None and step not in _STEPS:
                raise ConfigError(f"{source}: {where}: step must be one of {_STEPS}")
            if (step == "generation") != (s.get("within") is not None):
                raise ConfigError(f'{source}: {where}: step "generation" goes with `within`')
            out.append(
                StructureStage(
                    structure=name,
                    title=title,
                    stage=stage,
                    pattern=_regex(s.get("match"), f"{where} stage {stage!r} match", source),
                    exclude=None
                    if s.get("exclude") is None
                    else _regex(s["exclude"], f"{where} exclude", source),
                    kinds=tuple(kinds),
                    span=None if s.get("span") is None else _regex(s["span"], "span", source),
                    step=step,
                    within=None
                    if s.get("within") is None
                    else _regex(s["within"], "within", source),
                    batch=None if s.get("batch") is None else _regex(s["batch"], "batch", source),
                    required=requires is None or stage in requires,
                    request=None
                    if t.get("request") is None
                    else _regex(t["request"], f"{where} request", source),
                )
            )
    return out


@cache
def builtin_structures() -> tuple[StructureStage, ...]:
    text = files("tracekit").joinpath("serving_structures.toml").read_text()
    return tuple(parse_structures(text, "tracekit/serving_structures.toml"))


def user_structures(directory: Path | None = None) -> list[StructureStage]:
    """[[structure]] tables of tracekit.toml in `directory` (default: the working directory)."""
    found = read_config(directory)
    return parse_structures(*found) if found else []


def effective_structures() -> list[StructureStage]:
    """The working directory's structures first, then the built-in ones."""
    return user_structures() + list(builtin_structures())


def structures_digest(structures: list[StructureStage]) -> str:
    """A short digest of the structures, part of a cache's key (they decide the stages)."""
    return hashlib.sha256(repr(structures).encode()).hexdigest()[:16]


def titles() -> dict[str, str]:
    """structure name -> title, for the report's sentence on where stages came from."""
    return {s.structure: s.title for s in effective_structures()}


def install(con: duckdb.DuckDBPyConnection, structures: list[StructureStage]) -> None:
    """The temp table derive.sql reads: one row per (structure, stage pattern), `rank` the
    structure's place (first match wins)."""
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _structure_rules (rank INTEGER, structure VARCHAR, "
        "stage VARCHAR, pattern VARCHAR, exclude VARCHAR, kinds VARCHAR[], span VARCHAR, "
        "step VARCHAR, batch VARCHAR, required BOOLEAN, within VARCHAR, request VARCHAR)"
    )
    ranks: dict[str, int] = {}
    rows = [
        row_literal(
            (
                ranks.setdefault(s.structure, len(ranks)),
                s.structure,
                s.stage,
                s.pattern,
                s.exclude,
                list(s.kinds),
                s.span,
                s.step,
                s.batch,
                s.required,
                s.within,
                s.request,
            )
        )
        for s in structures
    ]
    if rows:
        con.execute(f"INSERT INTO _structure_rules VALUES {', '.join(rows)}")
