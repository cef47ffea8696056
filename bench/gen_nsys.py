"""Generate a realistic synthetic Nsight Systems SQLite export of any size.

    python bench/gen_nsys.py --kernels 5000000 -o big.sqlite [--seed 0] [--threads 1]

Tables and columns follow real 2022.4-2024.x exports (StringIds, NVTX_EVENTS with a domain
create row, CUPTI_ACTIVITY_KIND_RUNTIME / KERNEL / MEMCPY / MEMSET / SYNCHRONIZATION joined by
correlationId within one process, PROCESSES, ThreadNames, TARGET_INFO_GPU,
TARGET_INFO_SESSION_START_TIME, ANALYSIS_DETAILS, EXPORT_META_DATA, ENUM tables). The content
is a served model: each request is an NVTX push/pop `request` range in domain `tracekit`
holding `preprocess` (host-to-device cudaMemcpyAsync), `inference` (transformer layers of
cudaLaunchKernel calls, each with its kernel on a GPU stream) and `postprocess` (memset,
device-to-host copy, cudaStreamSynchronize). Rows are written with executemany in chunks, so
memory stays flat; no indexes, like nsys.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import sys
import time
from pathlib import Path

CHUNK = 100_000
PID = 31337
VM = 1 << 48
GPID = VM | (PID << 24)
STREAM, CONTEXT, DEVICE = 7, 1, 0

DDL = """
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE EXPORT_META_DATA (name TEXT, value TEXT);
CREATE TABLE ANALYSIS_DETAILS (globalVid INTEGER NOT NULL, duration INTEGER NOT NULL,
    startTime INTEGER NOT NULL, stopTime INTEGER NOT NULL);
CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT NOT NULL,
    name TEXT NOT NULL, nameEnum INTEGER NOT NULL, value TEXT NOT NULL);
CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT,
    busLocation TEXT, isDiscrete INTEGER, l2CacheSize INTEGER, totalMemory INTEGER,
    memoryBandwidth INTEGER, clockRate INTEGER, smCount INTEGER, uuid TEXT, chipName TEXT,
    cuDevice INTEGER, computeMajor INTEGER, computeMinor INTEGER);
CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER);
CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
    rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,
    endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, uint64Value INTEGER,
    int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, int32Value INTEGER,
    floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
    eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL,
    returnValue INTEGER NOT NULL, callchainId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
    deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
    correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,
    shortName INTEGER NOT NULL, mangledName INTEGER, launchType INTEGER, cacheConfig INTEGER,
    registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL,
    gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL,
    blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL,
    dynamicSharedMemory INTEGER NOT NULL, localMemoryPerThread INTEGER NOT NULL,
    localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL, sharedMemoryExecuted INTEGER,
    graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL,
    deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
    correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL,
    deprecatedSrcId INTEGER, srcKind INTEGER, dstKind INTEGER, srcDeviceId INTEGER,
    srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER, migrationCause INTEGER,
    graphNodeId INTEGER, virtualAddress INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL,
    deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
    correlationId INTEGER, globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL,
    graphNodeId INTEGER, memKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INTEGER NOT NULL, end INTEGER NOT NULL,
    deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
    correlationId INTEGER, globalPid INTEGER, syncType INTEGER NOT NULL, eventId INTEGER NOT NULL);
