"""Reading a module whose comments are not valid UTF-8, as Python's import does.

Python imports a module that declares no encoding even where a comment holds bytes that are not
UTF-8 (comments written in a legacy code page, GBK or Latin-1, beside UTF-8 code): the compiler
never decodes a comment. Only a string or a name that is not UTF-8 stops the import. Such a file
is read here with each undecodable byte of its comments replaced by U+FFFD, one character per
byte, so that every position in the code is where it is in the file; the code itself is exact.
"""

from __future__ import annotations

import io
import tokenize

REPLACEMENT = "\ufffd"


def comments_only_undecodable(data: bytes) -> str | None:
    """The text of `data`, UTF-8 with its undecodable bytes replaced, when all of those bytes lie
    in comments; None when one lies in code, a string or anywhere else (or the text does not
    tokenize): then the file is unreadable to Python too."""
    escaped = data.decode("utf-8", "surrogateescape")
    if escaped.startswith("\ufeff"):
        escaped = escaped[1:]
    lines = escaped.splitlines(keepends=True)
    bad = [(row, col) for row, line in enumerate(lines, 1) for col, ch in enumerate(line)
           if "\udc80" <= ch <= "\udcff"]
    if not bad:
        return None
    comments: dict[int, int] = {}  # line → column where its comment starts
    try:
        for token in tokenize.generate_tokens(io.StringIO(escaped).readline):
            if token.type == tokenize.COMMENT:
                comments[token.start[0]] = token.start[1]
    except (tokenize.TokenError, SyntaxError):
        return None
    if any(row not in comments or col < comments[row] for row, col in bad):
        return None
    return "".join(REPLACEMENT if "\udc80" <= ch <= "\udcff" else ch for ch in escaped)


def strictly_decodable(data: bytes, encoding: str) -> bool:
    """`data` decodes under `encoding` as it is: a file read with replaced comment bytes is not,
    and writing it back would replace those bytes in the file."""
    try:
        data.decode(encoding)
    except (UnicodeDecodeError, LookupError):
        return False
    return True
