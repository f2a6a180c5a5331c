"""Numbered snapshots of the DDP wrapper's state dict (`str(step) + '.pt'`) read back by a
single-GPU script beside the run into a `DataParallel` model, through `ddpcheck lint` (DDP019):
that model's keys carry the same `module.` prefix, so the snapshots load. The script saves its
own result too, so it counts only where its loads name the files the run writes."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

RUN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def worker(rank, args, net, loader):
        dist.init_process_group("nccl", rank=rank, world_size=args.world)
        torch.cuda.set_device(rank)
        model = DDP(net.cuda(rank), device_ids=[rank])
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step, (x, y) in enumerate(loader):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            if rank == 0 and step % 100 == 0:
                torch.save(model.state_dict(), args.out + "/" + str(step // 100) + ".pt")
        dist.destroy_process_group()
    """

TWIN = """\
    import os

    import torch
    from nets import make_net


    def project(args):
        model = WRAP(make_net(args))
        model.cuda()
        points = []
        for i in range(args.first, args.last):
            model.load_state_dict(torch.load(LOADED))
            points.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
        torch.save(model.state_dict(), "projected.pt")
        return points
    """


def _lint(tmp_path: Path, wrap: str, loaded: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {
        "train.py": RUN,
        "project_weights.py": TWIN.replace("WRAP", wrap).replace("LOADED", loaded),
    })
    return finding_set(tmp_path, "train.py", select="DDP019")


def test_numbered_snapshots_loaded_into_a_dataparallel_model_are_clean(tmp_path: Path) -> None:
    assert _lint(tmp_path, "torch.nn.DataParallel", "os.path.join(args.out, str(i) + '.pt')") == set()


def test_numbered_snapshots_loaded_into_a_plain_model_are_reported(tmp_path: Path) -> None:
    assert _lint(tmp_path, "", "os.path.join(args.out, str(i) + '.pt')") == {("train.py", 18, "DDP019")}


def test_a_dataparallel_twin_reading_another_kind_of_file_is_reported(tmp_path: Path) -> None:
    # It reads numbered `.pth` files, which the run never writes; its own saves round-trip.
    assert _lint(tmp_path, "torch.nn.DataParallel", "os.path.join(args.out, str(i) + '.pth')") \
        == {("train.py", 18, "DDP019")}
