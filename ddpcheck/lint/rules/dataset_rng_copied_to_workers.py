from __future__ import annotations

from typing import Iterator

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.ddp import option_values
from ddpcheck.lint.model.module import CallSite, ClassInfo, ModuleModel
from ddpcheck.lint.model.syntax import dotted, int_value
from ddpcheck.lint.model.values import Frame
from ddpcheck.lint.rule import Invalid, Rule
from ddpcheck.lint.rules._argparse import int_default
from ddpcheck.lint.rules._classes import classes_of, method_calls

# Random-number objects a Dataset may hold; DataLoader workers get copies with the same state.
_RNG_CLASSES = frozenset({
    "numpy.random.default_rng", "numpy.random.Generator", "numpy.random.RandomState",
    "random.Random", "torch.Generator",
})


class DatasetRngCopiedToWorkers(Rule):
    """A Dataset draws its augmentation from a random-number object made in `__init__`, and the DataLoader has workers: every worker repeats the same random sequence, every epoch.

    In torch 2.13 each DataLoader worker reseeds the global `random` module, the global
    `numpy.random` state and torch's default generator from the loader's base seed plus its
    worker id (`torch/utils/data/_utils/worker.py`). An RNG object the Dataset holds —
    `np.random.default_rng(seed)`, `np.random.RandomState`, `random.Random`, `torch.Generator` —
    is not reseeded: each worker gets a copy with the state it had in the main process.

    ## Why it matters
    With `num_workers=N`, worker k's i-th sample gets exactly the same random crop, flip or noise
    as every other worker's i-th sample, and the copies in the main process never advance, so
    the next epoch starts from the same state again: N-fold less augmentation diversity, repeated
    every epoch, and nothing fails (measured with torch 2.13: 2 workers, two epochs, identical
    draws in pairs and across epochs).

    Reported at the RNG's construction when a class assigns one to `self.x` in a method, uses
    `self.x` in another method (`__getitem__` or what it calls), and a DataLoader of the linted
    file, or of a project helper it calls (`make_loader(dataset, num_workers=args.workers)`, read
    once per call), loads an instance of it with `num_workers` known to be above 0 (a literal,
    or an `args.x` whose `add_argument` default is one, also where a project function adds the
    option to the script's parser, `parser = cli.add_computing_args(parser)`) and no
    `worker_init_fn`.

    ## How to fix
    Draw from the global generators PyTorch reseeds per worker (`random`, `np.random`,
    `torch.rand`), or make the generator per worker: create it lazily in `__getitem__` from
    `torch.utils.data.get_worker_info().seed`, or reseed it in a `worker_init_fn`
    (`info = get_worker_info(); info.dataset.rng = np.random.default_rng(info.seed)`).

    ## References
    - https://pytorch.org/docs/stable/data.html#randomness-in-multi-process-data-loading
    - https://pytorch.org/docs/stable/notes/faq.html#my-data-loader-workers-return-identical-random-numbers
    - https://github.com/wolny/pytorch-3dunet/issues/32 (a dataset's seeded random transforms:
      every worker rotates by the same angle)
    - https://github.com/pytorch/pytorch/issues/5059 (the same for the global numpy state, which
      PyTorch has since reseeded per worker)
    """

    code = "DDP028"
    name = "dataset-rng-copied-to-workers"
    severity = Severity.WARNING
    MESSAGE = (
        "`{target}` is a random-number object the DataLoader's {workers} workers each copy with the "
        "same state: they repeat one another's augmentation, every epoch; draw from "
        "`np.random`/`random`/`torch` (reseeded per worker) or seed it from `get_worker_info().seed`"
    )

    VALID = [
        """
        import numpy as np
        import torch
        from torch.utils.data import DataLoader, Dataset, get_worker_info

        class Crops(Dataset):
            def __init__(self, images, seed):
                self.images = images
                self.seed = seed
                self.rng = None

            def __getitem__(self, i):
                if self.rng is None:
                    info = get_worker_info()
                    self.rng = np.random.default_rng(self.seed + (info.id if info else 0))
                return crop(self.images[i], self.rng.integers(0, 32, size=2))

        loader = DataLoader(Crops(images, 0), batch_size=64, num_workers=8)
        """,
        """
        # No workers: the one copy advances.
        import random
        from torch.utils.data import DataLoader, Dataset

        class Noisy(Dataset):
            def __init__(self, data):
                self.data = data
                self.rand = random.Random(0)

            def __getitem__(self, i):
                return self.data[i] + self.rand.gauss(0, 0.1)

        loader = DataLoader(Noisy(data), batch_size=32, num_workers=0)
        """,
    ]
    INVALID = [
        Invalid(
            """
            import argparse
            import numpy as np
            from torch.utils.data import DataLoader, Dataset, DistributedSampler

            class RandomCropDataset(Dataset):
                def __init__(self, images, size, seed=0):
                    self.images = images
                    self.size = size
                    self.rng = np.random.default_rng(seed)

                def __len__(self):
                    return len(self.images)

                def __getitem__(self, i):
                    y, x = self.rng.integers(0, 32, size=2)
                    return self.images[i][:, y:y + self.size, x:x + self.size]

            parser = argparse.ArgumentParser()
            parser.add_argument("--workers", type=int, default=8)
            args = parser.parse_args()
            train_set = RandomCropDataset(images, 224)
            loader = DataLoader(train_set, batch_size=64, sampler=DistributedSampler(train_set),
                                num_workers=args.workers, pin_memory=True)
            """,
            lines=(9,),
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader, Dataset

            class Jitter(Dataset):
                def __init__(self, x):
                    self.x = x
                    self.g = torch.Generator().manual_seed(1234)

                def __getitem__(self, i):
                    return self.x[i] + 0.01 * torch.randn(self.x[i].shape, generator=self.g)

            loader = DataLoader(Jitter(x), batch_size=16, num_workers=4)
            """,
            lines=(7,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        reported: set[int] = set()
        for site in model.paths.sites():
            if model.api(site) != api.DATALOADER:
                continue
            if site.arg("worker_init_fn") is not None or site.has_star_kwargs:
                continue
            dataset = site.arg("dataset", 0)
            if dataset is None:
                continue
            # A loader built in a helper of the project (`make_loader(ds, num_workers=args.workers)`)
            # is read once per caller: the dataset and the worker count of one call go together.
            frames = [None] if site.module is model.root else model.values.frames(site)
            for frame in frames:
                if site.module is not model.root and frame is None:
                    continue  # a helper nobody is seen calling: its dataset is not known
                workers = self._workers(site, frame)
                if workers is None:
                    continue
                for module, info in classes_of(model, model.values.at_call(site, dataset, frame)):
                    for owner_module, owner in model.graph.mro(module, info):
                        for target, node in self._held_rngs(owner_module, owner):
                            if id(node) in reported:
                                continue
                            reported.add(id(node))
                            self.report(node, self.MESSAGE.format(target=target, workers=workers),
                                        module=owner_module, related=[site] if owner_module is not model.root else ())

    def _workers(self, site: CallSite, frame: Frame | None = None) -> int | None:
        given = site.arg("num_workers", 5)
        if given is None:
            return None
        count = int_value(given)
        if count is None:
            for value in self.model.values.at_call(site, given, frame):
                node = value.node
                if isinstance(node, cst.BaseExpression):
                    count = int_value(node)
                    if count is None:
                        count = int_default(value.module, node)
                    if count is None:
                        # declared where the namespace is made: a project helper's `add_argument`
                        count = next((c for c in (int_value(d.node) for d in option_values(self.model, value)
                                                  if isinstance(d.node, cst.BaseExpression)) if c is not None), None)
                if count is not None:
                    break
        return count if count is not None and count > 0 else None

    def _held_rngs(self, module: ModuleModel, info: ClassInfo) -> Iterator[tuple[str, cst.Call]]:
        """(`self.x`, the construction) for RNG objects assigned to `self.x` and used elsewhere
        in the class."""
        for name, values in info.scope.assignments.items():
            if not name.startswith("self."):
                continue
            for value in values:
                node = getattr(value, "value", value)
                if not isinstance(node, cst.Call):
                    continue
                base = node
                while isinstance(base.func, cst.Attribute) and isinstance(base.func.value, cst.Call) \
                        and base.func.attr.value == "manual_seed":
                    base = base.func.value  # torch.Generator().manual_seed(s)
                site = module.call_at(base)
                if site is None or self.model.api(site) not in _RNG_CLASSES:
                    continue
                if self._used_outside(module, info, name, site):
                    yield name, node

    def _used_outside(self, module: ModuleModel, info: ClassInfo, name: str, made: CallSite) -> bool:
        for call in method_calls(self.model, module, info):
            if call.scope.function is made.scope.function:
                continue
            if call.receiver_name == name or any(dotted(a.value) == name for a in call.node.args):
                return True
        return False
