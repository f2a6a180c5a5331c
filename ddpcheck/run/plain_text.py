"""Text the script printed or raised, made fit to quote in a report: terminal escape sequences
(colour, bold, cursor moves that libraries add for a terminal) removed. Torch-free."""

from __future__ import annotations

import re

# CSI sequences (ESC [ params final), OSC sequences (ESC ] ... BEL or ESC \), and two-byte escapes.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def plain(text: str) -> str:
    """`text` without terminal escape sequences."""
    return _ESCAPES.sub("", text) if "\x1b" in text else text
