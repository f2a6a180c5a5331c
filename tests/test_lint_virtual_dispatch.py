"""Calls whose callee is chosen by the instance's class or by a table, through `ddpcheck lint`.

A base trainer's loop calls `self.on_epoch_end()` and `self._build()`; the project subclass the
script builds overrides them, so the override's code runs (and is checked) as if called there.
A function picked from a dict by a command-line value, or by `getattr(module, "name")`, runs as
each function the table may give. Overrides in subclasses the script never names, and tables the
model cannot read, are not followed."""

from __future__ import annotations

import textwrap

from tests.helpers import finding_set as _findings
from tests.helpers import write_project as _write


def _variant(text: str, old: str, new: str) -> str:
    assert old in text, old
    text = text.replace(old, new)
    compile(textwrap.dedent(text), "variant", "exec")
    return text


BASE = """\
    import torch
    import torch.distributed as dist


    class Trainer:
        def __init__(self, args):
            self.args = args
            self.model = self._build(args)
            self.opt = torch.optim.SGD(self.model.parameters(), lr=args.lr)

        def _build(self, args):
            raise NotImplementedError

        def on_epoch_end(self, epoch):
            pass

        def fit(self, loader):
            for epoch in range(self.args.epochs):
                for x, y in loader:
                    loss = torch.nn.functional.cross_entropy(self.model(x), y)
                    self.opt.zero_grad()
                    loss.backward()
                    self.opt.step()
                self.on_epoch_end(epoch)
    """

SUB = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from base import Trainer


    class ImageTrainer(Trainer):
        def _build(self, args):
            dist.init_process_group("nccl")
            local_rank = int(os.environ["LOCAL_RANK"])
            torch.cuda.set_device(local_rank)
            return DDP(make_net(args).cuda(), device_ids=[local_rank])

        def on_epoch_end(self, epoch):
            torch.save(self.model.module.state_dict(), f"ckpt_{epoch}.pt")
    """

RUN = """\
    import argparse

    from image import ImageTrainer

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()

    trainer = ImageTrainer(args)
    trainer.fit(make_loader(args))
    """


def test_an_override_in_another_module_runs_from_the_base_loop(tmp_path):
    _write(tmp_path, {"base.py": BASE, "image.py": SUB, "run.py": RUN})
    assert _findings(tmp_path, "run.py", select="DDP010") == {("image.py", 18, "DDP010")}


def test_the_guarded_override_is_clean(tmp_path):
    guarded = _variant(SUB, "            torch.save(", "            if dist.get_rank() == 0:\n                torch.save(")
    _write(tmp_path, {"base.py": BASE, "image.py": guarded, "run.py": RUN})
    assert _findings(tmp_path, "run.py", select="DDP010") == set()


def test_an_override_in_the_same_module_as_the_base(tmp_path):
    both = textwrap.dedent(BASE) + "\n\n" + textwrap.dedent(SUB).replace("from base import Trainer\n", "")
    run = RUN.replace("from image import ImageTrainer", "from trainers import ImageTrainer")
    _write(tmp_path, {"trainers.py": both, "run.py": run})
    found = _findings(tmp_path, "run.py", select="DDP010")
    assert {(name, code) for name, _, code in found} == {("trainers.py", "DDP010")}


def test_a_subclass_defined_in_the_script(tmp_path):
    script = textwrap.dedent(SUB) + textwrap.dedent(RUN).replace("from image import ImageTrainer\n", "")
    _write(tmp_path, {"base.py": BASE, "run.py": script})
    found = _findings(tmp_path, "run.py", select="DDP010")
    assert {(name, code) for name, _, code in found} == {("run.py", "DDP010")}


def test_the_setup_in_the_override_makes_a_module_level_seed_a_finding(tmp_path):
    # The process group is created only inside the subclass's `_build`, which the base's
    # constructor calls: the script is distributed, and its one global seed is every rank's.
    seeded = _variant(RUN, "import argparse\n", "import argparse\n\n    import torch\n\n    torch.manual_seed(0)\n")
    dropping = _variant(SUB, "DDP(make_net(args).cuda(),",
                        "DDP(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.1)).cuda(),")
    _write(tmp_path, {"base.py": BASE, "image.py": dropping, "run.py": seeded})
    assert ("run.py", 5, "DDP029") in _findings(tmp_path, "run.py", select="DDP029")


TWO = """\
    import torch
    import torch.distributed as dist

    from base import Trainer


    class QuietTrainer(Trainer):
        def _build(self, args):
            return make_net(args).cuda()

        def on_epoch_end(self, epoch):
            if dist.get_rank() == 0:
                torch.save(self.model.state_dict(), "last.pt")
    """


def test_two_subclasses_the_script_chooses_between(tmp_path):
    run = _variant(RUN, "    trainer = ImageTrainer(args)\n",
                   "    cls = ImageTrainer if args.epochs > 1 else QuietTrainer\n    trainer = cls(args)\n")
    run = run.replace("from image import ImageTrainer\n", "from image import ImageTrainer\n    from quiet import QuietTrainer\n")
    _write(tmp_path, {"base.py": BASE, "image.py": SUB, "quiet.py": TWO, "run.py": run})
    assert _findings(tmp_path, "run.py", select="DDP010") == {("image.py", 18, "DDP010")}


def test_a_subclass_the_script_does_not_name_is_not_followed(tmp_path):
    # The script builds the base itself (its `_build` raising); another module's subclass
    # that saves on every rank is not the instance's class.
    run = RUN.replace("from image import ImageTrainer", "from base import Trainer").replace(
        "ImageTrainer(args)", "Trainer(args)")
    _write(tmp_path, {"base.py": BASE, "image.py": SUB, "run.py": run})
    assert _findings(tmp_path, "run.py", select="DDP010") == set()


def test_no_override_runs_the_base_method(tmp_path):
    saving = _variant(BASE, "        def on_epoch_end(self, epoch):\n            pass\n",
                      "        def on_epoch_end(self, epoch):\n            torch.save(self.model.state_dict(), 'x.pt')\n")
    sub = _variant(SUB, "        def on_epoch_end(self, epoch):\n            torch.save(self.model.module.state_dict(), f\"ckpt_{epoch}.pt\")\n", "")
    _write(tmp_path, {"base.py": saving, "image.py": sub, "run.py": RUN})
    assert _findings(tmp_path, "run.py", select="DDP010") == {("base.py", 15, "DDP010")}


STEPS = """\
    import torch
    import torch.distributed as dist


    def eval_coco(model, loader):
        for x in loader:
            model(x)
        torch.save(model.state_dict(), "coco_best.pt")


    def eval_voc(model, loader):
        for x in loader:
            model(x)
        if dist.get_rank() == 0:
            torch.save(model.state_dict(), "voc_best.pt")


    def evaluate(model, loader, kind):
        table = {"coco": eval_coco, "voc": eval_voc}
        return table[kind](model, loader)
    """

TABLE_RUN = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from steps import evaluate

    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", default="coco")
    args = parser.parse_args()
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(make_net().cuda(), device_ids=[local_rank])
    evaluate(model, make_loader(), args.kind)
    dist.destroy_process_group()
    """


