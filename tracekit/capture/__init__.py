"""`tracekit capture`: run a command under nsys and/or torch.profiler into one run folder.

    from tracekit.capture import CaptureOptions, capture
    result = capture(CaptureOptions(command=("python", "infer.py"), run_dir=Path("runs/a")))

Modules: plan (which runs), nsys_runner (nsys argv, importer repair, export), torch_runner
(child side), stage_hooks (--stage), process (bounded child), manifest (capture.json).
"""

from __future__ import annotations

import datetime as dt
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.capture.manifest import MANIFEST, file_entries, versions, write_manifest
from tracekit.capture.nsys_runner import finish_report, report_paths
from tracekit.capture.plan import (
    ATTRIBUTES_DIR,
    NSYS_BASENAME,
    TORCH_TRACE,
    CaptureOptions,
    Plan,
    Run,
    make_plan,
)
from tracekit.capture.process import run_bounded
from tracekit.capture.stage_clock import (
    StageClock,
    empty_nsys_cause,
    nsys_tracekit_ranges,
    read_stage_clock,
)
from tracekit.capture.stage_hooks import StageTarget, parse_target
from tracekit.errors import CaptureFailed

__all__ = ["CaptureOptions", "CaptureResult", "StageTarget", "capture", "default_run_dir",
           "parse_target"]  # fmt: skip

# nsys sessions that fail before the program runs (process.NSYS_NOT_STARTED) are tried again,
# 1 s then 2 s apart
NSYS_START_ATTEMPTS = 3
NSYS_RETRY_NOTICE = "nsys could not start the program (see its message above); running it again"

_OURS = (MANIFEST, ATTRIBUTES_DIR, TORCH_TRACE, f"{NSYS_BASENAME}.nsys-rep",
         f"{NSYS_BASENAME}.sqlite", f"{NSYS_BASENAME}.qdstrm")  # fmt: skip


@dataclass
class CaptureResult:
    run_dir: Path
    manifest: Path
    exit_code: int  # the command's (0 when stopped by --duration)
    files: list[dict[str, Any]] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    timed_out: bool = False
    stage_clock: str = ""  # what the program entered, by its own clock (StageClock.summary)


def default_run_dir() -> Path:
    return Path("runs") / dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def _prepare(run_dir: Path, force: bool) -> None:
    if run_dir.exists() and not run_dir.is_dir():
        raise CaptureFailed(f"{run_dir} exists and is not a folder")
    if run_dir.is_dir() and any(run_dir.iterdir()):
        if not force:
            raise CaptureFailed(f"{run_dir} is not empty: choose another -o or pass --force")
        for name in _OURS:  # only what a capture writes; other files stay
            p = run_dir / name
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()
        for p in run_dir.glob("*.tracekit.duckdb*"):
            p.unlink()
    run_dir.mkdir(parents=True, exist_ok=True)


def _notice(msg: str, notices: list[str]) -> None:
    notices.append(msg)
    print(f"tracekit: {msg}", file=sys.stderr, flush=True)


