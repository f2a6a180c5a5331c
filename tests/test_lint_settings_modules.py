"""A learning rate chosen in a project's settings module (`config.py`, `configs/train_cfg.py`, a
module of constants) is the user's choice, as a YAML file's is; one written in the script or in
a helper's code is not. Through `ddpcheck lint` (DDP004) on small projects in tmp_path."""

from __future__ import annotations

import pytest

from tests.helpers import finding_set, write_project

SCRIPT = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler
{imports}


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    model = DDP(torch.nn.Linear(8, 2).cuda(local_rank), device_ids=[local_rank])
    data = torch.utils.data.TensorDataset(torch.randn(64, 8))
    loader = DataLoader(data, batch_size=32, sampler=DistributedSampler(data))
    optimizer = torch.optim.AdamW(model.parameters(), lr={rate})
    for (x,) in loader:
        model(x.cuda()).sum().backward()
        optimizer.step()


if __name__ == "__main__":
    main()
"""

CONSTANTS = 'LEARNING_RATE = 3e-4\nBATCH_SIZE = 32\nDATA_DIR = "data/"\n'


@pytest.mark.parametrize(("files", "imports", "rate"), [
    ({"config.py": CONSTANTS}, "from config import *", "LEARNING_RATE"),
    ({"settings.py": CONSTANTS}, "import settings as S", "S.LEARNING_RATE"),
    ({"configs/__init__.py": "", "configs/train_cfg.py": CONSTANTS}, "from configs.train_cfg import LEARNING_RATE",
     "LEARNING_RATE"),
    ({"knobs.py": CONSTANTS}, "from knobs import LEARNING_RATE", "LEARNING_RATE"),
], ids=["star-import", "module-alias", "configs-package", "constants-only-module"])
def test_a_rate_from_a_settings_module_is_the_users_choice(tmp_path, files, imports, rate):
    write_project(tmp_path, {"train.py": SCRIPT.format(imports=imports, rate=rate), **files})
    assert finding_set(tmp_path, "train.py", select="DDP004") == set()


def test_a_rate_written_in_the_script_is_reported(tmp_path):
    write_project(tmp_path, {"train.py": SCRIPT.format(imports="LEARNING_RATE = 3e-4", rate="LEARNING_RATE")})
    assert finding_set(tmp_path, "train.py", select="DDP004") == {("train.py", 15, "DDP004")}


def test_a_rate_in_a_helper_modules_code_is_reported(tmp_path):
    # A module with code (functions) is not a settings file: its constant is the code's.
    helper = "LEARNING_RATE = 3e-4\n\n\ndef build(model):\n    return model\n"
    write_project(tmp_path, {"train.py": SCRIPT.format(imports="from helpers import LEARNING_RATE",
                                                       rate="LEARNING_RATE"), "helpers.py": helper})
    assert finding_set(tmp_path, "train.py", select="DDP004") == {("train.py", 15, "DDP004")}
