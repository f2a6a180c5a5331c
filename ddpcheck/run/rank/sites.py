"""Where in the user's own code something happened: the innermost frame that is not torch, not
ddpcheck and not the standard library. Used by the crash, hang and emulation diagnostics."""

from __future__ import annotations

import functools
import os
import sys
from types import FrameType, TracebackType


@functools.lru_cache(maxsize=1)
def library_prefixes() -> tuple[str, ...]:
    import sysconfig

    import ddpcheck

    paths = {os.path.dirname(os.path.abspath(ddpcheck.__file__)) + os.sep}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            paths.add(os.path.abspath(p) + os.sep)
    torch_file = getattr(sys.modules.get("torch"), "__file__", None)
    if torch_file:
        paths.add(os.path.dirname(os.path.abspath(torch_file)) + os.sep)
    paths.add(_compiled_code_dir() + os.sep)
    return tuple(sorted(paths))


def _compiled_code_dir() -> str:
    """Where torch.compile writes the Python it generates (not the user's code either)."""
    import getpass
    import tempfile

    where = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not where:
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = f"uid_{os.getuid()}"
        where = os.path.join(tempfile.gettempdir(), "torchinductor_" + user)
    return os.path.abspath(where)


def is_user_file(filename: str) -> bool:
    return not filename.startswith("<") and not filename.startswith(library_prefixes())


def user_frame(frame: FrameType | None) -> FrameType | None:
    """The first user frame at or above `frame` (walking towards the caller)."""
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return frame
        frame = frame.f_back
    return None


def call_site(depth: int = 1) -> str | None:
    """`file:line` of the innermost user frame on the caller's stack, or None."""
    frame = user_frame(sys._getframe(depth + 1))
    return None if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


def innermost_user_frame(tb: TracebackType | None) -> tuple[str, int, str] | None:
    """(file, line, function) of the deepest traceback entry in the user's code."""
    found = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if is_user_file(code.co_filename):
            found = (code.co_filename, tb.tb_lineno, code.co_name)
        tb = tb.tb_next
    return found
