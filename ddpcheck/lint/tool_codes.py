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


class UnusedNoqa(Described):
    """A `# noqa: DDPxxx` that suppresses nothing: the code it names is not reported on that line.

    ## Why it matters
    A suppression outlives the finding it was written for: the code was fixed, the rule got more
    precise, or the comment was copied to another line. Left in place it hides the next real
    finding of that code on the line, and readers take it for a known problem. Like Ruff's RUF100,
    this check is off by default; turn it on with `--extend-select DDP901`.

    Only ddpcheck's codes are judged (`# noqa: E501` belongs to another tool), only codes whose
    rules ran on the file (a rule that is off here may be on in another job; runtime codes are
    left alone), and never a bare `# noqa`, which other linters read too. A code that names no
    ddpcheck rule (`DDP777`) is reported as unknown.

    ## How to fix
    Remove the code from the comment, or the whole comment when nothing is left. The fix does
    exactly that and is safe: the code suppressed nothing, so nothing new is reported.
    """

    code = "DDP901"
    name = "unused-noqa"
    severity = Severity.INFO
    kind = "tool"
    default_enabled = False
    fixable = True
    BAD = """
    loader = DataLoader(ds, sampler=DistributedSampler(ds))  # noqa: DDP001
    """
    GOOD = """
    loader = DataLoader(ds, sampler=DistributedSampler(ds))
    """


TOOL_CODES = (SyntaxErrorInFile, UnusedNoqa)
