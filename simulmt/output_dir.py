"""Checks of a command's output directory before any work (a model loads, a run starts), and the one-line
message of an ``OSError`` that happens anyway (a disk full mid-run)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from simulmt.errors import SimulmtError


def check_output_dir(path: str | os.PathLike, flag: str = "--output") -> Path:
    """``path`` if it is a directory this process can write into, or one it can create (``~`` is the caller's to
    expand); else a ``SimulmtError`` saying why: it is a file, one of its parents is a file, or the directory (or
    the nearest existing parent, where it would be created) is not writable. Creates nothing; what a directory
    already holds is the command's own business (continue, refuse or overwrite)."""
    out = Path(path)
    existing = out
    while True:  # the nearest existing path: out itself, or the parent it would be created in
        try:
            mode = existing.stat().st_mode
            break
        except (FileNotFoundError, NotADirectoryError):
            if existing.is_symlink():
                raise SimulmtError(f"{flag} {out}: {existing} is a broken symbolic link") from None
            if existing.parent == existing:
                raise SimulmtError(f"{flag} {out} cannot be created") from None
            existing = existing.parent
        except OSError as exc:
            raise SimulmtError(f"{flag} {out}: cannot access {existing}: {exc.strerror}") from None
    if not stat.S_ISDIR(mode):
        if existing == out:
            raise SimulmtError(f"{flag} {out} exists and is not a directory")
        raise SimulmtError(f"{flag} {out} cannot be created: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        if existing == out:
            raise SimulmtError(f"{flag} {out}: the directory is not writable")
        raise SimulmtError(f"{flag} {out} cannot be created: {existing} is not writable")
    return out


def os_error_message(exc: OSError) -> str:
    """``No space left on device: runs/x/instances.log``: the reason first, then the file(s) if known."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    files = [os.fsdecode(f) for f in (exc.filename, exc.filename2) if f is not None]
    return f"{reason}: {' -> '.join(files)}" if files else reason
