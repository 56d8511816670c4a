"""The layout is the architecture: each room of harness/ imports only the rooms its __init__ names, and no
harness module imports itself back through others, whether its imports sit at the top or inside functions;
docs/architecture.md's walk names files that exist, each once, and its tree names every module of each room."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parents[2] / "harness"


def _module_name(path: Path) -> str:
    parts = path.relative_to(HARNESS.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _is_type_checking(node: ast.AST) -> bool:
    """`if TYPE_CHECKING:` (or `typing.TYPE_CHECKING`): a block only type checkers run."""
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
                                         or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _nodes(tree: ast.AST, runtime_only: bool) -> list[ast.AST]:
    """Every node of `tree`, at any depth (functions included); without `if TYPE_CHECKING:` blocks when
    `runtime_only`, as those imports never run."""
    found, pending = [], [tree]
    while pending:
        node = pending.pop()
        found.append(node)
        if runtime_only and _is_type_checking(node):
            pending.extend(node.orelse)
            continue
        pending.extend(ast.iter_child_nodes(node))
    return found


def _imports(path: Path, runtime_only: bool = False) -> set[str]:
    """The harness modules a file imports anywhere in it (inside functions too), relative imports resolved;
    with `runtime_only`, not those of `if TYPE_CHECKING:` blocks."""
    found = set()
    for node in _nodes(ast.parse(path.read_text()), runtime_only):
        if isinstance(node, ast.ImportFrom) and (module := _absolute(path, node)).startswith("harness"):
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("harness"))
    return found


MODULES = {_module_name(path): path for path in HARNESS.rglob("*.py")}


def _room(module: str) -> str:
    return module.split(".")[1] if "." in module else "__init__"


def declared_rooms(room: str) -> set[str] | None:
    """The rooms a subpackage's docstring says it may import; None for 'any room'."""
    doc = ast.get_docstring(ast.parse((HARNESS / room / "__init__.py").read_text())) or ""
    match = re.search(r"^May import: (.+?)\.$", doc, re.M | re.S)
    assert match, f"harness/{room}/__init__.py does not say what it may import"
    if "any room" in match.group(1):
        return None
    return {name.split(".")[1] for name in re.findall(r"harness\.\w+", match.group(1))}


ROOMS = sorted(path.parent.name for path in HARNESS.glob("*/__init__.py"))


@pytest.mark.parametrize("room", ROOMS)
def test_room_imports_only_what_it_declares(room):
    allowed = declared_rooms(room)
    if allowed is None:
        return
    wrong = {(name, target) for name, path in MODULES.items() if _room(name) == room
             for target in _imports(path)
             if _room(target) not in allowed | {room, "__init__"} and target in MODULES}
    assert not wrong, f"harness/{room} imports rooms it does not declare: {sorted(wrong)}"


def test_rooms_form_no_cycle():
    graph = {room: (declared_rooms(room) or set()) - {room} for room in ROOMS}
    graph = {room: {dep for dep in deps if dep in graph} for room, deps in graph.items()}
    done: set[str] = set()

    def visit(room: str, stack: tuple[str, ...]) -> None:
        assert room not in stack, "rooms import each other: " + " -> ".join((*stack, room))
        if room not in done:
            for dep in graph[room]:
                visit(dep, (*stack, room))
            done.add(room)

    for room in graph:
        visit(room, ())


def test_no_module_imports_itself_back():
    """No import cycle between modules, counting imports inside functions: a cycle inside a room is as bad as
    one between rooms (only an `if TYPE_CHECKING:` import, which never runs, is left out)."""
    graph = {name: {target for target in _imports(path, runtime_only=True) if target in MODULES and target != name}
             for name, path in MODULES.items()}
    # a package's own __init__ is imported by every module in it: that edge is not a cycle
    graph = {name: {t for t in deps if not name.startswith(t + ".")} for name, deps in graph.items()}
    state: dict[str, int] = {}

    def visit(name: str, stack: list[str]) -> None:
        if state.get(name) == 2:
            return
        assert state.get(name) != 1, "import cycle: " + " -> ".join(stack[stack.index(name):] + [name])
        state[name] = 1
        for dep in graph[name]:
            visit(dep, [*stack, name])
        state[name] = 2

    for name in graph:
        visit(name, [])


