"""A checkpoint file named after a number each rank reads from its own tensor (the last batch's
loss) is one file per rank, not one file all ranks write (DDP010), through `ddpcheck lint`; the
same name after an all-reduce of that tensor is one file again."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train(net, loader, optimizer, epochs, out_dir):
        for epoch in range(epochs):
            for x, y in loader:
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(net(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
            REDUCE
            path = os.path.join(out_dir, "{:04d}_{:.4f}.pt".format(epoch, loss.item()))
            torch.save({"epoch": epoch, "model": net.module.state_dict()}, path)


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = DDP(torch.nn.Linear(4, 1).cuda(), device_ids=[local_rank])
        data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
        loader = torch.utils.data.DataLoader(data, sampler=torch.utils.data.DistributedSampler(data))
        train(net, loader, torch.optim.SGD(net.parameters(), lr=0.1), 3, "ckpt")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def _lint(tmp_path, reduce: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"train.py": TRAIN.replace("REDUCE", reduce)})
    return finding_set(tmp_path, "train.py", select="DDP010")


def test_a_name_from_the_ranks_own_loss_is_one_file_per_rank(tmp_path):
    assert _lint(tmp_path, "pass") == set()


def test_the_same_name_after_an_all_reduce_of_the_loss_is_one_shared_file(tmp_path):
    assert _lint(tmp_path, "dist.all_reduce(loss)") == {("train.py", 17, "DDP010")}
