"""The package's layers import only downward, and no two modules import each other, directly or
round a circle, counting the imports inside functions (a lazy import may save start-up time; it
may not hide a circle). docs/architecture.md draws the same layers."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tracekit"

# Bottom to top; a module belongs to the layer of its longest listed prefix.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("tracekit.version", "tracekit.config", "tracekit.errors", "tracekit.atomic",
              "tracekit.progress", "tracekit.redact", "tracekit.annotate", "tracekit.slo")),
    ("database", ("tracekit.sqlfile", "tracekit.store.literals", "tracekit.store.db_errors",
                  "tracekit.categories", "tracekit.structures", "tracekit.sql")),
    ("ingest", ("tracekit.ingest",)),
    ("store", ("tracekit.store",)),
    ("engines", ("tracekit.store.traceset", "tracekit.spark", "tracekit.spark_sql",
                 "tracekit.export")),
    ("analysis", ("tracekit.op_work", "tracekit.device_peaks", "tracekit.roofline")),
    ("presentation", ("tracekit.present", "tracekit.present_table", "tracekit.report",
                      "tracekit.compare", "tracekit.output", "tracekit.scrub")),
    ("capture", ("tracekit.capture", "tracekit.doctor")),
    ("api", ("tracekit",)),
    ("commands", ("tracekit.commands", "tracekit.cli", "tracekit.__main__")),
)  # fmt: skip


def layer_of(module: str) -> int:
    best, rank = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            inside = module.startswith(p + ".") and p != "tracekit"  # the root: itself only
            if (module == p or inside) and len(p) > best:
                best, rank = len(p), i
    assert rank >= 0, f"{module} is in no layer: add it to LAYERS and docs/architecture.md"
    return rank


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                lines.update(range(sub.lineno, (sub.end_lineno or sub.lineno) + 1))
    return lines


def imports() -> dict[str, set[tuple[str, int]]]:
    """module -> {(imported tracekit module, line)}; TYPE_CHECKING imports are not imports."""
    mods = modules()
    out: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        skip = _type_checking_lines(tree)
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or node.lineno in skip:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                           for a in node.names]  # fmt: skip
            for t in targets:
                while t not in mods and "." in t:
                    t = t.rpartition(".")[0]
                if t in mods and t != mod and t.startswith("tracekit"):
                    out[mod].add((t, node.lineno))
    return out


def test_every_module_has_a_layer() -> None:
    for mod in modules():
        layer_of(mod)


def test_imports_go_only_downward() -> None:
    upward = sorted(
        f"{mods} imports {t} (line {line}): {LAYERS[layer_of(mods)][0]} -> {LAYERS[layer_of(t)][0]}"
        for mods, targets in imports().items()
        for t, line in targets
        if layer_of(t) > layer_of(mods)
    )
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_no_import_circle() -> None:
    graph = {m: {t for t, _ in ts} for m, ts in imports().items()}
    # A package's __init__ re-exporting its own modules is not a circle with them.
    for m in graph:
        graph[m] = {t for t in graph[m] if not (t != "tracekit" and m.startswith(t + "."))}
    state: dict[str, int] = {}
    stack: list[str] = []
    circles: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph.get(m, ())):
            if state.get(t) == 1:
                circles.append(" -> ".join(stack[stack.index(t) :] + [t]))
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_the_map_draws_the_same_layers() -> None:
    """docs/architecture.md's layer table has the layers of LAYERS, in the same order."""
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    rows = [line.split("|")[1].strip() for line in doc.splitlines() if line.startswith("| ")]
    names = [name for name, _ in LAYERS]
    assert [r for r in rows if r in names] == names


# Commands import the library when they run, by design (cli.py: `tracekit --help` imports none
# of them); the package root loads tracekit.open at first use (PEP 562).
_LAZY_BY_DESIGN = ("tracekit.commands", "tracekit.cli", "tracekit.__main__")


def test_every_lazy_import_says_why() -> None:
    """An import inside a function saves start-up time or a dependency; `# lazy: <why>` on
    its line (or above its group of imports) says which, so none hides a circle unexplained."""
    silent = []
    for mod, path in modules().items():
        if mod == "tracekit" or mod.startswith(_LAZY_BY_DESIGN):
            continue
        source = path.read_text()
        lines = source.splitlines()
        tree = ast.parse(source, str(path))
        skip = _type_checking_lines(tree)
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, ast.ImportFrom | ast.Import) or node.lineno in skip:
                    continue
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names]
                )
                if not any(n.startswith("tracekit") for n in names):
                    continue
                first = node.lineno - 1  # a group of imports shares the comment above it
                while first > 0 and lines[first - 1].lstrip().startswith(("from ", "import ")):
                    first -= 1
                around = lines[max(first - 1, 0) : (node.end_lineno or node.lineno)]
                if not any("# lazy:" in line for line in around):
                    silent.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not silent, "imports inside functions without `# lazy: <why>`:\n" + "\n".join(silent)
