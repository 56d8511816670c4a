"""A local Debian bookworm image with Python 3.11, made without any registry.

Where no registry is reachable (these machines, air-gapped runners), the container tests and the
`act` session still need a real image: debootstrap writes a minimal bookworm root file system with
python3 and python3-venv, and `docker import` turns its tarball into an image. The tarball is kept
in the user's cache directory (as uv keeps its own), so only the first build on a machine pays
for debootstrap (about a minute); later imports take seconds.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

IMAGE = "harness-test/bookworm-py311:1"  # the tag names the recipe below: change both together
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "qwen35-harness"
ROOTFS = CACHE / "bookworm-py311-1.tar"


class Unavailable(RuntimeError):
    """The image cannot be made here; the message says why and what would fix it."""


def build_rootfs(dest: Path = ROOTFS) -> Path:
    """A bookworm root file system with Python 3.11 and venv, as a tarball for `docker import`."""
    tool = shutil.which("debootstrap")
    if tool is None:
        raise Unavailable("debootstrap is not installed (Debian: apt-get install debootstrap)")
    if os.geteuid() != 0:
        raise Unavailable("debootstrap needs root")
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=dest.parent))
    try:
        done = subprocess.run([tool, "--variant=minbase", "--include=python3,python3-venv", "bookworm",
                               str(work / "root")], capture_output=True, text=True, timeout=1500, check=False)
        if done.returncode != 0:
            raise Unavailable(f"debootstrap bookworm failed with status {done.returncode} (is a Debian mirror "
                              f"reachable?): {' | '.join(done.stdout.splitlines()[-5:])}")
        # The .debs debootstrap keeps and the docs are a third of the tree and nothing needs them.
        subprocess.run(["tar", "-C", str(work / "root"), "-cf", str(work / "rootfs.tar"),
                        "--exclude=./var/cache/apt/archives/*.deb", "--exclude=./usr/share/doc",
                        "--exclude=./usr/share/man", "--exclude=./usr/share/locale", "."], check=True)
        os.replace(work / "rootfs.tar", dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest


def ensure(client, ref: str = IMAGE):
    """The image `ref` on the engine of docker `client`: found, or imported from the (cached) root fs."""
    import docker

    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        pass
    if not ROOTFS.exists():
        build_rootfs(ROOTFS)
    name, tag = ref.rsplit(":", 1)
    client.api.import_image(src=str(ROOTFS), repository=name, tag=tag)
    return client.images.get(ref)
