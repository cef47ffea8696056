"""Budgets: `STAGE.METRIC<=VALUE` (also <, >=, >) and regressions `STAGE.METRIC=10%`.

`serving.METRIC` holds a batched server's figures (SERVING_METRICS: requests_per_s, mean_batch,
queue_p50_ms, ...), e.g. `serving.requests_per_s>=100`, `serving.queue_p99_ms<=20`.

Budget files hold one budget per line (`#` starts a comment), or, when the name ends in
`.toml`, a `[budgets]` table of `"STAGE.METRIC" = "<=VALUE"` strings. Errors name the budget,
and in a file `FILE:LINE`.
"""

from __future__ import annotations

import math
import operator
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tracekit.compare.metrics import GOODPUT, SERVING_METRICS, STAGE_METRICS, RunMetrics
from tracekit.errors import ConfigError

SERVING = "serving"  # the pseudo-stage of SERVING_METRICS

OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt,
}  # fmt: skip
_BUDGET = re.compile(r"^\s*([A-Za-z_][\w.-]*)\.(\w+)\s*(<=|>=|<|>)\s*([^\s]+)\s*$")
_REGRESSION = re.compile(r"^\s*([A-Za-z_][\w.-]*)\.(\w+)\s*=\s*([^\s%]+)\s*(%?)\s*$")


@dataclass(frozen=True)
class Budget:
    """One budget. `op` '<=' etc.; for a regression, `limit` is the allowed increase over
    the baseline value (percent when `percent`)."""

    text: str
    stage: str
    metric: str
    op: str
    limit: float
    regression: bool = False
    percent: bool = False
    source: str = "--budget"


@dataclass(frozen=True)
class Outcome:
    """A budget's verdict with both figures."""

    budget: Budget
    passed: bool
    measured: float
    limit: float  # absolute limit the measurement was held to
    baseline: float | None = None

    @property
    def line(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        extra = f", baseline {fmt(self.baseline)}" if self.baseline is not None else ""
        return (f"{verdict} {self.budget.text}: measured {fmt(self.measured)} "
                f"(limit {fmt(self.limit)}{extra})")  # fmt: skip


def fmt(v: float) -> str:
    """Numbers as people read them: 63.2, 0.0512, 1234.5."""
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.1f}" if abs(v) >= 1000 else f"{v:.4g}"


def _number(text: str, where: str, budget: str) -> float:
    try:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(text)
        return value
    except ValueError:
        raise ConfigError(f"{where}: budget {budget!r}: {text!r} is not a number") from None


def _metric(metric: str, where: str, budget: str, stage: str = "") -> None:
    known = SERVING_METRICS if stage == SERVING else STAGE_METRICS
    if metric not in known:
        raise ConfigError(f"{where}: budget {budget!r}: unknown metric {metric!r} "
                          f"(known{' for serving' if stage == SERVING else ''}: "
                          f"{' '.join(known)})")  # fmt: skip


def parse_budget(text: str, source: str = "--budget") -> Budget:
    """Parse `STAGE.METRIC<=VALUE`."""
    m = _BUDGET.match(text)
    if not m:
        raise ConfigError(f"{source}: malformed budget {text!r} "
                          "(want STAGE.METRIC<=VALUE, e.g. inference.p99_ms<=50)")  # fmt: skip
    stage, metric, op, value = m.groups()
    _metric(metric, source, text, stage)
    return Budget(text.strip(), stage, metric, op, _number(value, source, text), source=source)


def parse_regression(text: str, source: str = "--max-regression") -> Budget:
    """Parse `STAGE.METRIC=10%` (relative) or `STAGE.METRIC=5` (absolute, metric units)."""
    m = _REGRESSION.match(text)
    if not m:
        raise ConfigError(f"{source}: malformed regression {text!r} "
                          "(want STAGE.METRIC=PERCENT%, e.g. inference.p99_ms=10%)")  # fmt: skip
    stage, metric, value, pct = m.groups()
    _metric(metric, source, text, stage)
    limit = _number(value, source, text)
    if limit < 0:
        raise ConfigError(f"{source}: regression {text!r}: the allowance must be >= 0")
    return Budget(text.strip(), stage, metric, "<=", limit, True, bool(pct), source)


def parse_budget_file(path: Path) -> list[Budget]:
    """Budgets from a file: one per line with `#` comments, or TOML `[budgets]`."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read budget file ({e})") from None
    if path.suffix == ".toml":
        return _parse_toml(path, text)
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        body = line.split("#", 1)[0].strip()
        if body:
            out.append(parse_budget(body, f"{path}:{lineno}"))
    return out


def _parse_toml(path: Path, text: str) -> list[Budget]:
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as e:  # (RecursionError: deep nesting)
        raise ConfigError(f"{path}: not valid TOML ({e})") from None
    table = data.get("budgets")
    if not isinstance(table, dict):
        raise ConfigError(f'{path}:1: want a [budgets] table of "STAGE.METRIC" = "<=VALUE"')
    lines = text.splitlines()
    out = []
    for key, value in table.items():
        lineno = next((i for i, ln in enumerate(lines, 1) if key in ln), 1)
        if not isinstance(value, str):
            raise ConfigError(f'{path}:{lineno}: budget {key!r} must be a string like "<=50"')
        out.append(parse_budget(f"{key}{value.strip()}", f"{path}:{lineno}"))
    return out


def evaluate(budget: Budget, metrics: RunMetrics, baseline: RunMetrics | None = None) -> Outcome:
    """Hold one budget against measured metrics (and the baseline for regressions)."""
    measured = _value(budget, metrics, "the trace")
    if not budget.regression:
        return Outcome(budget, OPS[budget.op](measured, budget.limit), measured, budget.limit)
    if baseline is None:
        raise ConfigError(f"{budget.source}: {budget.text!r} needs --baseline")
    base = _value(budget, baseline, "the baseline")
    allowed = abs(base) * budget.limit / 100 if budget.percent else budget.limit
    limit = base + allowed
    return Outcome(budget, measured <= limit, measured, limit, base)


def _value(budget: Budget, metrics: RunMetrics, what: str) -> float:
    if budget.stage == SERVING:
        if metrics.serving is None:
            raise ConfigError(f"{budget.source}: budget {budget.text!r}: {what} has no served "
                              "requests (no tracekit.batch ranges)")  # fmt: skip
        if budget.metric in GOODPUT and budget.metric not in metrics.serving:
            raise ConfigError(f"{budget.source}: budget {budget.text!r} needs a target: "
                              "--slo 'end_to_end.p99<=200ms' (or queue, ttft, tpot)")  # fmt: skip
        if budget.metric not in metrics.serving:
            raise ConfigError(
                f"{budget.source}: budget {budget.text!r}: {what} has no prefill and decode "
                "steps in its batches (no generation)"
            )
        return metrics.serving[budget.metric]
    s = metrics.stage(budget.stage)
    if s is None:
        known = ", ".join(x.stage for x in metrics.stages) or "none"
        raise ConfigError(f"{budget.source}: budget {budget.text!r}: {what} has no stage "
                          f"{budget.stage!r} (stages: {known})")  # fmt: skip
    return s.metric(budget.metric)
