"""Quick tests of the collective comparison and the hang diagnosis on hand-made rank states (no
job): the first mismatch, uneven data loader passes, a rank that left the training loop, the live
state file, and the plain hang message."""

from __future__ import annotations

import textwrap

from ddpcheck.run import live
from ddpcheck.run.calls import DDP_BACKWARD, Call, CallLog, first_mismatch
from ddpcheck.run.checks.collectives import CollectiveMismatch, UnevenWork
from ddpcheck.run.checks.hang import CollectiveHang
from ddpcheck.run.diagnose import PassInfo, RankState, diagnose, uneven_passes
from ddpcheck.run.source_loops import enclosing_loop

MISMATCH, UNEVEN, HANG = CollectiveMismatch.code, UnevenWork.code, CollectiveHang.code


def _log(*calls: Call, current: bool = True) -> CallLog:
    return CallLog(calls[-1].seq if calls else 0, calls, calls[-1] if calls and current else None)


def _state(rank: int, *calls: Call, steps: int = 0, passes: tuple[PassInfo, ...] = (), current: bool = True,
           frames: tuple[str, ...] = ()) -> RankState:
    return RankState(rank, {"world": _log(*calls, current=current)}, steps=steps, passes=passes, frames=frames)


def test_a_shape_that_differs_on_one_rank_is_named_with_both_sides_and_lines():
    ok = Call(1, "all_reduce", "float32[4]", "/x/stats.py:10", 1)
    states = {r: _state(r, Call(1, "all_reduce", "float32[5]" if r == 2 else "float32[4]", "/x/stats.py:10", 1))
              for r in range(4)}
    found = diagnose(states, 4)
    assert found is not None and found.code == MISMATCH
    assert found.message == ("call #1: rank 2 all_reduce float32[5] at stats.py:10 (after step 1), "
                             "ranks 0, 1, 3 all_reduce float32[4] at stats.py:10 (after step 1)")
    assert found.ranks == (2,) and found.site == ok.site


def test_the_first_mismatch_is_found_after_equal_calls_and_a_missing_rank_is_named():
    a, b = Call(1, "all_reduce", "float32[1]", "/x/t.py:5", 0), Call(2, "broadcast", "float32[4] from rank 0", "/x/t.py:6", 0)
    logs = {0: _log(a, b), 1: _log(a, b), 2: _log(a, current=False)}
    found = first_mismatch(logs)
    assert found is not None and found.seq == 2 and found.missing == (2,)
    assert found.odd_ranks == (2,)
    assert "rank 2 never entered it (its last was call #1, all_reduce float32[1] at t.py:5" in found.message()
    assert first_mismatch({0: _log(a, b), 1: _log(a, b)}) is None


def test_calls_older_than_a_ranks_window_are_not_compared():
    old = [Call(i, "all_reduce", "float32[1]", None, 0) for i in range(1, 5)]
    other = Call(2, "barrier", "", None, 0)  # differs, but rank 1 no longer holds call #2
    logs = {0: CallLog(4, tuple(old[2:]), None), 1: CallLog(4, (old[0], other, *old[2:]), None)}
    assert first_mismatch(logs) is None


def test_a_collective_on_a_subgroup_is_compared_among_its_members_only():
    w = Call(1, "all_reduce", "float32[1]", None, 0)
    sub = {r: Call(1, "all_reduce", "float32[2]" if r == 1 else "float32[3]", "/x/t.py:9", 0, "ranks 0, 1")
           for r in (0, 1)}
    states = {r: RankState(r, {"world": _log(w, current=False), **({"ranks 0, 1": _log(sub[r])} if r in sub else {})})
              for r in range(3)}
    found = diagnose(states, 3)
    assert found is not None and found.message.startswith("call #1 on the group of ranks 0, 1: ")


