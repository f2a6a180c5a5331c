"""Evaluation on some ranks only (DDP009), shard metrics (DDP036) and rank-local loop exits
(DDP035), on mechanisms seen on public scripts of batch 23: each through `ddpcheck lint` on a
small project written in the style of the scripts, with a clean variant."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# A renderer assembled from parts handed to its constructor: its own code makes no buffer, the
# parts do (a frequency table and a fixed sampling grid registered as buffers).
RENDERER = """\
    import torch
    import torch.nn as nn


    class VolumeRenderer(nn.Module):
        def __init__(self, encoder, sampler, field, chunk=1024):
            super().__init__()
            self.encoder = encoder
            self.sampler = sampler
            self.field = field
            self.chunk = chunk

        def forward(self, origins, directions):
            points = self.sampler(origins, directions)
            return self.field(self.encoder(points))
"""

PARTS = """\
    import torch
    import torch.nn as nn


    class FourierFeatures(nn.Module):
        def __init__(self, n_freqs):
            super().__init__()
            {encoder_state}

        def forward(self, x):
            return torch.cat([torch.sin(x[..., None] * self.freqs)], -1).flatten(-2)


    class StratifiedSampler(nn.Module):
        def __init__(self, n_samples, near, far):
            super().__init__()
            {sampler_state}

        def forward(self, origins, directions):
            return origins[:, None] + directions[:, None] * self.grid[None, :, None]


    class RadianceField(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.net = nn.Sequential(nn.LazyLinear(width), nn.ReLU(), nn.Linear(width, 4))

        def forward(self, x):
            return self.net(x)
"""

NERF_SCRIPT = """\
    import argparse
    import torch
    import torch.distributed as dist
    from render.volume import VolumeRenderer
    from nets.parts import FourierFeatures, StratifiedSampler, RadianceField

    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=-1)
    parser.add_argument("--freqs", type=int, default=10)
    args = parser.parse_args()


    def main():
        torch.cuda.set_device(args.local_rank)
        dist.init_process_group("nccl")
        renderer = VolumeRenderer(
            encoder=FourierFeatures(args.freqs) if args.freqs > 0 else None,
            sampler=StratifiedSampler(64, 2.0, 6.0),
            field=RadianceField(256),
        ).to(args.local_rank)
        renderer = torch.nn.parallel.DistributedDataParallel(renderer, device_ids=[args.local_rank])
        optimizer = torch.optim.Adam(renderer.parameters(), 5e-4)
        for step in range(1000):
            origins, directions = torch.randn(1024, 3).cuda(), torch.randn(1024, 3).cuda()
            loss = renderer(origins, directions).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if args.local_rank <= 0 and step % 100 == 0:
                with torch.no_grad():
                    view = renderer(origins, directions)
                print(step, view.mean().item())
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def _nerf(encoder_state: str, sampler_state: str) -> dict[str, str]:
    return {
        "train.py": NERF_SCRIPT,
        "render/__init__.py": "",
        "render/volume.py": RENDERER,
        "nets/__init__.py": "",
        "nets/parts.py": PARTS.format(encoder_state=encoder_state, sampler_state=sampler_state),
    }


def test_rank0_forward_of_a_network_whose_parts_hold_buffers(tmp_path: Path) -> None:
    files = _nerf('self.register_buffer("freqs", 2.0 ** torch.arange(n_freqs), False)',
                  'self.register_buffer("grid", torch.linspace(near, far, n_samples))')
    assert lines(tmp_path, files, "DDP009") == [("train.py", 31)]


def test_rank0_forward_of_a_network_whose_parts_hold_no_buffers_is_silent(tmp_path: Path) -> None:
    files = _nerf("self.freqs = nn.Parameter(2.0 ** torch.arange(n_freqs), requires_grad=False)",
                  "self.grid = nn.Parameter(torch.linspace(near, far, n_samples), requires_grad=False)")
    assert lines(tmp_path, files, "DDP009") == []


