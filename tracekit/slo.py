"""Serving targets and warm-up for a batched server's figures: `--slo 'end_to_end.p99<=200ms'`
(also queue, ttft, tpot) and `--warmup N`, as the parameters of queries/serving_*.sql."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tracekit.errors import ConfigError

# the metric of a target -> the serving_throughput parameter that holds its limit
PARAMS = {"end_to_end": "slo_ms", "queue": "slo_queue_ms", "ttft": "slo_ttft_ms",
          "tpot": "slo_tpot_ms"}  # fmt: skip
UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}
_SLO = re.compile(
    r"^\s*([a-z_0-9]+?)(?:\.p(\d+(?:\.\d+)?))?\s*<=\s*([0-9.]+(?:e-?\d+)?)\s*(us|ms|s)?\s*$"
)


@dataclass(frozen=True)
class Slo:
    """One target: `metric` within `limit_ms` for at least `percentile`% of the requests."""

    metric: str
    percentile: float
    limit_ms: float
    text: str

    @property
    def param(self) -> str:
        return PARAMS[self.metric]


@dataclass(frozen=True)
class ServingOptions:
    """`--warmup N` and the `--slo` targets of one command."""

    warmup: int = 0
    slos: tuple[Slo, ...] = ()

    def params(self, declared: set[str] | frozenset[str]) -> dict[str, float | int]:
        """The values of the parameters a serving query declares (`declared`)."""
        values: dict[str, float | int] = {"warmup": self.warmup}
        values.update({s.param: s.limit_ms for s in self.slos})
        return {k: v for k, v in values.items() if k in declared}


NO_SERVING_OPTIONS = ServingOptions()


def parse_slo(text: str) -> Slo:
    """'end_to_end.p99<=200ms' -> Slo('end_to_end', 99, 200.0); a one-line ConfigError else."""
    m = _SLO.match(text)
    how = ("write METRIC.pNN<=LIMIT[us|ms|s], METRIC one of " + ", ".join(PARAMS)
           + ", e.g. 'end_to_end.p99<=200ms'")  # fmt: skip
    if m is None:
        raise ConfigError(f"--slo {text!r}: {how}")
    metric, pct, value, unit = m.groups()
    if metric not in PARAMS:
        raise ConfigError(f"--slo {text!r}: unknown metric {metric!r}; {how}")
    try:
        limit = float(value) * UNITS[unit or "ms"]
    except ValueError:
        raise ConfigError(f"--slo {text!r}: {value!r} is not a number; {how}") from None
    percentile = float(pct) if pct is not None else 100.0
    if not 0 < percentile <= 100 or limit <= 0:
        raise ConfigError(f"--slo {text!r}: the percentile must be in (0, 100] and the limit "
                          "positive")  # fmt: skip
    return Slo(metric, percentile, limit, text.strip())


def serving_options(warmup: int, slo_texts: tuple[str, ...] | list[str]) -> ServingOptions:
    """The parsed options; one target per metric (a ConfigError names a repeated one)."""
    if warmup < 0:
        raise ConfigError(f"--warmup {warmup}: must be 0 or more")
    slos = tuple(parse_slo(t) for t in slo_texts)
    seen: set[str] = set()
    for s in slos:
        if s.metric in seen:
            raise ConfigError(f"--slo {s.text!r}: a second target for {s.metric}; give one "
                              "per metric")  # fmt: skip
        seen.add(s.metric)
    return ServingOptions(warmup, slos)


__all__ = ["NO_SERVING_OPTIONS", "PARAMS", "ServingOptions", "Slo", "parse_slo", "serving_options"]
