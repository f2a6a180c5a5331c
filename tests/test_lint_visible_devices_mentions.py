"""`CUDA_VISIBLE_DEVICES` that a script only reads (a log line naming the GPU) or mentions in a
comment does not pin its processes, through `ddpcheck lint`: a spawned worker that uses CUDA with
no `set_device` is still reported; one that sets the variable per process is not."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


GAN_WORKER = """\
    import os

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train(rank, world_size, steps):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "12355"
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        device = torch.device(rank)
        generator = DDP(torch.nn.Linear(8, 8).to(device), device_ids=[rank])
        for step in range(steps):
            out = generator(torch.randn(4, 8, device=device))
            if rank == 0 and step % 100 == 0:
                print(f"[GPU: {os.environ['CUDA_VISIBLE_DEVICES']}] step {step} {out.mean().item()}")
        dist.destroy_process_group()


    if __name__ == "__main__":
        mp.spawn(train, args=(torch.cuda.device_count(), 1000), nprocs=torch.cuda.device_count())
"""


def test_reads_and_comments_of_the_variable_pin_nothing(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": GAN_WORKER}, "train.py", select="DDP003")
    assert _lines(findings, "DDP003") == [12]
    # Read with a default, at start-up.
    got = GAN_WORKER.replace("        device = torch.device(rank)",
                             "        visible = os.environ.get(\"CUDA_VISIBLE_DEVICES\", \"all\")\n"
                             "        device = torch.device(rank)")
    findings = lint_project(tmp_path, {"train.py": got}, "train.py", select="DDP003")
    assert _lines(findings, "DDP003") == [12]
    # Set only in a line left commented out.
    commented = GAN_WORKER.replace("import os\n", "import os\n    # os.environ[\"CUDA_VISIBLE_DEVICES\"] = \"1,2,3\"\n", 1)
    findings = lint_project(tmp_path, {"train.py": commented}, "train.py", select="DDP003")
    assert _lines(findings, "DDP003") == [13]


def test_a_variable_set_per_process_still_pins(tmp_path: Path) -> None:
    pinned = GAN_WORKER.replace('        os.environ["MASTER_ADDR"] = "localhost"',
                                '        os.environ["CUDA_VISIBLE_DEVICES"] = str(rank)\n'
                                '        os.environ["MASTER_ADDR"] = "localhost"')
    findings = lint_project(tmp_path, {"train.py": pinned}, "train.py", select="DDP003")
    assert _lines(findings, "DDP003") == []
    # Handed to a child process's environment: another way to set it, not followed.
    child = GAN_WORKER.replace("import os\n", "import os\n    import subprocess\n", 1).replace(
        "    if __name__ == \"__main__\":\n",
        "    def launch_eval():\n        subprocess.run([\"python\", \"eval.py\"], env={\"CUDA_VISIBLE_DEVICES\": \"0\"})\n\n\n"
        "    if __name__ == \"__main__\":\n")
    findings = lint_project(tmp_path, {"train.py": child}, "train.py", select="DDP003")
    assert _lines(findings, "DDP003") == []
