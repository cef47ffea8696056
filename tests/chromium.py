"""One headless Chromium for many pages, driven over its DevTools pipe (no extra package).

A `chromium --dump-dom` per page spends ~1.3 of its ~2 CPU seconds starting the browser; the
browser tests open ~45 pages. Here one browser serves a module: each page gets a fresh tab of
the asked window size (Target.createTarget's width and height: what --window-size sets), is
loaded, and a JavaScript expression is read back once its load event has fired. What the page
logged (console calls, uncaught exceptions, the browser's own entries such as CSP refusals)
comes back as "CONSOLE(level): text" lines, as `--enable-logging=stderr` writes them.

Waiting is watched the way tests/procs.py watches a child: a browser whose process tree stops
using CPU for STALL_S fails the test; load alone never does.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.procs import ProgressWatch, kill_tree

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run")  # fmt: skip


class Chromium:
    def __init__(self, profile: Path) -> None:
        exe = shutil.which("chromium")
        assert exe, "chromium is not installed"
        # The pipe protocol: Chromium reads commands from fd 3 and writes replies to fd 4.
        cmd_r, self._cmd_w = os.pipe()
        self._res_r, res_w = os.pipe()

        def onto_3_and_4() -> None:  # in the child, before exec
            os.dup2(cmd_r, 3)
            os.dup2(res_w, 4)

        self.proc = subprocess.Popen(
            [exe, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(3, 4, cmd_r, res_w), preexec_fn=onto_3_and_4,
        )  # fmt: skip
        os.close(cmd_r)
        os.close(res_w)
        self._next_id = 0
        self._buffer = b""
        self._events: list[dict[str, Any]] = []

    def _send(self, method: str, params: dict[str, Any] | None = None,
              session: str | None = None) -> int:  # fmt: skip
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        return self._next_id

    def _read(self) -> dict[str, Any]:
        """The next message, waiting while the browser's process tree makes progress."""
        watch = ProgressWatch(self.proc)
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._res_r], [], [], 1.0)
            if ready:
                chunk = os.read(self._res_r, 1 << 20)
                assert chunk, f"chromium exited ({self.proc.poll()})"
                self._buffer += chunk
            else:
                watch.check()
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)  # type: ignore[no-any-return]

    def call(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None, may_fail: bool = False) -> dict[str, Any]:  # fmt: skip
        """Send a command and wait for its reply ({} for an error it `may_fail` with); events
        read meanwhile are kept."""
        wanted = self._send(method, params, session)
        while True:
            msg = self._read()
            if msg.get("id") == wanted:
                assert may_fail or "error" not in msg, (method, msg["error"])
                return msg.get("result", {})  # type: ignore[no-any-return]
            if "method" in msg:
                self._events.append(msg)

    def _event(self, method: str, session: str) -> dict[str, Any]:
        while True:
            for i, ev in enumerate(self._events):
                if ev["method"] == method and ev.get("sessionId") == session:
                    return self._events.pop(i)
            msg = self._read()
            if "method" in msg:
                self._events.append(msg)

    def evaluate_after_load(self, url: str, width: int, height: int, expression: str
                            ) -> tuple[Any, str]:  # fmt: skip
        """(the expression's value once `url` has loaded in a fresh width x height tab, what
        the page logged)."""
        target = self.call("Target.createTarget",
                           {"url": "about:blank", "width": width, "height": height,
                            "newWindow": True})["targetId"]  # fmt: skip
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=session)
        self.call("Page.navigate", {"url": url}, session=session)
        # The tab's first document (about:blank) may fire its load event after Page.enable:
        # a load counts once the document is the page's and complete (asked while the page
        # replaces about:blank, the question fails: "execution context destroyed").
        loaded = "document.readyState === 'complete' && location.href !== 'about:blank'"
        while True:
            self._event("Page.loadEventFired", session)
            reply = self.call("Runtime.evaluate", {"expression": loaded, "returnByValue": True},
                              session=session, may_fail=True)  # fmt: skip
            if reply.get("result", {}).get("value"):
                break
        value = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                          session=session)["result"].get("value")  # fmt: skip
        self.call("Target.closeTarget", {"targetId": target})
        log = [_log_line(ev) for ev in self._events if ev.get("sessionId") == session]
        self._events = [ev for ev in self._events if ev.get("sessionId") != session]
        return value, "\n".join(line for line in log if line)

    def close(self) -> None:
        try:
            self._send("Browser.close")
            self.proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            kill_tree(self.proc)
        finally:
            os.close(self._cmd_w)
            os.close(self._res_r)


def _log_line(ev: dict[str, Any]) -> str:
    p = ev.get("params", {})
    if ev["method"] == "Runtime.consoleAPICalled":
        text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
        return f"CONSOLE({p.get('type')}): {text}"
    if ev["method"] == "Runtime.exceptionThrown":
        d = p.get("exceptionDetails", {})
        thrown = d.get("exception", {}).get("description", "")
        return f"CONSOLE(error): {d.get('text', '')} {thrown}"
    if ev["method"] == "Log.entryAdded":
        e = p.get("entry", {})
        return f"CONSOLE({e.get('level')}) {e.get('source')}: {e.get('text')}"
    return ""
