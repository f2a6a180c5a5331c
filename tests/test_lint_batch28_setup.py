"""Set-up rules on mechanisms seen on public scripts of batch 28: each through `ddpcheck lint` on a
small project written in the style of the scripts, with a clean (or differently reported) variant."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# A torchrun script (it reads RANK/WORLD_SIZE/LOCAL_RANK) that writes the rendezvous over the
# launcher's in its set-up.
RENDEZVOUS = """\
    import argparse
    import os
    import torch
    import torch.distributed as dist


    def init_distributed(args):
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            args.world_size = int(os.environ["WORLD_SIZE"])
            args.gpu = int(os.environ["LOCAL_RANK"])
        else:
            args.distributed = False
            return
        torch.cuda.set_device(args.gpu)
    {writes}
        dist.init_process_group(backend="nccl", world_size=args.world_size)


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--world_size", type=int, default=1)
        init_distributed(parser.parse_args())
"""


def _rendezvous(writes: str) -> dict[str, str]:
    return {"train.py": RENDEZVOUS.replace("    {writes}\n", writes)}


def test_address_and_port_written_together_are_one_finding(tmp_path: Path) -> None:
    writes = ('        os.environ["MASTER_ADDR"] = "127.0.0.1"\n'
              '        os.environ["MASTER_PORT"] = "29500"\n')
    assert lines(tmp_path, _rendezvous(writes), "DDP015") == [("train.py", 15)]


def test_address_and_port_written_apart_are_two_findings(tmp_path: Path) -> None:
    writes = ('        if os.path.exists("/etc/hosts"):\n'
              '            os.environ["MASTER_ADDR"] = "localhost"\n'
              '        print("rendezvous")\n'
              '        os.environ["MASTER_PORT"] = "29500"\n')
    assert lines(tmp_path, _rendezvous(writes), "DDP015") == [("train.py", 16), ("train.py", 18)]
