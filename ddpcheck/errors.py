"""Errors that reach the user as one line (what, where, what to do) and exit code 2."""


class UserError(Exception):
    """A problem with the user's input: bad flag, bad config, missing path. Printed as one line."""

    exit_code = 2
