"""Child-side runner: run a Python script, `-m module` or `-c code` as `__main__`, optionally
under torch.profiler, with `--stage` hooks installed. Started by `tracekit capture`:

    python -m tracekit.capture.torch_runner [--trace OUT.json] [--cuda] [--schedule W,WU,A]
        [--stage NAME=module:function ...] [--duration S] -- script.py ARGS...

With neither `--stage` nor `--request`, the methods serving code is known to be written with
(HF pipelines and generation, handler classes) are hooked instead (capture/auto_hooks.py).
Without `--trace` no profiler runs (the nsys half of a two-run capture uses it for `--stage`).
The profiler records CPU activity always, CUDA activity only with `--cuda` (the capture plan
never asks for it in a process nsys traces: both would use CUPTI). It is bound to
`tracekit.annotate.bind_profiler`, so each request advances a schedule. The trace is written
(temp file + rename) when the script ends, fails, exits, or is stopped by SIGTERM or
`--duration`; the runner exits with the script's exit code. A program that starts its own
torch.profiler is recorded through it (profiler_guard).
"""

from __future__ import annotations

import argparse
import importlib.util
import signal
import sys
import traceback
import types
from pathlib import Path
from typing import Any

from tracekit.capture.profiler_guard import ProfilerGuard
from tracekit.capture.stage_hooks import (
    StageHooks,
    parse_batch_target,
    parse_request_target,
    parse_target,
)


class _Stopped(BaseException):
    """Raised in the main thread by SIGTERM or the --duration alarm."""

    def __init__(self, code: int, why: str) -> None:
        super().__init__(why)
        self.code = code


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    if "--" not in argv:
        raise SystemExit("tracekit runner: expected -- before the target")
    cut = argv.index("--")
    ap = argparse.ArgumentParser(prog="python -m tracekit.capture.torch_runner")
    ap.add_argument("--trace", type=Path)
    ap.add_argument("--cuda", action="store_true")
    ap.add_argument("--schedule", type=str)
    ap.add_argument("--stage", action="append", default=[])
    ap.add_argument("--request", action="append", default=[])
    ap.add_argument("--batch", action="append", default=[])
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--with-stack", action="store_true")
    ap.add_argument("--duration", type=float)
    return ap.parse_args(argv[:cut]), argv[cut + 1 :]


def _load_target(target: list[str]) -> tuple[types.CodeType, types.ModuleType, list[str]]:
    """Code object, fresh `__main__` module and aliases of `__main__` for --stage."""
    if not target:
        raise SystemExit("tracekit runner: nothing to run")
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    if target[0] == "-c":
        sys.argv = ["-c", *target[2:]]
        sys.path[0] = ""
        return compile(target[1], "<string>", "exec"), main, []
    if target[0] == "-m":
        name = target[1]
        spec = importlib.util.find_spec(name)
        if spec is None:
            raise SystemExit(f"No module named {name}")
        if spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(name + ".__main__")
            if spec is None:
                raise SystemExit(f"No module named {name}.__main__")
        code = spec.loader.get_code(spec.name)  # type: ignore[union-attr]
        main.__spec__ = spec
        main.__file__ = spec.origin
        main.__loader__ = spec.loader
        main.__package__ = spec.parent
        sys.argv = [spec.origin or name, *target[2:]]
        return code, main, [name]
    script = Path(target[0])
    source = script.read_bytes()
    main.__file__ = str(script)
    main.__package__ = None
    main.__spec__ = None
    sys.argv = [str(script), *target[1:]]
    sys.path[0] = str(script.resolve().parent)
    return compile(source, str(script), "exec"), main, [script.stem]


