"""Shared base of the run-time diagnostics of crashes, hangs, emulation and spawn-style scripts
(DDP120–DDP139). Not a check itself: it has no code."""

from __future__ import annotations

from typing import ClassVar

from ddpcheck.run.catalog import RuntimeCheck


class Diagnostic(RuntimeCheck):
    """Base of the run-time diagnostics; `hint` is the one-line fix shown beside a finding."""

    hint: ClassVar[str] = ""
