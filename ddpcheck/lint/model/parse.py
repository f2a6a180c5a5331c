"""Parsing a file's text into a libcst tree, for every reader of the project's files.

libcst validates each node as it builds it, and a few of its checks reject valid Python: a
comprehension whose element ends in a closing parenthesis glued to `for`, as in
`[(a if c else b)for a in xs]`, fails "Must have at least one space before 'for' keyword"
although Python (and libcst's own grammar) reads it. A file with such a line would otherwise not be
checked at all. When Python itself reads the text, the parse is repeated without libcst's node
checks (traverse.unvalidated, which the walk's own rebuilding of such nodes uses too).
"""

from __future__ import annotations

import ast
import warnings

import libcst as cst

from ddpcheck.lint.traverse import unvalidated


def _python_reads(text: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences and the like
            ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return False
    return True


# What `parse_module` raises where a file cannot be read: a reader that only skips such files
# catches these.
PARSE_ERRORS = (cst.ParserSyntaxError, cst.CSTValidationError, RecursionError)


def parse_module(text: str) -> cst.Module:
    """The text's tree; raises cst.ParserSyntaxError (or RecursionError) where libcst cannot read it,
    and cst.CSTValidationError where Python cannot either."""
    try:
        return cst.parse_module(text)
    except cst.CSTValidationError:
        if not _python_reads(text):
            raise
        with unvalidated():
            return cst.parse_module(text)
