"""Check the local folders a write needs before its first request to the API server (or to the store)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from gpulens.core.errors import UserError


def check_out_dir(path: Path, flag: str) -> None:
    """Raise a ``UserError`` naming ``flag`` unless ``path`` is a folder gpulens can write files in, or can create.

    Nothing is created: the nearest folder that exists must be writable (a probe file is made and
    removed there), and nothing on the way may be a file.
    """
    path = Path(path)
    here = path
    while not here.exists():
        if here.is_symlink():
            raise UserError(f"invalid {flag} {path}: {here} is a broken link")
        parent = here.parent
        if parent == here:
            break
        here = parent
    if not here.is_dir():
        where = "is a file" if here == path else f"cannot be made: {here} is a file"
        raise UserError(f"invalid {flag} {path}: {where}, not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".gpulens-probe-", dir=here)
    except OSError as exc:
        raise UserError(f"invalid {flag} {path}: cannot write in {here} ({exc.strerror or exc})") from exc
    os.close(fd)
    os.unlink(probe)