def test_the_checker_sees_a_cycle(tmp_path, monkeypatch):
    """The cycle test must be able to fail: two modules importing each other are caught."""
    (tmp_path / "a.py").write_text("from harness.b import x\n")
    (tmp_path / "b.py").write_text("from harness.a import y\n")
    assert _imports(tmp_path / "a.py") == {"harness.b", "harness.b.x"}
    monkeypatch.setitem(MODULES, "harness.a", tmp_path / "a.py")
    monkeypatch.setitem(MODULES, "harness.b", tmp_path / "b.py")
    with pytest.raises(AssertionError, match="import cycle"):
        test_no_module_imports_itself_back()


def test_the_checker_sees_a_cycle_through_a_function_level_import(tmp_path, monkeypatch):
    """An import inside a function closes a cycle as well as one at the top: a -> b at the top, b -> c inside a
    method, c -> a inside a function."""
    (tmp_path / "a.py").write_text("from harness.b import x\n")
    (tmp_path / "b.py").write_text("class B:\n    def use(self):\n        from harness import c\n")
    (tmp_path / "c.py").write_text("def f():\n    if True:\n        import harness.a\n")
    assert _imports(tmp_path / "b.py") == {"harness", "harness.c"}
    for name in "abc":
        monkeypatch.setitem(MODULES, f"harness.{name}", tmp_path / f"{name}.py")
    with pytest.raises(AssertionError, match="import cycle: harness.(a|b|c) -> .* -> harness.(a|b|c)"):
        test_no_module_imports_itself_back()


def test_a_type_checking_import_closes_no_cycle(tmp_path, monkeypatch):
    """An import only type checkers run (`if TYPE_CHECKING:`) is not followed; its `else` branch is."""
    (tmp_path / "a.py").write_text("from harness.b import x\n")
    (tmp_path / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from harness.a import y\n")
    assert _imports(tmp_path / "b.py") == {"harness.a", "harness.a.y"}  # the room check still sees it
    assert _imports(tmp_path / "b.py", runtime_only=True) == set()
    for name in "ab":
        monkeypatch.setitem(MODULES, f"harness.{name}", tmp_path / f"{name}.py")
    test_no_module_imports_itself_back()
    (tmp_path / "b.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    pass\nelse:\n    import harness.a\n")
    with pytest.raises(AssertionError, match="import cycle"):
        test_no_module_imports_itself_back()


def test_project_root_constants_point_at_the_project():
    """Modules moved a level down must still find the project (their paths are relative to __file__)."""
    from harness.benchmarks import suite
    from harness.envs import cellenv, incontainer

    for root in (cellenv.PROJECT_ROOT, incontainer.ROOT, suite.ROOT):
        assert (root / "pyproject.toml").is_file() and (root / "harness" / "cli.py").is_file(), root


ARCHITECTURE = HARNESS.parent / "docs" / "architecture.md"


def _section(title: str) -> str:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start = text.index(f"## {title}")
    return text[start:text.index("\n## ", start + 1)]


def test_the_walk_names_files_that_exist_each_once():
    named = re.findall(r"\*\*`([\w/.]+\.py)`\*\*", _section("One cell, from the matrix file to its report row"))
    assert len(named) > 30 and len(set(named)) == len(named), [n for n in named if named.count(n) > 1]
    # A short path is under harness/ (matrix/axes.py) or under the report's room (html/plots.py).
    missing = [n for n in named if not any((base / n).is_file() for base in
                                           (HARNESS.parent, HARNESS, HARNESS / "report"))]
    assert missing == []


def test_the_tree_names_every_module_of_every_room():
    tree = _section("The tree")
    words = set(re.findall(r"\w+", tree))
    unnamed = [str(path.relative_to(HARNESS.parent)) for path in sorted(HARNESS.rglob("*.py"))
               if path.stem not in ("__init__", "__main__") and path.stem not in words]
    assert unnamed == []
