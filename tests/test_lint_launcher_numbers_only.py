"""A script whose process group takes its rank and world size from nowhere but the environment
(`init_process_group("nccl")`, no `rank=`/`world_size=`, nothing writes RANK/WORLD_SIZE) is started
by a launcher, which exports the rendezvous too: literal MASTER_ADDR/MASTER_PORT writes override
it (DDP015). Through `ddpcheck lint` on small projects in tmp_path."""

from __future__ import annotations

import pytest

from tests.helpers import finding_set, write_project

MODULE_LEVEL = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

os.environ["MASTER_ADDR"] = "127.0.0.1"
os.environ["MASTER_PORT"] = "29500"
dist.init_process_group("nccl"{extra})
model = DDP(torch.nn.Linear(4, 4).cuda())
"""

IN_A_FUNCTION = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def setup():
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    dist.init_process_group(backend="nccl", init_method="env://")


def main():
    setup()
    model = DDP(torch.nn.Linear(4, 4).cuda())


if __name__ == "__main__":
    main()
"""


def test_a_rendezvous_written_where_only_the_launcher_numbers_the_ranks_is_reported(tmp_path):
    write_project(tmp_path, {"train.py": MODULE_LEVEL.format(extra="")})
    assert finding_set(tmp_path, "train.py", select="DDP015") == {("train.py", 6, "DDP015")}


def test_the_same_in_a_setup_function_is_reported(tmp_path):
    write_project(tmp_path, {"train.py": IN_A_FUNCTION})
    assert finding_set(tmp_path, "train.py", select="DDP015") == {("train.py", 8, "DDP015")}


@pytest.mark.parametrize("extra", [
    ", rank=0, world_size=1",                     # a job the script numbers itself
    ", rank=args.rank, world_size=args.world_size",  # numbered from the command line
])
def test_a_script_that_numbers_its_ranks_itself_is_not_this_case(tmp_path, extra):
    write_project(tmp_path, {"train.py": MODULE_LEVEL.format(extra=extra)})
    assert finding_set(tmp_path, "train.py", select="DDP015") == set()


def test_a_script_that_writes_the_rank_and_world_size_is_clean(tmp_path):
    source = MODULE_LEVEL.format(extra="").replace(
        'os.environ["MASTER_PORT"] = "29500"\n',
        'os.environ["MASTER_PORT"] = "29500"\nos.environ["RANK"] = "0"\nos.environ["WORLD_SIZE"] = "1"\n')
    write_project(tmp_path, {"train.py": source})
    assert finding_set(tmp_path, "train.py", select="DDP015") == set()


def test_a_script_started_by_srun_is_clean(tmp_path):
    source = MODULE_LEVEL.format(extra="").replace(
        "import os\n", 'import os\nos.environ["LOCAL_RANK"] = os.environ["SLURM_LOCALID"]\n')
    write_project(tmp_path, {"train.py": source})
    assert finding_set(tmp_path, "train.py", select="DDP015") == set()


SETUP_HELPER = """\
import os
import torch.distributed as dist


def ddp_setup(rank, world_size, master_addr="localhost", master_port=12355):
    os.environ["MASTER_ADDR"] = master_addr
    os.environ["MASTER_PORT"] = str(master_port)
    dist.init_process_group("nccl", init_method="env://")
"""

TORCHRUN_SCRIPT = """\
import os
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from dist_utils import ddp_setup

LOCAL_RANK = int(os.environ["LOCAL_RANK"])


def main(args):
    ddp_setup(LOCAL_RANK, int(os.environ["WORLD_SIZE"]), {addr})
    model = DDP(torch.nn.Linear(4, 4).cuda(LOCAL_RANK), device_ids=[LOCAL_RANK])


if __name__ == "__main__":
    main(None)
"""


@pytest.mark.parametrize("addr", ['master_addr="127.0.0.1", master_port=29500', ""])
def test_a_helper_writing_literals_its_callers_pass_is_reported(tmp_path, addr):
    write_project(tmp_path, {"train.py": TORCHRUN_SCRIPT.format(addr=addr), "dist_utils.py": SETUP_HELPER})
    assert finding_set(tmp_path, "train.py", select="DDP015") == {("dist_utils.py", 6, "DDP015")}


def test_a_helper_writing_what_a_flag_gives_is_clean(tmp_path):
    addr = "master_addr=args.master_addr, master_port=args.master_port"
    write_project(tmp_path, {"train.py": TORCHRUN_SCRIPT.format(addr=addr), "dist_utils.py": SETUP_HELPER})
    assert finding_set(tmp_path, "train.py", select="DDP015") == set()
