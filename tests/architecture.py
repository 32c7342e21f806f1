"""The project's architecture rules, checked on a source tree by reading it (``ast``; nothing is imported).

1. No module imports another package's private module (``_name``) or a private name from another package.
2. No runtime import cycle between modules (imports under ``if TYPE_CHECKING:`` are not runtime).
3. The core (every package of ``quotaplane`` but the adapter packages) imports neither Ray, gRPC nor PySpark;
   the adapter ``exporters`` may use a gRPC client but runs no gRPC server, Ray or Spark.
4. No product module is longer than ``MAX_LINES``.
"""

from __future__ import annotations

import ast
from pathlib import Path

MAX_LINES = 800
ADAPTERS = ("services", "actors", "spark", "v1", "exporters")
FORBIDDEN = {"core": ("ray", "grpc", "pyspark"), "exporters": ("ray", "pyspark")}
SERVERS = ("grpc.server", "grpc.aio.server")


def _modules(root: Path, package: str) -> dict[str, Path]:
    """Module name -> file, for every ``.py`` under ``root / package`` (a package is named by its ``__init__``)."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(tree: ast.Module, name: str, is_package: bool, modules: dict[str, Path]) -> list[tuple[str, str, int]]:
    """(module imported, name taken from it or "", line) for each runtime import, relative ones resolved."""
    skip = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for child in node.body
        for n in ast.walk(child)
    }
    base = name if is_package else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, "", node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            parent = base.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (parent, node.module or "") if p)
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                found.append((sub, "", node.lineno) if sub in modules else (module, alias.name, node.lineno))
    return found


def _owner(module: str) -> str:
    """The package a module belongs to: itself for a package, else its parent."""
    return module.rpartition(".")[0]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def violations(root: Path, package: str = "quotaplane") -> list[str]:
    """Every breach of the rules in the package ``root / package``, one line each (empty when it is clean)."""
    modules = _modules(root, package)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    found = []
    for name, path in modules.items():
        source = path.read_text()
        tree = ast.parse(source)
        where = path.relative_to(root)
        if (lines := source.count("\n")) > MAX_LINES:
            found.append(f"{where}: {lines} lines (at most {MAX_LINES})")
        layer = name.split(".")[1] if name.count(".") else ""
        kind = "exporters" if layer == "exporters" else "core" if layer not in ADAPTERS else ""
        for target, taken, line in _imports(tree, name, path.name == "__init__.py", modules):
            if kind and any(target == f or target.startswith(f + ".") for f in FORBIDDEN[kind]):
                found.append(f"{where}:{line}: {kind} module imports {target}")
            if target in modules and target != name:
                graph[name].add(target)
            private = [p for p in target.split(".")[1:] if p.startswith("_") and not p.startswith("__")]
            if target.startswith(package + ".") and private:
                home = target[: target.index("." + private[0])]
                if not (name == home or name.startswith(home + ".")):
                    found.append(f"{where}:{line}: imports private module {target}")
            if taken.startswith("_") and not taken.startswith("__") and target in modules:
                home = target if modules[target].name == "__init__.py" else _owner(target)
                if not (name == home or name.startswith(home + ".")):
                    found.append(f"{where}:{line}: imports private name {taken} from {target}")
        if kind == "exporters":
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and ast.unparse(node) in SERVERS:
                    found.append(f"{where}:{node.lineno}: exporters module runs a gRPC server ({ast.unparse(node)})")
    found = list(dict.fromkeys(found))  # one line per import statement, however many names it takes
    found += [f"import cycle: {' -> '.join(cycle)}" for cycle in _cycles(graph)]
    return found
