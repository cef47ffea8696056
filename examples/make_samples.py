"""Regenerate sample_traces/ from a real `tracekit capture` of examples/infer.py (`make samples`).

Captures the example on CPU under nsys (when on PATH) and torch.profiler, scrubs the traces
(no environment, command lines or host names) and copies them, with the capture's attribute
sidecar and a trimmed capture.json, into sample_traces/. The copies form a run folder, so
`tracekit report sample_traces` finds the stage attributes too.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "sample_traces"
REQUESTS = "12"


def tracekit(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "tracekit", *args], check=True, cwd=REPO)


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        tracekit("capture", "-o", str(run), "--", sys.executable, "examples/infer.py",
                 "--requests", REQUESTS, "--max-batch", "4")  # fmt: skip
        OUT.mkdir(exist_ok=True)
        for old in OUT.glob("*"):
            if old.is_file() and old.name != "README.md":
                old.unlink()
        manifest = json.loads((run / "capture.json").read_text())
        kept = []
        for f in manifest["files"]:
            src = run / f["path"]
            if f["role"] in ("nsys-sqlite", "torch-trace"):
                tracekit("scrub", "--force", str(src), str(OUT / src.name))
            elif f["role"] == "attributes":
                (OUT / "attributes").mkdir(exist_ok=True)
                shutil.copyfile(src, OUT / f["path"])
            else:
                continue  # the .nsys-rep is large and holds the unscrubbed environment
            f["bytes"] = (OUT / f["path"]).stat().st_size
            kept.append(f)
        manifest.update(files=kept, cwd=".", command=["python", "examples/infer.py",
                        "--requests", REQUESTS, "--max-batch", "4"])  # fmt: skip
        for run_record in manifest.get("runs", []):
            run_record["argv"] = ["..."]
        (OUT / "capture.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    print(f"wrote {OUT}: " + ", ".join(sorted(p.name for p in OUT.iterdir())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
