"""Rank-0 output chosen by a flag set from literals under a rank test (`self.verbose = True`, then
`if dist.get_rank() != 0: self.verbose = False`), and by a printer picked by rank (`bar =
tqdm if is_main else iter`), through `ddpcheck lint`. The clean variants stay clean; the same
code where the flag or the printer does not depend on the rank only is still reported."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

TRAINER = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from tqdm import tqdm


    class Trainer:
        def __init__(self, args, model, loader):
            self.args = args
            self.loader = loader
{setup}
            self.model = DDP(model.cuda(), device_ids=[args.gpu])
            self.optim = torch.optim.AdamW(self.model.parameters(), lr=args.lr)

        def train(self):
            for epoch in range(self.args.epochs):
                self.loader.sampler.set_epoch(epoch)
                if self.verbose:
                    bar = tqdm(total=len(self.loader))
                for batch in self.loader:
                    loss = self.model(batch.cuda()).mean()
                    self.optim.zero_grad()
                    loss.backward()
                    self.optim.step()
                    if self.verbose:
                        bar.update(1)
                if self.verbose:
                    print(f"epoch {{epoch}} loss {{loss.item():.3f}}")


    def main(args, model, loader):
        dist.init_process_group("nccl")
        torch.cuda.set_device(args.gpu)
        Trainer(args, model, loader).train()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main(parse_args(), build_model(), build_loader())
    """

CLEARED_ON_OTHER_RANKS = """\
        self.verbose = True
        if self.args.distributed:
            if dist.get_rank() != 0:
                self.verbose = False
"""

SET_ON_RANK_ZERO = """\
        self.verbose = False
        if dist.get_rank() == 0:
            self.verbose = True
"""

CLEARED_IN_ONE_TEST = """\
        self.verbose = True
        if self.args.distributed and dist.get_rank() != 0:
            self.verbose = False
"""

CLEARED_BY_AN_OPTION = """\
        self.verbose = True
        if self.args.quiet:
            self.verbose = False
"""

CLEARED_ON_SOME_OTHER_RANKS = """\
        self.verbose = True
        if dist.get_rank() != 0 and self.args.quiet_workers:
            self.verbose = False
"""


def _lint(tmp_path, setup: str) -> set[tuple[str, int, str]]:
    indented = "".join("    " + line for line in setup.splitlines(keepends=True))
    write_project(tmp_path, {"trainer.py": TRAINER.format(setup=indented.rstrip("\n"))})
    return finding_set(tmp_path, "trainer.py", select="DDP020")


def test_a_flag_cleared_on_the_other_ranks_keeps_output_on_rank_zero(tmp_path) -> None:
    assert _lint(tmp_path, CLEARED_ON_OTHER_RANKS) == set()


def test_a_flag_set_on_rank_zero_only_keeps_output_there(tmp_path) -> None:
    assert _lint(tmp_path, SET_ON_RANK_ZERO) == set()


def test_a_flag_cleared_under_a_launch_mode_and_rank_test_keeps_output_on_rank_zero(tmp_path) -> None:
    assert _lint(tmp_path, CLEARED_IN_ONE_TEST) == set()


def test_a_flag_cleared_by_an_option_is_reported(tmp_path) -> None:
    assert _lint(tmp_path, CLEARED_BY_AN_OPTION) == {("trainer.py", 21, "DDP020"), ("trainer.py", 30, "DDP020")}


def test_a_flag_cleared_on_some_other_ranks_only_is_reported(tmp_path) -> None:
    assert _lint(tmp_path, CLEARED_ON_SOME_OTHER_RANKS) == {("trainer.py", 21, "DDP020"), ("trainer.py", 30, "DDP020")}


