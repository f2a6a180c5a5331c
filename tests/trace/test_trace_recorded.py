"""`ddpcheck trace` on Flight Recorder dumps recorded from real 2-rank gloo jobs (the scripts in
fixtures/trace/, run by tests/trace/fr_rank.py under torchrun with TORCH_FR_BUFFER_SIZE=2000).
The frames name the paths the jobs ran at; `--source fixtures/trace` maps them back here."""

from __future__ import annotations

import json
import pickle
import shutil

import pytest

from tests.conftest import FIXTURES, ROOT, run_cli

DATA = ROOT / "tests" / "trace" / "data"
SOURCE = str(FIXTURES / "trace")


def trace(*args: str):
    return run_cli("trace", *args, "--source", SOURCE, "--output-format", "json")


def findings(result) -> list[dict]:
    return json.loads(result.stdout)["findings"]


def test_rank_conditional_barrier_is_a_mismatch_caused_by_ddp009():
    r = trace(str(DATA / "rank_barrier" / "rank_0"), str(DATA / "rank_barrier" / "rank_1"))
    assert r.returncode == 1, r.stderr
    verdict, *static = findings(r)
    assert verdict["code"] == "DDP128"
    assert "rank 0 barrier at fixtures/trace/rank_barrier.py:26" in verdict["message"]
    assert "rank 1 all_reduce float[161] at fixtures/trace/rank_barrier.py:22" in verdict["message"]
    assert "Likely cause" in verdict["message"] and "DDP009" in verdict["message"]
    sides = verdict["details"]["sides"]
    assert {tuple(s["ranks"]): s["op"] for s in sides} == {(0,): "barrier", (1,): "all_reduce"}
    assert [f["code"] for f in static] == ["DDP009"]
    assert static[0]["location"]["line"] == 26


def test_json_form_of_the_same_dumps_gives_the_same_verdict_without_stacks():
    r = trace(str(DATA / "rank_barrier" / "rank_0.json"), str(DATA / "rank_barrier" / "rank_1.json"))
    assert r.returncode == 1, r.stderr
    verdict = findings(r)[0]
    assert verdict["code"] == "DDP128"
    assert "rank 0 barrier" in verdict["message"] and "rank 1 all_reduce float[161]" in verdict["message"]
    assert verdict["path"] is None  # the JSON form records no stacks


def test_directory_with_both_forms_prefers_the_one_with_stacks():
    r = trace(str(DATA / "rank_barrier"))
    assert r.returncode == 1, r.stderr
    assert findings(r)[0]["location"]["line"] == 22


def test_rank_local_early_stop_is_uneven_work_caused_by_ddp035():
    r = trace(str(DATA / "early_stop"))
    assert r.returncode == 1, r.stderr
    verdict, *static = findings(r)
    assert verdict["code"] == "DDP129"
    assert verdict["ranks"] == [0]
    assert "rank 1 entered call #8 all_reduce float[161] at fixtures/trace/early_stop.py:20" in verdict["message"]
    assert "rank 0 never arrived: its last call was #7" in verdict["message"]
    assert [f["code"] for f in static] == ["DDP035"]
    assert "DDP035 rank-local-break at fixtures/trace/early_stop.py:24" in verdict["message"]


def test_uneven_last_batch_is_uneven_work_caused_by_ddp034():
    r = trace(str(DATA / "uneven_batch"))
    assert r.returncode == 1, r.stderr
    verdict, *static = findings(r)
    assert verdict["code"] == "DDP129"
    assert "rank 0 entered call #11" in verdict["message"] and "rank 1 never arrived" in verdict["message"]
    assert [f["code"] for f in static] == ["DDP034"]
    assert static[0]["location"]["line"] == 16


def test_shape_mismatch_names_both_shapes():
    r = trace(str(DATA / "shape_mismatch"))
    assert r.returncode == 1, r.stderr
    verdict = findings(r)[0]
    assert verdict["code"] == "DDP128"
    assert "rank 0 all_reduce float[3] at fixtures/trace/shape_mismatch.py:16" in verdict["message"]
    assert "rank 1 all_reduce float[4] at fixtures/trace/shape_mismatch.py:16" in verdict["message"]


def test_killed_rank_has_no_dump_and_is_named():
    r = trace(str(DATA / "killed_rank"))
    assert r.returncode == 1, r.stderr
    verdict = findings(r)[0]
    assert verdict["code"] == "DDP120" and verdict["ranks"] == [1]
    assert "rank 1 of 2 wrote no Flight Recorder dump" in verdict["message"]
    assert "killed_rank.py:24" in verdict["message"]


def test_one_rank_file_missing_from_a_set():
    r = trace(str(DATA / "healthy" / "rank_0"))
    assert r.returncode == 1, r.stderr
    assert [(f["code"], f["ranks"]) for f in findings(r)] == [("DDP120", [1])]


def test_healthy_job_exits_0_and_says_where_it_ended():
    r = run_cli("trace", str(DATA / "healthy"), "--source", SOURCE)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "dumps of 2 of 2 ranks, 1 process group" in r.stdout
    assert "last call in the default group is #13 all_reduce float[161] at fixtures/trace/healthy.py:23" in r.stdout
    assert "All checks passed!" in r.stdout


