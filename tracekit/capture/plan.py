"""Capture plan: which runs, under which tracers, with which argv and environment.

The rule (docs/capture.md): nsys and torch.profiler's CUDA activity both use CUPTI, so they
never trace CUDA in the same process.

- No CUDA in the target (CPU box): one run carries both, nsys outside and the torch runner
  (CPU activity only) inside: one process, the same requests in both traces.
- CUDA available and both wanted: two runs of the same command, one under nsys (no torch
  profiler), then one under the torch runner with CPU+CUDA activity.
- One tracer only: one run with it. Non-Python commands get no torch half.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.capture.nsys_runner import Nsys, find_nsys, profile_argv
from tracekit.capture.stage_hooks import StageTarget
from tracekit.errors import CaptureFailed

NSYS_BASENAME = "nsys"  # -> nsys.nsys-rep, nsys.sqlite
TORCH_TRACE = "torch.pt.trace.json"
ATTRIBUTES_DIR = "attributes"
_PYTHON = re.compile(r"^(python|pypy)(\d+(\.\d+)*)?$")
_FLAGS_NO_ARG = {"-u", "-O", "-OO", "-B", "-s", "-S", "-E", "-I", "-q", "-b", "-bb", "-P"}
_FLAGS_ARG = {"-X", "-W"}

# Run by the command's interpreter. Importing torch costs ~2 s of CPU, so it is imported only
# where CUDA could be available: a torch built for CUDA or ROCm (its version.py, read as text)
# on a machine with a GPU device node. Elsewhere torch.cuda.is_available() is False.
PROBE = r"""
import ast, glob, importlib.util, json, os, platform, sys
info = {"python": platform.python_version(), "executable": sys.executable, "torch": None,
        "cuda": False, "devices": [], "nvtx": None}
try:
    from importlib.metadata import version
    info["nvtx"] = version("nvtx")
except Exception:
    pass