# A model summary printed by the rank that logs: torchsummary runs a forward of the model it is
# handed, here the DDP wrapper.
SUMMARY_SCRIPT = """\
    import argparse
    import torch
    import torch.distributed as dist
    import torchvision.models as models
    {summary_import}

    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=0)
    args = parser.parse_args()


    def main():
        torch.cuda.set_device(args.local_rank)
        dist.init_process_group("nccl")
        args.verbose = True if dist.get_rank() == 0 else False
        model = models.resnet50().cuda()
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.local_rank])
        if args.verbose:
            {summary_call}
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * dist.get_world_size())
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_rank0_library_summary_of_the_ddp_model(tmp_path: Path) -> None:
    files = {"train.py": SUMMARY_SCRIPT.format(summary_import="from torchsummary import summary",
                                               summary_call="summary(model, (3, 32, 32))")}
    assert lines(tmp_path, files, "DDP009") == [("train.py", 19)]


def test_rank0_flop_count_of_the_ddp_model(tmp_path: Path) -> None:
    files = {"train.py": SUMMARY_SCRIPT.format(
        summary_import="import thop",
        summary_call="flops, params = thop.profile(model, inputs=(torch.randn(1, 3, 224, 224).cuda(),))")}
    assert lines(tmp_path, files, "DDP009") == [("train.py", 19)]


def test_rank0_library_summary_of_the_inner_module_is_silent(tmp_path: Path) -> None:
    files = {"train.py": SUMMARY_SCRIPT.format(summary_import="from torchsummary import summary",
                                               summary_call="summary(model.module, (3, 32, 32))")}
    assert lines(tmp_path, files, "DDP009") == []


def test_rank0_summary_without_an_input_runs_no_forward(tmp_path: Path) -> None:
    # torchinfo lists the layers without a forward when it is given no input.
    files = {"train.py": SUMMARY_SCRIPT.format(summary_import="from torchinfo import summary",
                                               summary_call="summary(model, depth=2)")}
    assert lines(tmp_path, files, "DDP009") == []


# A pipeline configuration chosen from a table of configuration classes; the chosen class's
# static method builds the DDP model. Validation runs where the local rank read from the
# environment is unset (no launcher) or 0.
PIPELINE_DDP = """\
    import os
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP


    def get_local_rank():
        local_rank = os.environ.get("LOCAL_RANK")
        return int(local_rank) if local_rank is not None else None


    def wrap_if_needed(model):
        if get_local_rank() is not None:
            gpu = get_local_rank()
            model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model.to(gpu))
            return DDP(model, device_ids=[gpu])
        return model
"""

PIPELINE_CONFIG = """\
    import torchvision
    from lab.parallel import wrap_if_needed


    class ModelConfig:
        Model = torchvision.models.resnet50

        @staticmethod
        def make_model():
            return wrap_if_needed(ModelConfig.Model(num_classes={classes}))


    class PipelineConfig(ModelConfig):
        write_interval = 10
"""

PIPELINE_SCRIPT = """\
    import torch
    from torch.distributed import init_process_group
    from lab.parallel import get_local_rank
    import lab.configs as C

    CONFIGS = {{
        "small": C.Small,
        "large": C.Large,
    }}
    Config = CONFIGS["large"]


    def validate(model, loader, gpu_id):
        model.eval()
        with torch.no_grad():
            for x, y in loader:
                {forward}


    def main(train_loader, val_loader):
        init_process_group("nccl")
        gpu_id = get_local_rank()
        model = Config.make_model()
        optimizer = torch.optim.Adam(model.parameters(), 1e-4)
        for epoch in range(10):
            for x, y in train_loader:
                loss = torch.nn.functional.cross_entropy(model(x.to(gpu_id)), y.to(gpu_id))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            if gpu_id is None or gpu_id == 0:
                validate(model, val_loader, gpu_id)
"""


def _pipeline(forward: str) -> dict[str, str]:
    return {
        "train.py": PIPELINE_SCRIPT.format(forward=forward),
        "lab/__init__.py": "",
        "lab/parallel.py": PIPELINE_DDP,
        "lab/configs/__init__.py": "from .small import PipelineConfig as Small\nfrom .large import PipelineConfig as Large\n",
        "lab/configs/small.py": PIPELINE_CONFIG.format(classes=10),
        "lab/configs/large.py": PIPELINE_CONFIG.format(classes=1000),
    }


def test_rank0_validation_of_a_model_built_by_a_chosen_config_class(tmp_path: Path) -> None:
    files = _pipeline("print(model(x.to(gpu_id)).argmax(1).eq(y.to(gpu_id)).float().mean())")
    assert lines(tmp_path, files, "DDP009") == [("train.py", 32)]


def test_rank0_validation_through_the_inner_module_is_silent(tmp_path: Path) -> None:
    files = _pipeline("print(model.module(x.to(gpu_id)).argmax(1).eq(y.to(gpu_id)).float().mean())")
    assert lines(tmp_path, files, "DDP009") == []