"""

KERNELS = [
    # (demangled, short, ns, grid, block, regs)
    (
        "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn",
        "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn",
        38_000,
        (96, 1, 1),
        (256, 1, 1),
        232,
    ),
    (
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float>"
        "(c10::BFloat16*, c10::BFloat16 const*, int)",
        "cunn_SoftMaxForward",
        9_500,
        (512, 1, 1),
        (128, 1, 1),
        40,
    ),
    (
        "ampere_bf16_s1688gemm_bf16_64x64_sliced1x4_ldg8_f2f_tn",
        "ampere_bf16_s1688gemm_bf16_64x64_sliced1x4_ldg8_f2f_tn",
        21_000,
        (64, 8, 1),
        (128, 1, 1),
        128,
    ),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl"
        "(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}, "
        "at::detail::Array<char*, 2>>"
        "(int, at::native::GeluCUDAKernelImpl, at::detail::Array<char*, 2>)",
        "vectorized_elementwise_kernel",
        6_000,
        (1024, 1, 1),
        (128, 1, 1),
        28,
    ),
]
LAYERS = 24


class Strings:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, s: str) -> int:
        return self.ids.setdefault(s, len(self.ids) + 1)


def generate(out: Path, kernels: int, seed: int = 0) -> dict[str, int]:
    rnd = random.Random(seed)
    if out.exists():
        out.unlink()
    con = sqlite3.connect(out, isolation_level=None)
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")
    con.executescript(DDL)
    con.execute("BEGIN")
    sid = Strings()
    tid_main = VM | (PID << 24) | PID
    launch, memcpy_api, memset_api = (
        sid("cudaLaunchKernel_v7000"),
        sid("cudaMemcpyAsync_v3020"),
        sid("cudaMemsetAsync_v3020"),
    )
    sync_api = sid("cudaStreamSynchronize_v3020")
    kids = [(sid(k[0]), sid(k[1]), sid("_Z" + k[1]), *k[2:]) for k in KERNELS]
    names = {n: sid(n) for n in ("request", "preprocess", "inference", "postprocess", "layer")}
    rows: dict[str, list[tuple[object, ...]]] = {
        t: []
        for t in (
            "NVTX_EVENTS",
            "CUPTI_ACTIVITY_KIND_RUNTIME",
            "CUPTI_ACTIVITY_KIND_KERNEL",
            "CUPTI_ACTIVITY_KIND_MEMCPY",
            "CUPTI_ACTIVITY_KIND_MEMSET",
            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
        )
    }
    counts = dict.fromkeys(rows, 0)

    def flush(force: bool = False) -> None:
        for table, buf in rows.items():
            if buf and (force or len(buf) >= CHUNK):
                marks = ", ".join("?" * len(buf[0]))
                con.executemany(f"INSERT INTO {table} VALUES ({marks})", buf)
                counts[table] += len(buf)
                buf.clear()

    def nvtx(start: int, end: int, name: str) -> None:
        rows["NVTX_EVENTS"].append(
            (
                start,
                end,
                59,
                None,
                None,
                None,
                None,
                tid_main,
                None,
                names[name],
                1,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
            )
        )

    corr = 0
    gpu_t = t = 100_000_000
    rows["NVTX_EVENTS"].append(
        (
            t - 1000,
            None,
            75,
            None,
            None,
            None,
            "tracekit",
            tid_main,
            None,
            None,
            1,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
        )
    )
    made = 0
    while made < kernels:
        req_start = t
        # preprocess: a pageable host-to-device copy
        nvtx(t, t + 60_000, "preprocess")
        corr += 1
        rows["CUPTI_ACTIVITY_KIND_RUNTIME"].append(
            (t + 30_000, t + 42_000, 0, tid_main, corr, memcpy_api, 0, None)
        )
        gpu_t = max(gpu_t, t + 45_000)
        nbytes = rnd.choice((4096, 65536, 262144))
        rows["CUPTI_ACTIVITY_KIND_MEMCPY"].append(
            (
                gpu_t,
                gpu_t + nbytes // 10,
                DEVICE,
                CONTEXT,
                STREAM,
                corr,
                GPID,
                nbytes,
                1,
                None,
                0,
                2,
                0,
                CONTEXT,
                0,
                CONTEXT,
                0,
                None,
                0,
            )
        )
        gpu_t += nbytes // 10
        t += 61_000
        inf_start = t
        for _ in range(LAYERS):
            if made >= kernels:
                break
            layer_start = t
            for k in kids:
                if made >= kernels:
                    break
                corr += 1
                api_s = t + rnd.randint(1_000, 3_000)
                api_e = api_s + rnd.randint(3_000, 6_000)
                rows["CUPTI_ACTIVITY_KIND_RUNTIME"].append(
                    (api_s, api_e, 0, tid_main, corr, launch, 0, None)
                )
                gpu_t = max(gpu_t, api_e + 2_000)
                dur = int(k[3] * rnd.uniform(0.9, 1.2))
                (gx, gy, gz), (bx, by, bz) = k[4], k[5]
                rows["CUPTI_ACTIVITY_KIND_KERNEL"].append(
                    (
                        gpu_t,
                        gpu_t + dur,
                        DEVICE,
                        CONTEXT,
                        STREAM,
                        corr,
                        GPID,
                        k[0],
                        k[1],
                        k[2],
                        1,
                        0,
                        k[6],
                        gx,
                        gy,
                        gz,
                        bx,
                        by,
                        bz,
                        0,
                        16384,
                        0,
                        0,
                        corr,
                        0,
                        None,
                        1,
                    )
                )
                gpu_t += dur + 500
                made += 1
                t = api_e + 500
            nvtx(layer_start, t, "layer")
            t += 200
        nvtx(inf_start, t, "inference")
        # postprocess: memset, device-to-host copy, stream sync that waits for the GPU
        post = t
        for api, table in ((memset_api, "MEMSET"), (memcpy_api, "MEMCPY")):
            corr += 1
            rows["CUPTI_ACTIVITY_KIND_RUNTIME"].append(
                (t + 1_000, t + 6_000, 0, tid_main, corr, api, 0, None)
            )
            gpu_t = max(gpu_t, t + 7_000)
            if table == "MEMSET":
                rows["CUPTI_ACTIVITY_KIND_MEMSET"].append(
                    (gpu_t, gpu_t + 1_500, DEVICE, CONTEXT, STREAM, corr, GPID, 0, 4096, None, 2)
                )
                gpu_t += 1_500
            else:
                rows["CUPTI_ACTIVITY_KIND_MEMCPY"].append(
                    (
                        gpu_t,
                        gpu_t + 2_000,
                        DEVICE,
                        CONTEXT,
                        STREAM,
                        corr,
                        GPID,
                        4096,
                        2,
                        None,
                        2,
                        1,
                        0,
                        CONTEXT,
                        0,
                        CONTEXT,
                        0,
                        None,
                        0,
                    )
                )
                gpu_t += 2_000
            t += 7_000
        corr += 1
        sync_end = max(gpu_t, t + 2_000) + 1_000
        rows["CUPTI_ACTIVITY_KIND_RUNTIME"].append(
            (t, sync_end, 0, tid_main, corr, sync_api, 0, None)
        )
        rows["CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"].append(
            (t + 500, sync_end - 200, DEVICE, CONTEXT, STREAM, corr, GPID, 3, 0)
        )
        t = sync_end + 1_000
        nvtx(post, t, "postprocess")
        nvtx(req_start, t, "request")
        t += rnd.randint(5_000, 50_000)
        flush()
    flush(force=True)
    duration = t + 1_000_000
    meta = [
        ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
        ("EXPORT_PRODUCT_VERSION", "2022.4.2.1"),
        ("EXPORT_SCHEMA_VERSION", "3.0.0"),
        ("EXPORT_LAZY", "true"),
        ("EXPORT_GENERATOR", "tracekit bench/gen_nsys.py"),
    ]
    con.executemany("INSERT INTO EXPORT_META_DATA VALUES (?, ?)", meta)
    con.execute(
        "INSERT INTO ANALYSIS_DETAILS VALUES (?, ?, ?, ?)",
        (VM, duration, 1_000_000_000, 1_000_000_000 + duration),
    )
    con.execute(
        "INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, ?, ?)",
        (1_700_000_000_000_000_000, "2023-11-14T22:13:20", "2023-11-14T22:13:20"),
    )
    con.executemany(
        "INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (?, ?, ?, ?, ?)",
        [(VM, "", "Hostname", 0, "bench-host"), (VM, "", "CudaDriverVersion", 0, "12020")],
    )
    con.execute(
        "INSERT INTO TARGET_INFO_GPU VALUES (0, 0, 'NVIDIA A100-SXM4-80GB', "
        "'0000:07:00.0', 1, 41943040, 85899345920, 2039040000000, 1410000000, 108, "
        "'GPU-00000000-0000-0000-0000-000000000000', 'GA100', 0, 8, 0)"
    )
    con.executemany(
        "INSERT INTO PROCESSES VALUES (?, ?, ?)",
        [(GPID, PID, "python"), (VM | (1 << 24), 1, "systemd")],
    )
    con.executemany(
        "INSERT INTO ThreadNames VALUES (?, ?, ?)",
        [(sid("python"), 10, tid_main), (sid("[NSys]"), 10, tid_main + 5)],
    )
    con.executemany(
        "INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (?, ?, ?)",
        [
            (59, "NvtxPushPopRange", "NVTX PushPop Range"),
            (75, "NvtxDomainCreate", "NVTX domain create"),
        ],
    )
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in sid.ids.items()])
    con.execute("COMMIT")
    con.close()
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", type=int, default=100_000, help="kernel rows to write")
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    counts = generate(args.output, args.kernels, args.seed)
    size = args.output.stat().st_size / 2**20
    print(
        f"Wrote {args.output} ({size:.0f} MiB) in {time.perf_counter() - t0:.1f} s: "
        + ", ".join(f"{k} {v}" for k, v in counts.items()),
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
