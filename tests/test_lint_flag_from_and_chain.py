"""A flag kept on the options object from an `and` of tests that ends in a rank test
(`args.save_logs = args.logs and args.logs.lower() != "none" and is_master(args)`), then read
by a helper the options are passed to: the value flow reads the operands of `and` apart, and
the leading operands are the flag's value only where it is false. Through `ddpcheck lint` on a
small project, with variants that must still be reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines

SCRIPT = """\
    import argparse
    import torch
    import torch.distributed as dist


    def is_master(args):
        return args.rank == 0


    def save_checkpoint(args, model, epoch):
        if args.save_logs:
            print(f"saving epoch {{epoch}}")
            torch.save(model.state_dict(), f"{{args.logs}}/epoch_{{epoch}}.pt")


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--logs", default="logs")
        parser.add_argument("--epochs", type=int, default=3)
        args = parser.parse_args()
        dist.init_process_group("nccl")
        args.rank = dist.get_rank()
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4).cuda())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2)
        args.save_logs = {flag}
        for epoch in range(args.epochs):
            for x in loader:
                model(x).sum().backward()
                optimizer.step()
            save_checkpoint(args, model, epoch)


    if __name__ == "__main__":
        main()
"""


def _project(flag: str) -> dict[str, str]:
    return {"train.py": SCRIPT.format(flag=flag)}


def test_and_chain_ending_in_a_rank_test_guards_the_save_and_the_print(tmp_path: Path) -> None:
    files = _project('args.logs and args.logs.lower() != "none" and is_master(args)')
    assert lines(tmp_path, files, "DDP010") == []
    assert lines(tmp_path, files, "DDP020") == []


def test_and_chain_without_a_rank_test_is_reported(tmp_path: Path) -> None:
    files = _project('args.logs and args.logs.lower() != "none"')
    assert lines(tmp_path, files, "DDP010") == [("train.py", 13)]
    assert lines(tmp_path, files, "DDP020") == [("train.py", 12)]


def test_or_with_a_rank_test_is_reported(tmp_path: Path) -> None:
    # `a or is_master(args)`: true on every rank where `a` is.
    files = _project('args.logs.lower() != "none" or is_master(args)')
    assert lines(tmp_path, files, "DDP010") == [("train.py", 13)]
