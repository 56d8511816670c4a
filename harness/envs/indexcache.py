"""PyPI's own cache policy for uv, where the network in between strips it.

uv keeps the package index's answers as long as their HTTP headers allow: PyPI serves its simple pages with
`max-age=600` and its files with `max-age=365000000, immutable`. A proxy or mirror that drops those headers
(measured on a CPU runner: no Cache-Control, ETag or Last-Modified on files.pythonhosted.org) makes uv
fetch every page again for each install and, worse, treat every source distribution as changed: it built
antlr4-python3-runtime 4.9.3 and wget 3.2 again for every verl and Megatron-Bridge environment (8 builds per
matrix run, one of 10.5 s on a cell's own clock). uv's index setting `cache-control` puts PyPI's policy back
(https://docs.astral.sh/uv/concepts/indexes/#customizing-cache-control-headers); files of a PyPI release
never change, and a direct connection to PyPI gets this policy from PyPI itself.

uv reads one configuration: a `--config-file` (UV_CONFIG_FILE) replaces the user's, the system's and the
project's, and an index named by a variable replaces the one the file names. So the policy is given only
where uv would read none of its own and no variable names an index (the installs then use PyPI); wherever
the runner's owner configures uv or its index, uv does what they say. The setting came in July 2025 (uv pull
requests 14620 and 14736, the second making it apply to the index's answers); an older uv does not know it,
so the policy is given only where the harness's uv package is MIN_UV or newer.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import tomllib
from pathlib import Path

from packaging.version import InvalidVersion, Version

from harness.files import write_text_atomic

VARIABLE = "UV_CONFIG_FILE"
PYPI = "https://pypi.org/simple"
MIN_UV = Version("0.9")
# PyPI's headers (simple pages and files), as uv would see them on a direct connection.
POLICY = {"api": "max-age=600", "files": "max-age=365000000, immutable"}
# A variable that names an index, or tells uv which configuration to read (or none): the runner's owner decides.
OWNER_VARIABLES = ("UV_CONFIG_FILE", "UV_NO_CONFIG", "UV_DEFAULT_INDEX", "UV_INDEX_URL", "UV_INDEX",
                   "UV_EXTRA_INDEX_URL")


def config_text(url: str = PYPI) -> str:
    """The uv.toml that gives `url`, the default index, PyPI's cache policy."""
    policy = ", ".join(f'{key} = "{value}"' for key, value in POLICY.items())
    return f'[[index]]\nname = "pypi"\nurl = "{url}"\ndefault = true\ncache-control = {{ {policy} }}\n'


def _owned_files(environ: dict[str, str], here: Path | None) -> list[Path]:
    """The configuration files uv would read on its own: the user's, the system's, and the project's from `here`
    up (a uv.toml, or a pyproject.toml with a [tool.uv] table)."""
    home = Path(environ.get("HOME") or Path.home())
    found = [Path(environ.get("XDG_CONFIG_HOME") or home / ".config") / "uv" / "uv.toml", Path("/etc/uv/uv.toml")]
    found += [Path(d) / "uv" / "uv.toml" for d in (environ.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(os.pathsep) if d]
    found += [Path(environ[name], *tail, "uv", "uv.toml") for name, tail in (("APPDATA", ()),
                                                                          ("SYSTEMDRIVE", ("ProgramData",)))
              if environ.get(name)]  # Windows' user and system folders
    for folder in ([here, *here.parents] if here is not None else []):
        found.append(folder / "uv.toml")
        if _has_uv_table(folder / "pyproject.toml"):
            found.append(folder / "pyproject.toml")
    return [path for path in found if path.is_file()]


@functools.cache
def uv_understands() -> bool:
    """Whether the harness's uv (the `uv` package beside it: cellenv.uv_binary) reads the `cache-control` setting."""
    try:
        return Version(importlib.metadata.version("uv")) >= MIN_UV
    except (importlib.metadata.PackageNotFoundError, InvalidVersion):  # a uv from PATH: its version unknown here
        return False


def _has_uv_table(pyproject: Path) -> bool:
    """Whether uv reads `pyproject` as configuration: it holds a [tool.uv] table (one it cannot parse counts, so
    that the owner's intent is never overridden)."""
    try:
        text = pyproject.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    try:
        tool = tomllib.loads(text).get("tool")
    except tomllib.TOMLDecodeError:
        return True
    return isinstance(tool, dict) and "uv" in tool


def _cwd() -> Path | None:
    try:
        return Path.cwd()
    except OSError:  # the folder was removed under this process
        return None


def uv_setting(environ: dict[str, str], folder: Path, here: Path | None = None) -> dict[str, str]:
    """{UV_CONFIG_FILE: a uv.toml in `folder` giving PyPI's cache policy}, or {} where the runner's owner
    configures uv (a variable, or a configuration file uv would read from `here`, by default the working folder:
    see the module's doc), the harness's uv is older than MIN_UV, or the file cannot be written. `environ` is uv's
    environment with the forwarded pip settings (an index-url of pip's is a variable for uv)."""
    if (not uv_understands() or any(environ.get(name) for name in OWNER_VARIABLES)
            or _owned_files(environ, here or _cwd())):
        return {}
    text = config_text()
    path = folder / f"uv-index-policy-{hashlib.sha256(text.encode()).hexdigest()[:12]}.toml"
    try:
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            write_text_atomic(path, text)
    except OSError:  # uv then keeps what the network's headers say: slower, never wrong
        return {}
    return {VARIABLE: str(path)}
