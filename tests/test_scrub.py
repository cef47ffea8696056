"""`tracekit scrub`: planted secrets are gone from OUT's bytes; events are intact; IN untouched."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests import procs
from tests.conftest import REPO, shared_traces
from tracekit.cli import main

SECRETS = (b"sk-test-123", b"tk-xyz")
NSYS = shared_traces("nsys_2022.4_cpu_nvtx_osrt_example.sqlite")
KINETO = shared_traces("kineto_h100_bert_*.json.gz")
needs_nsys_ingest = pytest.mark.skipif(
    not (REPO / "tracekit" / "ingest" / "nsys.py").exists(), reason="nsys ingestor not written"
)


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout, r.stderr


def events_of(path: Path) -> list[tuple[str, int]]:
    query = "SELECT kind, count(*) FROM events GROUP BY 1 ORDER BY 1"
    code, out, err = run("sql", str(path), query, "--format", "csv")
    assert code == 0, err
    return [(r.split(",")[0], int(r.split(",")[1])) for r in out.splitlines()[1:]]


def fingerprint(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def plant_nsys(path: Path) -> str:
    """Secrets where nsys keeps them: a process environment block and DeviceEnvironment."""
    shutil.copyfile(NSYS[0], path)
    path.chmod(0o644)
    con = sqlite3.connect(path)
    # (SQL LIKE and || stop at the NULs inside an environment block: edit it in Python.)
    sid, value = next(
        r for r in con.execute("SELECT id, value FROM StringIds") if "\x00PATH=" in r[1]
    )
    value += "\x00AWS_SECRET_ACCESS_KEY=sk-test-123\x00SECRET_TOKEN=tk-xyz"
    con.execute("UPDATE StringIds SET value = ? WHERE id = ?", (value, sid))
    con.execute(
        "UPDATE TARGET_INFO_SYSTEM_ENV SET value = value || ' SECRET_TOKEN=tk-xyz' "
        "WHERE name = 'DeviceEnvironment'"
    )
    host = "gpu-node-secret-42"
    con.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = ? WHERE name = 'Hostname'", (host,))
    con.commit()
    con.close()
    return host


@needs_nsys_ingest
@pytest.mark.skipif(not NSYS, reason="no shared nsys export")
def test_scrub_nsys_export(tmp_path: Path):
    src = tmp_path / "in.sqlite"
    host = plant_nsys(src)
    for s in SECRETS:
        assert s in src.read_bytes()
    before = fingerprint(src)
    out = tmp_path / "out" / "shared.sqlite"
    code, stdout, err = run("scrub", str(src), str(out))
    assert code == 0, err
    assert stdout.startswith(f"Wrote {out}")
    data = out.read_bytes()
    for s in SECRETS:
        assert s not in data
    assert b"CONTAINER_NAME=" not in data and b"PATH=/" not in data
    assert host.encode() not in data
    assert fingerprint(src) == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["shared.sqlite"]  # no temp left
    assert events_of(out) == events_of(src)
    # Refuses to overwrite without --force; --keep-env keeps the environment, never a
    # secret-shaped value in it (a secret-named key's value).
    assert run("scrub", str(src), str(out))[0] == 2
    code, _, err = run("scrub", str(src), str(out), "--force", "--keep-env")
    assert code == 0, err
    assert b"\x00DEBIAN_FRONTEND=noninteractive" in out.read_bytes()
    assert b"sk-test-123" not in out.read_bytes()
    assert fingerprint(src) == before


def plant_kineto(path: Path) -> dict[str, int]:
    doc = json.loads(gzip.decompress(KINETO[0].read_bytes()))
    doc["metadata"] = {"env": {"AWS_SECRET_ACCESS_KEY": "sk-test-123"}, "model": "bert"}
    doc["distributedInfo"] = {"rank": 0, "hostname": "gpu-node-secret-42", "world_size": 1}
    doc["traceName"] = "/home/alice/tk-xyz/run/trace.json"
    doc["command_line"] = "python serve.py --token tk-xyz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return {"events": len(doc["traceEvents"])}


@pytest.mark.skipif(not KINETO, reason="no shared Kineto trace")
def test_scrub_kineto_json(tmp_path: Path):
    src = tmp_path / "in.json.gz"
    plant_kineto(src)
    before = fingerprint(src)
    out = tmp_path / "shared.json.gz"
    code, _, err = run("scrub", str(src), str(out))
    assert code == 0, err
    data = gzip.decompress(out.read_bytes())
    for s in (*SECRETS, b"gpu-node-secret-42", b"alice"):
        assert s not in data, s
    doc = json.loads(data)
    assert doc["metadata"] == {"model": "bert"}
    assert doc["distributedInfo"] == {"rank": 0, "world_size": 1}
    assert doc["traceName"] == "trace.json"
    assert fingerprint(src) == before
    assert events_of(out) == events_of(src)
    code, _, _ = run("scrub", str(src), str(tmp_path / "k.json.gz"), "--keep-hosts")
    assert code == 0
    assert b"gpu-node-secret-42" in gzip.decompress((tmp_path / "k.json.gz").read_bytes())


def test_scrub_bad_input(tmp_path: Path):
    src = tmp_path / "x.json"
    src.write_bytes(b"not json")
    code, _, err = run("scrub", str(src), str(tmp_path / "o.json"))
    assert code == 2 and err.startswith("Error: ") and "x.json" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]


@pytest.mark.nsys
@pytest.mark.skipif(
    not shutil.which("nsys") or os.environ.get("TRACEKIT_RUN_NSYS") != "1",
    reason="real nsys capture: set TRACEKIT_RUN_NSYS=1 (nsys 2022.4 here can hang on shutdown)",
)
def test_scrub_real_capture(tmp_path: Path):
    env = {**os.environ, "SECRET_TOKEN": "tk-xyz", "AWS_SECRET_ACCESS_KEY": "sk-test-123"}
    rep = tmp_path / "cap"
    try:
        procs.run(
            ["nsys", "profile", "-t", "osrt", "-o", str(rep), "python", "-c", "pass"],
            env=env,
            capture_output=True,
            check=True,
        )
        export = ["nsys", "export", "--type", "sqlite", "-o", f"{rep}.sqlite", f"{rep}.nsys-rep"]
        procs.run(export, capture_output=True, check=True)
    except (subprocess.SubprocessError, OSError) as e:
        pytest.skip(f"nsys could not capture here: {e}")
    src = Path(f"{rep}.sqlite")
    assert b"tk-xyz" in src.read_bytes()
    out = tmp_path / "shared.sqlite"
    assert run("scrub", str(src), str(out))[0] == 0
    for s in SECRETS:
        assert s not in out.read_bytes()
