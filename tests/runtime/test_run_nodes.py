"""`ddpcheck run --nodes N`: N torchrun agents on this machine form one job, as N machines would, so
that what breaks only from the second node on breaks here, with its line."""

from __future__ import annotations

import pytest
from diag_jobs import assert_no_survivors, codes, ddpcheck_run, finding, fixture

NODES = ["--nodes", "2", "--nproc", "2"]


def _line_of(path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def _status(data: dict, code: str) -> str:
    return next(c["status"] for c in data["run"]["checks"] if c["code"] == code)


@pytest.mark.slow
def test_a_correct_script_on_two_nodes_is_clean_and_sees_local_rank_differ_from_rank(tmp_path):
    script = fixture("cluster_trainer.py", tmp_path)
    proc, data, mark = ddpcheck_run([*NODES, str(script), "--checkpoint", str(tmp_path / "ck" / "last.pt")],
                                    tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The second node's ranks are ranks 2 and 3 with LOCAL_RANK 0 and 1, in one job of four.
    assert "RANK=2 LOCAL_RANK=0 GROUP_RANK=1" in proc.stdout and "RANK=3 LOCAL_RANK=1 GROUP_RANK=1" in proc.stdout
    assert data["run"]["job"]["world_size"] == 4 and data["run"]["job"]["ranks_reported"] == [0, 1, 2, 3]
    assert [(r["rank"], r["local_rank"]) for r in data["run"]["ranks"]] == [(0, 0), (1, 1), (2, 0), (3, 1)]
    # cuda:0 of node 1 is another GPU than cuda:0 of node 0: one device per rank.
    assert _status(data, "DDP110") == "pass"
    assert _status(data, "DDP101") == "pass" and _status(data, "DDP105") == "pass"
    assert _status(data, "DDP151") == "pass"  # saved on the global rank 0 only
    assert not [c for c in codes(data) if c not in ("DDP122",)], codes(data)
    assert "this node ran" not in proc.stdout  # every node ran here: one report
    assert_no_survivors(mark)


@pytest.mark.slow
@pytest.mark.parametrize("flags, text", [
    (["--device-from", "rank"], "torch.cuda.set_device(device_index)"),
    (["--device-from", "rank", "--no-set-device"], "nn.Linear(32, 4)).to(device)"),
    (["--ddp-ids-from", "rank"], "model = DDP(model, device_ids="),
])
def test_the_global_rank_as_device_index_fails_on_the_second_node_at_its_line(tmp_path, flags, text):
    script = fixture("cluster_trainer.py", tmp_path)
    proc, data, mark = ddpcheck_run([*NODES, str(script), *flags, "--checkpoint", str(tmp_path / "last.pt")],
                                    tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = finding(data, "DDP150")
    assert found["location"]["line"] == _line_of(script, text)
    assert found["ranks"][0] in (2, 3)
    assert "(node 1, LOCAL_RANK" in found["message"] and "invalid device ordinal" in found["message"]
    assert "node 1 has 2 GPU(s)" in found["message"]
    assert "DDP120" not in codes(data)  # the crash is this finding, said once
    assert "InvalidDeviceOrdinal: CUDA error: invalid device ordinal" in proc.stderr
    assert "ddpcheck/run/rank/emulate.py" not in proc.stderr  # the traceback is the script's
    assert_no_survivors(mark)


@pytest.mark.slow
def test_a_checkpoint_saved_on_every_nodes_local_rank_0_to_one_path_is_reported(tmp_path):
    script = fixture("cluster_trainer.py", tmp_path)
    target = tmp_path / "ck" / "last.pt"
    proc, data, mark = ddpcheck_run([*NODES, str(script), "--save-on", "local", "--checkpoint", str(target)],
                                    tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = finding(data, "DDP151")
    assert found["ranks"] == [0, 2]
    assert found["location"]["line"] == _line_of(script, "torch.save(")
    assert "rank 0 (node 0), rank 2 (node 1)" in found["message"] and "last.pt" in found["message"]
    assert_no_survivors(mark)


# The two refusals below run in-process (`ddpcheck run` calls this very function): nothing is
# launched, so no interpreter of its own is needed per case.
def test_a_job_larger_than_the_machines_memory_is_refused_before_anything_starts(tmp_path, capsys):
    from ddpcheck.run.launcher.entry import main

    script = fixture("cluster_trainer.py", tmp_path)
    report = tmp_path / "report.json"
    assert main(["--report", str(report), "--nodes", "64", "--nproc", "64", str(script)]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ddpcheck run: 4096 ranks and 63 more torchrun agents need at least")
    assert "GiB available: nothing was started. Run at most" in lines[0]
    assert not report.exists() and "RANK=" not in out


def test_nodes_refuses_rendezvous_options_it_sets_itself(tmp_path, capsys):
    from ddpcheck.run.launcher.entry import main

    script = fixture("cluster_trainer.py", tmp_path)
    assert main(["--nodes", "2", "--rdzv-endpoint", "localhost:29400", str(script)]) == 2
    assert "--nodes starts every node on this machine and sets the rendezvous itself; drop --rdzv-endpoint" \
        in capsys.readouterr().err


@pytest.mark.slow
def test_a_sampler_built_from_the_nodes_local_rank_is_reported_with_the_nodes(tmp_path):
    script = fixture("cluster_trainer.py", tmp_path)
    proc, data, mark = ddpcheck_run([*NODES, str(script), "--sampler-from", "local", "--checkpoint",
                                     str(tmp_path / "last.pt")], tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = finding(data, "DDP101")
    assert "rank 0 (node 0) and rank 2 (node 1)" in found["message"]
    assert "LOCAL_RANK / LOCAL_WORLD_SIZE" in found["message"]
    assert_no_survivors(mark)
