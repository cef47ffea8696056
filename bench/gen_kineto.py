"""Generate a realistic synthetic PyTorch profiler (Kineto) trace of any size, streamed to disk.

    python bench/gen_kineto.py --events 1000000 -o /tmp/k1m.json.gz [--seed 0] [--rank 0]

The layout follows torch.profiler's `export_chrome_trace` output (one key per line inside
each event, as Kineto writes it), and the content follows a served model: each request is a
`ProfilerStep#N` holding a `tracekit:request` user_annotation with `tracekit:preprocess`
(tokenize, pad, host-to-device copy), `tracekit:inference` (embedding + transformer layers of
nested cpu_ops with Input Dims, each kernel launched by `cudaLaunchKernel` with a correlation
id, a matching kernel on a GPU stream and an `ac2g` flow pair) and `tracekit:postprocess`
(argmax, device-to-host copy, sync). Metadata events, deviceProperties and distributedInfo
close the file as Kineto does. Events are written as they are made: memory stays flat.

The event mix follows torch 2.x traces recorded with `profile_memory` and `with_stack` (the
H100 traces in shared/traces): besides complete events and `ac2g` flow pairs, a
`cpu_instant_event` `[memory]` instant per allocating op (~8 % of events) and
`python_function` frames (~18 %): one per layer op (`torch/nn/functional.py(...)`), one
`nn.Module: Layer_N` per layer, and the model's frames around the request's inference and
decoding (Python id / Python parent id args, as Kineto writes them).

Correlation ids are CUPTI's: one process-wide counter that every CUDA API call advances,
traced or not, and that has already run far by the time the profiler starts after warm-up.
So they start high (CORR_START) and step by a few per launch, as in the real traces in
shared/traces (first id 5 to 2e6, 4.5 to 16 per traced runtime call). Dense ids from 1000
also made HolisticTraceAnalysis 0.5 on pandas 3 fail ("Invalid value ... for dtype 'int16'"):
it downcasts `correlation` to the smallest int dtype, derives `index_correlation` from it and
then writes row indices into it, which pandas 3 refuses once ids < 32768 but rows > 32767.
"""

from __future__ import annotations

import argparse
import gzip
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

PID = 4242
TID = 4242
DEVICE = 0
STREAMS = (7, 20)
BASE_US = 1_700_000_000_000.0  # Kineto timestamps are large microsecond values
CORR_START = 1_000_000  # CUPTI correlation counter when profiling starts (after warm-up)
CORR_STEPS = (1, 1, 2, 2, 5, 6, 7, 9)  # ids used per traced launch (untraced API calls between)

LAYER_OPS = (
    # (cpu op, child op, kernel name, kernel us)
    ("aten::linear", "aten::addmm",
     "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", 38.0),
    ("aten::softmax", "aten::_softmax",
     "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float>"
     "(c10::BFloat16*, c10::BFloat16 const*, int)", 9.5),
    ("aten::bmm", None, "ampere_bf16_s1688gemm_bf16_64x64_sliced1x4_ldg8_f2f_tn", 21.0),
    ("aten::layer_norm", "aten::native_layer_norm",
     "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>"
     "(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, "
     "float*, c10::BFloat16*)", 4.2),
    ("aten::gelu", None,
     "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl"
     "(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const, "
     "std::array<char*, 2ul> >(int, at::native::GeluCUDAKernelImpl, std::array<char*, 2ul>)", 6.1),
    ("aten::add", None,
     "void at::native::vectorized_elementwise_kernel<4, "
     "at::native::CUDAFunctor_add<c10::BFloat16>, "
     "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
     "std::array<char*, 3ul>)", 2.3),
)  # fmt: skip


def _num(x: float) -> str:
    return f"{x:.3f}"


