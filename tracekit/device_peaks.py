"""Peak compute and memory bandwidth per accelerator: the roofs of the roofline.

The rows are data (tracekit/device_peaks.toml); [[device]] tables of a tracekit.toml in the
working directory come first, so users add or correct a device without editing tracekit. The
device name a trace records picks the first row whose `match` regex finds it.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from tracekit.config import read_config
from tracekit.errors import ConfigError

DTYPE_KEYS = ("fp32", "tf32", "bf16", "fp16", "fp8")


@dataclass(frozen=True)
class DevicePeak:
    """One accelerator's roofs."""

    name: str
    match: str
    memory_gb_s: float
    tflops: tuple[tuple[str, float], ...]  # (dtype, dense TFLOP/s), fp32 always present
    source: str  # the file the row came from

    def peak_tflops(self, dtype: str) -> float:
        """The dtype's peak; fp32's for a dtype without its own (int, fp64, unknown)."""
        table = dict(self.tflops)
        return table.get(dtype) or table["fp32"]


def parse_devices(text: str, source: str) -> list[DevicePeak]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{source}: not valid TOML ({e})") from None
    tables = data.get("device", [])
    if not isinstance(tables, list):
        raise ConfigError(f"{source}: [[device]] must be an array of tables")
    out = []
    for i, t in enumerate(tables, 1):
        if not isinstance(t, dict):
            raise ConfigError(f"{source}: device #{i} must be a table")
        name, match = t.get("name"), t.get("match")
        if not isinstance(name, str) or not isinstance(match, str) or not match:
            raise ConfigError(f"{source}: device #{i} needs a name and a match regex")
        try:
            re.compile(match)
        except re.error as e:
            raise ConfigError(f"{source}: device {name!r}: bad regular expression ({e})") from None
        nums: dict[str, Any] = {k: t[k] for k in ("memory_gb_s", *DTYPE_KEYS) if k in t}
        bad = [k for k, v in nums.items() if not isinstance(v, (int, float)) or v <= 0]
        if bad or "memory_gb_s" not in nums or "fp32" not in nums:
            raise ConfigError(
                f"{source}: device {name!r}: memory_gb_s and fp32 must be positive numbers"
                + (f" (bad: {', '.join(bad)})" if bad else "")
            )
        tflops = tuple((k, float(nums[k])) for k in DTYPE_KEYS if k in nums)
        out.append(DevicePeak(name, match, float(nums["memory_gb_s"]), tflops, source))
    return out


@cache
def builtin_devices() -> tuple[DevicePeak, ...]:
    text = files("tracekit").joinpath("device_peaks.toml").read_text()
    return tuple(parse_devices(text, "tracekit/device_peaks.toml"))


def user_devices(directory: Path | None = None) -> list[DevicePeak]:
    found = read_config(directory)
    return parse_devices(*found) if found else []


def find_device(name: str | None, directory: Path | None = None) -> DevicePeak | None:
    """The first row (user rows first) whose regex matches the recorded device name."""
    if not name:
        return None
    for row in (*user_devices(directory), *builtin_devices()):
        if re.search(row.match, name, re.IGNORECASE):
            return row
    return None
