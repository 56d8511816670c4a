"""harness.envs.indexcache: uv keeps an index's answers as PyPI's headers would let it, where the network strips
them, and only where nobody configures uv or its index. The first test runs the real uv against a local index
that sends no cache headers: with the policy, a second install asks the index nothing; without it, it asks
again for the page and the file (what made uv rebuild every source distribution for every environment)."""
import base64
import hashlib
import http.server
import io
import os
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from harness.envs import cellenv, indexcache, pipconfig


def _wheel() -> tuple[str, bytes]:
    name, files = "tinypkg-1.0-py3-none-any.whl", {
        "tinypkg/__init__.py": b"VALUE = 1\n",
        "tinypkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
        "tinypkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                       b"Tag: py3-none-any\n"}
    record = "".join(f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for path, data in files.items()) + "tinypkg-1.0.dist-info/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in {**files, "tinypkg-1.0.dist-info/RECORD": record.encode()}.items():
            archive.writestr(path, data)
    return name, buffer.getvalue()


@pytest.fixture
def bare_index():
    """A simple index on 127.0.0.1 serving one wheel with no Cache-Control, ETag or Last-Modified (as the proxy
    in front of PyPI on a CPU runner does); the paths it was asked for are kept."""
    name, wheel = _wheel()
    digest = hashlib.sha256(wheel).hexdigest()
    page = f'<html><body><a href="/files/{name}#sha256={digest}">{name}</a></body></html>'.encode()
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self, body: bool) -> None:
            asked.append(self.path)
            data, kind = ((page, "text/html") if self.path.rstrip("/") == "/simple/tinypkg"
                          else (wheel, "application/octet-stream") if self.path == f"/files/{name}" else (None, ""))
            if data is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

        def do_GET(self):  # noqa: N802 - http.server's name
            self._answer(True)

        def do_HEAD(self):  # noqa: N802
            self._answer(False)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple", asked
    server.shutdown()
    server.server_close()


def _installer(tmp_path: Path, config: Path):
    """install(name): tinypkg into a fresh environment `name`, through one uv cache for every call."""
    uv = cellenv.uv_binary()
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path / "home"), "UV_CACHE_DIR": str(tmp_path / "uv"),
           "UV_PYTHON_DOWNLOADS": "never", "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1",
           "UV_CONFIG_FILE": str(config)}

    def install(name: str) -> None:
        venv = tmp_path / name
        subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], env=env, check=True,
                       cwd=tmp_path)
        done = subprocess.run([uv, "pip", "install", "--python", str(venv / "bin" / "python"), "tinypkg==1.0"],
                              env=env, capture_output=True, text=True, cwd=tmp_path, check=False)
        assert done.returncode == 0, done.stderr

    return install


@pytest.mark.skipif(not indexcache.uv_understands(), reason="the harness's uv predates the cache-control setting")
@pytest.mark.parametrize("policy", [True, False], ids=["policy", "no-policy"])
def test_with_the_policy_uv_asks_a_header_less_index_nothing_the_second_time(bare_index, tmp_path, policy):
    url, asked = bare_index
    config = tmp_path / "uv.toml"  # without the policy, the index named the same way: uv's own rule for its answers
    config.write_text(indexcache.config_text(url) if policy
                      else f'[[index]]\nname = "pypi"\nurl = "{url}"\ndefault = true\n')
    install = _installer(tmp_path, config)
    install("first")
    assert "/simple/tinypkg/" in asked or "/simple/tinypkg" in asked
    asked.clear()
    install("second")
    if policy:
        assert asked == [], f"uv asked the index again: {asked}"
    else:
        assert any(p.startswith("/simple/tinypkg") for p in asked) and any(p.startswith("/files/") for p in asked)


@pytest.fixture
def nobodys(tmp_path, monkeypatch):
    """A runner where nobody configures uv: home, XDG folders and the working folder all empty."""
    monkeypatch.setattr(indexcache, "uv_understands", lambda: True)
    (tmp_path / "work").mkdir()
    return {"HOME": str(tmp_path / "home"), "XDG_CONFIG_DIRS": str(tmp_path / "xdg")}, tmp_path / "work"


def test_the_policy_is_written_once_and_named_where_nobody_configures_uv(nobodys, tmp_path):
    environ, here = nobodys
    given = indexcache.uv_setting(environ, tmp_path / "cache", here)
    path = Path(given[indexcache.VARIABLE])
    assert path.parent == tmp_path / "cache" and path.read_text() == indexcache.config_text()
    assert 'url = "https://pypi.org/simple"' in path.read_text() and "immutable" in path.read_text()
    stamp = path.stat().st_mtime_ns
    assert indexcache.uv_setting(environ, tmp_path / "cache", here) == given and path.stat().st_mtime_ns == stamp


