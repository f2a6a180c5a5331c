"""Who reads a run's checkpoints back, through `ddpcheck lint` (DDP019, DDP024).

A wrapper's key prefix (`module.`, `_orig_mod.`) is harmless when the project's reader removes
it: a function the loaded state dict passes through (`load_state_dict(clean(torch.load(p)))`),
or an inference script of the project the training script never imports. It is a finding when
a plain-model script of the project reads the checkpoints through the run's own loader, even
though the run itself resumes into the DDP model. A compiled model saved only by the script's
non-distributed mode is outside what DDP024 checks."""

from __future__ import annotations

import textwrap

from tests.helpers import finding_set as _findings
from tests.helpers import write_project as _write


def _variant(text: str, old: str, new: str) -> str:
    assert old in text, old
    text = text.replace(old, new)
    compile(textwrap.dedent(text), "variant", "exec")
    return text


TRAIN = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from net import Classifier


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--epochs", type=int, default=5)
        parser.add_argument("--out", default="classifier.pt")
        args = parser.parse_args()
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(Classifier().cuda(), device_ids=[local_rank])
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for epoch in range(args.epochs):
            train_one_epoch(model, opt)
            if dist.get_rank() == 0:
                torch.save({"epoch": epoch, "weights": model.state_dict()}, args.out)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """

NET = """\
    import torch


    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Linear(16, 4)

        def forward(self, x):
            return self.body(x)
    """

PREDICT = """\
    import sys

    import torch

    from net import Classifier


    def load(path):
        ckpt = torch.load(path, map_location="cpu")
        weights = {k.replace("module.", "", 1): v for k, v in ckpt["weights"].items()}
        model = Classifier()
        model.load_state_dict(weights)
        return model.eval()


    if __name__ == "__main__":
        net = load(sys.argv[1])
        print(net(torch.randn(1, 16)).argmax())
    """

SAVED = ("train.py", 24, "DDP019")


def test_an_inference_script_that_strips_the_prefix_makes_the_save_clean(tmp_path):
    _write(tmp_path, {"train.py": TRAIN, "net.py": NET, "tools/predict.py": PREDICT})
    assert _findings(tmp_path, "train.py", select="DDP019") == set()


def test_an_inference_script_that_loads_the_keys_as_saved_leaves_the_finding(tmp_path):
    plain = _variant(PREDICT, 'weights = {k.replace("module.", "", 1): v for k, v in ckpt["weights"].items()}',
                     'weights = ckpt["weights"]')
    _write(tmp_path, {"train.py": TRAIN, "net.py": NET, "tools/predict.py": plain})
    assert _findings(tmp_path, "train.py", select="DDP019") == {SAVED}


def test_a_prefix_named_away_from_any_loading_is_no_reader(tmp_path):
    # A script that only prints a key name never reads the checkpoint back.
    note = """\
        import torch

        def describe(sd):
            print("keys start with 'module.' under DDP:", list(sd)[:3])
        """
    _write(tmp_path, {"train.py": TRAIN, "net.py": NET, "tools/describe.py": note})
    assert _findings(tmp_path, "train.py", select="DDP019") == {SAVED}


def test_the_stripping_helper_the_reader_calls(tmp_path):
    # The other script loads through a helper of its own that renames the keys.
    helper = _variant(PREDICT, 'def load(path):', 'def unwrap_keys(sd):\n'
                      '        return {k[len("module."):] if k.startswith("module.") else k: v for k, v in sd.items()}\n\n\n'
                      '    def load(path):')
    helper = _variant(helper, 'weights = {k.replace("module.", "", 1): v for k, v in ckpt["weights"].items()}',
                      'weights = ckpt["weights"]')
    helper = _variant(helper, "model.load_state_dict(weights)", "model.load_state_dict(unwrap_keys(weights))")
    _write(tmp_path, {"train.py": TRAIN, "net.py": NET, "tools/predict.py": helper})
    assert _findings(tmp_path, "train.py", select="DDP019") == set()


RESUMING = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from checkpoints import fix_keys
    from net import Classifier


    def main(args):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = Classifier().cuda()
        if args.init:
            state = fix_keys(torch.load(args.init, map_location="cpu"))
            net.load_state_dict(state, strict=False)
        model = DDP(net, device_ids=[local_rank])
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for epoch in range(args.epochs):
            train_one_epoch(model, opt)
            if dist.get_rank() == 0:
                torch.save(model.state_dict(), "last.pt")


    if __name__ == "__main__":
        main(parse_args())
    """

