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
    INVALID = ("""
    def train(:
        pass
    """,)


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
    INVALID = ("""
    loader = DataLoader(ds, sampler=DistributedSampler(ds))  # noqa: DDP001
    """,)
    VALID = ("""
    loader = DataLoader(ds, sampler=DistributedSampler(ds))
    """,)


class UnreadableFile(Described):
    """A file named or found could not be read or decoded, so no rule checked it.

    ## Why it matters
    A file that was not checked must not pass for one that was: ddpcheck names it on standard
    error, lists it in every report format (the JSON report's `errors`, a SARIF tool execution
    notification, a JUnit `<error>`, a GitHub `::error` annotation), leaves "All checks passed!"
    out of the summary and exits with status 2 once the other files have been linted. Like a
    syntax error, it says the file is broken for Python too: the interpreter reads source the
    same way (a PEP 263 `# -*- coding: ... -*-` declaration, else UTF-8). A module whose bytes
    that are not UTF-8 all lie in comments (notes in a legacy code page, GBK or Latin-1) is read,
    as `import` reads it; `--fix` and `--add-noqa` leave it as it is (writing it would replace
    those bytes) and say so.

    It is not a finding: `--ignore` and `# noqa` do not hide it. A file that is not meant to be
    linted (generated, vendored, another encoding on purpose) is excluded with `--exclude` or
    `extend-exclude`.

    ## How to fix
    Save the file as UTF-8 (the message gives the first byte that is not), or declare its
    encoding on the first or second line; make it readable by the user running ddpcheck; or
    exclude it.
    """

    code = "DDP902"
    name = "unreadable-file"
    severity = Severity.ERROR
    kind = "tool"


class InternalError(Described):
    """ddpcheck itself failed while checking a file: a bug in ddpcheck, not in the file.

    ## Why it matters
    The file was not (fully) checked, so it must not pass for a file without findings. The error
    is reported for that file only, as one line: `path: internal error in ddpcheck: Type:
    message; please report it`; the other files are linted and reported as usual, every report
    format lists the error like an unreadable file (DDP902), and the exit status is 2.

    ## How to fix
    Please report it, with the line and, if you can, the smallest file that shows it. Run again
    with `DDPCHECK_DEBUG=1` to print the traceback. Until it is fixed, `--exclude` the file to
    keep the rest of the run clean.
    """

    code = "DDP903"
    name = "internal-error"
    severity = Severity.ERROR
    kind = "tool"


TOOL_CODES = (SyntaxErrorInFile, UnusedNoqa, UnreadableFile, InternalError)
