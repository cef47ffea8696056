"""A deterministic synthetic Kineto trace: tracekit stages with nested cpu_ops, runtime calls,
kernels on two streams, memcpys (pageable/pinned, sync/async) and gaps nothing covers.

Used by the golden-file tests (small) and by bench/bench_report.py (about 1e6 events).
Times are whole microseconds so that ns figures are exact.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any


class _Gen:
    def __init__(self, seed: int, names: dict[str, str] | None) -> None:
        self.rng = random.Random(seed)
        self.events: list[dict[str, Any]] = []
        self.ext = 0
        self.corr = 0
        self.names = names or {}

    def name(self, default: str) -> str:
        return self.names.get(default, default)

    def x(self, cat: str, name: str, ts: int, dur: int, **args: Any) -> dict[str, Any]:
        ev: dict[str, Any] = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": 100,
            "tid": 100,
            "ts": ts,
            "dur": dur,
        }
        if args:
            ev["args"] = args
        self.events.append(ev)
        return ev

    def op_with_gpu(
        self,
        name: str,
        ts: int,
        dur: int,
        gpu: list[tuple[str, str, int, int]],
        api: str = "cudaLaunchKernel",
        stream: int = 7,
    ) -> int:
        """A cpu_op of `dur` launching GPU work; gpu items: (cat, name, delay, gpu_dur)."""
        self.ext += 1
        ext = self.ext
        self.x("cpu_op", name, ts, dur, **{"External id": ext})
        t = ts + 1
        gpu_t = ts + 2
        for cat, gname, delay, gdur in gpu:
            self.corr += 1
            self.x(
                "cuda_runtime",
                api if cat == "kernel" else gname.split("|")[1],
                t,
                3,
                correlation=self.corr,
                **{"External id": ext},
            )
            gpu_t = max(gpu_t, t + 3 + delay)
            args: dict[str, Any] = {
                "device": 0,
                "stream": stream,
                "correlation": self.corr,
                "External id": ext,
            }
            if cat == "gpu_memcpy":
                args["bytes"] = 4 * 1024 * 1024
            ev = self.x(cat, gname.split("|")[0], gpu_t, gdur, **args)
            ev["pid"], ev["tid"] = 0, stream
            gpu_t += gdur
            t += 4
        return gpu_t


def generate(
    path: Path,
    requests: int = 6,
    layers: int = 2,
    seed: int = 7,
    names: dict[str, str] | None = None,
) -> Path:
    """Write a gzipped Kineto JSON trace; `names` renames ops/kernels (hostile-name tests)."""
    g = _Gen(seed, names)
    t = 1000
    for r in range(requests):
        seq = 16 * (1 + (r * 5) % 8)
        pre = 40 + seq // 4
        layer_us = 60
        inf = 20 + layers * layer_us + 10
        post = 30
        slow = 400 if r == requests - 1 and requests > 3 else 0
        req_dur = 5 + pre + 5 + inf + slow + 10 + post + 5
        g.x("user_annotation", "tracekit:request", t, req_dur)
        s = t + 5
        g.x("user_annotation", "tracekit:preprocess", s, pre)
        g.x("cpu_op", g.name("tokenize"), s + 1, pre - 20)
        g.x("cpu_op", "aten::to", s + pre - 18, 16, **{"External id": 0})
        g.op_with_gpu(
            "aten::copy_",
            s + pre - 17,
            12,
            [("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)|cudaMemcpyAsync", 2, 6)],
        )
        s += pre + 5
        g.x("user_annotation", "tracekit:inference", s, inf + slow)
        g.x("cpu_op", g.name("model_forward"), s + 1, inf + slow - 2)
        g.x("cpu_op", g.name("model_forward"), s + 2, inf + slow - 4)  # recursion
        c = s + 5
        for layer in range(layers):
            g.x("cpu_op", "aten::linear", c, 20)
            g.op_with_gpu("aten::addmm", c + 1, 18, [("kernel", g.name("sm80_gemm_kernel"), 1, 25)])
            g.op_with_gpu(
                "aten::bmm", c + 21, 14, [("kernel", "bmm_kernel", 0, 12)], stream=7 + layer % 2
            )
            g.op_with_gpu("aten::softmax", c + 36, 10, [("kernel", "softmax_kernel", 0, 6)])
            c += layer_us
        if slow:
            g.x("cpu_op", "aten::baddbmm", c, slow - 5)
        s += inf + slow + 10  # 10 us nothing covers
        g.x("user_annotation", "tracekit:postprocess", s, post)
        g.op_with_gpu("aten::argmax", s + 1, 8, [("kernel", "argmax_kernel", 0, 3)])
        g.op_with_gpu(
            "aten::item",
            s + 12,
            14,
            [("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)|cudaMemcpy", 1, 4)],
        )
        t += req_dur + 50 + g.rng.randint(0, 20)
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "Synthetic GPU"}],
        "traceEvents": g.events,
        "traceName": "synthetic",
    }
    data = json.dumps(doc).encode()
    with gzip.GzipFile(path, "wb", mtime=0) as fh:
        fh.write(data)
    return path
