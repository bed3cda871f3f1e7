"""The buffer dir is ours alone: one sidecar, one user, no symlinks.

The durable log (`wal`), the store's spool and the quarantine live in `--buffer-dir`, and a
replay trusts what it finds there: a second sidecar on the same directory would replay the
first one's log and delete its files under it, and a segment another user planted would be
replayed as the user's telemetry and graded (docs/hostile-input.md, "The buffer dir and
the store"). So the directory is created 0700 and refused when anyone else may write to it
or it is not ours; `flock` on its `lock` file keeps a second sidecar out for as long as the
first one's process lives (the kernel drops the lock with the process, however it dies);
and every file in it is opened without following a symlink and refused when another user
owns it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from pathlib import Path

from attest_otel.errors import UsageError

__all__ = ["claim", "open_private", "read_private", "release"]


def claim(directory: Path) -> int:
    """Creates or checks the buffer dir and takes its lock; the lock's descriptor, to keep
    open for the sidecar's life. UsageError (one line, exit 2) when it cannot be ours."""
    try:
        directory.mkdir(parents=True, mode=0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise UsageError(f"buffer-dir {directory}: cannot create it: {e.strerror or e}") from None
    info = os.lstat(directory)
    if stat.S_ISLNK(info.st_mode):
        raise UsageError(f"buffer-dir {directory} is a symlink; give the real directory")
    if not stat.S_ISDIR(info.st_mode):
        raise UsageError(f"buffer-dir {directory} is not a directory")
    if info.st_uid != os.geteuid():
        raise UsageError(
            f"buffer-dir {directory} belongs to uid {info.st_uid}, not to this user "
            f"(uid {os.geteuid()}); refused"
        )
    if info.st_mode & 0o022:
        raise UsageError(
            f"buffer-dir {directory} is writable by others (mode "
            f"{stat.S_IMODE(info.st_mode):04o}); refused: `chmod 700 {directory}`"
        )
    try:
        fd = open_private(directory / "lock", os.O_RDWR | os.O_CREAT)
    except OSError as e:
        raise UsageError(f"buffer-dir {directory}: cannot open its lock: {e}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise UsageError(
            f"buffer-dir {directory} is in use by another sidecar (pid {holder}); "
            "give each sidecar its own"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def release(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)  # closing drops the flock


def open_private(path: Path, flags: int, mode: int = 0o600) -> int:
    """`os.open` that follows no symlink (ELOOP) and refuses a file another user owns."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    owner = os.fstat(fd).st_uid
    if owner != os.geteuid():
        os.close(fd)
        raise OSError(errno.EPERM, f"owned by uid {owner}, not by this user", str(path))
    return fd


def read_private(path: Path) -> bytes:
    """A file's bytes through `open_private`."""
    fd = open_private(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        return f.read()
