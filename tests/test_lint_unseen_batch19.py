"""Mechanisms seen on public scripts around batch 19: each through `ddpcheck lint` on a small
project written in the style of the scripts."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, lint_project, write_project


def lines(tmp_path: Path, files: dict[str, str], select: str, target: str = "train.py") -> list[int]:
    return [f["location"]["line"] for f in lint_project(tmp_path, files, target, select=select)]


SEEDED_GPT = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from evalkit import iterate_examples, render_example
    from model import GPT

    dist.init_process_group("gloo")
    torch.manual_seed(1337)
    model = DDP(GPT())
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4)
    for step in range(100):
        x = torch.randint(0, 50, (4, 16), generator=torch.Generator().manual_seed(step))
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
    for example in iterate_examples("val"):
        render_example(example)
"""

GPT_MODEL = """\
    import torch
    import torch.nn as nn


    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(50, 32)
            self.head = nn.Linear(32, 50)
            self.pos = nn.Parameter(torch.randn(1, 16, 32))
            self.apply(self._init_weights)

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            elif isinstance(module, nn.Embedding):
                module.weight.data.normal_(mean=0.0, std=0.02)

        def forward(self, idx):
            return self.head({body})
"""

EVALKIT = """\
    import json
    from transformers import GPT2LMHeadModel


    def render_example(example):
        # the tokens where we evaluate the completion
        return json.dumps(example)


    def iterate_examples(split):
        yield {{"split": split}}


    def evaluate(model_type):
        model = GPT2LMHeadModel.from_pretrained(model_type)
        return model


    {tail}
"""


def project(body: str = "self.wte(idx) + self.pos", tail: str = 'if __name__ == "__main__":\n        evaluate("gpt2")') -> dict[str, str]:
    return {"train.py": SEEDED_GPT, "model.py": GPT_MODEL.format(body=body), "evalkit.py": EVALKIT.format(tail=tail)}


def test_a_seed_is_silent_when_training_draws_only_to_initialise_parameters(tmp_path: Path) -> None:
    # The same seed on every rank initialises the same weights (DDP broadcasts rank 0's anyway);
    # the helper module's own main block loads a library network the training never reaches.
    assert lines(tmp_path, project(), "DDP029") == []


def test_a_seed_is_reported_when_the_model_drops_out(tmp_path: Path) -> None:
    body = "nn.functional.dropout(self.wte(idx) + self.pos, 0.1, self.training)"
    assert lines(tmp_path, project(body=body), "DDP029") == [8]


def test_a_library_network_that_the_imported_code_loads_at_import_counts(tmp_path: Path) -> None:
    # Module-level code runs at import: its network trains with its own dropout.
    assert lines(tmp_path, project(tail='BASELINE = evaluate("gpt2")'), "DDP029") == [8]


REGISTRY = """\
    import torch.nn as nn

    MODELS = {}


    def register_model(fn):
        MODELS[fn.__name__] = fn
        return fn


    def get_model(name):
        return MODELS[name]()


    @register_model
    def wide_net():
        return nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.3), nn.Linear(8, 2))
"""

REGISTRY_SCRIPT = """\
    import argparse
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from registry import get_model

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="wide_net")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(get_model(args.model))
"""


def test_a_definition_put_in_a_registry_is_reached_from_a_configured_name(tmp_path: Path) -> None:
    # Only the registry's lookup is imported; the network the command line names drops out.
    assert lines(tmp_path, {"train.py": REGISTRY_SCRIPT, "registry.py": REGISTRY}, "DDP029") == [11]


VIT_TRAINER = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from model import Classifier

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(Classifier())
    if rank == 0:
        with torch.no_grad():
            print(model(torch.randn(2, 3, 224, 224)).shape)
"""

VIT_MODEL = """\
    import timm
    from torch import nn


    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = timm.create_model({name!r}, num_classes=0, pretrained=True)
            self.head = nn.Linear(384, 10)

        def forward(self, x):
            return self.head(self.backbone(x))
"""


def test_a_rank_0_forward_of_a_timm_vision_transformer_broadcasts_nothing(tmp_path: Path) -> None:
    # DDP's forward syncs buffers only where the module has some; a ViT holds none.
    files = {"train.py": VIT_TRAINER, "model.py": VIT_MODEL.format(name="vit_small_patch16_224.augreg_in21k")}
    assert lines(tmp_path, files, "DDP009") == []


def test_a_rank_0_forward_of_a_timm_resnet_is_reported(tmp_path: Path) -> None:
    files = {"train.py": VIT_TRAINER, "model.py": VIT_MODEL.format(name="resnet50")}
    assert lines(tmp_path, files, "DDP009") == [11]


TRAIN_LOOP = """\
    def train_model(model, optimizer, dataloader, epochs=1, verbose=False):
        model.train()
        for epoch in range(epochs):
            for x in dataloader:
                optimizer.zero_grad()
                model(x).sum().backward()
                optimizer.step()
"""

KWARGS_SCRIPT = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler
    from trainer import train_model


    def main(rank, world_size):
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        dataset = list(range(100))
        dataloader = DataLoader(dataset, batch_size=4, sampler=DistributedSampler(dataset{shuffle}))
        model = DDP(torch.nn.Linear(1, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_kwargs = dict(model=model, dataloader=dataloader, optimizer=optimizer, epochs=20000)
        if rank == 0:
            train_kwargs.update(dict(verbose=True))
        train_model(**train_kwargs)
"""


def test_a_loader_handed_on_through_a_dict_of_keyword_arguments_is_followed(tmp_path: Path) -> None:
    files = {"train.py": KWARGS_SCRIPT.format(shuffle=""), "trainer.py": TRAIN_LOOP}
    write_project(tmp_path, files)
    assert finding_set(tmp_path, "train.py", select="DDP002") == {("trainer.py", 3, "DDP002")}


def test_a_loader_handed_on_through_a_dict_that_does_not_shuffle_stays_clean(tmp_path: Path) -> None:
    files = {"train.py": KWARGS_SCRIPT.format(shuffle=", shuffle=False"), "trainer.py": TRAIN_LOOP}
    assert lines(tmp_path, files, "DDP002") == []


SCHEDULERS = """\
    import torch


    class Warmup:
        def __init__(self, optimizer, warmup_epochs, kind="step", **kwargs):
            self.inner = make_scheduler(optimizer, kind, **kwargs)


    def make_scheduler(optimizer, kind="step", **kwargs):
        warmup_epochs = kwargs.pop("warmup_epochs", 0)
        if warmup_epochs > 0:
            return Warmup(optimizer, warmup_epochs, kind, **kwargs)
        return torch.optim.lr_scheduler.StepLR(optimizer, step_size=kwargs.get("step_size", 10))
"""


def test_keyword_arguments_handed_back_and_forth_are_read_once(tmp_path: Path) -> None:
    # A constructor and a builder forward `**kwargs` to each other: reading a parameter through
    # the unpacked dicts must end, and the rest of the file is still checked.
    script = KWARGS_SCRIPT.format(shuffle="").replace(
        "        train_model(**train_kwargs)",
        "        scheduler = make_scheduler(optimizer, warmup_epochs=5, step_size=3)\n"
        "        train_model(**train_kwargs)").replace(
        "from trainer import train_model", "from trainer import train_model\n    from schedulers import make_scheduler")
    files = {"train.py": script, "trainer.py": TRAIN_LOOP, "schedulers.py": SCHEDULERS}
    write_project(tmp_path, files)
    assert finding_set(tmp_path, "train.py", select="ALL") >= {("trainer.py", 3, "DDP002")}
