"""The report's one documented context object and its parts: frozen dataclasses whose fields
carry help text (docs/report.md). Built by context.py, rendered by render.py; no logic here.
Its tables are the one table model of tracekit.present_table, shared with the diff page."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tracekit.present_table import Table
from tracekit.report import charts
from tracekit.report.finding import Finding
from tracekit.report.timeline import Timeline


@dataclass(frozen=True)
class Answer:
    """The headline: end-to-end latency and where it goes."""

    requests: int = field(metadata={"help": "requests in the trace"})
    source: str = field(metadata={"help": "where requests came from (tracekit:request ...)"})
    p50_ms: float | None = field(metadata={"help": "end-to-end latency p50, GPU included"})
    p99_ms: float | None = field(metadata={"help": "end-to-end latency p99, GPU included"})
    mean_ms: float | None = field(metadata={"help": "end-to-end latency mean, GPU included"})
    throughput_rps: float | None = field(metadata={"help": "requests / (last end - first start)"})
    split: tuple[tuple[str, float, float], ...] = field(
        metadata={"help": "(stage, host ms, share of the requests' host time), unattributed last"}
    )
    sentence: str = field(metadata={"help": "the answer in one sentence"})
    stage_source: str = field(
        default="", metadata={"help": "where the stages came from, in words ('' if none)"}
    )
    gpu_sentence: str = field(
        default="", metadata={"help": "GPU busy per device and the top category/kernel"}
    )
    serving: str = field(
        default="",
        metadata={
            "help": "generation (TTFT/TPOT), the host waiting for the GPU inside stages, GPU "
            "time replayed from graphs, in words ('' if none)"
        },
    )
    ttft_p50_ms: float | None = field(
        default=None, metadata={"help": "time to first token p50 (requests with prefill steps)"}
    )
    ttft_p99_ms: float | None = field(default=None, metadata={"help": "time to first token p99"})
    tpot_p50_ms: float | None = field(
        default=None, metadata={"help": "time per output token p50 (decode steps)"}
    )
    tpot_p99_ms: float | None = field(default=None, metadata={"help": "time per output token p99"})
    output_tokens_per_s: float | None = field(
        default=None, metadata={"help": "output tokens per second of request time, mean"}
    )


@dataclass(frozen=True)
class TraceReport:
    """Everything about one trace of the input."""

    trace_id: int = field(metadata={"help": "1..N in input order"})
    title: str = field(metadata={"help": "file name and format"})
    answer: Answer = field(metadata={"help": "headline figures"})
    findings: tuple[Finding, ...] = field(metadata={"help": "rule results, most severe first"})
    split_chart: charts.Chart | None = field(metadata={"help": "stage split bar (the answer)"})
    tables: tuple[Table, ...] = field(metadata={"help": "stage, request, ops, kernels ... tables"})
    figures: Mapping[str, Any] = field(metadata={"help": "the JSON report's trace object"})
    evidence: Mapping[str, str] = field(
        default_factory=dict, metadata={"help": "finding query -> id of the table showing it"}
    )
    timeline: Timeline | None = field(
        default=None, metadata={"help": "the one picture: lanes on one axis (timeline_lanes)"}
    )
    timeline_text: tuple[str, ...] = field(
        default=(), metadata={"help": "its Markdown version: a line per request, per GPU"}
    )


@dataclass(frozen=True)
class RankView:
    """The cross-rank section: several ranks of one job (report/ranks.py)."""

    table: Table = field(metadata={"help": "one row per rank (queries/rank_compare.sql)"})
    sentence: str = field(metadata={"help": "the skew verdict: which rank is late, who waits"})
    late_rank: int | None = field(metadata={"help": "the late rank (None: no rank is late)"})
    figures: Mapping[str, Any] = field(metadata={"help": "the JSON report's 'ranks' object"})


@dataclass(frozen=True)
class ReportContext:
    """The one object the templates receive."""

    title: str = field(metadata={"help": "report title"})
    tracekit_version: str = field(metadata={"help": "tracekit version that wrote the report"})
    inputs: tuple[str, ...] = field(metadata={"help": "input names as given (base names)"})
    traces: tuple[TraceReport, ...] = field(metadata={"help": "one section per trace"})
    environment: tuple[tuple[str, str], ...] = field(
        metadata={"help": "capture.json facts (command, versions, devices); never env values"}
    )
    one_run: str = field(
        default="",
        metadata={"help": "for a capture seen by two tools: that sentence, agreeing or not"},
    )
    ranks: RankView | None = field(
        default=None,
        metadata={"help": "several ranks of one job: the cross-rank section shown first"},
    )