@pytest.mark.parametrize("content", [b"", b"\x80\x04\x95 truncated", b"hello world\n", b"{not json"])
def test_unreadable_file_is_one_line_and_the_rest_is_still_analysed(tmp_path, content):
    for name in ("rank_0", "rank_1"):
        shutil.copy(DATA / "rank_barrier" / name, tmp_path / name)
    (tmp_path / "rank_2").write_bytes(content)
    r = run_cli("trace", str(tmp_path), "--source", SOURCE, "--output-format", "concise")
    assert r.returncode == 2
    errors = r.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith(f"ddpcheck: error: {tmp_path / 'rank_2'}: ")
    assert "Traceback" not in r.stderr
    assert "DDP128" in r.stdout


def test_a_pickle_that_names_a_class_is_refused_without_running_it(tmp_path):
    (tmp_path / "rank_0").write_bytes(pickle.dumps({"version": "2.10", "entries": [], "x": ValueError("boom")}))
    r = run_cli("trace", str(tmp_path / "rank_0"), "--source", SOURCE)
    assert r.returncode == 2
    assert "not a Flight Recorder dump (refers to builtins.ValueError)" in r.stderr


def test_frames_are_matched_by_their_tail_under_source(tmp_path):
    # The job ran elsewhere (/work/.../fixtures/trace/...); a copy of the scripts under another
    # root still gets the lines and the static cause.
    copy = tmp_path / "checkout" / "trace"
    shutil.copytree(FIXTURES / "trace", copy)
    r = run_cli("trace", str(DATA / "early_stop"), "--source", str(tmp_path / "checkout"),
                "--output-format", "json", cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    codes = [f["code"] for f in findings(r)]
    assert codes == ["DDP129", "DDP035"]
    assert findings(r)[0]["path"] == "checkout/trace/early_stop.py"


@pytest.mark.parametrize("fmt", ["full", "concise", "github", "sarif", "junit"])
def test_every_output_format(fmt):
    r = run_cli("trace", str(DATA / "early_stop"), "--source", SOURCE, "--output-format", fmt)
    assert r.returncode == 1, r.stderr
    assert "DDP129" in r.stdout


def test_json_schema_is_the_one_lint_uses():
    doc = json.loads(trace(str(DATA / "early_stop")).stdout)
    assert doc["schema_version"] == 1 and doc["command"] == "trace"
    assert set(doc) == {"schema_version", "tool", "version", "command", "findings", "errors", "summary"}
    assert doc["summary"]["by_code"] == {"DDP035": 1, "DDP129": 1}


def test_json_follows_the_shared_report_schema():
    import jsonschema

    schema = json.loads((ROOT / "ddpcheck" / "report" / "report.schema.json").read_text())
    jsonschema.validate(json.loads(trace(str(DATA / "early_stop")).stdout), schema)


def test_each_process_group_is_compared_on_its_own_and_cross_referenced():
    r = run_cli("trace", str(DATA / "subgroups"), "--source", SOURCE)
    assert r.returncode == 1, r.stderr
    assert "dumps of 3 of 3 ranks, 3 process groups" in r.stdout
    # gloo's dumps here list no ranks for the default group: said, not guessed
    assert "a rank with no file would go unnoticed" in r.stdout
    assert ("process group 2: rank 2 entered call #2 all_reduce float[4] at fixtures/trace/subgroups.py:19"
            in r.stdout)
    assert "rank 2 never arrived: its last call was #1" in r.stdout
    assert "(it waits in process group 2, call #2)" in r.stdout


def test_calls_the_ring_buffer_dropped_on_one_rank_do_not_count_as_a_divergence(tmp_path):
    # A full recorder keeps only the newest entries: rank 0 has lost its first three here.
    shutil.copy(DATA / "early_stop" / "rank_1", tmp_path / "rank_1")
    dump = pickle.loads((DATA / "early_stop" / "rank_0").read_bytes())
    dump["entries"] = dump["entries"][3:]
    (tmp_path / "rank_0").write_bytes(pickle.dumps(dump))
    r = trace(str(tmp_path))
    assert r.returncode == 1, r.stderr
    verdict = findings(r)[0]
    assert verdict["code"] == "DDP129" and verdict["ranks"] == [0]
    assert "rank 1 entered call #8" in verdict["message"]


def test_output_file_and_an_unwritable_one(tmp_path):
    out = tmp_path / "reports" / "trace.json"
    r = run_cli("trace", str(DATA / "early_stop"), "--source", SOURCE, "--output-format", "json", "-o", str(out))
    assert r.returncode == 1 and r.stdout == ""
    assert json.loads(out.read_text())["summary"]["by_code"]["DDP129"] == 1
    r = run_cli("trace", str(DATA / "early_stop"), "--source", SOURCE, "-o", "/proc/no-such/x.txt")
    assert r.returncode == 2 and "cannot write it" in r.stderr and "Traceback" not in r.stderr
