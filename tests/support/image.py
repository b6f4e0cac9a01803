"""Build the Dockerfile with buildah, on a Debian base made by mmdebstrap, and run the image read-only.

No registry is involved: the base is a minimal Debian root file system with python3 (what the
Dockerfile needs of ``python:3.11-slim``), imported into a buildah store of our own. The root file
system tarball, the store and buildah's layer cache live under ``~/.cache/gpulens-image-test``, keyed
by the base's package list, so a second run rebuilds only the layers whose inputs changed.

A container is run as Kubernetes runs the manifests' pods: the image's user, environment, working
directory and entry point, its root file system mounted read-only, and writable volumes where the
manifests mount them (``/data``, ``/tmp``). buildah's chroot isolation offers no read-only root, so
the runner mounts the container's root file system itself (``unshare``, ``mount``, ``chroot``), which
needs root.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.prometheus import missing

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpulens-image-test"
# Debian 12 has Python 3.11, as python:3.11-slim, the Dockerfile's default base.
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = ("python3", "python3-venv")
MMDEBSTRAP_OPTIONS = (
    "--variant=minbase",
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
)
IMAGE = "localhost/gpulens-test"
STORAGE_CONF = """[storage]
driver = "overlay"
graphroot = "{root}/graph"
runroot = "{root}/run"
"""


def base_key() -> str:
    """What the base is made of, hashed: a change of packages, suite or options makes a new base."""
    made_of = json.dumps([SUITE, MIRROR, BASE_PACKAGES, MMDEBSTRAP_OPTIONS])
    return hashlib.sha256(made_of.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Buildah:
    """buildah on our own store (``CONTAINERS_STORAGE_CONF``), never the machine's default one."""

    binary: str
    storage_conf: Path

    def env(self) -> dict[str, str]:
        return {**os.environ, "CONTAINERS_STORAGE_CONF": str(self.storage_conf)}

    def __call__(self, *args: str | Path, timeout: float = 600) -> str:
        proc = subprocess.run([self.binary, *map(str, args)], capture_output=True, text=True,
                              env=self.env(), timeout=timeout, check=False)
        assert proc.returncode == 0, f"buildah {' '.join(map(str, args))}: {proc.stderr[-3000:]}"
        return proc.stdout.strip()

    def has_image(self, name: str) -> bool:
        proc = subprocess.run([self.binary, "inspect", "--type", "image", name], capture_output=True,
                              env=self.env(), timeout=60, check=False)
        return proc.returncode == 0

    def image_config(self, name: str) -> dict[str, Any]:
        """The OCI image configuration (``config``: User, Env, Entrypoint, Labels, WorkingDir)."""
        config: dict[str, Any] = json.loads(self("inspect", "--type", "image", name))["OCIv1"]
        return config


def require_tools() -> Buildah:
    """buildah with its store under the cache; skips loudly (fails under CI=true) where it cannot run."""
    for name in ("buildah", "mmdebstrap", "unshare", "chroot"):
        if shutil.which(name) is None:
            missing(f"'{name}' not on PATH: the image test builds with buildah on a base made by mmdebstrap "
                    "(Debian: apt-get install buildah mmdebstrap; scripts/dev test does it when root)")
    if os.geteuid() != 0:
        missing("the image test mounts the image's root file system read-only (unshare, mount, chroot): run it as root")
    store = CACHE / "storage"
    store.mkdir(parents=True, exist_ok=True)
    conf = CACHE / "storage.conf"
    conf.write_text(STORAGE_CONF.format(root=store), encoding="utf-8")
    return Buildah(str(shutil.which("buildah")), conf)


def base_image(buildah: Buildah) -> str:
    """The Debian base as an image in our store, made (mmdebstrap) and imported once per package list."""
    name = f"localhost/gpulens-test-base:{base_key()}"
    if buildah.has_image(name):
        return name
    tarball = CACHE / f"base-{base_key()}.tar"
    if not tarball.is_file():
        partial = tarball.with_suffix(".partial.tar")
        proc = subprocess.run(["mmdebstrap", *MMDEBSTRAP_OPTIONS, f"--include={','.join(BASE_PACKAGES)}",
                               SUITE, str(partial), MIRROR], capture_output=True, text=True, timeout=900, check=False)
        assert proc.returncode == 0, f"mmdebstrap: {proc.stderr[-3000:]}"
        partial.rename(tarball)
    container = buildah("from", "scratch")
    try:
        buildah("add", container, tarball, "/")
        buildah("commit", "-q", container, name)
    finally:
        buildah("rm", container)
    return name


def make_image(buildah: Buildah, base: str) -> subprocess.CompletedProcess[str]:
    """``make image`` with buildah on ``base``, tagged ``localhost/gpulens-test:<package version>``."""
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), "image", "ENGINE=buildah", f"BASE_IMAGE={base}",
         f"IMAGE={IMAGE}"],
        capture_output=True, text=True, env=buildah.env(), timeout=1500, check=False,
    )


@dataclass(frozen=True)
class ReadOnlyContainer:
    """A container of an image: its root file system (``rootfs``) and the image's run configuration."""

    rootfs: Path
    user: str
    env: tuple[str, ...]
    workdir: str
    entrypoint: tuple[str, ...]
    volumes: Mapping[str, Path]  # path in the container -> host folder, writable

    def argv(self, args: Sequence[str], entrypoint: bool = True) -> list[str]:
        """The host command that runs ``entrypoint + args`` (or ``args`` alone) in the container."""
        mounts = [f"mount --bind {shlex.quote(str(self.rootfs))} {shlex.quote(str(self.rootfs))}",
                  f"mount -o remount,bind,ro {shlex.quote(str(self.rootfs))}",
                  f"mount --rbind /dev {shlex.quote(str(self.rootfs / 'dev'))}",
                  f"mount -t proc proc {shlex.quote(str(self.rootfs / 'proc'))}"]
        mounts += [f"mount --bind {shlex.quote(str(host))} {shlex.quote(str(self.rootfs / inside.lstrip('/')))}"
                   for inside, host in self.volumes.items()]
        command = [*(self.entrypoint if entrypoint else ()), *args]
        inner = ["chroot", f"--userspec={self.user}", str(self.rootfs), "/usr/bin/env", "-i", "-C", self.workdir,
                 *self.env, *command]
        script = "; ".join(mounts) + "; exec " + shlex.join(inner)
        return ["unshare", "--mount", "--propagation", "private", "sh", "-ec", script]

    def run(self, *args: str, entrypoint: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(args, entrypoint), capture_output=True, text=True, timeout=timeout, check=False)


@contextmanager
def read_only_container(buildah: Buildah, image: str, volumes: Mapping[str, Path]) -> Iterator[ReadOnlyContainer]:
    """A container of ``image`` with writable ``volumes`` (owned by the image's user), removed afterwards."""
    config = buildah.image_config(image)["config"]
    user = config.get("User") or "0:0"
    uid, _, gid = user.partition(":")
    for host in volumes.values():
        host.mkdir(parents=True, exist_ok=True)
        os.chown(host, int(uid), int(gid or uid))
    container = buildah("from", "-q", image)
    try:
        yield ReadOnlyContainer(Path(buildah("mount", container)), f"{uid}:{gid or uid}", tuple(config.get("Env", [])),
                                config.get("WorkingDir") or "/", tuple(config.get("Entrypoint") or ()), dict(volumes))
    finally:
        buildah("umount", container)
        buildah("rm", container)
