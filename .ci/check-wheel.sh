#!/usr/bin/env bash
# Build the wheel, install it in a clean venv, and use its packaged queries and templates.
set -euo pipefail
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m pip wheel -q --no-deps -w "$work/dist" .
python3 -m venv --system-site-packages "$work/venv"
"$work/venv/bin/pip" install -q --no-deps --force-reinstall "$work"/dist/tracekit_profiler-*.whl
cd "$work"
"$work/venv/bin/python" - <<'PY'
import tracekit, pathlib
assert "site-packages" in tracekit.__file__, tracekit.__file__
PY
# Into a file, not `| head`: under pipefail, head closing the pipe early fails the script
# whenever tracekit is still writing (click exits 1 on EPIPE) - a race that failed CI once.
"$work/venv/bin/tracekit" query --list > "$work/queries.txt"
head -3 "$work/queries.txt"
sample="$OLDPWD/sample_traces/torch.pt.trace.json"; [ -f "$sample" ] || sample=""
if [ -n "$sample" ] && "$work/venv/bin/tracekit" report --help >/dev/null 2>&1; then
  cp "$sample" "$work/"
  "$work/venv/bin/tracekit" report "$work/$(basename "$sample")" -o "$work/r.html" --force
  test -s "$work/r.html"
fi
echo "wheel OK"