def test_a_function_chosen_from_a_dict_runs_as_each_entry(tmp_path):
    _write(tmp_path, {"steps.py": STEPS, "run.py": TABLE_RUN})
    assert _findings(tmp_path, "run.py", select="DDP010") == {("steps.py", 8, "DDP010")}


def test_a_module_level_table_looked_up_by_a_flag(tmp_path):
    steps = _variant(STEPS, "    def evaluate(model, loader, kind):\n        table = {\"coco\": eval_coco, \"voc\": eval_voc}\n"
                     "        return table[kind](model, loader)\n",
                     "    EVALS = {\"coco\": eval_coco, \"voc\": eval_voc}\n")
    run = TABLE_RUN.replace("from steps import evaluate", "from steps import EVALS").replace(
        "evaluate(model, make_loader(), args.kind)", "EVALS[args.kind](model, make_loader())")
    _write(tmp_path, {"steps.py": steps, "run.py": run})
    assert _findings(tmp_path, "run.py", select="DDP010") == {("steps.py", 8, "DDP010")}


def test_a_table_with_an_entry_the_model_cannot_read_is_not_followed(tmp_path):
    steps = STEPS.replace('{"coco": eval_coco, "voc": eval_voc}', '{"coco": eval_coco, **load_plugins()}')
    _write(tmp_path, {"steps.py": steps, "run.py": TABLE_RUN})
    assert _findings(tmp_path, "run.py", select="DDP010") == set()


def test_a_function_fetched_by_getattr_with_a_literal_name(tmp_path):
    run = TABLE_RUN.replace("from steps import evaluate", "import steps").replace(
        "evaluate(model, make_loader(), args.kind)",
        "name = \"eval_coco\" if args.kind == \"coco\" else \"eval_voc\"\n    getattr(steps, name)(model, make_loader())")
    _write(tmp_path, {"steps.py": STEPS, "run.py": run})
    assert _findings(tmp_path, "run.py", select="DDP010") == {("steps.py", 8, "DDP010")}


def test_getattr_by_a_name_from_the_command_line_stays_silent(tmp_path):
    run = TABLE_RUN.replace("from steps import evaluate", "import steps").replace(
        "evaluate(model, make_loader(), args.kind)", "getattr(steps, \"eval_\" + args.kind)(model, make_loader())")
    _write(tmp_path, {"steps.py": STEPS, "run.py": run})
    assert _findings(tmp_path, "run.py", select="DDP010") == set()


REPEATS = """\
    import argparse

    from image import ImageTrainer

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()

    for run in range(args.runs):
        trainer = ImageTrainer(args)
        print("start training")
        trainer.fit(make_loader(args))
    """


def test_a_loop_whose_body_creates_the_process_group_prints_once_per_process(tmp_path):
    # The override's `_build` initialises the group, so the loop body runs once per process
    # (a second initialisation raises): its message is start-up output.
    guarded = _variant(SUB, "            torch.save(", "            if dist.get_rank() == 0:\n                torch.save(")
    _write(tmp_path, {"base.py": BASE, "image.py": guarded, "run.py": REPEATS})
    assert _findings(tmp_path, "run.py", select="DDP020") == set()


def test_a_print_in_the_base_epoch_loop_is_still_reported(tmp_path):
    noisy = _variant(BASE, "                self.on_epoch_end(epoch)\n",
                     "                print(f\"epoch {epoch} loss {loss.item()}\")\n                self.on_epoch_end(epoch)\n")
    guarded = _variant(SUB, "            torch.save(", "            if dist.get_rank() == 0:\n                torch.save(")
    _write(tmp_path, {"base.py": noisy, "image.py": guarded, "run.py": REPEATS})
    assert _findings(tmp_path, "run.py", select="DDP020") == {("base.py", 24, "DDP020")}
