from __future__ import annotations

from ddpcheck.findings import Severity
from ddpcheck.run.checks._diagnostic import Diagnostic


class RankCrashed(Diagnostic):
    """A rank raised an exception: the report names the rank, the exception and the line of your script.

    When one rank of a DDP job raises, torchrun only says that a child failed (`error_file: <N/A>`)
    and the other ranks break a moment later inside their next collective ("Connection reset by
    peer"), so the real error is easy to miss among the collateral failures. ddpcheck records the
    exception in every rank, reports the first rank that failed on its own — its exception type,
    message and the innermost frame of your code — and lists the ranks that failed only because of
    it. The other ranks are stopped at once; the report of what was checked until then is kept.

    ## Why it matters

    Without it you read four tracebacks, three of them about sockets, and guess which came first.

    ## How to fix

    Fix the exception at the reported line; the full traceback is in the JSON report
    (`details.traceback`).

    ## References

    - https://pytorch.org/docs/stable/elastic/errors.html
    """

    code = "DDP120"
    name = "rank-crashed"
    severity = Severity.ERROR
    hint = "fix the exception at the reported line; the full traceback is in the JSON report"
    BAD = """
    for step, (x, y) in enumerate(loader):
        if dist.get_rank() == 1 and step == 3:
            raise ValueError("bad batch")  # reported: rank 1 raised ValueError at train.py:NN
    """
