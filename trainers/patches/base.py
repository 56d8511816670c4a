"""The patch protocol: a patch names its target symbol and the versions it applies to.

A patch replaces one attribute (a function, a method, a class attribute) at a dotted target
such as ``transformers.models.qwen3_5.modeling_qwen3_5:Qwen3_5VisionModel.fast_pos_embed_interpolate``.
It can be applied and removed cleanly, and when its target is absent or its version range does
not include the installed package, it says so (`NotApplicable`) instead of silently doing nothing.
"""
from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import importlib.metadata
import importlib.util
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version


class NotApplicable(RuntimeError):
    """The patch does not apply to the installed versions (reason in the message)."""


class TargetMissing(NotApplicable):
    """The symbol the patch targets does not exist in the installed package (renamed or removed)."""


@functools.cache
def installed_version(distribution: str) -> Version | None:
    """The installed release of `distribution`, or None. Cached: a process's installed packages do not
    change under it, and each lookup scans every distribution's metadata (patch-parity asked 330 times)."""
    try:
        return Version(importlib.metadata.version(distribution))
    except importlib.metadata.PackageNotFoundError:
        return None


def split_target(target: str) -> tuple[str, list[str]]:
    module, _, attrs = target.partition(":")
    if not module or not attrs:
        raise ValueError(f"patch target {target!r} must look like 'package.module:Object.attribute'")
    return module, attrs.split(".")


def resolve(target: str) -> tuple[Any, str]:
    """Import the target's module; return (owner object, attribute name). Raises TargetMissing."""
    module_name, attrs = split_target(target)
    try:
        owner: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise TargetMissing(f"{target}: module {module_name} cannot be imported ({exc})") from exc
    for attr in attrs[:-1]:
        if not hasattr(owner, attr):
            raise TargetMissing(f"{target}: {attr} not found in {module_name}")
        owner = getattr(owner, attr)
    if not hasattr(owner, attrs[-1]):
        raise TargetMissing(f"{target}: {attrs[-1]} not found")
    return owner, attrs[-1]


def exists_statically(target: str) -> tuple[bool, str]:
    """Whether `target` is defined in its module's source, read without importing it.

    For packages that cannot be imported on this machine (torch_npu without CANN, CUDA-only
    vLLM): finds the module file from the installed distribution and walks its syntax tree.
    Only classes, functions and top-level assignments are seen; enough for a rename audit.
    """
    module_name, attrs = split_target(target)
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError) as exc:
        return False, f"{target}: module {module_name} not found ({exc})"
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return False, f"{target}: no Python source for {module_name}"
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    missing = next((attr for attr, node in zip(attrs, defined_statically(tree, attrs)) if node is None), None)
    if missing is not None:
        return False, f"{target}: {missing} not defined in {spec.origin.rsplit('/', 1)[-1]}"
    return True, f"{target}: found"


def defined_statically(tree: ast.Module, attrs: list[str]) -> list[ast.stmt | None]:
    """For each name of the chain `attrs` (a class, then its method, ...), the statement that defines it in `tree`
    (the last one at its level), None from the first name not found on: classes, functions, assignments and
    imports are seen."""
    found: list[ast.stmt | None] = []
    body: list[ast.stmt] = tree.body
    for attr in attrs:
        node = _defines(body, attr)
        found.append(node)
        if node is None:
            return found + [None] * (len(attrs) - len(found))
        body = getattr(node, "body", [])
    return found


def _defines(body: list[ast.stmt], attr: str) -> ast.stmt | None:
    found = None
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == attr:
            found = node
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == attr for t in node.targets):
            found = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == attr:
            found = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == attr for a in node.names):
            found = node
    return found


@dataclass
class Patch:
    """One replacement of one target, gated on one distribution's version range."""

    name: str
    target: str
    replacement: Callable[..., Any] | Any
    distribution: str = "transformers"
    versions: SpecifierSet = field(default_factory=SpecifierSet)
    description: str = ""
    _saved: list[tuple[Any, str, Any]] = field(default_factory=list, repr=False)

    def check_applicable(self) -> None:
        """Raise NotApplicable (or TargetMissing) with the reason when the patch cannot apply."""
        version = installed_version(self.distribution)
        if version is None:
            raise NotApplicable(f"{self.name}: {self.distribution} is not installed")
        if not self.versions.contains(version, prereleases=True):
            raise NotApplicable(
                f"{self.name}: not applicable to {self.distribution} {version} (applies to {self.versions})")
        resolve(self.target)

    def applicable(self) -> tuple[bool, str]:
        try:
            self.check_applicable()
        except NotApplicable as exc:
            return False, str(exc)
        return True, f"{self.name}: applies to {self.distribution} {installed_version(self.distribution)}"

    @property
    def applied(self) -> bool:
        return bool(self._saved)

    def apply(self) -> None:
        if self.applied:
            return
        self.check_applicable()
        owner, attr = resolve(self.target)
        # Keep the raw class attribute (a staticmethod stays a staticmethod when restored).
        original = owner.__dict__[attr] if isinstance(owner, type) and attr in owner.__dict__ else getattr(owner, attr)
        self._saved.append((owner, attr, original))
        setattr(owner, attr, self.replacement)

    def remove(self) -> None:
        while self._saved:
            owner, attr, original = self._saved.pop()
            setattr(owner, attr, original)

    @contextlib.contextmanager
    def applied_context(self) -> Iterator[Patch]:
        self.apply()
        try:
            yield self
        finally:
            self.remove()


@dataclass
class DelegatingPatch(Patch):
    """A patch whose replacement wraps the stock attribute: `make(stock) -> replacement`.

    The stock function is only known once the target is resolved, so the replacement is built
    at `apply()` time.
    """

    make: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None
    stock: Callable[..., Any] | None = field(default=None, repr=False)

    def apply(self) -> None:
        if self.applied:
            return
        self.check_applicable()
        owner, attr = resolve(self.target)
        self.stock = getattr(owner, attr)
        self.replacement = self.make(self.stock)
        super().apply()

    def remove(self) -> None:
        super().remove()
        self.stock = None
