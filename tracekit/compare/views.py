"""Runs and their views: which trace of a run each group of diff/check figures comes from.

A run is a trace/store file or a run folder. A run folder holding one nsys trace and one
Kineto (torch.profiler) trace is one capture seen by two tools: its requests are counted
once, never pooled as independent samples. Each group of figures is read from one view:
requests and stages from the nsys trace (else Kineto when only it has requests), kernels and
GPU busy from the nsys trace when it has kernels (else Kineto's), CPU ops from the Kineto
trace (nsys records none). Other folders (per-rank traces of one run) are pooled as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.errors import TraceFormatError
from tracekit.ingest import formats
from tracekit.store.stages import StageRule
from tracekit.store.traceset import find_traces, open_traces


@dataclass(frozen=True)
class RunViews:
    """One run and the trace files each group of figures is read from."""

    run: Path
    requests: tuple[Path, ...]  # requests, stages, throughput
    gpu: tuple[Path, ...]  # kernels, GPU busy
    ops: tuple[Path, ...]  # CPU ops
    paired: bool = False  # one capture seen by two tools

    def describe(self) -> str:
        """One line: which file gave which figures (file names relative to the run); empty
        for a run of one trace."""
        if not self.paired:
            if len(self.requests) < 2:
                return ""  # one trace: nothing to say
            return f"{self.run.name}: all figures from {_names(self.requests)} (pooled)"
        groups: dict[tuple[Path, ...], list[str]] = {}
        for what, files in (
            ("requests and stages", self.requests),
            ("kernels and GPU busy", self.gpu),
            ("CPU ops", self.ops),
        ):
            groups.setdefault(files, []).append(what)
        parts = [f"{', '.join(w)} from {_names(f)}" for f, w in groups.items()]
        return f"{self.run.name} (one capture, two tools; counted once): {'; '.join(parts)}"


def _names(files: tuple[Path, ...]) -> str:
    return ", ".join(p.name for p in files)


def expand_runs(path: str | Path) -> list[Path]:
    """One input → its runs: a trace/store file or a run folder is one run; a folder with
    no traces of its own whose subfolders hold traces is a folder of runs (sorted)."""
    p = Path(path)
    if not p.exists():
        raise TraceFormatError(f"{p}: no such file or directory")
    if not p.is_dir():
        return [p]
    try:
        find_traces(p)
        return [p]
    except TraceFormatError:
        pass
    runs = []
    for sub in sorted(q for q in p.iterdir() if q.is_dir()):
        try:
            find_traces(sub)
        except TraceFormatError:
            continue
        runs.append(sub)
    if not runs:
        raise TraceFormatError(f"{p}: no trace files here nor in its subfolders (runs)")
    return runs


def _facts(trace: Path, stage_rules: Sequence[StageRule] | None, refresh: bool) -> dict[str, Any]:
    with open_traces([trace], stage_rules=stage_rules, refresh=refresh) as ts:
        rows = ts.query("compare_gpu_busy").to_dicts()
    return {
        "format": rows[0]["format"] if len(rows) == 1 else "store",
        "requests": sum(r["requests"] for r in rows),
        "kernels": sum(r["kernels"] for r in rows),
        "cpu_ops": sum(r["cpu_ops"] for r in rows),
    }


def run_views(
    run: Path, stage_rules: Sequence[StageRule] | None = None, refresh: bool = False
) -> RunViews:
    """The views of one run (see the module docstring for the choice)."""
    traces = tuple(find_traces(run)) if run.is_dir() else (run,)
    if len(traces) != 2:
        return RunViews(run, traces, traces, traces)
    facts = {t: _facts(t, stage_rules, refresh) for t in traces}
    by_format = {f["format"]: t for t, f in facts.items()}
    if set(by_format) != {formats.NSYS.name, formats.KINETO.name}:
        return RunViews(run, traces, traces, traces)
    nsys, kin = (by_format[formats.NSYS.name],), (by_format[formats.KINETO.name],)
    fn, fk = facts[nsys[0]], facts[kin[0]]
    requests = nsys if fn["requests"] or not fk["requests"] else kin
    gpu = nsys if fn["kernels"] or not fk["kernels"] else kin
    ops = kin if fk["cpu_ops"] or not fn["cpu_ops"] else nsys
    return RunViews(run, requests, gpu, ops, paired=True)
