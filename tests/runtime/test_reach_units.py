"""How far the ranks got and how they ended, judged from rank records (no job launched): checks
whose point was never reached are "not-reached" with the reason; the root cause leads."""

from __future__ import annotations

from ddpcheck.run import reach
from ddpcheck.run.checks import crash
from ddpcheck.run.launcher import judging
from ddpcheck.run.verdict import FAIL, NOT_REACHED, PASS, SKIP, Context, Verdict


def record(rank: int, *, reached=(), step=0, status="finished", exit_code=0, exit_site=None,
           last=None, at=100.0, crash_of=None) -> dict:
    data = {"rank": rank, "world_size": 2, "status": status, "exit_code": exit_code, "step": step,
            "reached": {p: 1.0 for p in reached}, "exit_site": exit_site, "last_output": last,
            "left_at": at, "ended_at": None if at is None else at + 1, "probes": {}}
    if crash_of:
        kind, message, line, consequence = crash_of
        data["probes"]["crash"] = {"rank": rank, "type": kind, "message": message, "path": "/x/train.py",
                                   "line": line, "function": "main", "traceback": "", "time": at,
                                   "consequence": consequence}
        data["exit_code"] = 1
    return data


def test_a_polite_exit_before_init_leaves_every_check_not_reached_and_is_said_once():
    records = [record(r, exit_site="train.py:12", last="Unable to locate sufficient 4 gpus. Exiting.")
               for r in (0, 1)]
    ends = reach.endings(records, {})
    assert reach.reason("step", ends, 2) == "the script exited with 0 at train.py:12 before init_process_group"
    judged = {"DDP108": Verdict("DDP108", FAIL, "init_process_group never called on ranks 0,1"),
              "DDP111": Verdict("DDP111", SKIP, "no process group")}
    out = reach.apply(judged, {"DDP108": "step", "DDP111": "init"}, ends, 2)
    assert {v.status for v in out.values()} == {NOT_REACHED}
    assert out["DDP108"].detail == "not reached: the script exited with 0 at train.py:12 before init_process_group"
    assert out["DDP108"].details["judged"] == FAIL and out["DDP108"].message is None
    (early,) = crash.judge(records, Context(2))
    assert early.code == "DDP130"
    assert "Unable to locate sufficient 4 gpus. Exiting." in (early.message or "")


def test_checks_stand_when_training_happened_and_fail_for_real():
    records = [record(r, reached=("init",), step=5) for r in (0, 1)]  # trained, never wrapped in DDP
    ends = reach.endings(records, {})
    judged = {"DDP109": Verdict("DDP109", FAIL, "no DistributedDataParallel model on ranks 0,1"),
              "DDP110": Verdict("DDP110", SKIP, "no CUDA model")}
    out = reach.apply(judged, {"DDP109": "step", "DDP110": "ddp"}, ends, 2)
    assert out["DDP109"].status == FAIL  # a real finding: it trained without DDP
    assert out["DDP110"].status == NOT_REACHED and "before the model was wrapped in DDP" in out["DDP110"].detail
    assert crash.judge(records, Context(2)) == []  # no early end to report: it trained


def test_the_rank_that_crashed_on_its_own_leads_and_the_others_are_consequences():
    records = [
        record(0, reached=("init",), at=105.0, crash_of=("RuntimeError", "Connection closed by peer", 50, True)),
        record(1, reached=("init",), at=101.0, crash_of=("KeyError", "'model.width'", 34, False)),
        record(2, reached=("init",), status="running", at=None),
    ]
    ends = reach.endings(records, {2: -15})
    assert [e.rank for e in ends][:2] == [1, 0]
    assert reach.reason("step", ends, 3) == \
        "rank 1 crashed (KeyError: 'model.width' at train.py:34) before the model was wrapped in DDP"
    (found,) = crash.judge(records, Context(3, exit_codes={2: -15}))
    assert found.code == "DDP120" and found.ranks == (1,) and found.line == 34
    assert (found.message or "").startswith("rank 1 raised KeyError")
    assert "rank 0 failed after it (RuntimeError: Connection closed by peer)" in (found.message or "")
    assert "rank 2 was stopped by the launcher" in (found.message or "")


def test_a_rank_that_left_early_leads_over_the_broken_connections_it_caused():
    records = [
        record(0, reached=("init", "ddp"), exit_site="train.py:80", at=100.0),
        record(1, reached=("init", "ddp"), at=103.0, crash_of=("RuntimeError", "Connection reset by peer", 91, True)),
    ]
    (found,) = crash.judge(records, Context(2))
    assert (found.message or "").startswith(
        "rank 0 exited with 0 at train.py:80 while the other ranks were still in a collective; then rank 1 raised")


def test_a_signal_before_any_exception_is_the_root_cause():
    records = [record(1, reached=("init", "ddp"), at=103.0,
                      crash_of=("RuntimeError", "Connection closed by peer", 91, True))]
    (found,) = crash.judge(records, Context(2, exit_codes={0: -11, 1: 1}))
    assert found.code == "DDP127" and found.ranks == (0,)
    assert "SIGSEGV" in (found.message or "") and "rank 1 failed after it" in (found.message or "")


def test_not_reached_rows_sort_after_passes_and_are_counted_apart():
    judged = judging.Judged({"DDP105": Verdict("DDP105", NOT_REACHED, "not reached: x"),
                              "DDP108": Verdict("DDP108", PASS, "called on every rank")}, [], frozenset())
    rows = [r for r in judging.rows(judged) if r.code in ("DDP105", "DDP108")]
    assert [(r.code, r.status) for r in rows] == [("DDP108", "pass"), ("DDP105", "not-reached")]
