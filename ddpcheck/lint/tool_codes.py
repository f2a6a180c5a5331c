"""Codes for ddpcheck's own diagnostics about the files it reads."""

from __future__ import annotations

from ddpcheck.describe import Described
from ddpcheck.findings import Severity


class SyntaxErrorInFile(Described):
    """The file could not be parsed, so no rule could check it.

    ## Why it matters
    A file that does not parse is neither checked nor runnable: every rank would fail at import.
    ddpcheck reports the parser's line, column and message and goes on with the other files.

    ## How to fix
    Fix the syntax error at the reported position (the parser's message says what it expected).
    If the file targets a newer Python than libcst supports, exclude it with `--exclude`.
    """

    code = "DDP900"
    name = "syntax-error"
    severity = Severity.ERROR
    kind = "tool"
    BAD = """
    def train(:
        pass
    """


TOOL_CODES = (SyntaxErrorInFile,)