FIX_KEYS = """\
    from collections import OrderedDict


    def drop_prefix(sd):
        return OrderedDict((k[len("module."):], v) for k, v in sd.items())


    def fix_keys(sd):
        if "model" in sd:
            sd = sd["model"]
        if any(k.startswith("module.") for k in sd):
            sd = drop_prefix(sd)
        return sd
    """


def test_a_state_dict_loaded_through_a_function_that_strips_the_prefix(tmp_path):
    _write(tmp_path, {"train.py": RESUMING, "net.py": NET, "checkpoints.py": FIX_KEYS})
    assert _findings(tmp_path, "train.py", select="DDP019") == set()


def test_a_state_dict_loaded_through_a_function_that_keeps_the_keys(tmp_path):
    keeps = """\
        def fix_keys(sd):
            return sd.get("model", sd)
        """
    _write(tmp_path, {"train.py": RESUMING, "net.py": NET, "checkpoints.py": keeps})
    assert _findings(tmp_path, "train.py", select="DDP019") == {("train.py", 24, "DDP019")}


UTIL = """\
    import torch


    def save_checkpoint(path, model, optimizer, epoch):
        torch.save({"epoch": epoch, "model": model.state_dict(), "optim": optimizer.state_dict()}, path)


    def load_checkpoint(path, model, optimizer):
        ckpt = torch.load(path, map_location="cpu")
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optim"])
        return ckpt["epoch"]
    """

