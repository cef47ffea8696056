"""Stage and request annotations: `tracekit.stage("preprocess")` and `tracekit.request()`.

Both work as context managers and as decorators::

    with tracekit.request(batch=1):
        with tracekit.stage("preprocess") as s:
            ids = tokenize(text)
            s.set(seq_len=len(ids))

    @tracekit.stage("postprocess")
    def decode(logits): ...

Each range is emitted three ways, each only when something listens:

- an NVTX push/pop range in domain ``tracekit`` with message ``<name>`` (``request`` for
  requests), so nsys shows ``tracekit:preprocess``. Only when an NVTX injection library is
  loaded (``NVTX_INJECTION64_PATH`` is set, as nsys does for the processes it profiles);
  ``TRACEKIT_NVTX=1``/``0`` forces it on/off.
- a torch.profiler ``record_function("tracekit:<name>")``, only when torch is already imported
  and a profiler is enabled. torch is never imported here.
- one JSON line per range in ``$TRACEKIT_ATTRIBUTES_DIR/attributes-<pid>.jsonl`` when that
  variable is set (`tracekit capture` sets it). Format: docs/capture.md.

With none of them active a stage (enter + exit) costs about 2 µs on the 2-core CI VM
(bench/bench_annotate.py: 1.9 µs bare, 2.2 µs NVTX on, 12 µs sidecar, 20 µs profiler).

A torch.profiler with a schedule advances once per request: `bind_profiler(prof)` (the capture
runner calls it) makes the exit of each outermost `request()` call `prof.step()`.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "batch",
    "bind_profiler",
    "bound_profiler",
    "flush",
    "request",
    "set_warmup",
    "stage",
]

DOMAIN = "tracekit"
PREFIX = "tracekit:"
ATTRIBUTES_ENV = "TRACEKIT_ATTRIBUTES_DIR"
REQUEST = "request"
BATCH = "batch"
NVTX_CACHED_MESSAGES = 4096  # message handles kept; request[id]/batch[ids] names are mostly unique

F = TypeVar("F", bound=Callable[..., Any])

_perf_ns = time.perf_counter_ns
_modules = sys.modules
_VALID_NAMES: set[str] = set()
_native_id = threading.get_native_id


class _State:
    """Process-wide, lazily initialised switches and handles (one instance: `_S`)."""

    def __init__(self) -> None:
        self.ready = False
        self.nvtx_push: Callable[[str], None] | None = None
        self.nvtx_pop: Callable[[], None] | None = None
        self.sidecar: _Sidecar | None = None
        self.torch: Any = None  # the torch module once seen in sys.modules
        self.record_function: Any = None
        self.profiler_enabled: Callable[[], bool] | None = None
        self.cuda_ok: bool | None = None
        self.profiler: Any = None
        self.step_lock = threading.Lock()
        self.ordinals: dict[tuple[int, str], int] = {}
        self.depth = threading.local()
        # Warm-up (`set_warmup`): the first N outermost requests, and every range inside
        # them, emit nothing; `on_warmup_done` runs at the exit of the last one.
        self.warmup_left = 0
        self.mute_depth = 0
        self.on_warmup_done: Callable[[], None] | None = None

    def setup(self) -> None:
        with _SETUP_LOCK:  # threads may open their first ranges at once
            if not self.ready:
                self._setup()
                self.ready = True  # last: another thread may read the handles once it is set

    def _setup(self) -> None:
        forced = os.environ.get("TRACEKIT_NVTX")
        injected = bool(os.environ.get("NVTX_INJECTION64_PATH"))
        want_nvtx = forced == "1" or (forced != "0" and injected)
        if want_nvtx:
            self.nvtx_push, self.nvtx_pop = _nvtx_handles()
        directory = os.environ.get(ATTRIBUTES_ENV)
        if directory:
            self.sidecar = _Sidecar(Path(directory))

    def find_torch(self) -> Any:
        torch = sys.modules.get("torch")
        if torch is None or not hasattr(torch, "autograd"):
            return None  # not imported, or still importing
        native = torch.autograd._profiler_enabled
        module = torch.autograd.profiler
        if hasattr(module, "_is_profiler_enabled"):
            # a profiler started with profile_all_threads (tracekit capture's) is on for every
            # thread, yet _profiler_enabled() says False on each: the module flag says it
            self.profiler_enabled = lambda: module._is_profiler_enabled or native()
        else:
            self.profiler_enabled = native
        self.record_function = torch.autograd.profiler.record_function
        self.torch = torch  # last: other threads test it, then use the two above
        return torch


_SETUP_LOCK = threading.Lock()
_S = _State()


def _nvtx_handles() -> tuple[Callable[[str], None] | None, Callable[[], None] | None]:
    """Push/pop callables for the tracekit domain, with domain and message handles cached."""
    try:
        import nvtx
    except ImportError:
        return None, None
    try:  # fast path: cached domain handle and event attributes (nvtx's own C functions)
        from nvtx._lib.lib import pop_range as _pop
        from nvtx._lib.lib import push_range as _push

        domain = nvtx.get_domain(DOMAIN)
        handle = domain.handle
        attrs: dict[str, Any] = {}

        def push(message: str) -> None:
            a = attrs.get(message)
            if a is None:
                a = domain.get_event_attributes(message=message)
                if len(attrs) < NVTX_CACHED_MESSAGES:
                    attrs[message] = a
            _push(a, handle)

        def pop() -> None:
            _pop(handle)

        return push, pop
    except (ImportError, AttributeError):  # another nvtx layout: the public API
        return (
            lambda message: nvtx.push_range(message, domain=DOMAIN),
            lambda: nvtx.pop_range(domain=DOMAIN),
        )


class _Sidecar:
    """Buffered JSON-lines writer, one file per process (re-opened after a fork).

    Records are kept as dicts and serialised in batches, off the ranges' critical path."""

    BATCH = 2048

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.pid = os.getpid()
        self.pending: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        with self.lock:  # (threads write at once: an append racing flush's swap was lost)
            if record["pid"] != self.pid:  # forked child: drop the parent's buffer
                self.pid, self.pending = record["pid"], []
            self.pending.append(record)
            full = len(self.pending) >= self.BATCH
        if full:
            self.flush()

    def flush(self) -> None:
        with self.lock:
            if not self.pending or self.pid != os.getpid():
                return
            batch, self.pending = self.pending, []
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.directory / f"attributes-{self.pid}.jsonl"
            # 0644 at most: nsys runs the program with umask 0 (open() would make it 0666)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            with open(fd, "a", encoding="utf-8") as fh:
                for r in batch:
                    fh.write(json.dumps(r, default=str, separators=(",", ":")) + "\n")