class _Gen:
    def __init__(self, out: IO[str], seed: int, rank: int) -> None:
        self.out = out
        self.rng = random.Random(seed)
        self.rank = rank
        self.t = BASE_US + 1000.0 * rank
        self.corr = CORR_START
        self.corr_rng = random.Random(seed + 1)  # own stream: the rest of the trace is unchanged
        self.ext = 1
        self.count = 0
        self.first = True
        self.alloc = 1_003_059_712  # bytes allocated so far (the [memory] instants' total)
        self.py_id = 0  # python_function ids, and the open frames' ids
        self.py_stack: list[int] = []

    # -- writers -------------------------------------------------------------------------
    def _emit(self, text: str) -> None:
        self.out.write(text if self.first else ",\n" + text)
        self.first = False
        self.count += 1

    def x(self, cat: str, name: str, pid: int, tid: int, ts: float, dur: float,
          args: str) -> None:  # fmt: skip
        body = f',\n    "args": {{\n{args}\n    }}' if args else ""
        self._emit(
            f'  {{\n    "ph": "X", "cat": "{cat}", "name": "{name}", "pid": {pid}, "tid": {tid},\n'
            f'    "ts": {_num(ts)}, "dur": {_num(dur)}{body}\n  }}'
        )

    def flow(self, ph: str, corr: int, pid: int, tid: int, ts: float) -> None:
        bp = ', "bp": "e"' if ph == "f" else ""
        self._emit(
            f'  {{\n    "ph": "{ph}", "id": {corr}, "pid": {pid}, "tid": {tid}, '
            f'"ts": {_num(ts)},\n    "cat": "ac2g", "name": "ac2g"{bp}\n  }}'
        )

    def instant(self, ts: float, nbytes: int) -> None:
        """A `[memory]` allocation instant, as profile_memory=True records one per alloc."""
        self.alloc += nbytes
        self._emit(
            f'  {{\n    "ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",\n'
            f'    "pid": {PID}, "tid": {TID},\n    "ts": {_num(ts)},\n    "args": {{\n'
            f'      "Total Reserved": 2629828608, "Total Allocated": {self.alloc}, '
            f'"Bytes": {nbytes}, "Addr": {137877174353920 + self.alloc}, "Device Id": {DEVICE}, '
            f'"Device Type": 1, "Ev Idx": {self.count}\n    }}\n  }}'
        )

    def python(self, name: str, ts: float, dur: float) -> None:
        """A with_stack frame: `python_function`, its id and its parent's (None at a root)."""
        self.py_id += 1
        parent = self.py_stack[-1] if self.py_stack else "null"
        self.x("python_function", name, PID, TID, ts, dur,
               f'      "Python parent id": {parent}, "Python id": {self.py_id}, '
               f'"Ev Idx": {self.count}')  # fmt: skip

    # -- building blocks -----------------------------------------------------------------
    def annotation(self, name: str, ts: float, dur: float) -> None:
        ext = self._ext()
        self.x(
            "user_annotation",
            name,
            PID,
            TID,
            ts,
            dur,
            f'      "External id": {ext}, "Record function id": 0, "Ev Idx": {self.count}',
        )

    def _corr(self) -> int:
        self.corr += self.corr_rng.choice(CORR_STEPS)
        return self.corr

    def _ext(self) -> int:
        self.ext += 1
        return self.ext

    def op(self, name: str, ts: float, dur: float, dims: str, ext: int) -> None:
        self.x("cpu_op", name, PID, TID, ts, dur,
               f'      "External id": {ext},"Record function id": 0, "Ev Idx": {self.count},\n'
               f'      "Input Dims": {dims},\n'
               f'      "Input type": ["c10::BFloat16", "c10::BFloat16"],\n'
               f'      "Concrete Inputs": ["", ""]')  # fmt: skip

    def launch(self, kernel: str, ts: float, ext: int, gpu_us: float, gpu_at: float,
               cat: str = "kernel", runtime: str = "cudaLaunchKernel",
               extra: str = "") -> float:  # fmt: skip
        """A runtime call at `ts` plus its GPU activity; returns the runtime call's end."""
        corr = self._corr()
        rdur = 3.0 + self.rng.random() * 2.0
        self.x("cuda_runtime", runtime, PID, TID, ts, rdur,
               f'      "External id": {ext}, "cbid": 211, "correlation": {corr}')  # fmt: skip
        stream = STREAMS[0] if cat == "kernel" or self.rng.random() < 0.7 else STREAMS[1]
        self.flow("s", corr, PID, TID, ts + 0.5)
        dur = gpu_us * (0.9 + 0.2 * self.rng.random())
        self.x(cat, kernel, DEVICE, stream, gpu_at, dur,
               f'      "External id": {ext}, "queued": 0, "device": {DEVICE}, "context": 1,\n'
               f'      "stream": {stream}, "correlation": {corr}, "registers per thread": 128,\n'
               f'      "shared memory": 49152{extra}')  # fmt: skip
        self.flow("f", corr, DEVICE, stream, gpu_at)
        return ts + rdur

    # -- one request ---------------------------------------------------------------------
    def request(self, step: int, layers: int) -> None:
        rng = self.rng
        t0 = self.t
        tokens = rng.choice((64, 128, 256, 512))
        gpu = t0 + 5.0  # GPU clock runs behind the host: next free time on the GPU
        events: list[tuple[str, float, float]] = []  # (annotation, ts, dur) written first
        pre = t0 + 2.0
        # preprocess: cpu work (tokenize/pad), tensor, H2D copy
        t = pre + 1.0
        ext = self._ext()
        self.op("aten::pad", t, 12.0, f"[[1, {tokens}], []]", ext)
        t += 14.0
        ext = self._ext()
        self.op("aten::to", t, 18.0, f"[[1, {tokens}], [], [], [], [], []]", ext)
        self.op("aten::_to_copy", t + 0.5, 17.0, f"[[1, {tokens}], [], [], [], [], []]", ext)
        self.instant(t + 0.8, tokens * 8)
        self.op("aten::copy_", t + 1.0, 16.0, f"[[1, {tokens}], [1, {tokens}], []]", ext)
        gpu = max(gpu, t + 3.0)
        self.launch("Memcpy HtoD (Pageable -> Device)", t + 2.0, ext, 2.5, gpu, cat="gpu_memcpy",
                    runtime="cudaMemcpyAsync", extra=f', "bytes": {tokens * 8}')  # fmt: skip
        gpu += 3.0
        t += 20.0
        events.append(("tracekit:preprocess", pre, t - pre))
        # inference: layers of nested ops, each with one kernel
        inf = t + 1.0
        t = inf + 1.0
        layer_us = len(LAYER_OPS) * 15.0
        end = t + layers * layer_us  # the frames around the model are written first
        self.python("model.py(88): forward", inf + 0.2, end - inf - 0.4)
        self.py_stack.append(self.py_id)
        self.python("torch/nn/modules/module.py(1747): _call_impl", inf + 0.4, end - inf - 0.8)
        self.py_stack.append(self.py_id)
        for layer in range(layers):
            self.python(f"nn.Module: Layer_{layer}", t - 0.4, layer_us - 0.1)
            self.py_stack.append(self.py_id)
            for op, child, kernel, kus in LAYER_OPS:
                ext = self._ext()
                dims = f"[[1, {tokens}, 768], [768, 768], []]"
                self.python(f"torch/nn/functional.py({2300 + len(op)}): {op[6:]}", t - 0.2, 14.6)
                self.op(op, t, 14.0, dims, ext)
                lt = t + 1.0
                if child:
                    self.op(child, t + 1.0, 12.0, dims, ext)
                    self.instant(t + 1.3, tokens * 768 * 2)
                    lt = t + 2.0
                gpu = max(gpu, lt + 4.0)
                self.launch(kernel, lt, ext, kus, gpu)
                gpu += kus + 1.0
                t += 15.0
            self.py_stack.pop()
        self.py_stack.clear()
        events.append(("tracekit:inference", inf, t - inf))
        # postprocess: argmax, D2H copy, sync
        post = t + 1.0
        t = post + 1.0
        ext = self._ext()
        self.python("generate.py(31): decode", t - 0.2, 10.4)
        self.op("aten::argmax", t, 10.0, f"[[1, {tokens}, 30522], [], []]", ext)
        self.instant(t + 0.5, 8)
        gpu = max(gpu, t + 5.0)
        self.launch("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
                    "at::native::ArgMaxOps<float>, unsigned int, long, 4> >()", t + 2.0, ext,
                    12.0, gpu)  # fmt: skip
        gpu += 13.0
        t += 11.0
        ext = self._ext()
        self.op("aten::item", t, max(gpu - t, 1.0) + 8.0, "[[]]", ext)
        self.launch("Memcpy DtoH (Device -> Pageable)", t + 1.0, ext, 1.8, gpu + 1.0,
                    cat="gpu_memcpy", runtime="cudaMemcpyAsync", extra=', "bytes": 8')  # fmt: skip
        self.x(
            "cuda_runtime",
            "cudaStreamSynchronize",
            PID,
            TID,
            t + 6.0,
            max(gpu - t, 1.0),
            f'      "External id": {ext}, "cbid": 131, "correlation": {self._corr()}',
        )
        t += max(gpu - t, 1.0) + 10.0
        events.append(("tracekit:postprocess", post, t - post))
        # annotations last, as Kineto writes them in no particular order
        self.annotation(f"ProfilerStep#{step}", t0, t - t0 + 2.0)
        self.annotation("tracekit:request", t0 + 1.0, t - t0)
        for name, ts, dur in events:
            self.annotation(name, ts, dur)
        self.t = t + 20.0 + rng.random() * 50.0


