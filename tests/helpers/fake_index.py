"""A package index on disk for tests: tiny wheels (METADATA and modules only) behind a PEP 503 simple index
read through file://, so that releases can appear between two calls without the network."""
from __future__ import annotations

import html
import zipfile
from pathlib import Path

from packaging.utils import canonicalize_name


class FakeIndex:
    def __init__(self, root: Path):
        self.root, self.files = root, root / "files"
        self.files.mkdir(parents=True, exist_ok=True)
        self.requires_python: dict[str, str] = {}

    @property
    def url(self) -> str:
        return (self.root / "simple").as_uri()

    def add(self, name: str, version: str, requires: tuple[str, ...] = (), python: str = "",
            modules: dict[str, str] | None = None) -> Path:
        """A wheel of `name` `version` declaring `requires` (and Requires-Python `python`), then the index again."""
        stem = f"{name.replace('-', '_')}-{version}"
        path = self.files / f"{stem}-py3-none-any.whl"
        meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
        meta += [f"Requires-Python: {python}"] if python else []
        meta += [f"Requires-Dist: {r}" for r in requires]
        with zipfile.ZipFile(path, "w") as wheel:
            for module, source in (modules or {}).items():
                wheel.writestr(f"{module}.py", source)
            wheel.writestr(f"{stem}.dist-info/METADATA", "\n".join(meta) + "\n")
            wheel.writestr(f"{stem}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
            wheel.writestr(f"{stem}.dist-info/RECORD", "")
        self.requires_python[path.name] = python
        self._write_pages()
        return path

    def _write_pages(self) -> None:
        by_name: dict[str, list[Path]] = {}
        for wheel in sorted(self.files.glob("*.whl")):
            by_name.setdefault(canonicalize_name(wheel.name.split("-")[0]), []).append(wheel)
        for name, wheels in by_name.items():
            page = self.root / "simple" / name
            page.mkdir(parents=True, exist_ok=True)
            python = {w.name: html.escape(self.requires_python.get(w.name, "")) for w in wheels}
            links = [f'<a href="../../files/{w.name}" data-requires-python="{python[w.name]}">{w.name}</a>'
                     for w in wheels]
            (page / "index.html").write_text("<html><body>\n" + "\n".join(links) + "\n</body></html>\n")