def flush() -> None:
    """Write buffered attribute records to disk (also done at interpreter exit)."""
    if _S.sidecar is not None:
        _S.sidecar.flush()


atexit.register(flush)


def bind_profiler(prof: Any) -> None:
    """Make each outermost `request()` exit call `prof.step()` (None unbinds).

    The capture runner binds its torch.profiler so a schedule (wait/warmup/active) counts
    requests without edits to the user's script. Users running their own scheduled profiler
    may bind it too, instead of calling `prof.step()` themselves.
    """
    _S.profiler = prof


def bound_profiler() -> Any:
    """The profiler bound by `bind_profiler`, or None."""
    return _S.profiler


def set_warmup(n: int, on_done: Callable[[], None] | None = None) -> None:
    """Mute the next `n` outermost requests (warm-up): they and every range opened inside them
    emit nothing (no NVTX, no record_function, no sidecar line, no profiler step). `on_done`
    runs at the exit of the last one (the capture runner starts its profiler there); at once
    when `n` is 0."""
    _S.warmup_left = max(n, 0)
    _S.on_warmup_done = on_done
    if n <= 0 and on_done is not None:
        on_done()


def warmup_left() -> int:
    """Warm-up requests still to come (0 when none was asked for or all were seen)."""
    return _S.warmup_left


