"""Code that never runs, or runs against a stand-in, through `ddpcheck lint`: a resume method of a
script's trainer whose only call is commented out, BatchNorm that a layer builder makes only when
asked, a logger that is a do-nothing object off rank 0, a progress bar labelled with the rank
after it is built. Each test writes a small project in the style of such code, with the variant
that is still reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


FITTER = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel


    class Fitter:
        def __init__(self, model, device):
            self.model = model
            self.device = device
            self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def fit(self, loader, epochs):
            for epoch in range(epochs):
                for x, y in loader:
                    loss = self.model(x.to(self.device), y.to(self.device))
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()

        def load(self, path):
            checkpoint = torch.load(path)
            self.model.load_state_dict(checkpoint["model"])
            self.optimizer.load_state_dict(checkpoint["optimizer"])


    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    net = DistributedDataParallel(torch.nn.Linear(8, 1).cuda(), device_ids=[local_rank])
    fitter = Fitter(net, torch.device("cuda", local_rank))
    meta = torch.load("meta.bin", map_location="cpu")
    # fitter.load("last-checkpoint.bin")
    fitter.fit(train_loader, 10)
"""


def test_a_trainer_method_nothing_calls_does_not_load(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": FITTER}, "train.py", select="DDP011")
    assert _lines(findings, "DDP011") == []
    # Called, by name through an attribute, or looked up by its name: it may run.
    for call in ('fitter.load("last-checkpoint.bin")', 'getattr(fitter, "load")("last.bin")',
                 'restore = fitter.load\n    restore("last.bin")'):
        called = FITTER.replace('# fitter.load("last-checkpoint.bin")', call)
        findings = lint_project(tmp_path, {"train.py": called}, "train.py", select="DDP011")
        assert _lines(findings, "DDP011") == [22], call
    # A class with a base: a framework may call its methods by name.
    based = FITTER.replace("class Fitter:", "class Fitter(BaseTrainer):").replace(
        "import os\n", "import os\n    from engine import BaseTrainer\n")
    findings = lint_project(tmp_path, {"train.py": based, "engine.py": "class BaseTrainer:\n    pass\n"},
                            "train.py", select="DDP011")
    assert _lines(findings, "DDP011") == [23]
    # Another module of the project imports the script's class and may call it.
    findings = lint_project(tmp_path, {"train.py": FITTER, "resume.py": "from train import Fitter\n"},
                            "train.py", select="DDP011")
    assert _lines(findings, "DDP011") == [22]


def test_output_and_saves_in_an_uncalled_method_are_not_reported(tmp_path: Path) -> None:
    source = FITTER.replace("""        def load(self, path):""", """        def dump(self, path, loader):
            for x, y in loader:
                print("step loss", self.model(x, y).item())
            torch.save(self.model.state_dict(), path)

        def load(self, path):""")
    findings = lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP010,DDP011")
    assert _lines(findings, "DDP010") == []
    called = source.replace("    fitter.fit(train_loader, 10)\n",
                            "    fitter.fit(train_loader, 10)\n    fitter.dump(\"last.bin\", train_loader)\n")
    findings = lint_project(tmp_path, {"train.py": called}, "train.py", select="DDP010")
    assert _lines(findings, "DDP010") == [24]


COUNTING_NET = """\
    import torch.nn as nn


    class CountingNet(nn.Module):
        def __init__(self, load_weights=False):
            super().__init__()
            self.frontend = make_layers([64, 64, "M", 128, 128, "M", 256])
            self.output_layer = nn.Conv2d(256, 1, kernel_size=1)
            if not load_weights:
                self._initialize_weights()

        def forward(self, x):
            return self.output_layer(self.frontend(x))

        def _initialize_weights(self):
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.normal_(m.weight, std=0.01)
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.constant_(m.weight, 1)
                    nn.init.constant_(m.bias, 0)


    def make_layers(cfg, in_channels=3, batch_norm=False, dilation=False):
        d_rate = 2 if dilation else 1
        layers = []
        for v in cfg:
            if v == "M":
                layers += [nn.MaxPool2d(kernel_size=2, stride=2)]
            else:
                conv2d = nn.Conv2d(in_channels, v, kernel_size=3, padding=d_rate, dilation=d_rate)
                if batch_norm:
                    layers += [conv2d, nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
                else:
                    layers += [conv2d, nn.ReLU(inplace=True)]
                in_channels = v
        return nn.Sequential(*layers)
"""

COUNTING_TRAIN = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from model import CountingNet

    if __name__ == "__main__":
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = CountingNet().cuda()
        net = DDP(net, device_ids=[local_rank])
"""


def test_batchnorm_behind_a_builder_switch_left_off_is_not_built(tmp_path: Path) -> None:
    files = {"model.py": COUNTING_NET, "train.py": COUNTING_TRAIN}
    assert _lines(lint_project(tmp_path, files, "train.py", select="DDP012"), "DDP012") == []
    # The same network in the script itself.
    script = COUNTING_NET + COUNTING_TRAIN.replace("from model import CountingNet\n", "")
    assert _lines(lint_project(tmp_path, {"train.py": script}, "train.py", select="DDP012"), "DDP012") == []
    # Switched on, by keyword or by position, or given what the model cannot read: BatchNorm.
    for call in ('make_layers([64, "M", 256], batch_norm=True)', 'make_layers([64, "M", 256], 3, True)',
                 'make_layers([64, "M", 256], **self.layer_options)'):
        on = COUNTING_NET.replace('make_layers([64, 64, "M", 128, 128, "M", 256])', call)
        files = {"model.py": on, "train.py": COUNTING_TRAIN}
        assert _lines(lint_project(tmp_path, files, "train.py", select="DDP012"), "DDP012") == [12], call
        script = on + COUNTING_TRAIN.replace("from model import CountingNet\n", "")
        assert _lines(lint_project(tmp_path, {"train.py": script}, "train.py", select="DDP012"), "DDP012") == [48], call


STAND_IN_LOGGER = """\
    import logging
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    class NoOp:
        def __getattr__(self, *args):
            def no_op(*args, **kwargs): pass
            return no_op


    class FileLogger:
        def __init__(self, output_dir, is_rank0=False):
            if is_rank0:
                self.logger = self.get_logger(output_dir)
            else:
                self.logger = NoOp()

        def get_logger(self, output_dir):
            logger = logging.getLogger("training")
            logger.setLevel(logging.DEBUG)
            logger.addHandler(logging.StreamHandler())
            return logger

        def info(self, *args):
            self.logger.info(*args)


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        logger = FileLogger("logs", is_rank0=local_rank == 0)
        model = DDP(torch.nn.Linear(8, 1).cuda(local_rank), device_ids=[local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(10):
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                logger.info(f"epoch {epoch} loss {loss.item():.4f}")


    if __name__ == "__main__":
        main()
"""


def test_a_logger_the_other_ranks_get_as_a_do_nothing_stand_in_is_rank_zero_only(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": STAND_IN_LOGGER}, "train.py", select="DDP020")
    assert _lines(findings, "DDP020") == []
    # A stand-in written with methods that do nothing.
    methods = STAND_IN_LOGGER.replace("""        def __getattr__(self, *args):
            def no_op(*args, **kwargs): pass
            return no_op""", '''        def info(self, *args):
            """Other ranks stay quiet."""

        def warning(self, *args):
            return None''')
    findings = lint_project(tmp_path, {"train.py": methods}, "train.py", select="DDP020")
    assert _lines(findings, "DDP020") == []
    # The other ranks get a real logger, or a stand-in that still writes: every rank logs.
    every = STAND_IN_LOGGER.replace("self.logger = NoOp()", 'self.logger = logging.getLogger("training")')
    findings = lint_project(tmp_path, {"train.py": every}, "train.py", select="DDP020")
    assert _lines(findings, "DDP020") == [43]
    loud = STAND_IN_LOGGER.replace("def no_op(*args, **kwargs): pass", "def no_op(*args, **kwargs): print(*args)")
    findings = lint_project(tmp_path, {"train.py": loud}, "train.py", select="DDP020")
    assert _lines(findings, "DDP020") == [43]


RANK_POSTFIX = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from tqdm import tqdm

    dist.init_process_group("nccl")
    global_rank = dist.get_rank()
    local_rank = int(os.environ["LOCAL_RANK"])
    model = DDP(torch.nn.Linear(8, 1).cuda(local_rank), device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters())


    def train_epoch():
        bar = tqdm(train_loader)
        total = 0.0
        for step, (x, y) in enumerate(bar, 1):
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
            bar.set_postfix({str(global_rank) + "_train_loss": total / step})
        return total


    for epoch in range(10):
        train_epoch()
"""


def test_a_bar_labelled_with_the_rank_after_it_is_built_is_meant_per_rank(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": RANK_POSTFIX}, "train.py", select="DDP020")
    assert _lines(findings, "DDP020") == []
    plain = RANK_POSTFIX.replace('str(global_rank) + "_train_loss"', '"train_loss"')
    findings = lint_project(tmp_path, {"train.py": plain}, "train.py", select="DDP020")
    assert _lines(findings, "DDP020") == [15]
    # Another bar's label says nothing about this one.
    other = RANK_POSTFIX.replace("bar.set_postfix(", "other_bar = tqdm(range(3))\n        other_bar.set_postfix(")
    findings = lint_project(tmp_path, {"train.py": other}, "train.py", select="DDP020")
    assert 15 in _lines(findings, "DDP020")


def test_a_builder_switch_the_body_sets_again_is_not_its_default(tmp_path: Path) -> None:
    net = COUNTING_NET.replace('        d_rate = 2 if dilation else 1\n',
                               '        d_rate = 2 if dilation else 1\n        batch_norm = batch_norm or len(cfg) > 4\n')
    files = {"model.py": net, "train.py": COUNTING_TRAIN}
    assert _lines(lint_project(tmp_path, files, "train.py", select="DDP012"), "DDP012") == [12]


HELD_BAR = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from tqdm import trange


    class DiffusionRunner:
        def __init__(self, model, loader, iters):
            self.model = model
            self.loader = loader
            self.iters = iters
            self.step = 0
            self.optimizer = torch.optim.AdamW(model.parameters())

        def train(self):
            self.bar = trange(self.step, self.iters)
            while self.step < self.iters:
                self.train_epoch()

        def train_epoch(self):
            for batch in self.loader:
                loss = self.model(batch).mean()
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                self.step += 1
                self.bar.set_description(f"loss: {loss.item():0.4f}")


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        model = DDP(torch.nn.Linear(8, 1).cuda(local_rank), device_ids=[local_rank])
        DiffusionRunner(model, train_loader, 10000).train()


    if __name__ == "__main__":
        main()
"""


def test_a_bar_held_and_advanced_in_the_training_loop_is_shown_by_every_rank(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": HELD_BAR}, "train.py", select="DDP020")
    assert _lines(findings, "DDP020") == [17]
    # Advanced outside any training loop, hidden off rank 0, or labelled with the rank: not reported.
    for old, new in (("                self.bar.set_description(", "            self.bar.set_description("),
                     ("trange(self.step, self.iters)", "trange(self.step, self.iters, disable=dist.get_rank() != 0)"),
                     ('f"loss: {loss.item():0.4f}"', 'f"rank {dist.get_rank()} loss: {loss.item():0.4f}"')):
        quiet = HELD_BAR.replace(old, new)
        findings = lint_project(tmp_path, {"train.py": quiet}, "train.py", select="DDP020")
        assert _lines(findings, "DDP020") == [], new


RETRIEVAL_LOG = """\
    import logging
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    logging.basicConfig(level=logging.INFO)
    logger = logging.getLogger("reid.train")


    def do_train(model, loader, val_loader, optimizer, epochs):
        for epoch in range(epochs):
            for img, pid in loader:
                loss = model(img, pid).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            cmc, m_ap = evaluate(model, val_loader)
            logger.info("mAP: {:.1%}".format(m_ap))
            for r in [1, 5, 10]:
                logger.info("CMC curve, Rank-{:<3}:{:.1%}".format(r, cmc[r - 1]))


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        model = DDP(torch.nn.Linear(8, 1).cuda(local_rank), device_ids=[local_rank])
        do_train(model, train_loader, val_loader, torch.optim.SGD(model.parameters(), lr=0.1), 120)


    if __name__ == "__main__":
        main()
"""


def test_a_retrieval_rank_in_a_message_does_not_name_the_process(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": RETRIEVAL_LOG}, "train.py", select="DDP020")
    assert _lines(findings, "DDP020") == [19, 21]
    for tagged in ('"rank {} CMC curve, Rank-{:<3}:{:.1%}".format(dist.get_rank(), r, cmc[r - 1])',
                   'f"[rank-{dist.get_rank()}] CMC Rank-{r}: {cmc[r - 1]:.1%}"'):
        source = RETRIEVAL_LOG.replace('"CMC curve, Rank-{:<3}:{:.1%}".format(r, cmc[r - 1])', tagged)
        findings = lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP020")
        assert _lines(findings, "DDP020") == [19], tagged
