"""What a finding is: one observation with its evidence and next step, as the rules of
tracekit.report.findings and tracekit.report.input_findings write it (they import this; the
first runs the second's rules too)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Rows = Sequence[Mapping[str, Any]]
Results = Mapping[str, Rows]  # query name -> its rows for one trace

SEVERITIES = ("high", "medium", "low", "info")


@dataclass(frozen=True)
class Finding:
    """One observation with its evidence and what to do next."""

    id: str = field(metadata={"help": "stable rule id, e.g. 'prepost_dominant'"})
    severity: str = field(metadata={"help": "high | medium | low | info"})
    title: str = field(metadata={"help": "one line saying what was found"})
    evidence: str = field(metadata={"help": "the numbers, in words"})
    query: str = field(metadata={"help": "the query whose rows are the evidence"})
    next_step: str = field(metadata={"help": "what to try or measure next"})
    numbers: Mapping[str, float] = field(
        default_factory=dict, metadata={"help": "the figures the rule compared"}
    )
    scope: str = field(
        default="program",
        metadata={
            "help": "'program': a verdict about the program, the same for every capture of it; "
            "'run': about this capture's spread (a tail, an outlier request), which noise on the "
            "machine can change between captures"
        },
    )


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else 0.0
