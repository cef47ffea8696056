"""No finding contradicted by the report's own tables: each finding's claim checked against
the JSON report's tables (issue 35). Returns the contradictions found, as sentences."""

from __future__ import annotations

import re
from typing import Any

# fused attention kernels (FlashAttention, cuDNN/TRT fmha, aiter, SageAttention, paged MFMA)
FUSED_ATTENTION = re.compile(r"flash|fmha|aiter.*attn|sage_fwd|paged_attention|attention_?kernel",
                             re.I)  # fmt: skip
LAUNCH_SHARE = 0.5  # launch API time must explain this share of the idle (findings.py's bar)
CAUSE_SHARE = 0.2  # a cause explains at least this share of the idle
GRAPH_HEAVY = 0.5  # of the kernels replayed from graphs: not launch-bound


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= max(1e-3, 1e-3 * abs(b))


def contradictions(fig: dict[str, Any]) -> list[str]:
    out: list[str] = []
    program = fig.get("program") or {}
    kernels = program.get("kernels") or 0
    replayed = program.get("graph_kernels") or 0
    devices = {str(d["device"]): d for d in fig["gpu"]["per_device"]}
    blocking = fig.get("blocking_calls", [])
    fused = [k["name"] for k in fig["top_kernels"] if FUSED_ATTENTION.search(str(k["name"]))]
    for f in fig["findings"]:
        text = f"{f['title']} {f['evidence']}"
        step = f["next_step"] or ""
        nums = f["numbers"]
        if f["id"].startswith("gpu_low_utilization:"):
            dev = devices.get(f["id"].split(":", 1)[1])
            if dev is None:
                out.append(f"{f['id']}: no such device row")
                continue
            # its numbers are the device table's
            if not (_close(nums["busy_ms"], dev["busy_ms"])
                    and _close(nums["window_ms"], dev["active_ms"])):  # fmt: skip
                out.append(f"{f['id']}: busy/active {nums} not the device row's")
            idle = nums["window_ms"] - nums["busy_ms"]
            if "launch-bound" in text:
                if kernels and replayed >= GRAPH_HEAVY * kernels:
                    out.append(f"{f['id']}: launch-bound but {replayed}/{kernels} replayed")
                if nums["launch_api_ms"] < LAUNCH_SHARE * idle:
                    out.append(f"{f['id']}: launch-bound, launch API {nums['launch_api_ms']} ms "
                               f"of {idle:.3f} ms idle")  # fmt: skip
            m = re.search(r"blocking calls: (.+?) x(\d+) takes ([0-9.]+) ms", text)
            if m and not any(
                b["name"] == m.group(1) and abs(b["total_ms"] - float(m.group(3))) < 5e-4
                for b in blocking
            ):
                out.append(f"{f['id']}: blocking call {m.group(1)} {m.group(3)} ms in no row")
            if "no blocking call" in text:
                big = [b for b in blocking if b["total_ms"] >= CAUSE_SHARE * idle]
                if big:
                    out.append(f"{f['id']}: 'no blocking call' beside {big[0]['name']} "
                               f"{big[0]['total_ms']} ms")  # fmt: skip
        if f["id"].startswith("exposed_communication:"):
            dev = devices.get(f["id"].split(":", 1)[1]) or {}
            for k in ("communication_ms", "exposed_communication_ms"):
                if not _close(nums[k], dev.get(k) or 0.0):
                    out.append(f"{f['id']}: {k} {nums[k]} not the device row's {dev.get(k)}")
        if f["id"].startswith("memcpy_hot_loop:"):
            row = next((r for r in fig["memcpy"] if r["direction"] == f["id"].split(":")[1]), {})
            if not (_close(nums["total_ms"], row.get("total_ms") or 0.0)
                    and nums["count"] == row.get("count")):  # fmt: skip
                out.append(f"{f['id']}: {nums} not the memcpy row {row}")
        if f["id"].startswith("attention_dominated:"):
            dev = devices.get(f["id"].split(":", 1)[1]) or {}
            cat = (dev.get("by_category") or {}).get("attention")
            if cat is None or not _close(nums["attention_ms"], cat):
                out.append(f"{f['id']}: attention {nums['attention_ms']} ms vs by_category {cat}")
        if f["id"] == "tail_latency":
            stages = {r["stage"]: r for r in fig["stages"]}
            for key, ratio in nums.items():
                row = stages.get(key.split(":", 1)[1], {})
                if not row.get("p50_ms") or abs(row["p99_ms"] / row["p50_ms"] - ratio) > 1e-3:
                    out.append(f"tail_latency: {key} {ratio} not the stage row's p99/p50")
        if ("CUDA graphs" in step or "reduce-overhead" in step) and kernels and replayed:
            out.append(f"{f['id']}: advises CUDA graphs, {replayed} kernels already replayed")
        if re.search(r"use fused attention|flashattention", step, re.I) and fused:
            out.append(f"{f['id']}: advises fused attention beside {fused[0][:60]}")
        if "bucket_cap_mb" in step and program.get("kind") != "training":
            out.append(f"{f['id']}: DDP advice for a {program.get('kind')} program")
    return out