def test_a_longer_shard_is_uneven_work_but_a_rank_that_is_only_behind_is_not():
    def p(batches: int, ended: bool) -> PassInfo:
        return PassInfo(0, 0, "/x/train.py:31", batches, ended, steps=min(batches, 4))

    longer = {r: _state(r, passes=(p(5 if r == 3 else 4, r != 3),)) for r in range(4)}
    found = uneven_passes(longer)
    assert found is not None and found.odd == (3,)
    assert found.message() == ("uneven work in epoch 0 from the DataLoader at train.py:31: rank 3 had drawn "
                               "5 batches (4 optimizer steps), ranks 0–2 drew 4 batches (4 optimizer steps)")
    behind = {r: _state(r, passes=(p(2 if r == 3 else 4, r != 3),)) for r in range(4)}
    assert uneven_passes(behind) is None
    finished_short = {r: _state(r, passes=(p(3 if r == 0 else 4, True),)) for r in range(4)}
    assert uneven_passes(finished_short).odd == (0,)  # type: ignore[union-attr]


SCRIPT = """\
    import torch.distributed as dist

    def main(model, opt, rank):
        for step in range(1, 20):
            loss = model()
            loss.backward()
            opt.step()
            if rank == 0 and step == 3:
                dist.barrier()
            if loss.item() < 0.05:
                break
        dist.barrier()
"""


def test_a_rank_whose_next_collective_is_after_the_loop_left_it_early(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(SCRIPT))
    backward = Call(5, DDP_BACKWARD, "1 bucket: 36 B", f"{path}:6", 3)
    after_loop = Call(5, "barrier", "", f"{path}:12", 3)
    states = {r: _state(r, after_loop if r == 1 else backward, steps=3) for r in range(4)}
    found = diagnose(states, 4, hung_s=10)
    assert found is not None and found.code == UNEVEN and found.ranks == (1,)
    assert found.message.startswith(
        "rank 1 left the training loop at train.py:4 after 3 optimizer steps (the `break` at train.py:11) "
        "while ranks 0, 2, 3 went on: call #5: rank 1 barrier at train.py:12 (after step 3), ranks 0, 2, 3 "
        "DDP's gradient all-reduce (1 bucket: 36 B) in loss.backward() at train.py:6 (step 4)")
    assert found.message.endswith("; the job hung (no progress for 10 s) and ddpcheck stopped it")
    assert found.site == f"{path}:11"


def test_a_collective_only_one_rank_makes_inside_the_loop_is_a_mismatch(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(SCRIPT))
    backward = Call(5, DDP_BACKWARD, "1 bucket: 36 B", f"{path}:6", 3)
    inside = Call(5, "barrier", "", f"{path}:9", 3)
    found = diagnose({r: _state(r, inside if r == 0 else backward, steps=3) for r in range(4)}, 4, hung_s=10)
    assert found is not None and found.code == MISMATCH and found.ranks == (0,) and found.site == f"{path}:9"


def test_loops_know_their_lines_their_exits_and_stop_at_function_boundaries(tmp_path):
    path = tmp_path / "t.py"
    path.write_text(textwrap.dedent("""\
        for epoch in range(2):
            def helper():
                return 1
            for x in []:
                if x:
                    break
                continue
            while True:
                break
            epoch += 1
    """))
    inner = enclosing_loop(str(path), 5)
    assert inner is not None and (inner.start, inner.end, inner.exits) == (4, 7, (6,))
    assert enclosing_loop(str(path), 9).start == 8  # type: ignore[union-attr]
    outer = enclosing_loop(str(path), 10)
    assert outer is not None and (outer.start, outer.end, outer.exits) == (1, 10, ())  # the while's break is its own
    assert enclosing_loop(str(path), 3) is None  # a function body is not in the loop around the def


def test_a_hang_nothing_explains_says_where_each_rank_waits():
    same = Call(7, "all_reduce", "float32[4]", "/x/t.py:9", 2)
    found = diagnose({r: _state(r, same) for r in range(3)}, 4, hung_s=5)
    assert found is not None and found.code == HANG
    assert "ranks 0–2 are in all_reduce float32[4] at t.py:9 (after step 2) (call #7)" in found.message
    assert "rank 3 is silent" in found.message


