"""`--stage NAME=module:function`: wrap functions in a stage without editing the user's code.

Two mechanisms, both installed by the capture runner before the user's code runs:

- For the script (or `-m` module) run as `__main__` (spelled `__main__:fn` or `<stem>:fn`, e.g.
  `infer:tokenize` for `infer.py`), the code is executed with a namespace that wraps the
  target the moment the script binds its name, so calls made later by the script itself go
  through the stage.
- For any other module, a `sys.meta_path` finder wraps the target right after the module is
  executed, before the importer returns, so `from mod import fn` gets the wrapped function.
  Modules already imported are patched at once.

Targets may be dotted within the module (`model:Encoder.forward`).

`--batch module:function` (with `--request`): each call is a batch, serving the requests whose
objects it receives: every call of the `--request` function gets an id and, while it runs,
each object it was passed is in flight under that id; a `--batch` call whose arguments
include a list or tuple of such objects is `tracekit.batch(those ids)`. A call with none
records no batch and is counted (`BatchHooks.unserved`): the runner explains a target that
never served a request in one line.
"""

from __future__ import annotations

import functools
import itertools
import sys
import threading
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from tracekit.capture.import_hooks import AfterImport, MainNamespace
from tracekit.errors import ConfigError

MAIN = "__main__"
REQUEST = "request"  # StageTarget.stage of a `--request` target
BATCH = "batch"  # StageTarget.stage of a `--batch` target


