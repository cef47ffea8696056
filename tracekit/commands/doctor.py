"""`tracekit doctor`: check nsys, its importer, torch, nvtx and DuckDB's sqlite extension."""

from __future__ import annotations

import sys

import click

MARK = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}


@click.command("doctor")
def command() -> None:
    """Check that this machine can capture and read traces (exit 1 when a trap is found)."""
    from tracekit.doctor import run_checks

    checks = run_checks()
    for c in checks:
        click.echo(f"{MARK[c.status]}  {c.name:<14} {c.detail}")
        if c.fix and c.status != "ok":
            click.echo(f"      {'':<14} fix: {c.fix}")
    failed = [c for c in checks if c.status == "fail"]
    if failed:
        click.echo(f"{len(failed)} problem(s) found", err=True)
        sys.exit(1)