def _start_profiler(args: argparse.Namespace, guard: ProfilerGuard) -> Any:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    if not guard.may_start() or torch.autograd.profiler._is_profiler_enabled:
        # The program's own profiler is recording (or did): starting ours would end its session.
        guard.aside = True
        return None
    activities = [ProfilerActivity.CPU]
    if args.cuda and torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    kwargs: dict[str, Any] = {}
    if args.schedule:
        wait, warmup, active = (int(x) for x in args.schedule.split(","))
        kwargs["schedule"] = schedule(wait=wait, warmup=warmup, active=active, repeat=1)
        kwargs["on_trace_ready"] = guard.export_ours
    try:  # every thread's ops and ranges, not only this one's: servers answer on many threads
        kwargs["experimental_config"] = torch._C._profiler._ExperimentalConfig(
            profile_all_threads=True
        )
    except (AttributeError, TypeError):  # an older torch: the profiling thread only
        pass
    prof = profile(activities=activities, record_shapes=True, with_stack=args.with_stack, **kwargs)
    guard.ours = prof
    prof.start()
    return prof


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def run(argv: list[str]) -> int:
    args, target = _parse(argv)
    try:
        code, main, aliases = _load_target(target)
    except (OSError, SyntaxError, ImportError) as e:
        print(f"tracekit runner: cannot load {' '.join(target[:2])}: {e}", file=sys.stderr)
        return 2

    def stop(code: int, why: str) -> Any:
        def handler(signum: int, frame: Any) -> None:
            raise _Stopped(code, why)

        return handler

    signal.signal(signal.SIGTERM, stop(128 + signal.SIGTERM, "SIGTERM"))
    if args.duration:
        signal.signal(signal.SIGALRM, stop(0, f"--duration {args.duration:g} s reached"))
        signal.setitimer(signal.ITIMER_REAL, args.duration)

    targets = [parse_target(s) for s in args.stage]
    targets += [parse_request_target(s) for s in args.request]
    targets += [parse_batch_target(s) for s in args.batch]
    hooks = StageHooks(targets, aliases)
    hooks.install()
    auto = None
    if not targets:  # zero-flag: the methods serving code is known to be written with
        from tracekit.capture.auto_hooks import AutoHooks  # lazy: transformers' hooks only

        auto = AutoHooks()
        auto.install()
    from tracekit import annotate  # lazy: nvtx/torch after the profiler's set-up

    guard: ProfilerGuard | None = None
    if args.trace is not None:
        guard = ProfilerGuard(args.trace, lambda: annotate.bind_profiler(None))
    if guard is not None and args.warmup > 0:
        # The profiler starts when the warm-up ends: warm-up requests are in no trace and
        # a --schedule counts measured requests only.
        g = guard
        guard.install()
        annotate.set_warmup(args.warmup, lambda: annotate.bind_profiler(_start_profiler(args, g)))
    elif guard is not None:
        try:
            guard.install()  # imports torch: seconds, so a stop may land here
            prof = _start_profiler(args, guard)
        except _Stopped as e:
            print(f"tracekit: stopped before the target started ({e})", file=sys.stderr)
            guard.uninstall()
            hooks.uninstall()
            return e.code
        annotate.bind_profiler(prof)
    elif args.warmup > 0:
        annotate.set_warmup(args.warmup)
    rc = 0
    sys.modules["__main__"] = main
    try:
        if auto is not None:
            from tracekit.capture.auto_hooks import main_namespace  # lazy: zero-flag runs only

            exec(code, main.__dict__, main_namespace(main.__dict__))
        else:
            exec(code, main.__dict__, hooks.main_namespace(main.__dict__))
    except SystemExit as e:
        rc = _exit_code(e)
    except _Stopped as e:
        print(f"tracekit: stopped the target ({e})", file=sys.stderr)
        rc = e.code
    except BaseException:
        traceback.print_exc()
        rc = 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # let the trace be written
        _finish(args, hooks, guard)
        if auto is not None:
            auto.uninstall()
    return rc


def _finish(args: argparse.Namespace, hooks: StageHooks, guard: ProfilerGuard | None) -> None:
    from tracekit import annotate  # lazy: nvtx/torch after the profiler's set-up

    prof = annotate.bound_profiler()
    if annotate.warmup_left() > 0:
        print(
            f"tracekit: --warmup {args.warmup}: the program ended during its warm-up "
            f"({args.warmup - annotate.warmup_left()} of {args.warmup} requests): nothing measured",
            file=sys.stderr,
        )
    if prof is not None:
        annotate.bind_profiler(None)
        try:
            prof.stop()
            if not args.schedule and guard is not None:
                guard.export_ours(prof)
            elif guard is not None and not guard.aside and not args.trace.exists():
                wait, warm, _active = (int(x) for x in args.schedule.split(","))
                print(
                    f"tracekit: the schedule {args.schedule} never reached its active steps: "
                    f"{prof.step_num} measured requests, it needs more than {wait + warm}; "
                    "no torch trace written",
                    file=sys.stderr,
                )
        except Exception as e:  # a broken profiler must not hide the script's exit code
            print(f"tracekit: could not write the torch trace: {e}", file=sys.stderr)
    if guard is not None:
        guard.finish()
    for t in hooks.missing():
        print(f"tracekit: {t.option} was never applied (not found)", file=sys.stderr)
    problem = hooks.batch_problem()
    if problem:
        print(f"tracekit: {problem}", file=sys.stderr)
    hooks.uninstall()
    annotate.flush()


if __name__ == "__main__":
    code = run(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)
