"""Rank guards seen on public scripts of batch 21 (DDP020, DDP010): a flag set to a rank test in
one arm of a launch-mode test the model cannot read and to True in the other, a helper whose
only unguarded print sits in the `else` of `if dist.is_initialized():`, and `rank in ranks`
where the ranks given name rank 0 only. Each through `ddpcheck
lint` on a small project written in the style of the scripts, with a variant that must stay as it
is."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project, finding_lines as lines


# A worker that mp.spawn starts when `--mode multi` is given and the script calls directly
# otherwise: the writer flag is the spawn index test on the first path, True on the second.
MODE_FLAG_SCRIPT = """\
    import argparse
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train(gpu, opt):
        if opt.launch_mode == "multi":
            writer = {multi}
        else:
            writer = {single}
        dist.init_process_group("nccl", init_method=opt.dist_url, rank=gpu, world_size=opt.world_size)
        torch.cuda.set_device(gpu)
        model = DDP(torch.nn.Linear(4, 4).cuda(gpu), device_ids=[gpu])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * opt.world_size)
        for epoch in range(opt.epochs):
            for step in range(100):
                loss = model(torch.randn(8, 4).cuda(gpu)).sum()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                if step % 10 == 0 and writer:
                    print("epoch", epoch, "step", step, loss.item())
            if writer:
                torch.save({{"model": model.module.state_dict()}}, "epoch_%d.pth" % epoch)
            dist.barrier()
        dist.destroy_process_group()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--launch_mode", default="multi")
        parser.add_argument("--dist_url", default="tcp://127.0.0.1:9991")
        parser.add_argument("--world_size", type=int, default=2)
        parser.add_argument("--epochs", type=int, default=10)
        opt = parser.parse_args()
        if opt.launch_mode == "multi":
            mp.spawn(train, nprocs=opt.world_size, args=(opt,))
        else:
            train(0, opt)
"""


def test_rank_flag_with_a_true_fallback_arm_guards_logs_and_saves(tmp_path: Path) -> None:
    files = {"train.py": MODE_FLAG_SCRIPT.format(multi="gpu == 0", single="True")}
    assert lines(tmp_path, files, "DDP020,DDP010") == []


def test_flag_true_in_both_arms_is_still_reported(tmp_path: Path) -> None:
    files = {"train.py": MODE_FLAG_SCRIPT.format(multi="True", single="True")}
    assert lines(tmp_path, files, "DDP020,DDP010") == [("train.py", 24), ("train.py", 26)]


def test_true_on_the_distributed_arm_is_not_read_as_a_fallback(tmp_path: Path) -> None:
    # The test is read as "distributed": True on that arm holds on every rank of the job.
    files = {"train.py": MODE_FLAG_SCRIPT.replace('if opt.launch_mode == "multi":\n            writer',
                                                  'if opt.distributed:\n            writer')
             .format(multi="True", single="gpu == 0")}
    assert lines(tmp_path, files, "DDP020,DDP010") == [("train.py", 24), ("train.py", 26)]


# A helper that prints on rank 0 of a distributed run and, in the `else` of the process-group
# test, on the only process of a run without one; the training loop calls it every epoch.
MEMORY_UTIL = """\
    import torch
    import torch.distributed as dist


    def print_memory_stats():
        used = torch.cuda.memory_allocated() / 2 ** 30
        peak = torch.cuda.max_memory_allocated() / 2 ** 30
        if dist.is_initialized():
            if {rank_test}:
                print(f"memory {{used:.2f}} GB, peak {{peak:.2f}} GB")
        else:
            print(f"memory {{used:.2f}} GB, peak {{peak:.2f}} GB")