# per layer: op + runtime + kernel + 2 flows + python frame per op, a child op and an instant
# per op that has a child, the layer's nn.Module frame
_LAYER_EVENTS = len(LAYER_OPS) * 6 + 2 * sum(1 for _, c, _, _ in LAYER_OPS if c) + 1
# request overhead outside layers (preprocess + postprocess + annotations + 3 python frames +
# 2 instants)
_FIXED_EVENTS = 29


def _header(rank: int, world: int) -> str:
    return (
        '{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    {\n      "id": 0, '
        '"name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936,\n      '
        '"computeMajor": 9, "computeMinor": 0, "maxThreadsPerBlock": 1024, "numSms": 132,\n'
        '      "warpSize": 32, "sharedMemPerBlock": 49152\n    }\n  ],\n'
        f'  "distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {world}}},\n'
        '  "record_shapes": 1,\n  "with_stack": 0,\n  "cupti_version": 22,\n'
        '  "cuda_runtime_version": 12040,\n  "cuda_driver_version": 12090,\n'
        '  "traceEvents": [\n'
    )


def _metadata(gen: _Gen) -> Iterator[str]:
    ts = _num(BASE_US)
    yield (f'  {{\n    "name": "process_name", "ph": "M", "ts": {ts}, "pid": {PID}, "tid": 0,\n'
           f'    "args": {{\n      "name": "python3"\n    }}\n  }}')  # fmt: skip
    yield (f'  {{\n    "name": "thread_name", "ph": "M", "ts": {ts}, "pid": {PID}, "tid": {TID},\n'
           f'    "args": {{\n      "name": "thread {TID} (python3)"\n    }}\n  }}')  # fmt: skip
    yield (f'  {{\n    "name": "process_name", "ph": "M", "ts": {ts}, "pid": {DEVICE}, "tid": 0,\n'
           f'    "args": {{\n      "name": "python3"\n    }}\n  }}')  # fmt: skip
    for s in STREAMS:
        yield (
            f'  {{\n    "name": "thread_name", "ph": "M", "ts": {ts}, "pid": {DEVICE}, '
            f'"tid": {s},\n    "args": {{\n      "name": "stream {s} "\n    }}\n  }}'
        )
    yield (f'  {{\n    "ph": "X", "cat": "Trace", "ts": {ts}, "dur": {_num(gen.t - BASE_US)},\n'
           f'    "pid": "Spans", "tid": "PyTorch Profiler",\n    "name": "PyTorch Profiler (0)",\n'
           f'    "args": {{\n      "Op count": 0\n    }}\n  }}')  # fmt: skip
    yield (f'  {{\n    "name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "",\n'
           f'    "ts": {_num(gen.t + 10.0)}\n  }}')  # fmt: skip