def test_the_live_file_reads_back_what_the_rank_wrote_even_after_a_torn_slot(tmp_path):
    path = str(tmp_path / "live-rank-0.bin")
    writer = live.LiveFile(path)
    calls = [Call(i, "all_reduce", "float32[4]", "/x/t.py:9", i // 2) for i in range(1, 41)]
    for call in calls:
        writer.put_call(call)
    writer.set("entered", 40)
    writer.set("in_call", 40)
    writer.set("steps", 19)
    writer.set_pass({"loader": 0, "pass": 1, "site": "/x/t.py:3"})
    writer.close()
    data = live.read(path)
    assert data is not None and data["steps"] == 19 and data["pass"]["pass"] == 1
    log = data["log"]
    assert log.entered == 40 and [c.seq for c in log.recent] == list(range(9, 41)) and log.current == calls[-1]
    with open(path, "r+b") as fh:  # a slot half written when the rank died
        fh.seek(live._HEAD + live.PASS_SLOT + (20 % live.RING) * live.SLOT)
        fh.write(b'[20, "all_re\n')
    assert [c.seq for c in live.read(path)["log"].recent] == list(range(21, 41))  # type: ignore[index]


def test_a_rank_that_stepped_once_more_waits_in_ddpchecks_exchange_and_is_uneven_work():
    a = Call(4, "all_reduce", "float32[1]", "/x/t.py:9", 3)
    b = Call(5, "all_reduce", "float32[1]", "/x/t.py:9", 3)
    states = {r: _state(r, a, b, steps=3) for r in (0, 1, 2)}
    states[3] = RankState(3, {"world": _log(a, current=False)}, steps=4, ours="ddpcheck's check exchange after optimizer step 4")
    found = diagnose(states, 4, hung_s=5)
    assert found is not None and found.code == UNEVEN and found.ranks == (3,)
    assert found.message.startswith("rank 3 ran optimizer step 4 (the others have run 3) and waits in ddpcheck's "
                                    "check exchange: call #5: ranks 0–2 all_reduce float32[1] at t.py:9")


GUARDED = """\
    import torch.distributed as dist

    def main(model, opt, loader, args):
        for epoch in range(3):
            for batch in loader:
                model(batch).backward()
                opt.step()
            if dist.get_rank() == 0:
                dist.all_reduce(total)
            if args.local_rank != -1:
                dist.barrier()
"""


def test_a_collective_under_an_if_on_the_rank_is_a_mismatch_named_by_its_line_not_a_rank_leaving_the_loop(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(GUARDED))
    backward = Call(5, DDP_BACKWARD, "1 bucket: 36 B", f"{path}:6", 4)
    guarded = Call(5, "all_reduce", "float32[1]", f"{path}:9", 4)
    # The other rank's next gradient all-reduce meets rank 0's call: after the inner loop, but
    # rank 0 did not leave the training loop.
    found = diagnose({0: _state(0, guarded, steps=4), 1: _state(1, backward, steps=4)}, 2, hung_s=10)
    assert found is not None and found.code == MISMATCH, found
    assert found.ranks == (0,) and found.site == f"{path}:9"
    assert "rank 0 makes that call only under `if dist.get_rank() == 0:` at train.py:8" in found.message
    # The other rank finished the script: after the job, a crash of rank 0's call is this mismatch.
    last = Call(4, DDP_BACKWARD, "1 bucket: 36 B", f"{path}:6", 3)
    alone = {0: _state(0, guarded, steps=4), 1: _state(1, last, steps=4, current=False)}
    found = diagnose(alone, 2, ended=frozenset({1}))
    assert found is not None and found.code == MISMATCH and found.ranks == (0,) and found.site == f"{path}:9"
    assert found.message.endswith("which the other ranks skip; rank 1 had finished the script")
    # A hang where the other rank waits outside any collective: the same, not "never joined".
    found = diagnose(alone, 2, hung_s=10)
    assert found is not None and found.code == MISMATCH and found.ranks == (0,)
    # `local_rank != -1` holds on every rank of a distributed run: no rank is singled out by it.
    barrier = Call(5, "barrier", "", f"{path}:11", 4)
    found = diagnose({0: _state(0, barrier, steps=4), 1: _state(1, backward, steps=4)}, 2, hung_s=10)
    assert found is not None and found.code == UNEVEN