QUIET_SCRIPT = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train(model, loader, optimizer, epochs):
        quiet = False
        if {test}:
            quiet = True
        for epoch in range(epochs):
            loader.sampler.set_epoch(epoch)
            for step, (x, y) in enumerate(loader):
                loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                if not quiet and step % 100 == 0:
                    print("step", step, loss.item())


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = DDP(torch.nn.Linear(8, 1).cuda(), device_ids=[local_rank])
        train(net, make_loader(), torch.optim.SGD(net.parameters(), lr=0.1), 10)
    """


def test_a_quiet_flag_raised_on_the_other_ranks_is_quiet(tmp_path) -> None:
    write_project(tmp_path, {"fit.py": QUIET_SCRIPT.format(test="dist.get_rank() > 0")})
    assert finding_set(tmp_path, "fit.py", select="DDP020") == set()


def test_a_quiet_flag_raised_by_the_environment_is_reported(tmp_path) -> None:
    write_project(tmp_path, {"fit.py": QUIET_SCRIPT.format(test='os.environ.get("QUIET") == "1"')})
    assert finding_set(tmp_path, "fit.py", select="DDP020") == {("fit.py", 20, "DDP020")}


BAR_SCRIPT = """\
    import os

    import torch
    import torch.distributed as dist
    import tqdm
    from torch.nn.parallel import DistributedDataParallel as DDP


    def run(model, loader, optimizer, epochs):
        if {test}:
            progress = tqdm.tqdm
        else:
            progress = {other}
        for epoch in range(epochs):
            loader.sampler.set_epoch(epoch)
            for x, y in progress(loader):
                loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = DDP(torch.nn.Linear(8, 4).cuda(), device_ids=[local_rank])
        run(net, make_loader(), torch.optim.SGD(net.parameters(), lr=0.1), 10)
    """


def test_a_bar_picked_on_rank_zero_is_quiet(tmp_path) -> None:
    write_project(tmp_path, {"run.py": BAR_SCRIPT.format(test="dist.get_rank() == 0", other="iter")})
    assert finding_set(tmp_path, "run.py", select="DDP020") == set()


def test_a_bar_picked_on_rank_zero_with_a_plain_function_elsewhere_is_quiet(tmp_path) -> None:
    write_project(tmp_path, {"run.py": BAR_SCRIPT.format(test='int(os.environ["RANK"]) == 0', other="lambda it: it")})
    assert finding_set(tmp_path, "run.py", select="DDP020") == set()


def test_a_bar_picked_by_an_option_is_reported(tmp_path) -> None:
    write_project(tmp_path, {"run.py": BAR_SCRIPT.format(test='os.environ.get("BARS") == "1"', other="iter")})
    assert finding_set(tmp_path, "run.py", select="DDP020") == {("run.py", 16, "DDP020")}


def test_the_same_bar_on_every_rank_is_reported(tmp_path) -> None:
    write_project(tmp_path, {"run.py": BAR_SCRIPT.format(test="dist.get_rank() == 0", other="tqdm.tqdm")})
    assert finding_set(tmp_path, "run.py", select="DDP020") == {("run.py", 16, "DDP020")}


EPOCH_BAR = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from tqdm import tqdm

    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    net = DDP(torch.nn.Linear(4, 2).cuda(), device_ids=[local_rank])
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(make_dataset(), batch_size=32,
                                         sampler=torch.utils.data.DistributedSampler(make_dataset()))
    epochs = {epochs}
    for epoch in epochs:
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(net(x.cuda()), y.cuda())
            opt.zero_grad()
            loss.backward()
            opt.step()
            epochs.set_description(f"loss {{loss.item():.3f}}")
    """


def test_a_bar_bound_to_a_name_that_the_epoch_loop_iterates_is_reported(tmp_path) -> None:
    write_project(tmp_path, {"ddp_demo.py": EPOCH_BAR.format(epochs="tqdm(range(20))")})
    assert finding_set(tmp_path, "ddp_demo.py", select="DDP020") == {("ddp_demo.py", 15, "DDP020")}


def test_a_bar_bound_to_a_name_and_disabled_off_rank_zero_is_quiet(tmp_path) -> None:
    write_project(tmp_path, {"ddp_demo.py": EPOCH_BAR.format(
        epochs="tqdm(range(20), disable=dist.get_rank() != 0)")})
    assert finding_set(tmp_path, "ddp_demo.py", select="DDP020") == set()


BASE_TRAINER = """\
    import torch.distributed as dist


    class LoopTrainer:
        def step(self, batch):
            raise NotImplementedError

        def fit(self, loader, epochs, sampler):
            for epoch in range(epochs):
                sampler.set_epoch(epoch)
                {message}
                for batch in loader:
                    self.step(batch)
    """

SUBCLASS_SCRIPT = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from engine.base import LoopTrainer


    class RegressionTrainer(LoopTrainer):
        def __init__(self, net, local_rank):
            self.model = DDP(net.cuda(), device_ids=[local_rank])
            self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)

        def step(self, batch):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.model(x.cuda()), y.cuda())
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        data = make_dataset()
        sampler = torch.utils.data.DistributedSampler(data)
        loader = torch.utils.data.DataLoader(data, batch_size=16, sampler=sampler)
        RegressionTrainer(torch.nn.Linear(3, 1), local_rank).fit(loader, 10, sampler)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_an_epoch_print_around_a_loader_loop_of_an_abstract_trainer_is_reported(tmp_path) -> None:
    write_project(tmp_path, {"engine/__init__.py": "", "engine/base.py": BASE_TRAINER.format(message='print("-" * 40)'),
                             "train.py": SUBCLASS_SCRIPT})
    assert finding_set(tmp_path, "train.py", "engine/base.py", select="DDP020") == {("base.py", 11, "DDP020")}


def test_an_epoch_print_of_an_abstract_trainer_on_rank_zero_is_quiet(tmp_path) -> None:
    write_project(tmp_path, {"engine/__init__.py": "", "train.py": SUBCLASS_SCRIPT,
                             "engine/base.py": BASE_TRAINER.format(
                                 message='if dist.get_rank() == 0:\n                print("-" * 40)')})
    assert finding_set(tmp_path, "train.py", "engine/base.py", select="DDP020") == set()
