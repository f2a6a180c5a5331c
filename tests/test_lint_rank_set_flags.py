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