def generate(out: IO[str], events: int, seed: int = 0, rank: int = 0, world: int = 1,
             layers: int = 12) -> int:  # fmt: skip
    """Write a trace of about `events` events (never fewer) to `out`; return the exact count."""
    gen = _Gen(out, seed, rank)
    out.write(_header(rank, world))
    per_request = _FIXED_EVENTS + layers * _LAYER_EVENTS
    step = 1
    while gen.count + 7 < events:
        remaining = events - gen.count - 7
        n_layers = layers if remaining >= per_request else max(
            1, (remaining - _FIXED_EVENTS) // _LAYER_EVENTS + 1)  # fmt: skip
        gen.request(step, n_layers)
        step += 1
    for text in _metadata(gen):
        gen._emit(text)
    out.write('\n  ],\n  "traceName": "synthetic", "displayTimeUnit": "ms",\n'
              '  "baseTimeNanoseconds": 1700000000000000000\n}\n')  # fmt: skip
    return gen.count


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=float, default=1e5, help="approximate event count")
    p.add_argument("-o", "--output", type=Path, required=True, help=".json or .json.gz")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--layers", type=int, default=12, help="transformer layers per request")
    a = p.parse_args(argv)
    tmp = a.output.with_name(a.output.name + ".part")
    if a.output.name.endswith(".gz"):
        raw: IO[str] = gzip.open(tmp, "wt", compresslevel=6, encoding="utf-8")
    else:
        raw = open(tmp, "w", encoding="utf-8", buffering=1 << 20)
    with raw as f:
        n = generate(f, int(a.events), a.seed, a.rank, a.world_size, a.layers)
    tmp.replace(a.output)
    print(f"Wrote {a.output} ({n} events, {a.output.stat().st_size / 1e6:.1f} MB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
