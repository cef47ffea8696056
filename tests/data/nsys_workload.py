"""A small NVTX workload for the nsys ingest tests (profiled with `nsys profile -t nvtx,osrt`).

Covers: two custom domains plus the default one, nested push/pop ranges, a category, a payload,
start/end ranges (one ended on another thread), marks, work on a second thread, repeated range
names (so the summary statistics have several instances), and one push range left open.
Uses the `nvtx` package (0.2.11 with nsys 2022.4: newer nvtx needs a newer nsys).
"""

import threading
import time

import nvtx

REQ = "tk_requests"
MODEL = "tk_model"


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def worker(n: int) -> None:
    for i in range(n):
        nvtx.push_range(message="worker_step", domain=MODEL, payload=i)
        time.sleep(0.002)
        nvtx.pop_range(domain=MODEL)


nvtx.mark(message="startup", color="green")
t = threading.Thread(target=worker, args=(5,), name="tk-worker")
t.start()
for req in range(3):
    nvtx.push_range(message="request", color="blue", domain=REQ)
    nvtx.push_range(message="preprocess", domain=REQ, category="cpu")
    time.sleep(0.003 + 0.001 * req)
    nvtx.pop_range(domain=REQ)
    nvtx.push_range(message="inference", domain=MODEL, category="gpu")
    for layer in range(2):
        nvtx.push_range(message="layer", domain=MODEL, payload=layer)
        spin(0.001)
        nvtx.pop_range(domain=MODEL)
    nvtx.pop_range(domain=MODEL)
    nvtx.push_range(message="postprocess")  # default domain
    time.sleep(0.001)
    nvtx.pop_range()
    nvtx.pop_range(domain=REQ)
    nvtx.mark(message="request_done", domain=REQ)
t.join()

rng = nvtx.start_range(message="async_batch", domain=REQ)
time.sleep(0.004)
nvtx.end_range(rng)
cross = nvtx.start_range(message="cross_thread", domain=REQ)
ender = threading.Thread(target=lambda: (time.sleep(0.002), nvtx.end_range(cross)))
ender.start()
ender.join()
nvtx.push_range(message="never_popped", domain=MODEL)  # left open at exit
