"""How real projects write DDP code, through `ddpcheck lint`: usage text that says how a file is
launched, spawn scripts and their rendezvous address, classes that wrap torch's, builders in
project packages. Each test writes a small project and reads what the user sees."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.conftest import run_cli


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def _findings(root: Path, *targets: str, select: str = "DDP0") -> set[tuple[str, int, str]]:
    r = run_cli("lint", "--no-cache", "--exit-zero", "--select", select, "--output-format", "json",
                *(str(root / t) for t in targets))
    assert r.returncode == 0, r.stderr
    return {(Path(f["path"]).name, f["location"]["line"], f["code"]) for f in json.loads(r.stdout)["findings"]}


SETUP = """\
    import torch.distributed as dist


    def setup(rank, world_size):
        dist.init_process_group("gloo", init_method="tcp://localhost:29500", rank=rank, world_size=world_size)
    {usage}
    """


def test_a_file_its_own_usage_text_launches_is_a_script(tmp_path):
    _write(tmp_path, {"ddp_setup.py": SETUP.format(usage="# Launch with: torchrun --nproc_per_node=2 ddp_setup.py")})
    assert ("ddp_setup.py", 5, "DDP015") in _findings(tmp_path, "ddp_setup.py", select="DDP015")


def test_usage_text_naming_another_script_of_the_project_is_about_that_script(tmp_path):
    _write(tmp_path, {
        "dist_utils.py": SETUP.format(usage="# Used by: torchrun --nproc_per_node=2 train.py"),
        "train.py": "import dist_utils\n",
    })
    assert _findings(tmp_path, "dist_utils.py", select="DDP015") == set()