class _InFlight:
    """Objects passed to running `--request` calls, by id(), with their request ids; and how
    `--batch` calls went (served: with requests in their arguments; unserved: without)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_object: dict[int, str] = {}
        self.counter = itertools.count(1)
        self.enabled = False  # only with a --batch target: requests then carry ids
        self.served = 0
        self.unserved = 0

    def enter(self, objects: Sequence[Any]) -> tuple[str, list[int]]:
        key = str(next(self.counter))
        mine = [id(o) for o in objects if not isinstance(o, int | float | bool | type(None))]
        with self.lock:
            for i in mine:
                self.by_object[i] = key
        return key, mine

    def exit(self, key: str, mine: list[int]) -> None:
        with self.lock:
            for i in mine:
                if self.by_object.get(i) == key:
                    del self.by_object[i]

    def members(self, args: Sequence[Any]) -> list[str]:
        """Request ids of the in-flight objects in the first list/tuple argument holding any."""
        with self.lock:
            for a in args:
                if isinstance(a, list | tuple):
                    keys = [self.by_object[id(x)] for x in a if id(x) in self.by_object]
                    if keys:
                        return list(dict.fromkeys(keys))
        return []


IN_FLIGHT = _InFlight()


@dataclass(frozen=True)
class StageTarget:
    stage: str
    module: str
    attr: str  # dotted path inside the module

    @property
    def spec(self) -> str:
        return f"{self.stage}={self.module}:{self.attr}"

    @property
    def option(self) -> str:
        """The capture option that names this target: `--request mod:fn` or `--stage N=...`."""
        if self.stage in (REQUEST, BATCH):
            return f"--{self.stage} {self.module}:{self.attr}"
        return f"--stage {self.spec}"


def parse_target(text: str) -> StageTarget:
    """Parse `NAME=module:function` (function may be dotted: `Class.method`)."""
    stage, sep, rest = text.partition("=")
    module, colon, attr = rest.partition(":")
    if not sep or not colon or not stage.strip() or not module.strip() or not attr.strip():
        raise ConfigError(f"--stage: expected NAME=module:function, got {text!r}")
    if stage.strip() == "request" or ":" in stage:
        raise ConfigError(f"--stage: {stage!r} is not a usable stage name")
    return StageTarget(stage.strip(), module.strip(), attr.strip())


def parse_request_target(text: str) -> StageTarget:
    """Parse `module:function` of `--request` (function may be dotted)."""
    module, colon, attr = text.partition(":")
    if not colon or not module.strip() or not attr.strip() or "=" in module:
        raise ConfigError(f"--request: expected module:function, got {text!r}")
    return StageTarget(REQUEST, module.strip(), attr.strip())


def parse_batch_target(text: str) -> StageTarget:
    """Parse `module:function` of `--batch` (function may be dotted)."""
    module, colon, attr = text.partition(":")
    if not colon or not module.strip() or not attr.strip() or "=" in module:
        raise ConfigError(f"--batch: expected module:function, got {text!r}")
    return StageTarget(BATCH, module.strip(), attr.strip())


def _wrap_batch(fn: Any) -> Any:
    """A `--batch` function: a tracekit.batch over the in-flight requests it receives."""
    import functools

    from tracekit import annotate  # lazy: in the user's process, once a hooked call runs

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        keys = IN_FLIGHT.members([*args, *kwargs.values()])
        if not keys:
            IN_FLIGHT.unserved += 1
            return fn(*args, **kwargs)
        IN_FLIGHT.served += 1
        with annotate.batch(keys):
            return fn(*args, **kwargs)

    wrapped.__tracekit_stage__ = BATCH  # type: ignore[attr-defined]
    return wrapped


def _wrap(fn: Any, stage_name: str) -> Any:
    if isinstance(fn, (staticmethod, classmethod)):
        return type(fn)(_wrap(fn.__func__, stage_name))
    if getattr(fn, "__tracekit_stage__", None) == stage_name or not callable(fn):
        return fn
    if stage_name == BATCH:
        return _wrap_batch(fn)
    import functools

    # lazy: in the user's process, only once a hooked function runs (nvtx, torch)
    from tracekit import annotate
    from tracekit.capture.call_facts import call_facts, param_names

    names = param_names(fn)

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if stage_name == REQUEST and IN_FLIGHT.enabled:  # served by --batch calls: an id
            key, mine = IN_FLIGHT.enter([*args, *kwargs.values()])
            try:
                with annotate.request(id=key):
                    return fn(*args, **kwargs)
            finally:
                IN_FLIGHT.exit(key, mine)
        rng = annotate.request() if stage_name == REQUEST else annotate.stage(stage_name)
        result = None
        # the facts (a mask's non-zero count is a tensor op) are taken after the range ends: in
        # it they added 0.05-0.15 ms to every stage against the program's own clock
        rng.after = lambda: call_facts(names, args, kwargs, result)
        with rng:
            result = fn(*args, **kwargs)
            return result

    wrapped.__tracekit_stage__ = stage_name  # type: ignore[attr-defined]
    return wrapped


def _patch_attr(obj: Any, path: list[str], stage_name: str) -> bool:
    """Wrap obj.<path> in place; False when the attribute chain does not exist (yet)."""
    for part in path[:-1]:
        obj = getattr(obj, part, None)
        if obj is None:
            return False
    last = path[-1]
    raw = obj.__dict__.get(last) if isinstance(obj, type) else getattr(obj, last, None)
    if raw is None:
        return False
    setattr(obj, last, _wrap(raw, stage_name))
    return True


class StageHooks:
    """Installed targets; `applied` lists what was wrapped, `missing()` what never was."""

    def __init__(self, targets: Sequence[StageTarget], main_aliases: Sequence[str]) -> None:
        self.main_targets = [t for t in targets if t.module in (MAIN, *main_aliases)]
        self.module_targets = [t for t in targets if t not in self.main_targets]
        self.applied: set[StageTarget] = set()
        self._finder: AfterImport | None = None
        IN_FLIGHT.enabled = any(t.stage == BATCH for t in targets)

    def install(self) -> None:
        pending = []
        for t in self.module_targets:
            mod = sys.modules.get(t.module)
            if mod is not None and _patch_attr(mod, t.attr.split("."), t.stage):
                self.applied.add(t)
            else:
                pending.append(t)
        if pending:
            by_module: dict[str, list[StageTarget]] = {}
            for t in pending:
                by_module.setdefault(t.module, []).append(t)
            self._finder = AfterImport(
                {m: functools.partial(self._patch_module, ts) for m, ts in by_module.items()}
            )
            self._finder.install()

    def main_namespace(self, globals_: dict[str, Any]) -> MutableMapping[str, Any] | dict[str, Any]:
        """The locals mapping to exec `__main__` code with (the dict itself if no targets)."""
        if not self.main_targets:
            return globals_
        by_name: dict[str, list[StageTarget]] = {}
        for t in self.main_targets:
            by_name.setdefault(t.attr.split(".")[0], []).append(t)

        def on_bind(key: str, value: Any) -> Any:
            for t in by_name.get(key, ()):
                path = t.attr.split(".")
                if len(path) == 1:
                    value = _wrap(value, t.stage)
                    self.applied.add(t)
                elif _patch_attr(value, path[1:], t.stage):
                    self.applied.add(t)
            return value

        return MainNamespace(globals_, on_bind)

    def _patch_module(self, targets: Sequence[StageTarget], module: ModuleType) -> None:
        for t in targets:
            if _patch_attr(module, t.attr.split("."), t.stage):
                self.applied.add(t)

    def batch_problem(self) -> str | None:
        """Why the --batch targets recorded no batch (None: they did, or there are none)."""
        targets = [t for t in (*self.main_targets, *self.module_targets) if t.stage == BATCH]
        if not targets or IN_FLIGHT.served or not any(t in self.applied for t in targets):
            return None
        what = " ".join(t.option for t in targets)
        if not IN_FLIGHT.unserved:
            return f"{what} was never called: no batches recorded"
        return (
            f"{what} was called {IN_FLIGHT.unserved} times, never with an object a running "
            "--request call received in a list or tuple argument: no batches recorded "
            "(name the function that takes the batch of requests)"
        )

    def missing(self) -> list[StageTarget]:
        return [t for t in (*self.main_targets, *self.module_targets) if t not in self.applied]

    def uninstall(self) -> None:
        if self._finder is not None:
            self._finder.uninstall()
