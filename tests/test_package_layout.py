"""The package's shape: no import cycle (an import hidden in a function, or in a package
``__init__`` run on the way to a module, counts too), package
``__init__`` files that only hand names on, contracts defined once, modules of a readable size."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "jupyter_gpuburst"
ROOT = PACKAGE.parent
MAX_LINES = 600
# Jupyter finds its extension hooks on the package itself
JUPYTER_HOOKS = {"_jupyter_server_extension_points", "_jupyter_labextension_paths"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    found = {module_name(p): p for p in PACKAGE.rglob("*.py") if "labextension" not in p.parts}
    assert "jupyter_gpuburst.core.keys" in found, f"no package at {PACKAGE}"
    return found


def imports(path: Path, known: set[str], name: str | None = None) -> set[str]:
    """Our modules that ``path`` imports, at the top or inside a function."""
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        found.update(t for t in targets if t in known and t != name)
    # importing a module first runs each package __init__ above it that is not yet running (those
    # above the importer are): a package __init__ that imports a module of its own is on the path
    found.update(p for t in list(found) for p in _packages_above(t) if p in known and p != name and p not in _packages_above(name))
    return found


def _packages_above(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_module_imports_itself_back_even_from_inside_a_function():
    known = modules()
    graph = {name: imports(path, set(known)) for name, path in known.items()}
    assert find_cycle(graph) is None


def test_the_cycle_finder_finds_a_cycle_through_a_function_local_import(tmp_path):
    a = tmp_path / "a.py"
    a.write_text("import c\n\n\ndef f():\n    from b import x\n")
    assert imports(a, {"b", "c"}, name="a") == {"b", "c"}
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    # a module of a package whose __init__ imports another of its modules goes through the __init__
    d = tmp_path / "d.py"
    d.write_text("from p.light import y\n")
    assert imports(d, {"p", "p.light", "p.heavy"}, name="d") == {"p", "p.light"}
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_package_init_files_only_hand_names_on():
    offenders = []
    for path in PACKAGE.rglob("__init__.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                continue
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue  # the docstring
            if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) and t.id.isupper() or t.id == "__all__" for t in node.targets):
                continue  # __all__ and constants handed on
            if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["__getattr__"]:
                continue  # names handed on when first read (core/lazy.py)
            if isinstance(node, ast.Try) and all(isinstance(n, ast.ImportFrom | ast.Assign) for n in node.body):
                continue  # __version__ of a checkout that was never built
            if isinstance(node, ast.FunctionDef) and node.name in JUPYTER_HOOKS:
                continue
            offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_every_environment_name_that_crosses_a_process_is_defined_once_in_core_keys():
    assignment = re.compile(r'^\s*[A-Z_]+\s*=\s*f?"(JUPYTER_GPUBURST_[A-Z_]+|GPUBURST_SERVICE_[A-Z_]+)"', re.M)
    defined = {
        str(path.relative_to(ROOT)): assignment.findall(path.read_text()) for path in PACKAGE.rglob("*.py") if path.name != "keys.py"
    }
    assert {k: v for k, v in defined.items() if v} == {}


def test_no_module_is_longer_than_it_can_be_read_unless_it_says_why():
    long = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        head = ast.get_docstring(ast.parse(text)) or ""
        if text.count("\n") > MAX_LINES and "longer than" not in head.lower():
            long.append(f"{path.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    assert long == []


def test_no_test_imports_another_test_module_or_a_conftest():
    """Shared helpers live in tests/helpers (fixtures registered in tests/conftest.py)."""
    offenders = []
    # tests/reference holds upstream's files unchanged (KubeSpawner's suite), run apart
    for path in (p for p in (ROOT / "tests").rglob("*.py") if "reference" not in p.relative_to(ROOT / "tests").parts):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                modules = [node.module or ""] + ([a.name for a in node.names] if not node.module or node.level else [])
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            else:
                continue
            last = {m.rsplit(".", 1)[-1] for m in modules if m}
            if any(m.startswith("test_") or m == "conftest" for m in last):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_a_kernel_pod_and_the_gpu_package_reach_neither_the_user_server_nor_the_hub():
    """What runs in a kernel pod reads GPUs through jupyter_gpuburst.gpu, which the user's server
    uses too; neither reaches into server/ or hub/ (core/ is shared by all)."""
    known = modules()
    graph = {name: imports(path, set(known)) for name, path in known.items()}
    starts = [name for name in known if name.startswith(("jupyter_gpuburst.kernel", "jupyter_gpuburst.gpu"))]
    reached = {m for start in starts for m in reachable(graph, start)}
    assert sorted(m for m in reached if m.startswith(("jupyter_gpuburst.server", "jupyter_gpuburst.hub"))) == []
    assert "jupyter_gpuburst.gpu.select" in reachable(graph, "jupyter_gpuburst.kernel.gpu")
