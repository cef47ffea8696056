"""Before/after comparison (`tracekit diff`) and budgets for CI (`tracekit check`)."""

from __future__ import annotations

from tracekit.compare.budgets import Budget, parse_budget, parse_budget_file
from tracekit.compare.check import CheckResult, run_check
from tracekit.compare.diff import diff_runs
from tracekit.compare.metrics import RunMetrics, extract_run, load_side
from tracekit.compare.result import DiffResult

__all__ = [
    "Budget", "CheckResult", "DiffResult", "RunMetrics", "diff_runs", "extract_run",
    "load_side", "parse_budget", "parse_budget_file", "run_check",
]  # fmt: skip
