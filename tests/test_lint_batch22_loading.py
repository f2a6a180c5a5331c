"""Checkpoint loading (DDP011) in a project one of whose modules has comments in a legacy code
page (GBK, no encoding declaration), as seen on a public script of batch 22: Python imports such
a module, so the lint reads it too and goes on with the rest of the run, through `ddpcheck lint`
on a small project written in the style of the script, with a clean variant."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import lint_project, run_lint, write_project

TRAIN = """\
    import os
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from models.base_model import BaseModel
    from models import networks


    class Pix2Pix(BaseModel):
        def initialize(self, opt):
            self.netG = networks.define_G(opt)
            if opt.continue_train:
                self.load_network(self.netG, "G", opt.which_epoch)


    def train(gpu, opt):
        torch.cuda.set_device(gpu)
        dist.init_process_group("nccl", rank=gpu, world_size=opt.gpus)
        model = Pix2Pix()
        model.initialize(opt)
        model = torch.nn.parallel.DistributedDataParallel(model.cuda(gpu), device_ids=[gpu])
        dist.destroy_process_group()


    if __name__ == "__main__":
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "8888"
        opt = parse()
        mp.spawn(train, nprocs=opt.gpus, args=(opt,))
"""

BASE_MODEL = """\
    import os
    import torch


    class BaseModel(torch.nn.Module):
        def load_network(self, network, label, epoch):
            path = os.path.join(self.save_dir, "%s_net_%s.pth" % (epoch, label))
            network.load_state_dict(torch.load(path{location}))
"""

# Comments written in GBK (a Chinese code page), the code itself ASCII: Python imports this.
NETWORKS = (
    b"import torch.nn as nn\n"
    b"\n"
    b"\n"
    b"def define_G(opt):\n"
    b"    # \xb6\xa8\xd2\xe5\xc9\xfa\xb3\xc9\xc6\xf7\n"
    b"    return nn.Conv2d(3, 3, 3)  # \xbe\xed\xbb\xfd\n"
)


def project(tmp_path: Path, location: str = "") -> list[str]:
    write_project(tmp_path, {"train.py": TRAIN, "models/__init__.py": "",
                             "models/base_model.py": BASE_MODEL.format(location=location)})
    (tmp_path / "models" / "networks.py").write_bytes(NETWORKS)
    return ["train.py", "models/base_model.py", "models/networks.py"]


def test_module_with_legacy_comments_is_read_and_the_load_reported(tmp_path: Path) -> None:
    targets = project(tmp_path)
    found = lint_project(tmp_path, {}, *targets, select="DDP011")
    assert [(Path(f["path"]).name, f["location"]["line"], f["code"]) for f in found] == [
        ("base_model.py", 8, "DDP011")]


def test_module_with_legacy_comments_clean_load_stays_silent(tmp_path: Path) -> None:
    targets = project(tmp_path, location=', map_location="cpu"')
    assert lint_project(tmp_path, {}, *targets, select="DDP011") == []


def test_legacy_bytes_in_code_still_unreadable(tmp_path: Path) -> None:
    # A string that is not UTF-8 stops Python's import too: the file is not read.
    (tmp_path / "legacy.py").write_bytes(b"# \xb6\xa8\nNAME = \"\xb6\xa8\"\n")
    r = run_lint("--no-cache", "--output-format", "json", str(tmp_path / "legacy.py"))
    assert r.returncode == 2
    [error] = json.loads(r.stdout)["errors"]
    assert error["code"] == "DDP902" and "not valid utf-8 (byte 0xb6 at offset 2)" in error["message"]


def test_fix_leaves_a_file_with_legacy_comments_as_it_was(tmp_path: Path) -> None:
    # Its comments were read with their bytes replaced: writing the fix would lose them.
    script = tmp_path / "train.py"
    data = (b"import torch\n"
            b"import torch.distributed as dist\n"
            b"dist.init_process_group(\"nccl\")  # \xb3\xf5\xca\xbc\xbb\xaf\n"
            b"state = torch.load(args.resume)\n")
    script.write_bytes(data)
    r = run_lint("--no-cache", "--fix", "--unsafe-fixes", "--select", "DDP011", "--output-format", "concise",
                 str(script))
    assert script.read_bytes() == data
    assert f"{script}:4:9: DDP011" in r.stdout
    assert "cannot write fix: its comments are not valid utf-8" in r.stderr + r.stdout
