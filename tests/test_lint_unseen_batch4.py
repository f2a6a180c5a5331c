"""False findings met on a fourth batch of public scripts, through `ddpcheck lint`: each test writes
a small project in the style of such code, with the variant that is still reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


DEVICE_FROM_RANK = """\
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel


    def fit(net, loader, epochs=3, device="cuda", out="net.pt"):
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for epoch in range(epochs):
            for x in loader:
                loss = net(x.to(device)).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            if device == 0:
                torch.save(net.module.state_dict(), out)
                print(f"epoch {epoch} loss {loss.item():.3f}")
            dist.barrier()


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        device = rank % torch.cuda.device_count()
        torch.cuda.set_device(device)
        net = DistributedDataParallel(nn.Linear(4, 1).to(device), device_ids=[device])
        fit(net, [torch.randn(8, 4)], device=device)
        dist.destroy_process_group()
"""


def test_a_device_index_taken_from_the_rank_guards_like_the_local_rank(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": DEVICE_FROM_RANK}, "train.py", select="DDP010,DDP020")
    assert _lines(findings, "DDP010") == []
    assert _lines(findings, "DDP020") == []
    # An index taken from something other than the rank says nothing about which process runs.
    other = DEVICE_FROM_RANK.replace("device = rank % torch.cuda.device_count()",
                                     "device = len(__file__) % torch.cuda.device_count()")
    findings = lint_project(tmp_path, {"train.py": other}, "train.py", select="DDP010,DDP020")
    assert _lines(findings, "DDP010") == [16]
    assert _lines(findings, "DDP020") == [17]


COMPILE_FLAG = """\
    import argparse
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--compile", action="store_true")
        opts = parser.parse_args()
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        torch.cuda.set_device(rank)
        net = DDP(nn.Linear(8, 2).cuda(), device_ids=[rank])
        if opts.compile:
            net = torch.compile(net)
        for epoch in range(2):
            if rank == 0:
                if opts.compile:
                    weights = net._orig_mod.module.state_dict()
                else:
                    weights = net.module.state_dict()
                torch.save(weights, "last.pt")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_orig_mod_read_under_the_flag_that_compiled_the_model_is_not_reported(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": COMPILE_FLAG}, "train.py", select="DDP025")
    assert _lines(findings, "DDP025") == []
    # Read under another test, the wrapper may not be compiled there: reported.
    other = COMPILE_FLAG.replace("                if opts.compile:\n                    weights",
                                 "                if epoch > 0:\n                    weights")
    findings = lint_project(tmp_path, {"train.py": other}, "train.py", select="DDP025")
    assert _lines(findings, "DDP025") == [21]
    # The options read again in between: the second test may not ask the same question.
    changed = COMPILE_FLAG.replace("        for epoch in range(2):\n",
                                   "        opts = parser.parse_args()\n        for epoch in range(2):\n")
    findings = lint_project(tmp_path, {"train.py": changed}, "train.py", select="DDP025")
    assert _lines(findings, "DDP025") == [22]
    # Compiled first and wrapped after, `._orig_mod` is asked of the DDP wrapper: still reported.
    inner = COMPILE_FLAG.replace(
        "        net = DDP(nn.Linear(8, 2).cuda(), device_ids=[rank])\n        if opts.compile:\n"
        "            net = torch.compile(net)\n",
        "        net = nn.Linear(8, 2).cuda()\n        if opts.compile:\n            net = torch.compile(net)\n"
        "        net = DDP(net, device_ids=[rank])\n")
    findings = lint_project(tmp_path, {"train.py": inner}, "train.py", select="DDP025")
    assert _lines(findings, "DDP025") == [22]


MOVED_IN_PLACE = """\
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel


    def build(width):
        return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))


    def main(local_rank: int):
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        model = build(16)
        model.to(device)
        model = DistributedDataParallel(model, device_ids=[local_rank])
        model.module.load_state_dict(torch.load("best.pt", map_location="cpu"))
        model.to(device)
        model.eval()
        dist.destroy_process_group()
"""


def test_a_move_after_wrapping_to_where_the_module_was_moved_in_place_is_not_reported(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": MOVED_IN_PLACE}, "train.py", select="DDP014")
    assert _lines(findings, "DDP014") == []
    # To another device than before the wrap: reported.
    half = MOVED_IN_PLACE.replace("        model.to(device)\n        model.eval()",
                                  "        model.to(\"cpu\")\n        model.eval()")
    findings = lint_project(tmp_path, {"train.py": half}, "train.py", select="DDP014")
    assert _lines(findings, "DDP014") == [19]
    # The device chosen again in between: reported.
    again = MOVED_IN_PLACE.replace("        model.module.load_state_dict",
                                   "        device = torch.device(\"cuda\", 0)\n        model.module.load_state_dict")
    findings = lint_project(tmp_path, {"train.py": again}, "train.py", select="DDP014")
    assert _lines(findings, "DDP014") == [20]
    # Moved only on one path before the wrap: reported.
    maybe = MOVED_IN_PLACE.replace("        model.to(device)\n        model = Distributed",
                                   "        if local_rank >= 0:\n            model.to(device)\n"
                                   "        model = Distributed")
    findings = lint_project(tmp_path, {"train.py": maybe}, "train.py", select="DDP014")
    assert _lines(findings, "DDP014") == [20]


GENERATOR = """\
    import torch.nn as nn


    class Generator(nn.Module):
        def __init__(self, channels=3, width=64):
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(channels, width, 3, padding=1),
                nn.InstanceNorm2d(width),
                nn.ReLU(inplace=True),
                nn.Conv2d(width, channels, 3, padding=1),
            )
            self.init_weights()

        def init_weights(self):
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.normal_(m.weight, 0.0, 0.02)
                elif isinstance(m, (nn.BatchNorm2d, nn.InstanceNorm2d)) and m.affine:
                    nn.init.ones_(m.weight)

        def forward(self, x):
            return self.body(x)
"""

GAN_TRAIN = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from nets.generator import Generator


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        netG = DDP(Generator().cuda(local_rank), device_ids=[local_rank])
        return netG


    if __name__ == "__main__":
        main()
        dist.destroy_process_group()
"""


def test_a_batchnorm_class_named_only_in_an_isinstance_test_is_not_a_batchnorm_layer(tmp_path: Path) -> None:
    files = {"nets/__init__.py": "", "nets/generator.py": GENERATOR, "train.py": GAN_TRAIN}
    findings = lint_project(tmp_path, files, "train.py", select="DDP012")
    assert _lines(findings, "DDP012") == []
    # A generator that builds one BatchNorm layer: reported at the wrap.
    files["nets/generator.py"] = GENERATOR.replace("nn.InstanceNorm2d(width),", "nn.BatchNorm2d(width),")
    findings = lint_project(tmp_path, files, "train.py", select="DDP012")
    assert _lines(findings, "DDP012") == [13]


ROWS_PER_RANK = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP


    def worker(rank, world_size, image):
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29531", rank=rank, world_size=world_size)
        model = DDP(nn.Linear(3, 3))
        optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
        rows = image.shape[0] // world_size
        for step in range(100):
            mine = image[rank * rows:(rank + 1) * rows]
            loss = (model(mine) - mine).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        mp.spawn(worker, args=(2, torch.rand(64, 3)), nprocs=2)
"""


def test_a_literal_rate_where_each_step_splits_one_batch_across_the_ranks_is_not_reported(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": ROWS_PER_RANK}, "train.py", select="DDP004")
    assert _lines(findings, "DDP004") == []
    # Every rank trains on the whole image: the global batch grows with the ranks.
    whole = ROWS_PER_RANK.replace("mine = image[rank * rows:(rank + 1) * rows]", "mine = image[:rows]")
    findings = lint_project(tmp_path, {"train.py": whole}, "train.py", select="DDP004")
    assert _lines(findings, "DDP004") == [11]


RANK0_PREVIEW = """\
    import os
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torchvision
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Field(nn.Module):
        def __init__(self, width=64):
            super().__init__()
            self.layers = nn.Sequential(nn.Linear(3, width), nn.ReLU(), nn.Linear(width, 4))

        def forward(self, x):
            return self.layers(x)


    def save_preview(pixels, path):
        torchvision.utils.save_image(pixels, path)


    def main():
        dist.init_process_group("nccl")
        rank = int(os.environ["RANK"])
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        field = DDP(Field().cuda(), device_ids=[local_rank])
        optimizer = torch.optim.Adam(field.parameters())
        for step in range(1000):
            points = torch.rand(4096, 3, device="cuda")
            loss = field(points).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if rank == 0 and step % 100 == 0:
                with torch.no_grad():
                    preview = field(torch.rand(64 * 64, 3, device="cuda"))
                save_preview(preview[:, :3].T.reshape(3, 64, 64), f"step{step}.png")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_a_rank0_forward_of_a_network_without_buffers_in_a_module_using_torchvision_helpers(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": RANK0_PREVIEW}, "train.py", select="DDP009")
    assert _lines(findings, "DDP009") == []
    # A network with running statistics: its DDP forward broadcasts them, the other ranks never join.
    normed = RANK0_PREVIEW.replace("nn.Linear(3, width), nn.ReLU()", "nn.Linear(3, width), nn.BatchNorm1d(width)")
    findings = lint_project(tmp_path, {"train.py": normed}, "train.py", select="DDP009")
    assert _lines(findings, "DDP009") == [37]


UNUSED_REDUCER = """\
    import os
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


    def reduce_mean(tensor, nprocs):
        out = tensor.clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out / nprocs


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = DDP(nn.Linear(8, 2).cuda(), device_ids=[local_rank])
        train_set = TensorDataset(torch.randn(512, 8), torch.randint(0, 2, (512,)))
        val_set = TensorDataset(torch.randn(100, 8), torch.randint(0, 2, (100,)))
        train_sampler = DistributedSampler(train_set)
        train_loader = DataLoader(train_set, batch_size=32, sampler=train_sampler)
        val_sampler = DistributedSampler(val_set, shuffle=False)
        val_loader = DataLoader(val_set, batch_size=32, sampler=val_sampler)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1 * dist.get_world_size())
        for epoch in range(3):
            train_sampler.set_epoch(epoch)
            for x, y in train_loader:
                loss = nn.functional.cross_entropy(net(x.cuda()), y.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            total = 0.0
            with torch.no_grad():
                for x, y in val_loader:
                    val_loss = nn.functional.cross_entropy(net(x.cuda()), y.cuda())
                    total += val_loss.item()
            print(f"epoch {epoch} val_loss {total / len(val_loader):.4f}")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_a_reduction_helper_nothing_calls_does_not_make_a_padded_sampler_biased(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": UNUSED_REDUCER}, "train.py", select="DDP018")
    assert _lines(findings, "DDP018") == []
    # The helper reduces the validation loss: the padded duplicates count twice.
    used = UNUSED_REDUCER.replace("total += val_loss.item()",
                                  "total += reduce_mean(val_loss, dist.get_world_size()).item()")
    findings = lint_project(tmp_path, {"train.py": used}, "train.py", select="DDP018")
    assert _lines(findings, "DDP018") == [24]


RETRIEVAL_TRAINER = """\
    import os
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


    class Trainer:
        def __init__(self, batch_size=64):
            self.batch_size = batch_size

        def build_data(self):
            source = TensorDataset(torch.randn(1024, 16), torch.randint(0, 10, (1024,)))
            sampler = DistributedSampler(source)
            source_loader = DataLoader(source, batch_size=self.batch_size, sampler=sampler)
            sets = {
                "query": DataLoader(TensorDataset(torch.randn(100, 16)), batch_size=self.batch_size),
                "gallery": DataLoader(TensorDataset(torch.randn(900, 16)), batch_size=self.batch_size),
            }
            return source_loader, sets

        def extract(self, model, test_loaders):
            model.eval()
            with torch.no_grad():
                return {part: torch.cat([model(x) for (x,) in loader]) for part, loader in test_loaders.items()}

        def run(self):
            dist.init_process_group("nccl")
            local_rank = int(os.environ["LOCAL_RANK"])
            torch.cuda.set_device(local_rank)
            model = DDP(nn.Linear(16, 8).cuda(), device_ids=[local_rank])
            source_loader, sets = self.build_data()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * dist.get_world_size())
            for epoch in range(10):
                source_loader.sampler.set_epoch(epoch)
                for x, y in source_loader:
                    loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda())
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                features = self.extract(model, sets)
            dist.destroy_process_group()


    if __name__ == "__main__":
        Trainer().run()
"""


def test_loaders_kept_in_a_dict_that_is_handed_on_as_test_loaders_are_evaluation_loaders(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": RETRIEVAL_TRAINER}, "train.py", select="DDP001")
    assert _lines(findings, "DDP001") == []
    # Handed on under a name that says nothing: they may be read for training, reported.
    plain = RETRIEVAL_TRAINER.replace("test_loaders", "loaders")
    findings = lint_project(tmp_path, {"train.py": plain}, "train.py", select="DDP001")
    assert _lines(findings, "DDP001") == [18, 19]
    # A training loader without a sampler is still reported, whatever else it is handed to.
    unsharded = RETRIEVAL_TRAINER.replace("batch_size=self.batch_size, sampler=sampler)",
                                          "batch_size=self.batch_size, shuffle=True)")
    findings = lint_project(tmp_path, {"train.py": unsharded}, "train.py", select="DDP001")
    assert _lines(findings, "DDP001") == [16]