TRAIN_DDP = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from net import Classifier
    from util import load_checkpoint, save_checkpoint


    def run(rank, world_size, path):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        model = DDP(Classifier().cuda(rank), device_ids=[rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        start = load_checkpoint(path, model, optimizer) if os.path.exists(path) else 0
        for epoch in range(start, 10):
            train_one_epoch(model, optimizer)
            if rank == 0:
                save_checkpoint(path, model, optimizer, epoch)
        dist.destroy_process_group()


    if __name__ == "__main__":
        torch.multiprocessing.spawn(run, args=(2, "ckpt.pt"), nprocs=2)
    """

TRAIN_ONE_GPU = """\
    import os

    import torch

    from net import Classifier
    from util import load_checkpoint, save_checkpoint


    def main(path="ckpt.pt"):
        model = Classifier().cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        start = load_checkpoint(path, model, optimizer) if os.path.exists(path) else 0
        for epoch in range(start, 10):
            train_one_epoch(model, optimizer)
            save_checkpoint(path, model, optimizer, epoch)


    if __name__ == "__main__":
        main()
    """


def test_a_single_gpu_script_reading_through_the_runs_loader_makes_the_prefix_a_finding(tmp_path):
    _write(tmp_path, {"train_ddp.py": TRAIN_DDP, "train.py": TRAIN_ONE_GPU, "net.py": NET, "util.py": UTIL})
    assert _findings(tmp_path, "train_ddp.py", select="DDP019") == {("util.py", 5, "DDP019")}


def test_the_ddp_resume_alone_round_trips_the_prefix(tmp_path):
    _write(tmp_path, {"train_ddp.py": TRAIN_DDP, "net.py": NET, "util.py": UTIL})
    assert _findings(tmp_path, "train_ddp.py", select="DDP019") == set()


def test_a_reader_that_wraps_its_model_too_is_no_plain_reader(tmp_path):
    wrapped = _variant(TRAIN_ONE_GPU, "model = Classifier().cuda()",
                       "model = torch.nn.DataParallel(Classifier().cuda())")
    _write(tmp_path, {"train_ddp.py": TRAIN_DDP, "train.py": wrapped, "net.py": NET, "util.py": UTIL})
    assert _findings(tmp_path, "train_ddp.py", select="DDP019") == set()


def test_a_script_with_a_loader_of_the_same_name_is_no_reader_of_the_run(tmp_path):
    own = _variant(TRAIN_ONE_GPU, "from util import load_checkpoint, save_checkpoint\n",
                   "\n\n    def load_checkpoint(path, model, optimizer):\n        return 0\n\n\n"
                   "    def save_checkpoint(path, model, optimizer, epoch):\n        pass\n")
    _write(tmp_path, {"train_ddp.py": TRAIN_DDP, "train.py": own, "net.py": NET, "util.py": UTIL})
    assert _findings(tmp_path, "train_ddp.py", select="DDP019") == set()


COMPILED = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from net import Classifier


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--distributed", action="store_true")
        args = parser.parse_args()
        rank = 0
        model = Classifier().cuda()
        if args.distributed:
            dist.init_process_group("nccl")
            rank = dist.get_rank()
            local_rank = int(os.environ["LOCAL_RANK"])
            model = DDP(model.cuda(local_rank), device_ids=[local_rank])
        else:
            model = torch.compile(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for epoch in range(10):
            train_one_epoch(model, opt)
            if rank == 0:
                torch.save({"model": model.module.state_dict() if args.distributed else model.state_dict(),
                            "epoch": epoch}, "last.pt")


    if __name__ == "__main__":
        main()
    """


def test_a_model_compiled_only_by_the_non_distributed_mode(tmp_path):
    _write(tmp_path, {"train.py": COMPILED, "net.py": NET})
    assert _findings(tmp_path, "train.py", select="DDP024") == set()


def test_a_model_compiled_in_both_modes_saves_the_compiled_keys(tmp_path):
    both = _variant(COMPILED, "        model = Classifier().cuda()\n",
                    "        model = torch.compile(Classifier().cuda())\n")
    both = _variant(both, "        else:\n            model = torch.compile(model)\n", "")
    both = _variant(both, "DDP(model.cuda(local_rank),", "DDP(model,")
    _write(tmp_path, {"train.py": both, "net.py": NET})
    assert ("train.py", 26, "DDP024") in _findings(tmp_path, "train.py", select="DDP024")


COMPILED_DDP = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from net import Classifier

    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    model = torch.compile(DDP(Classifier().cuda(local_rank), device_ids=[local_rank]))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(10):
        train_one_epoch(model, opt)
        if dist.get_rank() == 0:
            torch.save({"model_state": model.state_dict()}, "model.pt")
    """

EXPORT = """\
    import torch

    from net import Classifier


    def export(path, out):
        state = torch.load(path, map_location="cpu")["model_state"]
        state = {k.replace("_orig_mod.module.", ""): v for k, v in state.items()}
        model = Classifier()
        model.load_state_dict(state)
        torch.onnx.export(model.eval(), torch.randn(1, 16), out)


    if __name__ == "__main__":
        export("model.pt", "model.onnx")
    """


def test_an_export_script_that_strips_the_compiled_prefix(tmp_path):
    _write(tmp_path, {"train.py": COMPILED_DDP, "net.py": NET, "export.py": EXPORT})
    assert _findings(tmp_path, "train.py", select="DDP024") == set()


def test_an_export_script_that_strips_nothing(tmp_path):
    plain = _variant(EXPORT, '        state = {k.replace("_orig_mod.module.", ""): v for k, v in state.items()}\n', "")
    _write(tmp_path, {"train.py": COMPILED_DDP, "net.py": NET, "export.py": plain})
    assert _findings(tmp_path, "train.py", select="DDP024") == {("train.py", 16, "DDP024")}


def test_a_reader_in_another_projects_folder_of_the_repository_is_not_this_scripts(tmp_path):
    # A repository of several research projects: another project's evaluation code strips the
    # prefix from its own checkpoints, which says nothing of this script's.
    (tmp_path / ".git").mkdir()
    _write(tmp_path, {"segmentation/pretrain/train.py": TRAIN, "segmentation/pretrain/net.py": NET,
                      "detection/finetune/predict.py": PREDICT})
    assert _findings(tmp_path, "segmentation/pretrain/train.py", select="DDP019") == {SAVED}


def test_a_reader_below_the_scripts_folder_is_the_scripts(tmp_path):
    (tmp_path / ".git").mkdir()
    _write(tmp_path, {"segmentation/pretrain/train.py": TRAIN, "segmentation/pretrain/net.py": NET,
                      "segmentation/pretrain/tools/predict.py": PREDICT})
    assert _findings(tmp_path, "segmentation/pretrain/train.py", select="DDP019") == set()


# --- a save helper that forwards its `*args` to torch.save ---------------------------------------

FORWARDING_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from tools.dist import save_on_master


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        model = DDP(torch.nn.Linear(16, 4).cuda(local_rank), device_ids=[local_rank])
        for epoch in range(3):
            model(torch.randn(8, 16).cuda(local_rank)).sum().backward()
        save_on_master(model.state_dict(), "last.pth")


    if __name__ == "__main__":
        main()
    """

FORWARDING_HELPERS = {
    "tools/__init__.py": "",
    "tools/dist.py": """\
        import torch
        import torch.distributed as dist


        def is_main_process():
            return not dist.is_initialized() or dist.get_rank() == 0


        def save_on_master(*args, **kwargs):
            if is_main_process():
                torch.save(*args, **kwargs)
        """,
}


def test_a_save_helper_forwarding_its_args_saves_what_its_caller_passes(tmp_path):
    _write(tmp_path, {"train.py": FORWARDING_TRAIN, **FORWARDING_HELPERS})
    assert _findings(tmp_path, "train.py", select="DDP019") == {("train.py", 16, "DDP019")}


def test_a_save_helper_forwarding_the_inner_modules_state_dict_is_clean(tmp_path):
    text = _variant(FORWARDING_TRAIN, "model.state_dict()", "model.module.state_dict()")
    _write(tmp_path, {"train.py": text, **FORWARDING_HELPERS})
    assert _findings(tmp_path, "train.py", select="DDP019") == set()


def test_a_caller_that_passes_a_star_of_its_own_is_not_read(tmp_path):
    text = _variant(FORWARDING_TRAIN, 'save_on_master(model.state_dict(), "last.pth")',
                    'save_on_master(*[model.module.state_dict(), "last.pth"])')
    _write(tmp_path, {"train.py": text, **FORWARDING_HELPERS})
    assert _findings(tmp_path, "train.py", select="DDP019") == set()


def test_a_checkpointer_method_with_a_leading_parameter_forwards_the_rest(tmp_path):
    # The same forwarding, written as a method of a class in the script, after a step parameter.
    train = """\
        import os

        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP


        class Checkpointer:
            def __init__(self, every):
                self.every = every

            def maybe_save(self, step, *args):
                if step % self.every == 0 and dist.get_rank() == 0:
                    torch.save(*args)


        def main():
            dist.init_process_group("nccl")
            local_rank = int(os.environ["LOCAL_RANK"])
            net = DDP(torch.nn.Linear(16, 4).cuda(local_rank), device_ids=[local_rank])
            saver = Checkpointer(every=100)
            for step in range(1000):
                net(torch.randn(8, 16).cuda(local_rank)).sum().backward()
                saver.maybe_save(step, {{"model": {model}.state_dict(), "step": step}}, "ckpt.pth")


        if __name__ == "__main__":
            main()
        """
    _write(tmp_path, {"train.py": train.format(model="net")})
    assert _findings(tmp_path, "train.py", select="DDP019") == {("train.py", 24, "DDP019")}
    _write(tmp_path, {"train.py": train.format(model="net.module")})
    assert _findings(tmp_path, "train.py", select="DDP019") == set()


# --- pretrained parts loaded by the project's networks are not the run's checkpoints -------------

PART_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from losses import PerceptualLoss


    def train(model, loader, epochs, resume=None):
        criterion = PerceptualLoss("vgg16.pth")
        optimizer = torch.optim.Adam(model.parameters())
        for epoch in range(epochs):
            for image, target in loader:
                optimizer.zero_grad()
                criterion(model(image), target).backward()
                optimizer.step()


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        model = DDP(torch.nn.Conv2d(3, 3, 3).cuda(local_rank), device_ids=[local_rank])
        train(model, make_loader(), 10)
        if dist.get_rank() == 0:
            torch.save(model.state_dict(), "final.pth")


    if __name__ == "__main__":
        main()
    """

PART_LOSSES = """\
    import sys

    import torch
    import torch.nn as nn


    class Features(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())

        def forward(self, x):
            return self.body(x)


    class PerceptualLoss(nn.Module):
        def __init__(self, weights):
            super().__init__()
            self.features = Features()
            state = torch.load(weights, map_location="cpu")
            # the published weights were saved from a DataParallel model
            self.features.load_state_dict({k.replace("module.", ""): v for k, v in state.items()})

        def forward(self, x, y):
            return (self.features(x) - self.features(y)).abs().mean()


    if __name__ == "__main__":
        features = Features()
        features.load_state_dict(torch.load(sys.argv[1], map_location="cpu"))
        print(features(torch.randn(1, 3, 32, 32)).shape)
    """


def test_a_loss_network_that_renames_its_pretrained_parts_reads_no_run_checkpoint(tmp_path):
    # The constructor renames the keys of the weights it loads into a part of itself; the self-test
    # at the foot of its module loads a file as it is. Neither says how the run's checkpoints are read,
    # and handing the DDP model to a training function that builds this loss loads nothing into it.
    _write(tmp_path, {"train.py": PART_TRAIN, "losses.py": PART_LOSSES})
    assert _findings(tmp_path, "train.py", select="DDP019") == {("train.py", 26, "DDP019")}


def test_a_training_function_that_resumes_into_the_ddp_model_round_trips(tmp_path):
    text = _variant(PART_TRAIN, '        criterion = PerceptualLoss("vgg16.pth")\n',
                    '        criterion = PerceptualLoss("vgg16.pth")\n'
                    '        if resume:\n'
                    '            model.load_state_dict(torch.load(resume, map_location="cpu"))\n')
    _write(tmp_path, {"train.py": text, "losses.py": PART_LOSSES})
    assert _findings(tmp_path, "train.py", select="DDP019") == set()


def test_a_network_that_loads_its_whole_self_through_a_renaming_still_strips(tmp_path):
    # A network class that loads a checkpoint into itself, renaming `module.` keys, can read the
    # run's checkpoints: the project strips the prefix.
    losses = _variant(PART_LOSSES, "self.features.load_state_dict(", "self.load_state_dict(")
    _write(tmp_path, {"train.py": PART_TRAIN, "losses.py": losses})
    assert _findings(tmp_path, "train.py", select="DDP019") == set()


DIST_PREDICT = """\
    import os
    import sys

    import torch
    import torch.distributed as dist

    from net import Classifier


    def main(path):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = torch.nn.parallel.DistributedDataParallel(Classifier().cuda(), device_ids=[local_rank])
        ckpt = torch.load(path, map_location="cpu")
        model.load_state_dict(ckpt["weights"])
        model.eval()
        with torch.no_grad():
            print(model(torch.randn(1, 16).cuda()).argmax())
        dist.destroy_process_group()


    if __name__ == "__main__":
        main(sys.argv[1])
    """


def test_a_distributed_inference_script_that_loads_into_the_ddp_model_makes_the_save_clean(tmp_path):
    # The project reads its checkpoints back into the wrapper: the `module.` keys round-trip.
    _write(tmp_path, {"train.py": TRAIN, "net.py": NET, "tools/dist_predict.py": DIST_PREDICT})
    assert _findings(tmp_path, "train.py", select="DDP019") == set()


def test_a_distributed_script_that_saves_too_is_no_reader_of_the_runs_checkpoints(tmp_path):
    # A second trainer loads into its own DDP model and saves: it round-trips its own files, and
    # says nothing of who reads the run's.
    trainer = _variant(DIST_PREDICT, "        model.eval()\n",
                       "        model.eval()\n        torch.save(model.module.state_dict(), 'finetuned.pt')\n")
    _write(tmp_path, {"train.py": TRAIN, "net.py": NET, "tools/finetune.py": trainer})
    assert _findings(tmp_path, "train.py", select="DDP019") == {SAVED}
