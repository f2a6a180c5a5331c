"""Base class for runtime check metadata. Torch-free: `ddpcheck rules` imports it."""

from __future__ import annotations

from typing import ClassVar

from ddpcheck.describe import Described


class RuntimeCheck(Described):
    """Metadata of one runtime check; each lives in ddpcheck/run/checks/<name>.py and is discovered."""

    kind: ClassVar[str] = "run"