def capture(opts: CaptureOptions) -> CaptureResult:
    """Run the plan; write capture.json even when the command fails or times out."""
    if not opts.command:
        raise CaptureFailed("no command given: tracekit capture [options] -- CMD ARGS...")
    _prepare(opts.run_dir, opts.force)
    notices: list[str] = []
    plan: Plan = make_plan(opts)
    for n in plan.notices:
        _notice(n, notices)
    started = dt.datetime.now(dt.UTC)
    t0 = time.monotonic()
    files: list[dict[str, Any]] = []
    run_records: list[dict[str, Any]] = []
    exit_code, timed_out = 0, False
    empty_nsys = ""
    no_torch_trace = ""
    clock = None
    for run in plan.runs:
        if exit_code != 0 or timed_out:
            _notice(f"skipped the {run.name} run: the previous run failed", notices)
            continue
        assert run.attributes_dir is not None
        run.attributes_dir.mkdir(parents=True, exist_ok=True)
        res = run_bounded(run.argv, env=run.env, timeout=opts.timeout,
                          filter_noise=not opts.verbose)  # fmt: skip
        for attempt in range(2, NSYS_START_ATTEMPTS + 1):
            if not (res.nsys_not_started and res.returncode != 0 and not _run_left_anything(run)):
                break
            # nsys failed before the program ran (its daemon or its process waiter), as it does
            # when another nsys session holds its daemon: wait for that one, then again
            _notice(f"{NSYS_RETRY_NOTICE} (try {attempt} of {NSYS_START_ATTEMPTS})", notices)
            time.sleep(attempt - 1)
            res = run_bounded(run.argv, env=run.env, timeout=opts.timeout,
                              filter_noise=not opts.verbose)  # fmt: skip
        rc = res.returncode
        if opts.duration and rc in (128 + 15, 0) and res.duration_s >= opts.duration:
            rc = 0  # nsys --duration ends the target with SIGTERM
        written: list[Path] = []
        clock = read_stage_clock(run.attributes_dir)
        if run.nsys_output is not None and plan.nsys is not None:
            nsys_files, nsys_notices = finish_report(plan.nsys, run.nsys_output, opts.timeout)
            written += nsys_files
            for n in nsys_notices:
                _notice(n, notices)
            empty = _empty_nsys_trace(nsys_files, clock, plan.nsys.year)
            if empty:
                notices.append(empty)  # said once, below, as the error or a notice
                empty_nsys = empty
        if run.torch_trace is not None and run.torch_trace.exists():
            written.append(run.torch_trace)
        elif run.torch_trace is not None and rc == 0 and not res.timed_out:
            no_torch_trace = _no_torch_trace(opts, clock)
        traces = [p for p in written if p.suffix in (".sqlite", ".json")]
        written += sorted(run.attributes_dir.glob("attributes-*.jsonl"))
        files += file_entries(opts.run_dir, written, run.name, traces)
        run_records.append({"name": run.name, "tracers": run.tracers, "argv": run.argv,
                            "exit_code": rc, "duration_s": round(res.duration_s, 3),
                            "timed_out": res.timed_out})  # fmt: skip
        exit_code, timed_out = rc, res.timed_out
        if res.timed_out:
            _notice(f"the {run.name} run passed --timeout {opts.timeout:g} s and was killed",
                    notices)  # fmt: skip
    manifest = write_manifest(
        opts.run_dir,
        {
            "command": list(opts.command),
            "cwd": str(Path.cwd()),
            "exit_code": exit_code,
            "timed_out": timed_out,
            "started_at": started.isoformat(timespec="seconds"),
            "duration_s": round(time.monotonic() - t0, 3),
            "versions": versions(plan.nsys.version if plan.nsys else None, plan.probe),
            "devices": plan.probe.get("devices", []),
            "cuda_available": bool(plan.probe.get("cuda")),
            "options": {
                "nsys": opts.nsys,
                "torch": opts.torch,
                "duration": opts.duration,
                "timeout": opts.timeout,
                "schedule": list(opts.schedule) if opts.schedule else None,
                "stages": [t.spec for t in opts.stages],
                "requests": [f"{t.module}:{t.attr}" for t in opts.requests if t.stage == "request"],
                **(
                    {
                        "batches": [
                            f"{t.module}:{t.attr}" for t in opts.requests if t.stage == "batch"
                        ]
                    }
                    if any(t.stage == "batch" for t in opts.requests)
                    else {}
                ),
                "warmup": opts.warmup,
                "python_stacks": opts.python_stacks,
            },  # fmt: skip
            "runs": run_records,
            "files": files,
            "notices": notices,
        },
    )
    result = CaptureResult(opts.run_dir, manifest, exit_code, files, notices, timed_out,
                           clock.summary() if clock else "")  # fmt: skip
    if timed_out:
        raise CaptureFailed(
            f"the profiled command did not finish within --timeout {opts.timeout:g} s and was "
            f"killed (a stuck profiler?); partial files and {manifest} were kept; "
            "try --duration, or rerun",
            exit_code=124,
        )
    if no_torch_trace:
        raise CaptureFailed(f"{no_torch_trace} ({manifest} was kept)")
    if empty_nsys and exit_code == 0 and not opts.allow_empty:
        raise CaptureFailed(
            f"{empty_nsys} (the traces and {manifest} were kept; --allow-empty accepts them)"
        )
    if empty_nsys:
        print(f"tracekit: {empty_nsys}", file=sys.stderr, flush=True)
    return result


def _run_left_anything(run: Run) -> bool:
    """Whether the program or nsys left anything: its torch trace, its stage records, nsys's
    report. Only an nsys run that left nothing is run again (the program may have effects)."""
    if run.nsys_output is None:
        return True  # no nsys: nothing to retry
    if any(p is not None and p.exists() for p in (run.torch_trace, *report_paths(run.nsys_output))):
        return True
    return run.attributes_dir is not None and any(run.attributes_dir.iterdir())


def _no_torch_trace(opts: CaptureOptions, clock: StageClock) -> str:
    """Why the torch run of a successful command wrote no trace."""
    measured = clock.counts.get("request", 0)
    if opts.schedule:
        wait, warm, active = opts.schedule
        how = (
            "tracekit.request() calls or --request"
            if measured or opts.requests
            else "requests: the program made none (mark them with --request module:function)"
        )
        return (
            f"no torch trace: --schedule {wait},{warm},{active} needs more than {wait + warm} "
            f"measured requests and the program made {measured} (counted: {how}"
            + (f", after --warmup {opts.warmup}" if opts.warmup else "")
            + ")"
        )
    if opts.warmup:
        return (
            f"no torch trace: the program made fewer requests than --warmup {opts.warmup} "
            "(the profiler starts after the warm-up)"
        )
    return "no torch trace was written (see the messages above)"


def _empty_nsys_trace(nsys_files: list[Path], clock: StageClock, nsys_year: int) -> str:
    """A message when the program entered tracekit ranges but the nsys trace holds none."""
    sqlite = next((p for p in nsys_files if p.suffix == ".sqlite"), None)
    if sqlite is None or clock.ranges == 0 or nsys_tracekit_ranges(sqlite) > 0:
        return ""
    return (
        f"the program entered {clock.ranges} tracekit ranges but {sqlite.name} holds none: "
        + empty_nsys_cause(nsys_year or None)
    )
