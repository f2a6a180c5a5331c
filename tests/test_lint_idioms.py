"""How real projects write DDP code, through `ddpcheck lint`: usage text that says how a file is
launched, spawn scripts and their rendezvous address, classes that wrap torch's, builders in
project packages. Each test writes a small project and reads what the user sees."""

from __future__ import annotations

import textwrap

from tests.helpers import write_project as _write, finding_set as _findings


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


LOADER_SCRIPT = """\
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    {loader_class}

    dist.init_process_group("gloo")
    loader = {call}
    for epoch in range(10):
        for batch in loader:
            pass
    dist.destroy_process_group()
    """


def _loader_findings(tmp_path, loader_class: str, call: str) -> set[tuple[str, int, str]]:
    _write(tmp_path, {"train.py": LOADER_SCRIPT.format(loader_class=textwrap.indent(textwrap.dedent(loader_class), "    ").strip(),
                                                     call=call)})
    return {(c, line) for _, line, c in _findings(tmp_path, "train.py", select="DDP001,DDP002")}


def test_a_dataloader_subclass_passing_the_callers_options_on_has_the_callers_sampler(tmp_path):
    cls = """
    class Loader(DataLoader):
        def __init__(self, dataset, **kwargs):
            super().__init__(dataset, collate_fn=list, **kwargs)
    """
    # The sampler reaches torch's constructor through **kwargs: a shuffling DistributedSampler
    # that never gets set_epoch, not a loader without one.
    assert _loader_findings(tmp_path, cls, "Loader(ds, sampler=DistributedSampler(ds))") == {("DDP002", 10)}
    assert _loader_findings(tmp_path, cls, "Loader(ds, shuffle=True)") == {("DDP001", 9)}


def test_a_dataloader_subclass_whose_base_call_the_model_cannot_read_is_not_reported(tmp_path):
    cls = """
    class Loader(DataLoader):
        def __init__(self, dataset, cfg):
            super().__init__(dataset, **cfg.loader_options())
    """
    assert _loader_findings(tmp_path, cls, "Loader(ds, cfg)") == set()


SCALER_PROJECT = {
    "scaler.py": """\
        class Scaler:
            def __call__(self, loss, optimizer, update_grad=True):
                loss.backward()
                if update_grad:
                    optimizer.step()
        """,
    "engine.py": """\
        def train_one_epoch(model, loader, optimizer, loss_scaler, accum):
            for i, batch in enumerate(loader):
                loss = model(batch).mean()
                loss_scaler(loss, optimizer, update_grad=(i + 1) % accum == 0)
        """,
    "train.py": """\
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        from engine import train_one_epoch
        from scaler import Scaler

        dist.init_process_group("gloo")
        model = DDP(torch.nn.Linear(4, 4))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * dist.get_world_size())
        for epoch in range(3):
            train_one_epoch(model, [torch.randn(2, 4)], optimizer, Scaler(), 4)
        dist.destroy_process_group()
        """,
}


def test_a_helper_linted_before_the_script_does_not_hide_what_the_script_reaches(tmp_path):
    # A loss scaler's __call__ runs backward on every micro-batch and steps on a counter: the
    # accumulation loop in engine.py all-reduces every micro-batch, whichever file is read first.
    _write(tmp_path, SCALER_PROJECT)
    want = {("engine.py", 4, "DDP016")}
    assert _findings(tmp_path, "train.py", select="DDP016") == want
    assert _findings(tmp_path, "engine.py", "scaler.py", "train.py", select="DDP016") == want