"""

MEMORY_SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from utils import print_memory_stats


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = DDP(torch.nn.Linear(16, 4).cuda(), device_ids=[local_rank])
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
        loader = torch.utils.data.DataLoader(list(range(64)), batch_size=8)
        for epoch in range(5):
            for batch in loader:
                optimizer.zero_grad()
                loss = net(torch.randn(8, 16).cuda()).sum()
                loss.backward()
                optimizer.step()
            print_memory_stats()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_print_in_the_no_process_group_arm_of_a_helper_is_clean(tmp_path: Path) -> None:
    files = {"utils.py": MEMORY_UTIL.format(rank_test="dist.get_rank() == 0"), "train.py": MEMORY_SCRIPT}
    assert lines(tmp_path, files, "DDP020") == []


def test_helper_printing_on_every_rank_of_the_process_group_is_reported(tmp_path: Path) -> None:
    files = {"utils.py": MEMORY_UTIL.format(rank_test="torch.cuda.is_available()"), "train.py": MEMORY_SCRIPT}
    assert lines(tmp_path, files, "DDP020") == [("train.py", 21)]


# A logging helper that prints on the ranks its caller lists.
LOG_DIST_UTIL = """\
    import torch.distributed as dist


    def log_dist(msg, ranks=[]):
        assert dist.is_initialized()
        if dist.get_rank() in ranks:
            print(msg)


    def report_params(net):
        count = sum(p.numel() for p in net.parameters())
        log_dist(f"params on this rank: {{count}}", {report_ranks})
"""

LOG_DIST_SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from utils import log_dist, report_params


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = DDP(torch.nn.Linear(16, 4).cuda(), device_ids=[local_rank])
        report_params(net)
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
        loader = torch.utils.data.DataLoader(list(range(64)), batch_size=8)
        for epoch in range(5):
            for i, batch in enumerate(loader):
                optimizer.zero_grad()
                loss = net(torch.randn(8, 16).cuda()).sum()
                loss.backward()
                optimizer.step()
                if i % 10 == 0:
                    log_dist(f"epoch {{epoch}} iter {{i}} loss {{loss.item():.3f}}", {loop_ranks})
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_helper_printing_on_the_ranks_listed_with_rank_zero_listed_is_clean(tmp_path: Path) -> None:
    files = {"utils.py": LOG_DIST_UTIL.format(report_ranks="[0]"),
             "train.py": LOG_DIST_SCRIPT.format(loop_ranks="[0]")}
    assert lines(tmp_path, files, "DDP020") == []


def test_loop_call_listing_rank_zero_beside_a_call_listing_every_rank_is_clean(tmp_path: Path) -> None:
    # The once-only report lists every rank; the per-step log lists rank 0.
    files = {"utils.py": LOG_DIST_UTIL.format(report_ranks="list(range(dist.get_world_size()))"),
             "train.py": LOG_DIST_SCRIPT.format(loop_ranks="[0]")}
    assert lines(tmp_path, files, "DDP020") == []


def test_loop_call_listing_every_rank_is_reported(tmp_path: Path) -> None:
    files = {"utils.py": LOG_DIST_UTIL.format(report_ranks="[0]"),
             "train.py": LOG_DIST_SCRIPT.format(loop_ranks="list(range(dist.get_world_size()))")}
    assert lines(tmp_path, files, "DDP020") == [("train.py", 23)]


SAVE_RANKS_SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    SAVE_RANKS = {ranks}


    def save_on(state, path, ranks):
        if dist.get_rank() in ranks:
            torch.save(state, path)


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = DDP(torch.nn.Linear(16, 4).cuda(), device_ids=[local_rank])
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
        for epoch in range(5):
            optimizer.zero_grad()
            net(torch.randn(8, 16).cuda()).sum().backward()
            optimizer.step()
            save_on(net.module.state_dict(), f"epoch{{epoch}}.pt", SAVE_RANKS)
            if dist.get_rank() in SAVE_RANKS:
                torch.save(net.module.state_dict(), "last.pt")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_save_on_the_ranks_of_a_list_naming_rank_zero_is_clean(tmp_path: Path) -> None:
    files = {"train.py": SAVE_RANKS_SCRIPT.format(ranks="[0]")}
    assert lines(tmp_path, files, "DDP010") == []


def test_save_on_the_ranks_of_a_list_naming_others_is_not_read_as_rank_zero(tmp_path: Path) -> None:
    # `[0, 1]` names a rank besides the main one: two ranks still write the same file.
    files = {"train.py": SAVE_RANKS_SCRIPT.format(ranks="[0, 1]")}
    found = lint_project(tmp_path, files, "train.py", select="DDP010")
    assert sorted(f["location"]["line"] for f in found) == [11, 26]