_MUTED = ("muted",)


def _recording(prof: Any) -> bool | None:
    """Whether the bound profiler keeps what happens now (None: no profiler bound)."""
    if prof is None:
        return None
    action = getattr(prof, "current_action", None)
    name = getattr(action, "name", "")
    return name in ("RECORD", "RECORD_AND_SAVE") if name else None


class _Range:
    __slots__ = ("name", "sync", "attrs", "kind", "after", "_stack")

    def __init__(self, name: str, kind: str, sync: bool, attrs: dict[str, Any]) -> None:
        self.name = name
        self.kind = kind
        self.sync = sync
        self.attrs = attrs
        # attributes computed once the range has ended (so their cost stays outside it), for
        # the record of a capture; not called for muted (warm-up) ranges
        self.after: Callable[[], dict[str, Any]] | None = None
        self._stack: list[tuple[Any, int, dict[str, Any], Any]] = []

    def set(self, **attrs: Any) -> None:
        """Add attributes to the range now open (e.g. seq_len, known once tokenized)."""
        if self._stack:
            self._stack[-1][2].update(attrs)
        else:
            self.attrs.update(attrs)

    def __enter__(self) -> _Range:
        s = _S
        if not s.ready:
            s.setup()
        # (requests with an id overlap on many threads: warm-up and profiler steps count the
        # plain, sequential `request()` only; a served request's warm-up is dropped at analysis)
        if s.mute_depth or (s.warmup_left and self.name == REQUEST):
            s.mute_depth += 1
            self._stack.append((None, 0, self.attrs, _MUTED))
            return self
        info = None
        if s.sidecar is not None:
            # the bookkeeping comes before the range opens so that it is not timed as the stage
            if "[" in self.name:  # request[id]/batch[ids]: unique names, matched by start
                ordinal = 0
            else:
                key = (_native_id(), self.name)
                ordinal = s.ordinals.get(key, 0)
                s.ordinals[key] = ordinal + 1
            prof = s.profiler
            extra = None if prof is None else (_recording(prof), getattr(prof, "step_num", None))
            info = (ordinal, extra)
        if s.profiler is not None and self.name == REQUEST:
            d = s.depth
            d.n = getattr(d, "n", 0) + 1
        torch = s.torch
        if torch is None and "torch" in _modules:
            torch = s.find_torch()
        record = torch is not None and s.profiler_enabled()  # type: ignore[misc]
        attrs = dict(self.attrs)
        if self.sync:
            _synchronize()
        if s.nvtx_push is not None:
            s.nvtx_push(self.name)
        handle = None
        if record:
            handle = s.record_function(PREFIX + self.name)
            handle.__enter__()
        self._stack.append((handle, 0 if info is None else _perf_ns(), attrs, info))
        return self

    def __exit__(self, *exc: object) -> None:
        s = _S
        handle, start, attrs, info = self._stack.pop()
        if info is _MUTED:
            s.mute_depth -= 1
            if s.mute_depth == 0:
                s.warmup_left -= 1
                if s.warmup_left == 0 and s.on_warmup_done is not None:
                    done, s.on_warmup_done = s.on_warmup_done, None
                    done()
            return
        if self.sync:
            _synchronize()
        end = _perf_ns() if info is not None else 0
        if handle is not None:
            handle.__exit__(None, None, None)
        if s.nvtx_pop is not None:
            s.nvtx_pop()
        if info is not None and s.sidecar is not None:
            if self.after is not None:
                attrs.update(self.after())
            self._record(start, end, attrs, info)
        if s.profiler is not None and self.name == REQUEST:
            d = s.depth
            d.n = getattr(d, "n", 1) - 1
            if d.n == 0:
                with s.step_lock:
                    s.profiler.step()

    def _record(self, start: int, end: int, attrs: dict[str, Any], info: Any) -> None:
        ordinal, extra = info
        record = {
            "name": self.name,
            "kind": self.kind,
            "pid": os.getpid(),
            "tid": _native_id(),
            "ordinal": ordinal,
            "start_ns": start,
            "end_ns": end,
            "attrs": attrs,
        }
        if extra is not None:
            record["torch_recorded"], record["step"] = extra
        _S.sidecar.write(record)  # type: ignore[union-attr]

    def __call__(self, fn: F) -> F:
        name, kind, sync, attrs = self.name, self.kind, self.sync, self.attrs

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with _Range(name, kind, sync, dict(attrs)):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def _synchronize() -> None:
    s = _S
    torch = s.torch if s.torch is not None else s.find_torch()
    if torch is None:
        return
    if s.cuda_ok is None:
        s.cuda_ok = bool(torch.cuda.is_available())
    if s.cuda_ok:
        torch.cuda.synchronize()


