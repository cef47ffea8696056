"""The two ways the capture runner reaches into the user's code before it runs, shared by
`--stage`/`--request`/`--batch` (stage_hooks.py) and the zero-flag hooks (auto_hooks.py):

- `MainNamespace`: the locals `__main__` is executed with; they write through to its globals
  and hand each value the script binds to `on_bind`, which may return a wrapped value.
- `AfterImport`: a `sys.meta_path` finder that runs a hook on a module right after it is
  executed, before the importer returns (so `from mod import fn` gets what the hook patched).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from types import ModuleType
from typing import Any

ModuleHook = Callable[[ModuleType], None]


class MainNamespace(MutableMapping[str, Any]):
    """Module-level locals of `__main__` that write through to its globals; every binding goes
    through `on_bind(name, value)` first."""

    def __init__(self, globals_: dict[str, Any], on_bind: Callable[[str, Any], Any]) -> None:
        self.g = globals_
        self.on_bind = on_bind

    def __getitem__(self, key: str) -> Any:
        return self.g[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.g[key] = self.on_bind(key, value)

    def __delitem__(self, key: str) -> None:
        del self.g[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.g)

    def __len__(self) -> int:
        return len(self.g)


class AfterImport(importlib.abc.MetaPathFinder):
    """Runs `pending[name]` on module `name` right after it is executed (once)."""

    def __init__(self, pending: dict[str, ModuleHook]) -> None:
        self.pending = pending

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        hook = self.pending.get(fullname)
        if hook is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            hook(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        del self.pending[fullname]
        return spec

    def install(self) -> None:
        sys.meta_path.insert(0, self)

    def uninstall(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
