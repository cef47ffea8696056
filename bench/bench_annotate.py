"""Overhead of `with tracekit.stage("x"):` in ns per stage, with and without listeners.

    python bench/bench_annotate.py            # every scenario, each in a fresh process

Scenarios: nothing listening; torch imported (no profiler); NVTX on without a tool attached
(TRACEKIT_NVTX=1: the nvtx C calls are no-ops); attribute sidecar on; torch.profiler active.
Under nsys the NVTX cost is nsys's own (about a microsecond per range).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

SCENARIOS = ("bare", "torch-imported", "nvtx-on", "sidecar", "torch-profiler")


def measure(n: int) -> float:
    from tracekit.annotate import stage

    for _ in range(1000):
        with stage("x"):
            pass
    t = time.perf_counter_ns()
    for _ in range(n):
        with stage("x"):
            pass
    return (time.perf_counter_ns() - t) / n


def baseline(n: int) -> float:
    t = time.perf_counter_ns()
    for _ in range(n):
        pass
    return (time.perf_counter_ns() - t) / n


def run_scenario(name: str) -> float:
    n = 200_000
    if name == "torch-imported":
        import torch  # noqa: F401
    if name == "torch-profiler":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]):
            return measure(5_000) - baseline(5_000)
    return measure(n) - baseline(n)


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--scenario":
        print(f"{run_scenario(sys.argv[2]):.0f}")
        return 0
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for name in SCENARIOS:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("NVTX_INJECTION64_PATH", "TRACEKIT_ATTRIBUTES_DIR", "TRACEKIT_NVTX")
        }
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        with tempfile.TemporaryDirectory() as tmp:
            if name == "nvtx-on":
                env["TRACEKIT_NVTX"] = "1"
            if name == "sidecar":
                env["TRACEKIT_ATTRIBUTES_DIR"] = tmp
            out = subprocess.run(
                [sys.executable, __file__, "--scenario", name], env=env, capture_output=True,
                text=True, check=True,
            ).stdout.strip().splitlines()[-1]  # fmt: skip
        print(f"{name:<16} {out:>8} ns/stage")
    return 0


if __name__ == "__main__":
    sys.exit(main())