def stage(name: str, sync: bool = False, **attrs: Any) -> _Range:
    """A stage range `tracekit:<name>`: context manager or decorator.

    `attrs` (batch size, seq len, padded tokens ...) go to the capture's attribute sidecar;
    more can be added inside the range with `.set(...)`.

    `sync=True` calls `torch.cuda.synchronize()` at entry and exit when CUDA is available, so
    the range's host time includes the GPU work queued inside it. The cost: the host waits for
    every kernel queued before the stage and inside it, which removes CPU/GPU overlap and
    usually makes the whole request slower; use it to measure, not in production.
    """
    if name not in _VALID_NAMES:
        if (
            not isinstance(name, str)
            or not name
            or name == REQUEST
            or ":" in name
            or name.startswith((REQUEST + "[", BATCH + "["))
        ):
            raise ValueError(
                "stage name must be a non-empty str without ':', not 'request' nor "
                f"'request[...]'/'batch[...]': {name!r}"
            )
        _VALID_NAMES.add(name)
    return _Range(name, "stage", sync, attrs)


def _request_key(value: object) -> str:
    """A request id as it travels in range names: str(value), no ',', '[' or ']'."""
    key = str(value)
    if not key or any(c in key for c in ",[]") or key != key.strip():
        raise ValueError(
            f"request id must print as a non-empty str without ',', '[', ']' or edge "
            f"spaces: {value!r}"
        )
    return key


def request(id: object = None, **attrs: Any) -> _Range:  # noqa: A002  (the public name)
    """A request range `tracekit:request`: context manager or decorator.

    Without `id` requests are sequential: the exit of an outermost one advances a profiler
    bound with `bind_profiler`, and `set_warmup` counts them.

    With `id` (an int or str; no ',', '[' or ']') the range is `tracekit:request[<id>]`: a
    served request that may overlap others on any thread or process, and that a
    `batch([...])` naming the same id serves. Such requests neither step a bound profiler
    nor count for `set_warmup` (their warm-up is dropped at analysis: `--warmup`).
    """
    if id is None:
        return _Range(REQUEST, REQUEST, False, attrs)
    return _Range(f"{REQUEST}[{_request_key(id)}]", REQUEST, False, attrs)


def batch(request_ids: Any, **attrs: Any) -> _Range:
    """A batch range `tracekit:batch[<id>,<id>,...]`: context manager (or decorator for a
    fixed set) on any thread, serving the requests with those ids (`request(id=...)`).

    Stages inside it belong to each of its requests: a request's waterfall is its queue
    (arrival -> its batch starts), the batch's stages, and its hand-back (batch end ->
    response). `attrs` (padded tokens, ...) go to the capture's attribute sidecar.
    """
    keys = [_request_key(r) for r in request_ids]
    if not keys:
        raise ValueError("tracekit.batch() needs at least one request id")
    attrs.setdefault("size", len(keys))
    return _Range(f"{BATCH}[{','.join(keys)}]", BATCH, False, attrs)


def _reset_for_tests() -> None:
    """Forget cached switches so a changed environment is read again (tests only)."""
    flush()
    global _S
    profiler = _S.profiler
    _S = _State()
    _S.profiler = profiler
