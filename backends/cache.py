"""Where built artefacts are cached (the torch-cpu C kernels, the bench's peak probe).

``$XDG_CACHE_HOME/w8a8`` (default ``~/.cache/w8a8``); where that folder cannot be created or written (a
read-only HOME, a HOME that does not exist), a per-user folder in the temporary directory instead, so that
a build is never refused for want of a writable HOME. A folder is used only when it is this user's and
writable by no one else; a cached build is run or loaded only when :func:`trusted` (else it is rebuilt, and
builds land by an atomic rename, so an interrupted one leaves no half-written file under the final name).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def preferred() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "w8a8"


def cache_dir() -> Path:
    """A writable cache folder (created): :func:`preferred`, else ``<tmp>/w8a8-cache-<uid>`` (mode 0700).
    Raises ``OSError`` only when neither can be made."""
    first = preferred()
    for folder in (first, Path(tempfile.gettempdir()) / f"w8a8-cache-{os.getuid() if hasattr(os, 'getuid') else 0}"):
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError:
            continue
        if os.access(folder, os.W_OK | os.X_OK) and _ours(folder):
            return folder
    raise OSError(f"no writable cache folder: neither {first} nor the temporary directory can be written")


def _uid() -> int | None:
    return os.getuid() if hasattr(os, "getuid") else None


def _ours(path: Path, *, follow: bool = True) -> bool:
    """``path`` is owned by this user and writable by no one else (what another user could plant, in a shared
    temporary folder, is never run or loaded)."""
    try:
        st = path.stat() if follow else path.lstat()
    except OSError:
        return False
    uid = _uid()
    return (uid is None or st.st_uid == uid) and not st.st_mode & 0o022


def trusted(path: Path) -> bool:
    """A cached build that may be run or loaded: a regular file (not a link), not empty, owned by this user and
    writable by no one else. Anything else (a file another user planted, a link, an empty file left by an
    interrupted copy) is rebuilt instead."""
    import stat

    try:
        st = Path(path).lstat()
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size > 0 and _ours(Path(path), follow=False)
