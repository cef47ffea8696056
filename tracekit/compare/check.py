"""`run_check(trace, budgets, ...)`: hold a trace to budgets, for CI (`tracekit check`)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tracekit.atomic import atomic_output
from tracekit.compare.budgets import Budget, Outcome, evaluate
from tracekit.compare.metrics import RunMetrics, expand_runs, load_side
from tracekit.errors import ConfigError
from tracekit.slo import NO_SERVING_OPTIONS, ServingOptions
from tracekit.store.stages import StageRule


@dataclass(frozen=True)
class KernelOutcome:
    """`--no-new-top-kernels N`: kernels in the trace's top N absent from the baseline's."""

    top: int
    new: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.new

    @property
    def name(self) -> str:
        return f"no new kernel in top {self.top}"

    @property
    def line(self) -> str:
        if self.passed:
            return f"PASS {self.name}: none new vs baseline"
        listed = "; ".join(n if len(n) <= 80 else n[:79] + "…" for n in self.new)
        return f"FAIL {self.name}: {len(self.new)} new vs baseline: {listed}"


@dataclass(frozen=True)
class CheckResult:
    outcomes: tuple[Outcome | KernelOutcome, ...]
    views: tuple[str, ...] = ()  # per run measured: which trace gave which figures

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outcomes)

    @property
    def failures(self) -> int:
        return sum(not o.passed for o in self.outcomes)


def new_top_kernels(metrics: RunMetrics, baseline: RunMetrics, top: int) -> KernelOutcome:
    """Kernel names in the trace's top `top` by total time that are not in the baseline's."""
    base = {k.name for k in baseline.kernels[:top]}
    return KernelOutcome(top, tuple(k.name for k in metrics.kernels[:top] if k.name not in base))


def check_metrics(metrics: RunMetrics, budgets: Sequence[Budget],
                  baseline: RunMetrics | None = None,
                  top_kernels: int | None = None) -> CheckResult:  # fmt: skip
    outcomes: list[Outcome | KernelOutcome] = [evaluate(b, metrics, baseline) for b in budgets]
    if top_kernels is not None:
        if baseline is None:
            raise ConfigError("--no-new-top-kernels needs --baseline")
        outcomes.append(new_top_kernels(metrics, baseline, top_kernels))
    return CheckResult(tuple(outcomes))


def run_check(trace: str | Path, budgets: Sequence[Budget], baseline: str | Path | None = None,
              top_kernels: int | None = None, stage_rules: Sequence[StageRule] | None = None,
              refresh: bool = False,
              serving: ServingOptions = NO_SERVING_OPTIONS) -> CheckResult:  # fmt: skip
    """Measure `trace` (a file, run folder or folder of runs, pooled) and hold it to budgets
    (`serving`: --warmup, and the --slo targets of serving.within_slo / goodput_per_s)."""
    if baseline is None and (top_kernels is not None or any(b.regression for b in budgets)):
        raise ConfigError("--max-regression and --no-new-top-kernels need --baseline")
    metrics, _ = load_side(expand_runs(trace), str(trace), stage_rules, refresh, per_run=False,
                           serving=serving)  # fmt: skip
    base = None
    if baseline is not None:
        base, _ = load_side(expand_runs(baseline), str(baseline), stage_rules, refresh,
                            per_run=False, serving=serving)  # fmt: skip
    result = check_metrics(metrics, budgets, base, top_kernels)
    return CheckResult(result.outcomes, metrics.views)


def write_junit(result: CheckResult, path: Path, suite: str = "tracekit check") -> None:
    """One testcase per budget (xml.etree), written atomically."""
    root = ET.Element("testsuite", name=suite, tests=str(len(result.outcomes)),
                      failures=str(result.failures), errors="0")  # fmt: skip
    for o in result.outcomes:
        name = o.budget.text if isinstance(o, Outcome) else o.name
        case = ET.SubElement(root, "testcase", classname="tracekit.check", name=name)
        if not o.passed:
            ET.SubElement(case, "failure", message=o.line).text = o.line
        else:
            ET.SubElement(case, "system-out").text = o.line
    ET.indent(root)
    data = ET.tostring(root, encoding="unicode", xml_declaration=True)
    with atomic_output(path) as fh:
        fh.write(data + "\n")
