"""Zero-flag stages: with no `--stage` and no `--request`, the capture runner wraps the methods
that serving code is known to be written with, the way `--stage` wraps a named function.

- Hugging Face pipelines: `Pipeline.__call__` is the request; each pipeline class's own
  `preprocess` / `postprocess` and the base `Pipeline.forward` (the model call plus the copies to
  and from the device) are stages preprocess / inference / postprocess.
- Hugging Face generation: a tokenizer's `__call__` is stage tokenize, `generate` stage
  generate with its model forwards as stages prefill (the first) and decode (the others),
  `batch_decode` / `decode` stage detokenize.
- Handler classes (TorchServe style) defined by the script run as `__main__`: a class with
  `preprocess`, `inference` and `postprocess` methods gets them as stages, and its `handle`
  method, if any, as the request.

A stage already open on the thread is not opened again (a pipeline subclass that calls its
parent's `preprocess` is one preprocess range).
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from tracekit.capture.import_hooks import AfterImport, MainNamespace

REQUEST = "request"
HANDLER_STAGES = ("preprocess", "inference", "postprocess")

_open = threading.local()


def _active() -> set[str]:
    names: set[str] | None = getattr(_open, "names", None)
    if names is None:
        names = _open.names = set()
    return names


def wrap(fn: Any, name: str) -> Any:
    """`fn` inside stage `name` (or the request, for REQUEST), unless one is already open."""
    if isinstance(fn, (staticmethod, classmethod)):
        return type(fn)(wrap(fn.__func__, name))
    if not callable(fn) or getattr(fn, "__tracekit_auto__", None) == name:
        return fn

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        active = _active()
        if name in active:
            return fn(*args, **kwargs)
        from tracekit import annotate  # lazy: in the user's process, once a hooked call runs

        active.add(name)
        try:
            with annotate.request() if name == REQUEST else annotate.stage(name):
                return fn(*args, **kwargs)
        finally:
            active.discard(name)

    wrapped.__tracekit_auto__ = name  # type: ignore[attr-defined]
    return wrapped


def _patch(owner: Any, attr: str, name: str) -> bool:
    raw = owner.__dict__.get(attr) if isinstance(owner, type) else None
    if raw is None:
        return False
    setattr(owner, attr, wrap(raw, name))
    return True


def _generate_steps(generate: Callable[..., Any]) -> Callable[..., Any]:
    """generate(), its model forwards as prefill (the first) and decode steps, in stage
    generate. The instance's forward is wrapped for the call only."""

    @functools.wraps(generate)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        from tracekit import annotate  # lazy: in the user's process, once a hooked call runs

        if "generate" in _active() or not hasattr(self, "forward"):
            return generate(self, *args, **kwargs)
        forward = self.forward
        calls = [0]

        def step(*a: Any, **k: Any) -> Any:
            calls[0] += 1
            with annotate.stage("prefill" if calls[0] == 1 else "decode"):
                return forward(*a, **k)

        _active().add("generate")
        self.forward = step
        try:
            with annotate.stage("generate"):
                return generate(self, *args, **kwargs)
        finally:
            _active().discard("generate")
            try:
                del self.forward
            except AttributeError:
                pass

    wrapped.__tracekit_auto__ = "generate"  # type: ignore[attr-defined]
    return wrapped


def _hook_pipelines(module: ModuleType) -> None:
    found = getattr(module, "Pipeline", None)
    if not isinstance(found, type):
        return
    pipeline: type = found
    _patch(pipeline, "__call__", REQUEST)
    _patch(pipeline, "forward", "inference")

    def own_methods(cls: type) -> None:
        _patch(cls, "preprocess", "preprocess")
        _patch(cls, "postprocess", "postprocess")

    previous = pipeline.__dict__.get("__init_subclass__")

    def init_subclass(cls: Any, /, **kwargs: Any) -> None:
        if previous is not None:
            previous.__func__(cls, **kwargs)
        else:
            parent: Any = super(pipeline, cls)
            parent.__init_subclass__(**kwargs)
        own_methods(cls)

    pipeline.__init_subclass__ = classmethod(init_subclass)  # type: ignore[assignment]
    stack: list[type] = list(pipeline.__subclasses__())
    while stack:
        cls = stack.pop()
        own_methods(cls)
        stack.extend(cls.__subclasses__())


def _hook_tokenizers(module: ModuleType) -> None:
    base = getattr(module, "PreTrainedTokenizerBase", None)
    if isinstance(base, type):
        _patch(base, "__call__", "tokenize")
        _patch(base, "batch_decode", "detokenize")
        _patch(base, "decode", "detokenize")


def _hook_generation(module: ModuleType) -> None:
    mixin = getattr(module, "GenerationMixin", None)
    raw = mixin.__dict__.get("generate") if isinstance(mixin, type) else None
    if raw is not None and not hasattr(raw, "__tracekit_auto__"):
        mixin.generate = _generate_steps(raw)  # type: ignore[union-attr]


KNOWN: dict[str, Callable[[ModuleType], None]] = {
    "transformers.pipelines.base": _hook_pipelines,
    "transformers.tokenization_utils_base": _hook_tokenizers,
    "transformers.generation.utils": _hook_generation,
}


def hook_handler_class(value: Any) -> bool:
    """Wrap a handler class's preprocess / inference / postprocess (and handle as request)."""
    if not isinstance(value, type) or not all(
        callable(value.__dict__.get(m)) for m in HANDLER_STAGES
    ):
        return False
    for m in HANDLER_STAGES:
        _patch(value, m, m)
    _patch(value, "handle", REQUEST)
    return True


def main_namespace(globals_: dict[str, Any]) -> MainNamespace:
    """The locals to exec `__main__` with: handler classes are hooked as the script defines
    them."""

    def on_bind(_: str, value: Any) -> Any:
        hook_handler_class(value)
        return value

    return MainNamespace(globals_, on_bind)


class AutoHooks:
    """The known methods, hooked when their modules load (at once if already loaded)."""

    def __init__(self) -> None:
        self._finder: AfterImport | None = None

    def install(self) -> None:
        pending = {}
        for name, hook in KNOWN.items():
            mod = sys.modules.get(name)
            if mod is not None:
                hook(mod)
            else:
                pending[name] = hook
        if pending:
            self._finder = AfterImport(pending)
            self._finder.install()

    def uninstall(self) -> None:
        if self._finder is not None:
            self._finder.uninstall()
