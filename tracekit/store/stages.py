"""Stage rules for traces recorded without tracekit: `--stage NAME=REGEX` and tracekit.toml."""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tracekit.config import CONFIG_NAME
from tracekit.errors import ConfigError

_STAGE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class StageRule:
    """Events (ranges, ops, Python frames) whose name matches `pattern` become stage `stage`.

    The pattern is searched anywhere in the name (RE2 syntax, as DuckDB's regexp_matches);
    anchor it with ^...$ for whole names. Only the outermost match on a thread counts.
    """

    stage: str
    pattern: str


def parse_rule(text: str, source: str = "--stage") -> StageRule:
    """Parse `NAME=REGEX`."""
    name, sep, pattern = text.partition("=")
    name = name.strip()
    if not sep or not name or not pattern:
        raise ConfigError(f"{source}: expected NAME=REGEX, got {text!r}")
    if not _STAGE_NAME.match(name):
        raise ConfigError(f"{source}: stage name {name!r} must be a plain identifier")
    if name == "request":
        raise ConfigError(f"{source}: 'request' is reserved for request ranges")
    try:
        re.compile(pattern)
    except re.error as e:
        raise ConfigError(f"{source}: bad regular expression {pattern!r} ({e})") from None
    return StageRule(name, pattern)


def load_config_rules(directory: Path) -> list[StageRule]:
    """Rules from `[stages]` in tracekit.toml of `directory`, if the file exists."""
    path = directory / CONFIG_NAME
    if not path.is_file():
        return []
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ConfigError(f"{path}: not valid TOML ({e})") from None
    stages = data.get("stages", {})
    if not isinstance(stages, dict):
        raise ConfigError(f'{path}: [stages] must be a table of NAME = "REGEX"')
    rules = []
    for name, pattern in stages.items():
        if not isinstance(pattern, str):
            raise ConfigError(f"{path}: stage {name!r} must map to a regex string")
        rules.append(parse_rule(f"{name}={pattern}", source=str(path)))
    return rules


DEPTH_KEY = "@depth"


def depth_rule(depth: int) -> StageRule:
    """`--stage-depth N` travels with the stage rules (it joins their cache key the same way):
    a pseudo-rule that derive.py takes out again."""
    if depth < 1:
        raise ConfigError(f"--stage-depth: must be 1 or more, got {depth}")
    return StageRule(DEPTH_KEY, str(depth))


def split_depth(rules: list[StageRule]) -> tuple[list[StageRule], int | None]:
    """(the real rules, the --stage-depth for inferred stages or None)."""
    depth = next((int(r.pattern) for r in rules if r.stage == DEPTH_KEY), None)
    return [r for r in rules if r.stage != DEPTH_KEY], depth


def rules_digest(rules: list[StageRule]) -> str:
    """A short digest of the rules, part of a cache's key."""
    text = "\n".join(f"{r.stage}={r.pattern}" for r in rules)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