@pytest.mark.parametrize("name", indexcache.OWNER_VARIABLES)
def test_a_variable_that_configures_uv_or_names_an_index_leaves_uv_alone(nobodys, tmp_path, name):
    environ, here = nobodys
    assert indexcache.uv_setting({**environ, name: "x"}, tmp_path / "cache", here) == {}
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("where", ["user", "xdg-user", "system-xdg", "appdata", "project-uv",
                                   "project-pyproject-above"])
def test_a_configuration_file_uv_would_read_leaves_uv_alone(nobodys, tmp_path, where):
    environ, here = nobodys
    files = {"user": Path(environ["HOME"]) / ".config" / "uv" / "uv.toml",
             "xdg-user": tmp_path / "xdgc" / "uv" / "uv.toml",
             "system-xdg": Path(environ["XDG_CONFIG_DIRS"]) / "uv" / "uv.toml",
             "appdata": tmp_path / "appdata" / "uv" / "uv.toml",
             "project-uv": here / "uv.toml",
             "project-pyproject-above": tmp_path / "pyproject.toml"}
    if where == "xdg-user":
        environ = {**environ, "XDG_CONFIG_HOME": str(tmp_path / "xdgc")}
    elif where == "appdata":
        environ = {**environ, "APPDATA": str(tmp_path / "appdata")}
    files[where].parent.mkdir(parents=True, exist_ok=True)
    files[where].write_text("[project]\nname = 'x'\n\n[[tool.uv.index]]\nurl = 'https://mirror.example/simple'\n"
                            if where.endswith("pyproject-above") else "")
    assert indexcache.uv_setting(environ, tmp_path / "cache", here) == {}


def test_a_pyproject_without_a_uv_table_is_not_uvs_configuration(nobodys, tmp_path):
    environ, here = nobodys
    (here / "pyproject.toml").write_text("[project]\nname = 'x'\n[tool.uvicorn]\nport = 1\n# [tool.uv]\n")
    assert indexcache.VARIABLE in indexcache.uv_setting(environ, tmp_path / "cache", here)


def test_an_unwritable_folder_gets_nothing(nobodys, tmp_path):
    environ, here = nobodys
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert indexcache.uv_setting(environ, blocked / "cache", here) == {}  # a file where the folder would be


@pytest.mark.parametrize("version", ["0.8.0", None], ids=["older", "not-a-package"])
def test_an_older_or_unknown_uv_gets_nothing(tmp_path, monkeypatch, version):
    def installed(name):
        if version is None:
            raise indexcache.importlib.metadata.PackageNotFoundError(name)
        return version

    monkeypatch.setattr(indexcache.importlib.metadata, "version", installed)
    indexcache.uv_understands.cache_clear()
    try:
        (tmp_path / "work").mkdir()
        assert indexcache.uv_setting({"HOME": str(tmp_path / "home"), "XDG_CONFIG_DIRS": str(tmp_path / "xdg")},
                                     tmp_path / "cache", tmp_path / "work") == {}
    finally:
        monkeypatch.undo()
        indexcache.uv_understands.cache_clear()


def test_pips_index_url_is_a_variable_for_uv_so_the_forwarded_settings_carry_no_policy(nobodys, monkeypatch,
                                                                                       tmp_path):
    environ, here = nobodys
    monkeypatch.chdir(here)
    monkeypatch.setattr(pipconfig, "cache_folder", lambda: tmp_path / "cache")
    monkeypatch.setattr(pipconfig, "pip_config", lambda: {"index-url": "https://mirror.example/simple"})
    assert pipconfig.uv_environment(environ) == {"UV_DEFAULT_INDEX": "https://mirror.example/simple"}
    monkeypatch.setattr(pipconfig, "pip_config", lambda: {})
    assert pipconfig.uv_environment(environ) == {
        indexcache.VARIABLE: str(next((tmp_path / "cache").glob("uv-index-policy-*.toml")))}


def test_a_pyproject_uv_could_not_parse_counts_as_the_owners(nobodys, tmp_path):
    environ, here = nobodys
    (here / "pyproject.toml").write_text("[tool.uv\nindex-url = \n")
    assert indexcache.uv_setting(environ, tmp_path / "cache", here) == {}
