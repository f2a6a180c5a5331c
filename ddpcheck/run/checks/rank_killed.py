from __future__ import annotations

from ddpcheck.findings import Severity
from ddpcheck.run.checks._diagnostic import Diagnostic


class RankKilled(Diagnostic):
    """A rank died from a signal without a Python exception (a segfault, an abort, the OOM killer).

    The rank left no traceback: it was ended by a signal that neither torchrun nor ddpcheck sent.
    `SIGKILL` usually means the kernel's out-of-memory killer; `SIGSEGV` or `SIGABRT` a crash in
    native code (a C++ extension, a CUDA kernel, a library built for another torch).

    ## Why it matters

    The other ranks then fail in their next collective, and their errors hide the real one.

    ## How to fix

    For SIGKILL, check memory (`dmesg`, fewer DataLoader workers, a smaller batch). For SIGSEGV or
    SIGABRT, run the rank alone with `python -X faulthandler` to see the native stack.
    """

    code = "DDP127"
    name = "rank-killed"
    severity = Severity.ERROR
    hint = "SIGKILL: check memory; SIGSEGV/SIGABRT: run with `python -X faulthandler` for the stack"
