"""A polling evaluation loop that skips or leaves on what each rank finds on disk (a project
function that globs the checkpoints and returns the first one not yet in a record file), before
an evaluation that waits in barriers, through `ddpcheck lint --select DDP035`: one rank can find a
checkpoint another does not (or the record a peer just wrote), and the others wait in the barrier.
Clean variants (rank 0's answer broadcast, no collective in the loop) stay silent."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str = "DDP035") -> list[tuple[str, int]]:
    return sorted((Path(f["path"]).name, f["location"]["line"]) for f in findings if f["code"] == code)


WATCH = """\
    import glob
    import os
    import time
    import torch
    import torch.distributed as dist

    from scoring import evaluate


    def next_unscored(folder, record):
        done = [line.strip() for line in open(record).readlines()]
        for path in sorted(glob.glob(os.path.join(folder, "ckpt_*.pt"))):
            if path not in done:
                return path
        return None


    def watch(model, loader, folder, record, limit):
        waited = 0
        while True:
            path = next_unscored(folder, record)
            if path is None:
                time.sleep(10)
                waited += 10
                if waited > limit:
                    break
                continue
            waited = 0
            model.load_state_dict(torch.load(path, map_location="cpu"))
            score = evaluate(model, loader)
            with open(record, "a") as f:
                print(path, file=f)


    def main():
        dist.init_process_group("nccl")
        rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(rank)
        model = torch.nn.Linear(4, 2).cuda()
        watch(model, [torch.zeros(2, 4)], "ckpts", "scored.txt", 600)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""

SCORING = """\
    import torch
    import torch.distributed as dist


    def evaluate(model, loader):
        total = 0.0
        with torch.no_grad():
            for x in loader:
                total += model(x.cuda()).sum().item()
        dist.barrier()
        return total
"""


def _lint(tmp_path: Path, watch: str, scoring: str = SCORING) -> list[tuple[str, int]]:
    files = {"watch.py": watch, "scoring.py": scoring}
    return _lines(lint_project(tmp_path, files, "watch.py", select="DDP035"))


def test_skip_on_what_this_rank_finds_on_disk_before_a_barrier_is_reported(tmp_path: Path) -> None:
    assert _lint(tmp_path, WATCH) == [("watch.py", 27)]


def test_no_collective_in_the_evaluation_is_silent(tmp_path: Path) -> None:
    assert _lint(tmp_path, WATCH, SCORING.replace("        dist.barrier()\n", "")) == []


def test_a_helper_that_only_reads_a_file_is_silent(tmp_path: Path) -> None:
    watch = WATCH.replace(
        "        for path in sorted(glob.glob(os.path.join(folder, \"ckpt_*.pt\"))):\n"
        "            if path not in done:\n"
        "                return path\n"
        "        return None\n",
        "        return done[-1] if done else None\n")
    assert _lint(tmp_path, watch) == []
