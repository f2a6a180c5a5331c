"""Files written whole or not at all, by the launcher (reports) and by each rank (its record)."""

from __future__ import annotations

import itertools
import os

_NAMES = itertools.count()


def write_atomic(path: str, text: str) -> None:
    """Write `text` to `path` through a temporary file beside it, then rename it over `path`.

    The temporary name is this process's and this call's own (a rank's stop handler may write
    while its main thread's write is under way; a user's file is never overwritten by O_EXCL), and
    it is created with the umask's permissions, as `open(path, "w")` would. It is removed again
    when anything fails. Raises OSError."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.{next(_NAMES)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
