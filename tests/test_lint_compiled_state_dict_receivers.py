"""The state dict of a compiled model saved through a receiver chosen by mode (`(model.module if
distributed else model).state_dict()`, or a name bound to such a choice) and through a name the
saved dict holds (`state = net.state_dict()`, then `{"model": state}`). Through `ddpcheck lint`."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

CHECKPOINTS = """\
    import torch


    def save_run(model, epoch, path, distributed=False):
        SAVE
    """

TRAIN = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from checkpoints import save_run


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--compile", default=None)
        parser.add_argument("--distributed", action="store_true")
        args = parser.parse_args()
        if args.distributed:
            dist.init_process_group("nccl")
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        model = torch.nn.Linear(8, 8).cuda()
        COMPILE
        if args.distributed:
            model = DDP(model, device_ids=[local_rank])
        for epoch in range(3):
            model(torch.randn(4, 8).cuda()).sum().backward()
            if local_rank == 0:
                save_run(model, epoch, f"ckpt_{epoch}.tar", distributed=args.distributed)


    if __name__ == "__main__":
        main()
    """

COMPILED = "if args.compile:\n            model = torch.compile(model, mode=args.compile)"

IN_PLACE = 'torch.save({"model": (model.module if distributed else model).state_dict(), "epoch": epoch}, path)'

THROUGH_NAMES = """net = model.module if distributed else model
        state = net.state_dict()
        checkpoint = {"model": state, "epoch": epoch}
        torch.save(checkpoint, path)"""


def _found(tmp_path, save: str, compile_: str = COMPILED) -> set[tuple[str, int, str]]:
    _write(tmp_path, {"checkpoints.py": CHECKPOINTS.replace("SAVE", save),
                      "train.py": TRAIN.replace("COMPILE", compile_)})
    return _findings(tmp_path, "train.py", select="DDP024")


def test_a_receiver_chosen_by_mode_in_place_is_read_through_its_arms(tmp_path):
    assert _found(tmp_path, IN_PLACE) == {("checkpoints.py", 5, "DDP024")}


def test_a_name_bound_to_the_choice_and_a_dict_entry_bound_to_the_state_dict_are_followed(tmp_path):
    assert _found(tmp_path, THROUGH_NAMES) == {("checkpoints.py", 6, "DDP024")}


def test_without_compile_the_same_saves_are_clean(tmp_path):
    assert _found(tmp_path, THROUGH_NAMES, compile_="pass") == set()


def test_saving_the_module_inside_the_compiled_one_is_clean(tmp_path):
    save = THROUGH_NAMES.replace("net.state_dict()", "net._orig_mod.state_dict()")
    assert _found(tmp_path, save) == set()