build = {}
try:
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.submodule_search_locations:
        path = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
        for node in ast.parse(open(path).read()).body:
            if isinstance(node, ast.Assign):
                target = node.targets[0]
            else:
                target = getattr(node, "target", None)
            if isinstance(target, ast.Name) and getattr(node, "value", None) is not None:
                try:
                    build[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    pass
except Exception:
    build = {}
nodes = glob.glob("/dev/nvidia[0-9]*") + glob.glob("/dev/dxg") + glob.glob("/dev/kfd")
if "__version__" in build and not ((build.get("cuda") or build.get("hip")) and nodes):
    info["torch"] = str(build["__version__"])
else:
    try:
        import torch
        info["torch"] = torch.__version__
        info["cuda"] = bool(torch.cuda.is_available())
        for i in range(torch.cuda.device_count() if info["cuda"] else 0):
            p = torch.cuda.get_device_properties(i)
            info["devices"].append({"id": i, "name": p.name, "memory_bytes": p.total_memory})
    except Exception:
        pass
print("TRACEKIT_PROBE " + json.dumps(info))
"""


@dataclass(frozen=True)
class CaptureOptions:
    command: tuple[str, ...]
    run_dir: Path
    nsys: bool = True
    torch: bool = True
    schedule: tuple[int, int, int] | None = None
    stages: tuple[StageTarget, ...] = ()
    requests: tuple[StageTarget, ...] = ()  # --request and --batch targets (their .stage says)
    warmup: int = 0  # --warmup: the first N requests are served but recorded nowhere
    python_stacks: bool = False  # --python: torch.profiler with_stack (Python function events)
    duration: float | None = None
    timeout: float | None = None
    force: bool = False
    verbose: bool = False  # pass the profilers' own output through
    allow_empty: bool = False  # an nsys trace without the program's stage ranges is kept, exit 0


@dataclass(frozen=True)
class PythonCommand:
    interpreter: str
    flags: tuple[str, ...]
    target: tuple[str, ...]  # ('script.py', args...) | ('-m', mod, args...) | ('-c', code, ...)


@dataclass
class Run:
    name: str  # 'combined' | 'nsys' | 'torch'
    argv: list[str]
    env: dict[str, str]
    tracers: list[str]
    nsys_output: Path | None = None
    torch_trace: Path | None = None
    attributes_dir: Path | None = None


@dataclass
class Plan:
    runs: list[Run]
    nsys: Nsys | None
    probe: dict[str, Any]
    notices: list[str] = field(default_factory=list)


def parse_python_command(command: tuple[str, ...]) -> PythonCommand | None:
    """Recognise `python [flags] script.py|-m mod|-c code ...` and `script.py ...`."""
    if not command:
        return None
    head = Path(command[0]).name
    if head.endswith(".py"):
        return PythonCommand(sys.executable, (), command)
    if not _PYTHON.match(head):
        return None
    flags: list[str] = []
    i = 1
    while i < len(command):
        a = command[i]
        if a in ("-m", "-c"):
            if i + 1 >= len(command):
                return None
            return PythonCommand(command[0], tuple(flags), command[i:])
        if a in _FLAGS_NO_ARG:
            flags.append(a)
        elif a in _FLAGS_ARG and i + 1 < len(command):
            flags += [a, command[i + 1]]
            i += 1
        elif a.startswith("-"):
            return None  # an interpreter flag we do not know how to carry
        else:
            return PythonCommand(command[0], tuple(flags), command[i:])
        i += 1
    return None


def probe_python(interpreter: str, env: dict[str, str]) -> dict[str, Any]:
    """Versions and devices as seen by the target interpreter ({} when it cannot run)."""
    try:
        out = subprocess.run(
            [interpreter, "-c", PROBE], capture_output=True, text=True, timeout=120, env=env,
            check=False,
        ).stdout  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return {}
    for line in out.splitlines():
        if line.startswith("TRACEKIT_PROBE "):
            return dict(json.loads(line.removeprefix("TRACEKIT_PROBE ")))
    return {}


def child_env(attributes_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])  # the folder holding tracekit/
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env["TRACEKIT_ATTRIBUTES_DIR"] = str(attributes_dir.resolve())
    return env


def _runner_argv(
    py: PythonCommand, opts: CaptureOptions, trace: Path | None, cuda: bool
) -> list[str]:
    argv = [py.interpreter, *py.flags, "-m", "tracekit.capture.torch_runner"]
    if trace is not None:
        argv += ["--trace", str(trace)]
        if cuda:
            argv.append("--cuda")
        if opts.schedule:
            argv += ["--schedule", ",".join(map(str, opts.schedule))]
        if opts.python_stacks:
            argv.append("--with-stack")
    for t in opts.stages:
        argv += ["--stage", t.spec]
    for t in opts.requests:  # --request, and --batch (StageTarget.stage == 'batch')
        argv += [f"--{t.stage}", f"{t.module}:{t.attr}"]
    if opts.warmup:
        argv += ["--warmup", str(opts.warmup)]
    if opts.duration and trace is not None:
        argv += ["--duration", f"{opts.duration:g}"]
    return [*argv, "--", *py.target]


def make_plan(opts: CaptureOptions) -> Plan:
    notices: list[str] = []
    py = parse_python_command(opts.command)
    nsys = find_nsys() if opts.nsys else None
    if opts.nsys and nsys is None:
        notices.append("nsys not found on PATH: torch.profiler-only capture")
    probe = probe_python(py.interpreter, child_env(opts.run_dir)) if py else {}
    use_torch = opts.torch and py is not None and probe.get("torch") is not None
    if opts.torch and not use_torch:
        why = "not a Python command" if py is None else "torch is not importable by its python"
        notices.append(f"torch.profiler half skipped: {why}")
    if (opts.stages or opts.requests or opts.warmup) and py is None:
        notices.append("--stage, --request and --warmup ignored: not a Python command")
    if nsys is None and not use_torch:
        raise CaptureFailed(
            "nothing to capture with: "
            + ("nsys was disabled" if not opts.nsys else "nsys is not on PATH")
            + " and "
            + ("torch.profiler was disabled" if not opts.torch else "torch.profiler cannot run")
            + " for this command; install Nsight Systems or torch, or see `tracekit doctor`",
            exit_code=2,
        )
    cuda = bool(probe.get("cuda"))
    run_dir = opts.run_dir
    plain = list(opts.command)
    runs: list[Run] = []

    def inner(trace: Path | None, cuda_activity: bool) -> list[str]:
        if py is None or (trace is None and not (opts.stages or opts.requests or opts.warmup)):
            return plain
        return _runner_argv(py, opts, trace, cuda_activity)

    if nsys is not None and use_torch and not cuda:
        attrs, out, trace = run_dir / ATTRIBUTES_DIR, run_dir / NSYS_BASENAME, run_dir / TORCH_TRACE
        argv = profile_argv(nsys, out, inner(trace, False), opts.duration)
        runs.append(Run("combined", argv, child_env(attrs), ["nsys", "torch"], out, trace, attrs))
    else:
        two = nsys is not None and use_torch
        if nsys is not None:
            attrs = run_dir / ATTRIBUTES_DIR / ("nsys" if two else "")
            out = run_dir / NSYS_BASENAME
            argv = profile_argv(nsys, out, inner(None, False), opts.duration)
            runs.append(Run("nsys", argv, child_env(attrs), ["nsys"], out, None, attrs))
        if use_torch:
            attrs = run_dir / ATTRIBUTES_DIR / ("torch" if two else "")
            trace = run_dir / TORCH_TRACE
            runs.append(Run("torch", inner(trace, cuda), child_env(attrs), ["torch"], None, trace,
                            attrs))  # fmt: skip
    return Plan(runs, nsys, probe, notices)
