"""Where built artefacts are cached (the torch-cpu C kernels, the bench's peak probe).

``$XDG_CACHE_HOME/w8a8`` (default ``~/.cache/w8a8``); where that folder cannot be created or written (a
read-only HOME, a HOME that does not exist), a per-user folder in the temporary directory instead, so that
a build is never refused for want of a writable HOME.
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
        if os.access(folder, os.W_OK | os.X_OK):
            return folder
    raise OSError(f"no writable cache folder: neither {first} nor the temporary directory can be written")
