from __future__ import annotations

import re
from typing import TYPE_CHECKING

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.conditions import Resolve, is_distributed_test, is_rank_value
from ddpcheck.lint.model.ddp import feed
from ddpcheck.lint.model.index import code_only
from ddpcheck.lint.model.module import CallSite, Element, Guard, ModuleModel, Param
from ddpcheck.lint.model.options import constant_flag, option_default
from ddpcheck.lint.model.randomness import draws_random, model_draws_random, model_drops_out
from ddpcheck.lint.model.shares import takes_own_share
from ddpcheck.lint.model.symbols import Function
from ddpcheck.lint.model.syntax import children, dotted, int_value, is_none
from ddpcheck.lint.model.values import Value
from ddpcheck.lint.rule import Invalid, Rule
from ddpcheck.lint.rules._argparse import option_defaults

if TYPE_CHECKING:
    from ddpcheck.lint.model.semantic import Model


class SameSeedOnEveryRank(Rule):
    """`torch.manual_seed(<constant>)` on every rank: the DataLoader workers of every rank draw the same random augmentation.

    In torch 2.13 a DataLoader iterator takes its workers' base seed from torch's default
    generator (`torch.empty((), dtype=torch.int64).random_()` in `dataloader.py`), and worker k
    seeds `random`, `numpy.random` and torch with `base_seed + k`. After the same
    `torch.manual_seed(42)` on every rank, the base seeds are equal: worker k of rank 0 and worker
    k of rank 1 produce the same random numbers, and with `num_workers=0` the ranks' main
    processes do. Dropout masks follow the same generator.

    ## Why it matters
    The ranks read different samples (the DistributedSampler shards them) but apply the same
    random crops, flips, masks and noise in the same order, so a global batch of N × B samples
    carries only B draws of augmentation: less regularisation than the same batch on one GPU,
    and nothing fails. Off by default and informational: seeding identically is sometimes
    deliberate, and the effect is a loss of diversity, not wrong gradients.

    Reported at a `torch.manual_seed(...)` call (also `torch.random.manual_seed`, and library
    seeders such as `transformers.set_seed`, RecBole's `init_seed`, PyG's `seed_everything` or
    MONAI's `set_determinism`) that runs on every rank of a file whose DataLoader
    uses a DistributedSampler (built in the file or in a project function it calls), that hands
    each rank its own share of the data by hand (`idx.split(...)[rank]`, `files[rank::world_size]`,
    a slice whose two bounds both come from the rank, `rays[bounds[rank]:bounds[rank + 1]]`,
    `x[rank * n:(rank + 1) * n]`, the rank's part of a split into world-size parts,
    `partition_dataset(data, num_partitions=world_size)[rank]`),
    or that wraps a model in DDP (itself or through the project: without a sampler every rank
    reads the same data, and with the same seed draws the same dropout masks on it too; with no
    sharding in sight only dropout in the code counts as a draw), when training draws random numbers (dropout, random augmentation, random tensors — not a
    synthetic set drawn once inside `TensorDataset(torch.randn(n, d), ...)` — or
    Python/NumPy draws, a shuffling DataLoader — not one of the file that only the
    non-distributed branch builds, the `else` of `if use_ddp:` —, not a sampler's order (`RandomSampler`) nor a set a
    dataset's constructor draws once (`self.x = torch.randn(n, d)`), a library model with its own dropout, not a tokenizer's or a
    configuration's `from_pretrained`, which loads no network — in the file
    or a project module it imports), and the seed is a literal, a command-line option of the file (whatever its default: every rank
    gets the same command line; also converted, `int(args.seed)`; also where the file moves it alike on
    every rank, `args.seed += epoch` in the epoch loop, but not by the rank, under a rank test or
    to what a call returns) or a field of a configuration that every rank loads the same way
    (`hps.train.seed` of `hps = get_hparams()`, a project function that parses the command line or
    reads a JSON/YAML/INI file and mentions nothing that differs between ranks: rank, environment,
    clock, random draws — in its code: not in its messages —, or a project configuration class whose
    constructor reads the file, itself or through a method it calls, and whose class mentions none
    of them, `Config(args.config)`; also read with a literal default, `cfg.get("seed", 42)`, or with
    another field of the same configuration that has one, `cfg.get("seed", cfg.get("random_seed",
    42))`; `wandb.config` filled from the
    command line; `cfg.seed` of the configuration Hydra hands an `@hydra.main` function;
    `cfg.SEED` of a configuration object a project module builds at import, `_C = CN()` of yacs
    or `__C = AttrDict()`, that the module sets only at module level; the fields of a parameter
    declared `argparse.Namespace`; `self.cfg["SEED"]` of `self.cfg = load_config(path)` set in the constructor (also the field copied into the object, `self.seed = config.seed`, then `torch.manual_seed(self.seed)`; a loader that returns None when the file does not parse has no field there); `vars(args)` of a parsed namespace),
    and nothing in it comes from the rank (a project rank helper that returns a literal until the
    process group is set up, `if not is_dist_avail_and_initialized(): return 0`, called before
    the run sets the group up, in `main()` ahead of the worker that initialises, gives that
    literal on every rank: `args.seed + get_rank()` there is the same seed). A call of a project seeding helper (`fix_random_seeds(args.seed)`, `set_seed(args)`
    whose body seeds torch with that parameter or its `.seed`, also through a local, `seed =
    config.SEED`) is judged by what it passes, and by its parameter's literal default when the
    call passes nothing (`seed_torch()` of `def seed_torch(seed=1029)`); a helper that draws a
    seed of its own when given none (`if opt.seed is None: opt.seed = random.randint(...)`)
    counts only where the option it is given has a number for its default. A seed set in a project
    function the run reaches (`train(cfg)` of a trainer module, called by the script with Hydra's
    `cfg`) is judged with the values the script passes and reported where it is set. A project function of
    another module that seeds torch with a literal whenever it runs (`setup_env()` calling
    `torch.manual_seed(54321)` under no condition; a function named for setting up the run:
    seeds, environment, init, not a builder such as `create_model()` whose seed fixes the
    weights it draws) is reported where the script calls it,
    unless that function wraps a model in DDP itself (its own seed is reported where it is
    written, when its module is linted). A project module the file imports at its top that
    seeds torch at its own top level (`torch.manual_seed(config.seed)` in `setup.py` beside the
    `config` it builds) seeds every rank when it is imported, spawned workers too: reported
    there, unless the run seeds torch with the rank somewhere. Where only the GPU generators are seeded alike
    (`torch.cuda.manual_seed(args.seed)`, torch's own generator never seeded), the workers'
    seeds still differ, so the call is reported only when the model drops out (dropout on the
    GPU draws from that generator; where the data is sharded, a library network built from its
    configuration counts too: `GPT2LMHeadModel(config)`, as `from_config`). A library network loaded with its weights
    (`AutoModel.from_pretrained(...)`, `timm.create_model(...)`, not a tokenizer's or a
    configuration's `from_pretrained`, nor one whose weights a project network with its own
    `from_pretrained` copies) counts as dropout; one built from its configuration
    (`AutoModelForCausalLM.from_config(config)`, whose configuration may set no dropout) counts
    as a draw only where the data is sharded. Not
    reported: a seed set only in the process that starts the workers, before `mp.spawn` in the
    same function or `__main__` block (also a spawn under a flag the command line cannot turn
    off, `action="store_true", default=True`; a spawn only when there are several GPUs or the run
    is distributed, `if torch.cuda.device_count() > 1:`, `if args.distributed:`, the other arm
    training in one process), or before a project function there that spawns
    (`Trainer(cfg).run()` calling `mp.spawn`, in a file no outside launcher can start), or anywhere on
    the launching process's own path of such a file when nothing on that path sets up a process group
    (`main()` seeding, then `mp.spawn(worker)` on one arm and a pool of folds or a single-GPU run on
    the others; a test mode the `__main__` block calls instead) (spawned workers start a fresh interpreter that skips that
    block, so the seed never reaches them; a seed at module level outside it runs in every
    worker and is reported); a seed that, on every path, is set again later with the rank in it
    (`torch.manual_seed(args.seed + rank)` at the top of the training function called next,
    also in the worker a project function spawns, a few calls down, or on both arms of a later
    `if`/`else`; for a seed at a module's top level outside its `__main__` block, which runs
    first in every process, a per-rank seed under no condition anywhere on the run).

    Also reported: a `torch.Generator` seeded with the same value on every rank (`g =
    torch.Generator(); g.manual_seed(0)` at a module's top level, `torch.Generator().manual_seed(0)`)
    and handed as `generator=` to a DataLoader with workers that a DistributedSampler feeds: the
    workers' base seed is drawn from it, not from torch's generator (unless the loader's
    `worker_init_fn` reseeds with the rank).

    ## How to fix
    Offset the seed by the rank: `torch.manual_seed(args.seed + rank)` (and the same for `random`
    and `numpy`). DDP broadcasts rank 0's parameters when it wraps the model, so the replicas
    still start identical. The DistributedSampler has its own `seed`, which must stay the same on
    every rank. When the same seed is needed to build the same synthetic dataset on every rank,
    seed again with the rank once it is built (`# noqa: DDP029` on the first call says so).

    ## References
    - https://pytorch.org/docs/stable/data.html#randomness-in-multi-process-data-loading
    - https://pytorch.org/docs/stable/notes/randomness.html
    - https://github.com/huggingface/pytorch-image-models/issues/1519 (why timm seeds each rank
      differently: "we want the dataloader workers on each node to have different augmentations")
    """

    code = "DDP029"
    name = "same-seed-on-every-rank"
    severity = Severity.INFO
    default_enabled = False
    MESSAGE = (
        "every rank seeds torch with the same `{seed}`: the DataLoader workers of every rank draw the "
        "same augmentation (and dropout masks); offset the seed by the rank"
    )

    GPU_MESSAGE = (
        "every rank seeds the GPU generator with the same `{seed}`: dropout on the GPU draws the same "
        "masks on every rank; offset the seed by the rank"
    )
    GENERATOR_MESSAGE = (
        "every rank seeds the DataLoader's generator with the same `{seed}`: its workers get the same "
        "base seed on every rank and draw the same augmentation; offset the seed by the rank"
    )

    VALID = [
        """
        import torch
        import torch.distributed as dist
        from torch.utils.data import DataLoader, DistributedSampler

        dist.init_process_group("nccl")
        rank = dist.get_rank()
        torch.manual_seed(args.seed + rank)
        loader = DataLoader(train_set, sampler=DistributedSampler(train_set, seed=args.seed), num_workers=8)
        """,
        """
        import torch
        import torch.distributed as dist
        from torch.utils.data import DataLoader, DistributedSampler

        def set_seed(seed):
            torch.manual_seed(seed)

        dist.init_process_group("nccl")
        set_seed(args.seed + dist.get_rank())
        loader = DataLoader(train_set, sampler=DistributedSampler(train_set), num_workers=8)
        """,
        """
        import json
        import os

        import torch
        import torch.distributed as dist
        from torch.utils.data import DataLoader, DistributedSampler


        def read_settings(path):
            with open(path) as f:
                settings = json.load(f)
            settings["seed"] = settings["seed"] + int(os.environ["RANK"])
            return settings


        def train():
            dist.init_process_group("nccl")
            settings = read_settings("settings.json")
            torch.manual_seed(settings["seed"])
            loader = DataLoader(train_set, sampler=DistributedSampler(train_set), num_workers=4)
        """,
        """
        import argparse
        import torch
        import torch.distributed as dist
        from torch.utils.data import DataLoader, DistributedSampler

        parser = argparse.ArgumentParser()
        parser.add_argument("--seed", type=int, default=42)
        args = parser.parse_args()
        dist.init_process_group("nccl")
        torch.manual_seed(args.seed)
        loader = DataLoader(train_set, sampler=DistributedSampler(train_set), num_workers=8)
        model = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
        """,
    ]
    INVALID = [
        Invalid(
            """
            import argparse
            import torch
            import torch.distributed as dist
            from torch.utils.data import DataLoader, DistributedSampler

            parser = argparse.ArgumentParser()
            parser.add_argument("--seed", type=int, default=42)
            args = parser.parse_args()
            dist.init_process_group("nccl")
            torch.manual_seed(args.seed)
            loader = DataLoader(train_set, sampler=DistributedSampler(train_set), num_workers=8)
            augment = transforms.RandomResizedCrop(224)
            """,
            lines=(10,),
        ),
        Invalid(
            """
            import argparse
            import random

            import numpy as np
            import torch
            import torch.distributed as dist
            from torch.utils.data import DataLoader, DistributedSampler


            def fix_random_seeds(seed=31):
                torch.manual_seed(seed)
                torch.cuda.manual_seed_all(seed)
                np.random.seed(seed)


            def main():
                parser = argparse.ArgumentParser()
                parser.add_argument("--seed", type=int)
                args = parser.parse_args()
                dist.init_process_group("nccl")
                if args.seed is not None:
                    fix_random_seeds(args.seed)
                sampler = DistributedSampler(train_set)
                loader = DataLoader(train_set, sampler=sampler, batch_size=64, num_workers=10)
                augment = transforms.RandomResizedCrop(224)
            """,
            lines=(22,),
        ),
        Invalid(
            """
            import argparse
            import random

            import torch
            from torch.utils.data import DataLoader, DistributedSampler

            from gpu import add_gpu_params, parse_gpu

            parser = argparse.ArgumentParser(description="fine-tuning")
            parser.add_argument("--train_data", required=True)
            add_gpu_params(parser)

            if __name__ == "__main__":
                args = parser.parse_args()
                parse_gpu(args)
                torch.manual_seed(args.random_seed)
                random.seed(args.random_seed)
                train_data = load_dataset(args.train_data)
                train_loader = DataLoader(train_data, batch_size=8, drop_last=True,
                                          sampler=DistributedSampler(train_data, seed=args.random_seed))
                augment = transforms.RandomResizedCrop(224)
            """,
            lines=(16,),
        ),
        Invalid(
            """
            import argparse
            import random

            import numpy as np
            import torch
            from transformers import set_seed as hf_set_seed
            from torch.utils.data import DataLoader
            from torch.utils.data.distributed import DistributedSampler


            def set_seed(args):
                random.seed(args.seed)
                np.random.seed(args.seed)
                torch.manual_seed(args.seed)
                if args.n_gpu > 0:
                    torch.cuda.manual_seed_all(args.seed)


            def main():
                parser = argparse.ArgumentParser()
                parser.add_argument("--seed", default=None, type=int)
                parser.add_argument("--local_rank", type=int, default=-1)
                args = parser.parse_args()
                torch.distributed.init_process_group(backend="nccl")
                if args.seed is not None:
                    set_seed(args)
                hf_set_seed(args.seed)
                sampler = DistributedSampler(labeled_dataset)
                loader = DataLoader(labeled_dataset, sampler=sampler, batch_size=64, num_workers=4)
                augment = transforms.RandomResizedCrop(224)
            """,
            lines=(26, 27),
        ),
        Invalid(
            """
            import argparse
            import json

            import torch
            import torch.distributed as dist
            import torch.multiprocessing as mp
            from torch.utils.data import DataLoader, DistributedSampler


            class Settings:
                def __init__(self, **entries):
                    for key, entry in entries.items():
                        setattr(self, key, Settings(**entry) if isinstance(entry, dict) else entry)


            def load_settings():
                parser = argparse.ArgumentParser()
                parser.add_argument("--config", default="configs/small.json")
                with open(parser.parse_args().config) as f:
                    return Settings(**json.load(f))


            def worker(gpu, world, settings):
                dist.init_process_group("nccl", rank=gpu, world_size=world)
                torch.manual_seed(settings.optim.seed)
                sampler = DistributedSampler(corpus, num_replicas=world, rank=gpu)
                loader = DataLoader(corpus, sampler=sampler, batch_size=16, num_workers=4)


            if __name__ == "__main__":
                settings = load_settings()
                mp.spawn(worker, nprocs=torch.cuda.device_count(), args=(torch.cuda.device_count(), settings))
                augment = transforms.RandomResizedCrop(224)
            """,
            lines=(25,),
        ),
        Invalid(
            """
            from math import ceil

            import torch
            import torch.distributed as dist
            import torch.multiprocessing as mp
            import torch.nn.functional as F


            def worker(rank, world_size, graph):
                dist.init_process_group("nccl", rank=rank, world_size=world_size)
                nodes = graph.train_nodes.split(ceil(graph.train_nodes.numel() / world_size))[rank]
                torch.manual_seed(7)
                model = build_model().to(rank)
                for batch in make_batches(graph, nodes):
                    F.cross_entropy(model(batch), batch.y).backward()
                    augment = transforms.RandomResizedCrop(224)
            """,
            lines=(12,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        self._reseeds: dict[tuple[int, str, int], bool] = {}
        if not model.uses_ddp:
            return
        # The file trains on several ranks: it loads data through a DistributedSampler (its own
        # DataLoader, or a sampler built in a project function it calls), hands each rank its
        # own share by hand (`idx.split(...)[rank]`, `files[rank::world]`), or wraps a model in
        # DDP itself or through the project with no sharding in sight (every rank reads the same
        # data). There only the model's dropout counts as a draw: the other draws the text shows
        # are too often initialisation or generation code to stand alone.
        sharded = any(model.api(s) == api.DATALOADER and feed(model, s) is not None
                      or model.facts.does(s, "distributed_sampler") for s in model.root.calls) \
            or takes_own_share(model)
        if not sharded:
            if not any(model.api(s) == api.DDP or model.facts.does(s, "ddp_wrap") for s in model.root.calls):
                return
            if not model_drops_out(model):
                return
        # The same seed matters only where training draws from the generator it seeds.
        if not draws_random(model):
            return
        # Workers reseeded per rank (`worker_init_fn` seeding with the rank) draw different
        # augmentation on every rank: only the model's own draws (dropout) stay alike.
        if self._workers_seeded_per_rank() and not model_draws_random(model):
            return
        # One finding per seeding helper: its fix is one (in the helper, or the seed it reads),
        # however many times the script calls it (`set_seed(args)` at start-up and again before
        # training).
        helpers_reported: set[tuple[int, str]] = set()
        seeds_cpu = False
        gpu_only: list[CallSite] = []  # `torch.cuda.manual_seed(...)` calls, judged at the end
        # The file's own calls and those of the project functions its run reaches (`train(cfg)` in
        # a trainer module seeding with `cfg.training.seed` of the configuration the script hands it).
        for site in model.paths.sites():
            if model.api(site) in _SEEDERS or any(_seeded_parameter(model, f) is not None
                                                   for f, _ in model.graph.targets(site)):
                seeds_cpu = True
            if model.paths.rank_guard(site) is not None or self._launcher_only(site) or model.paths.single_only(site):
                continue
            if self._reseeded_per_rank_later(site) or self._top_level_reseeded(site):
                continue
            if model.api(site) in _GPU_SEEDERS:
                gpu_only.append(site)
                continue
            if model.api(site) in _SEEDERS:
                seed = site.arg("seed", 0)
                helper = model.paths.function_of(site)
                if helper is not None and _seeded_parameter(model, helper) is not None:
                    continue  # a seeding helper: its calls are judged by what they pass (below)
                if site.module is not model.root and seed is not None and int_value(seed) is not None:
                    continue  # a literal in another module: reported where the script calls it (below)
                if seed is not None and self._same_everywhere(site, seed, model.resolver_for(site.module)):
                    self.report(site.node, self.MESSAGE.format(seed=model.text_of(site.module, seed)),
                                module=site.module, related=model.paths.chain(site))
                continue
            # A project seeding helper (`fix_random_seeds(args.seed)`, `set_seed(args)`): judged
            # by what this call passes to the parameter the helper seeds torch with.
            for function, bound in model.graph.targets(site):
                seeded = _seeded_parameter(model, function)
                if seeded is None or (id(function.module), function.qualname) in helpers_reported:
                    continue
                param, attr = seeded
                passed = model.graph.argument_for(site, function, param, bound)
                if passed is None and attr is None and param.default is not None \
                        and int_value(param.default) is not None and not site.has_star_kwargs \
                        and not any(a.star for a in site.node.args):
                    # `seed_torch()` seeding with its own default (`def seed_torch(seed=1029)`).
                    same, shown = True, function.module.code(param.default)
                elif not isinstance(passed, cst.BaseExpression):
                    continue
                elif attr is None:
                    same = self._same_everywhere(site, passed, model.resolver_for(site.module))
                    shown = model.text_of(site.module, passed)
                else:
                    # `set_seed(args)` seeding with `args.seed`: the command line's namespace,
                    # or a configuration every rank loads alike (`set_seed(cfg)` with `cfg.SEED`).
                    same = isinstance(passed, cst.Name) and not _reassigned(site.module, attr) and (
                        _option(site.module, attr) or self._loaded_alike(site, passed, attr))
                    shown = f"{model.text_of(site.module, passed)}.{attr}"
                if same and isinstance(passed, cst.BaseExpression) and _draws_when_unset(function):
                    # Given no seed, every rank draws its own: the same only where the option
                    # that fills it has a number for its default.
                    default = option_default(site.module, passed) if attr is None \
                        else option_defaults(site.module).get(attr)
                    same = default is not None and int_value(default) is not None
                if same:
                    self.report(site.node, self.MESSAGE.format(seed=shown), module=site.module,
                                related=model.paths.chain(site))
                    helpers_reported.add((id(function.module), function.qualname))
                    break
            else:
                # A project function of another module that seeds torch with a literal whenever
                # it runs (`setup_torch_training_env()` calling `torch.manual_seed(54321)`):
                # every rank that calls it seeds alike; the fix is where the script calls it.
                literal = self._literal_seed_inside(site, 2)
                if literal is not None:
                    self.report(site.node, self.MESSAGE.format(seed=literal), module=site.module,
                                related=model.paths.chain(site))
        # A project module the file imports at its top seeds torch when it is imported
        # (`torch.manual_seed(config.seed)` beside `config = Configuration(...)` in setup.py):
        # every rank, spawned workers too, runs that module's top level on import.
        for site in self._seeds_on_import():
            seeds_cpu = True
            seed = site.arg("seed", 0)
            if seed is not None and self._same_everywhere(site, seed, model.resolver_for(site.module)):
                self.report(site.node, self.MESSAGE.format(seed=model.text_of(site.module, seed)),
                            module=site.module)
        self._loader_generators_seeded_alike()
        # Only the GPU generators seeded (`torch.cuda.manual_seed(args.seed)`, torch's own generator
        # left alone): the workers' seeds differ, but dropout on the GPU draws from the seeded
        # generator, alike on every rank. A library network built from its configuration
        # (`GPT2LMHeadModel(config)`) drops out as the configuration says: counted where the
        # data is sharded, as for the CPU generator.
        if not seeds_cpu and (model_drops_out(model) or sharded and model_draws_random(model)):
            for site in gpu_only:
                seed = site.arg("seed", 0)
                if seed is not None and self._same_everywhere(site, seed, model.resolver_for(site.module)):
                    self.report(site.node, self.GPU_MESSAGE.format(seed=model.text_of(site.module, seed)),
                                module=site.module, related=model.paths.chain(site))
                    break

    def _loader_generators_seeded_alike(self) -> None:
        """A DataLoader of the run fed by a DistributedSampler takes `generator=g`, a
        `torch.Generator()` seeded with the same value on every rank (`g = torch.Generator();
        g.manual_seed(0)` at a module's top level, or `torch.Generator().manual_seed(0)` passed
        inline): torch 2.13 draws the workers' base seed from that generator (`_base_seed =
        torch.empty(...).random_(generator=loader.generator)`), so worker k of every rank is
        seeded alike, whatever torch's own generator holds. Reported at the generator's
        `manual_seed` call, unless the loader's `worker_init_fn` reseeds with the rank or the
        loader starts no workers (`num_workers` left out or 0)."""
        model = self.model
        reported: set[int] = set()
        for site in model.paths.sites():
            if model.api(site) != api.DATALOADER or model.paths.rank_guard(site) is not None:
                continue
            given = site.arg("generator", 12)
            workers = site.arg("num_workers", 5)
            if given is None or workers is None or self._no_workers(site, workers) \
                    or feed(model, site) is None or self._init_reseeds(site):
                continue  # (without workers the generator seeds nothing that draws)
            for value in model.values.at_call(site, given):
                for seeding in self._generator_seeds(value, given):
                    if id(seeding.node) in reported or model.paths.rank_guard(seeding) is not None:
                        continue
                    seed = seeding.arg("seed", 0)
                    if seed is not None and self._same_everywhere(seeding, seed, model.resolver_for(seeding.module)):
                        reported.add(id(seeding.node))
                        self.report(seeding.node, self.GENERATOR_MESSAGE.format(
                            seed=model.text_of(seeding.module, seed)), module=seeding.module)

    def _no_workers(self, site: CallSite, workers: cst.BaseExpression) -> bool:
        """`num_workers` is 0 on every path (also a parameter every caller passes 0)."""
        if int_value(workers) is not None:
            return int_value(workers) == 0
        values = self.model.values.at_call(site, workers)
        return bool(values) and all(isinstance(v.node, cst.BaseExpression) and int_value(v.node) == 0 for v in values)

    def _generator_seeds(self, value: Value, given: cst.BaseExpression) -> list[CallSite]:
        """The `manual_seed` calls that seed the generator `value` holds: chained on its
        construction, or made on the name it is bound to in the scope that builds it."""
        model = self.model
        call = value.call
        if call is None:
            return []
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == "manual_seed" \
                and isinstance(call.func.value, cst.Call) \
                and model.qualname(value.module, call.func.value.func, value.scope) == _GENERATOR:
            site = value.module.call_at(call)
            return [site] if site is not None else []
        if model.api_of(value) != _GENERATOR:
            return []
        name = dotted(given)
        if not name:
            return []
        return [c for c in value.module.calls if c.method == "manual_seed" and c.scope is value.scope
                and c.receiver is not None and dotted(c.receiver) == name and not c.loops]

    def _init_reseeds(self, site: CallSite) -> bool:
        """The loader's `worker_init_fn`, a function of its module, mentions the rank."""
        init = site.arg("worker_init_fn", 10)
        if init is None:
            return False
        if not isinstance(init, cst.Name):
            return True  # (a partial or a lambda: not read)
        function = site.module.functions.get(init.value)
        return function is None or re.search(r"rank", site.module.code(function), re.IGNORECASE) is not None

    def _seeds_on_import(self) -> list[CallSite]:
        """The seeding calls at the top level of the project modules the linted file imports at
        its own top level, under no condition and in no loop, when the run seeds torch with the
        rank nowhere (a per-rank seed later in the run would replace it)."""
        model = self.model
        found = [c for module in model.imported_modules(model.root) for c in module.calls_in("<module>")
                 if model.api(c) in _SEEDERS and not c.guards and not c.loops]
        if not found or any(model.api(c) in _SEEDERS and self._reseeds_per_rank(c, 0) for c in model.paths.sites()):
            return []
        return found

    def _top_level_reseeded(self, site: CallSite) -> bool:
        """`site` seeds at the top level of a module, outside its `__main__` block: it runs on
        import, first in every process, spawned workers too (as `_seeds_on_import`); and the run
        seeds torch with the rank, under no condition in its function (`torch.manual_seed(seed +
        rank)` at the top of the worker): the per-rank seed replaces it."""
        model = self.model
        if site.scope is not site.module.module_scope or site.loops or site.guards:
            return False
        return any(other is not site and not other.guards and model.api(other) in _SEEDERS
                   and self._reseeds_per_rank(other, 0) for other in model.paths.sites())

    def _literal_seed_inside(self, call: CallSite, depth: int) -> str | None:
        """The literal seed a project function of another module that `call` runs gives torch
        on every call: a seeder with a number literal, not under any condition in the function
        (nor in the functions it calls on the way, `depth` deep)."""
        model = self.model
        if depth <= 0 or model.facts.does(call, "ddp_wrap"):
            # A training function that wraps the model itself is a script of its own: the seed
            # is reported where it is written, when that module is linted.
            return None
        for function, _bound in model.graph.targets(call):
            if function.module is model.root or _seeded_parameter(model, function) is not None:
                continue
            if _SETUP_NAME.search(function.name) is None:
                # A builder (`create_model(...)` seeding before it draws the initial weights):
                # its seed fixes what it builds, the same on every rank by intent.
                continue
            for inner in function.module.calls_in(function.qualname):
                if inner.guards or inner.loops:
                    continue
                if model.api(inner) in _SEEDERS:
                    seed = inner.arg("seed", 0)
                    if seed is not None and int_value(seed) is not None:
                        return function.module.code(seed)
                    continue
                found = self._literal_seed_inside(inner, depth - 1)
                if found is not None:
                    return found
        return None

    def _reseeded_per_rank_later(self, site: CallSite) -> bool:
        """Whether torch is seeded again after `site`, on every path through it, with a seed that
        mentions the rank (`torch.manual_seed(args.seed + rank)` at the start of the training
        function it goes on to call, also in the worker a later `mp.spawn` starts): the same
        seed only sets up what runs before, and training draws from the per-rank one. A later
        `if`/`else` whose arms both reseed so (`if args.multinode: train_distributed(...) else:
        train_multiprocess(...)`, each reaching a training function that seeds with the rank)
        counts as a path that does."""
        held = {(id(g.node), g.negated) for g in site.guards}
        later = [other for other in site.module.calls_in(site.scope.qualname)
                 if other.index > site.index and not other.loops]
        arms: dict[int, set[bool]] = {}
        for other in later:
            guards = {(id(g.node), g.negated) for g in other.guards}
            extra = guards - held
            if len(extra) > 1 or not self._reseeds_per_rank(other, _RESEED_DEPTH):
                continue
            if not extra:
                return True
            node, negated = next(iter(extra))
            arms.setdefault(node, set()).add(negated)
        return any(len(sides) == 2 for sides in arms.values())

    def _reseeds_per_rank(self, call: CallSite, depth: int) -> bool:
        """Whether `call` seeds torch with a seed that mentions the rank: directly, through a
        seeding helper given such a seed, or unconditionally in a project function it calls."""
        model = self.model
        if model.paths.rank_guard(call) is not None:
            return False
        if model.api(call) in _SEEDERS:
            seed = call.arg("seed", 0)
            return seed is not None and _mentions_rank(seed, model.resolver_for(call.module, call.scope))
        if depth == 0:
            return False
        for function, bound in model.graph.targets(call):
            seeded = _seeded_parameter(model, function)
            if seeded is not None:
                passed = model.graph.argument_for(call, function, seeded[0], bound)
                if seeded[1] is None and isinstance(passed, cst.BaseExpression) and _mentions_rank(
                        passed, model.resolver_for(call.module, call.scope)):
                    return True
                continue
            if self._function_reseeds(function, depth - 1):
                return True
        return False

    def _function_reseeds(self, function: Function, depth: int) -> bool:
        """Whether `function` seeds torch with the rank under no condition, `depth` calls deep."""
        key = (id(function.module), function.qualname, depth)
        cache = self._reseeds
        if key not in cache:
            cache[key] = False  # a recursive call in progress answers no
            cache[key] = any(not inner.guards and self._reseeds_per_rank(inner, depth)
                             for inner in function.module.calls_in(function.qualname))
        return cache[key]

    def _launcher_only(self, site: CallSite, depth: int = 3) -> bool:
        """The call seeds only the process that starts the workers: every path through it goes
        on to `mp.spawn` in the same function (or under `if __name__ == "__main__":`), so the
        process is the launcher, not a rank. Spawned workers import the script afresh without
        running its `__main__` block, so the seed never reaches them (code at module level
        outside that block runs in every worker, and is reported; a spawn only on one arm of an
        `if` leaves the other arm, a torchrun path, seeding its ranks, unless that arm is the
        run in one process: `if args.distributed: mp.spawn(...)` or `if device_count() > 1:`,
        the other arm calling the worker directly). The spawn may sit in a
        project function called later (`Trainer(cfg).run()`), in a file no outside launcher can
        start. The seed may also sit in a project function that only such calls make
        (`args, config = parse_args_and_config()` in the `__main__` block before `mp.spawn`,
        the function seeding as it parses), followed `depth` calls up: it runs in the launcher
        alone."""
        if self._spawns_after(site):
            return True
        if self._in_launcher_alone(site):
            return True
        function = self.model.paths.function_of(site)
        if function is None or depth <= 0:
            return False
        callers = self.model.graph.callers(function)
        # A worker handed to `mp.spawn` (or a Process) runs in the workers, not the launcher.
        return bool(callers) and all(bound not in ("spawn", "process") and self._launcher_only(call, depth - 1)
                                     for call, bound in callers)

    def _in_launcher_alone(self, site: CallSite) -> bool:
        """`site` runs in the launching process of a file that never becomes a rank itself: no
        outside launcher can start it (see `torchrun_path`), it starts its workers with
        `mp.spawn` or a Process, and no call that process makes, followed through the project,
        sets up a process group (`init_process_group` is reached only inside the workers). A
        seed anywhere on the launcher's own path (`main()` seeding, then choosing between
        `mp.spawn(worker)` and a pool of cross-validation folds or a single-GPU run) seeds no
        rank. Code at the file's top level outside its `__main__` block runs in every spawned
        worker again, and a function the workers reach runs there: neither counts."""
        walk = self._launcher_walk()
        if walk is None:
            return False
        launcher, workers = walk
        model = self.model
        function = model.paths.function_of(site)
        if function is None:
            if site.module is not model.root or site.scope is not site.module.module_scope:
                return False
            mains = {id(node) for node in site.module.main_guards}
            return any(id(g.node) in mains for g in site.guards)
        key = (id(function.module), function.qualname)
        return key in launcher and key not in workers

    def _launcher_walk(self) -> tuple[set[tuple[int, str]], set[tuple[int, str]]] | None:
        """The project functions the launching process runs, and those its spawned workers run
        (each as (module id, qualified name)), or None where the launching process may join a
        process group itself, an outside launcher may start the file, or the walk is cut short."""
        if hasattr(self, "_walk_memo"):
            return self._walk_memo
        self._walk_memo: tuple[set[tuple[int, str]], set[tuple[int, str]]] | None = None
        model = self.model
        root = model.root
        if model.torchrun_path or not model.starts_workers():
            return None
        launcher: set[tuple[int, str]] = set()
        workers: set[tuple[int, str]] = set()
        started: list[Function] = []
        frontier = list(root.calls_in(root.module_scope.qualname))
        budget = 20000
        while frontier:
            budget -= 1
            if budget <= 0:
                return None
            call = frontier.pop()
            name = model.api(call) or ""
            if name == api.INIT_PROCESS_GROUP or _JOINS.search(call.method or name.rsplit(".", 1)[-1]):
                return None  # this process sets up a group (or may: a library's set-up helper)
            for function, bound in model.graph.targets(call):
                if bound in ("spawn", "process"):
                    started.append(function)
                    continue
                key = (id(function.module), function.qualname)
                if key not in launcher:
                    launcher.add(key)
                    frontier.extend(function.module.calls_in(function.qualname))
        if not started:
            return None
        pending = list(started)
        while pending:
            budget -= 1
            if budget <= 0:
                return None
            function = pending.pop()
            key = (id(function.module), function.qualname)
            if key in workers:
                continue
            workers.add(key)
            for call in function.module.calls_in(function.qualname):
                pending.extend(f for f, _ in model.graph.targets(call))
        self._walk_memo = (launcher, workers)
        return self._walk_memo

    def _spawns_after(self, site: CallSite) -> bool:
        """Every path through `site` goes on to an `mp.spawn` in the same function or block."""
        model = self.model
        scope = site.scope
        if scope is site.module.module_scope:
            mains = {id(node) for node in site.module.main_guards}
            if not any(id(g.node) in mains for g in site.guards):
                return False
        held = {(id(g.node), g.negated) for g in site.guards}
        if site.loops:
            return False
        # A project function that spawns (`Trainer(cfg).run()` calling `mp.spawn(self._train)`)
        # starts the workers too, when no outside launcher can start the file: no torchrun path
        # it could take instead.
        spawns_below = not model.torchrun_path
        resolve = model.resolver_for(site.module, scope)
        return any(other.index > site.index
                   and all((id(g.node), g.negated) in held or _several_devices(g)
                           or is_distributed_test(g.test, resolve) is (not g.negated)
                           # a flag the command line cannot turn off: every run takes that arm
                           or constant_flag(site.module, g.test) is (not g.negated) for g in other.guards)
                   and (model.api(other) in _SPAWNERS
                        or spawns_below and (other.target is None or other.target.external is None)
                        and "spawn" in model.facts.of_call(other))
                   for other in site.module.calls_in(scope.qualname))

    def _workers_seeded_per_rank(self) -> bool:
        """Whether every DataLoader of the file fed by a DistributedSampler passes a
        `worker_init_fn` of the file that seeds with the rank
        (`np.random.seed(torch.initial_seed() % 2**31 + worker_id + rank * 100)`)."""
        model = self.model
        loaders = [s for s in model.root.calls if model.api(s) == api.DATALOADER and feed(model, s) is not None]
        if not loaders:
            return False
        for site in loaders:
            init = site.arg("worker_init_fn", 10)
            if not isinstance(init, cst.Name):
                return False
            function = model.root.functions.get(init.value)
            if function is None:
                return False
            code = model.root.code(function)
            if _WORKER_SEEDS.search(code) is None or re.search(r"rank", code, re.IGNORECASE) is None:
                return False
        return True

    def _unset_ranks(self, module: ModuleModel, expr: cst.CSTNode) -> frozenset[int]:
        """The calls in `expr` of a project rank helper that returns a literal until the process
        group is set up (`dist_utils.get_rank()` with `if not is_dist_avail_and_initialized():
        return 0`), made before any set-up of the group on the run: in a function of the linted
        file that sets nothing up before the call, called only from the file's top level or
        `__main__` block before anything there sets the group up (`seed = args.seed +
        get_rank()` in `main()`, which calls the worker that initialises). On every rank the
        call returns the same literal."""
        out: set[int] = set()
        stack: list[cst.CSTNode] = [expr]
        while stack:
            node = stack.pop()
            stack.extend(children(node))
            if not isinstance(node, cst.Call):
                continue
            site = module.call_at(node)
            if site is None or module is not self.model.root:
                continue
            targets = self.model.graph.targets(site)
            if not targets or not all(_zero_until_initialized(f) for f, _ in targets):
                continue
            if self._before_any_init(site):
                out.add(id(node))
        return frozenset(out)

    def _before_any_init(self, site: CallSite) -> bool:
        model = self.model
        function = model.paths.function_of(site)
        if function is None:
            return False
        if any(other.scope is site.scope and other.tick < site.tick and self._initialises(other)
               for other in site.module.calls):
            return False
        callers = model.graph.callers(function)
        if not callers:
            return False
        for caller, _ in callers:
            if caller.module is not model.root or model.paths.function_of(caller) is not None:
                return False
            if any(other.scope is caller.scope and other.tick < caller.tick and self._initialises(other)
                   for other in caller.module.calls):
                return False
        return True

    def _initialises(self, site: CallSite) -> bool:
        return site.qualname == api.INIT_PROCESS_GROUP or "init_process_group" in self.model.facts.of_call(site)

    def _same_everywhere(self, site: CallSite, seed: cst.BaseExpression, resolve: Resolve) -> bool:
        """Whether `seed`, passed at `site`, is the same on every rank: a literal, or a command-line
        option (every rank is started with the same command line), with nothing from the rank."""
        if _mentions_rank(seed, resolve, self._unset_ranks(site.module, seed)):
            return False
        values = self.model.values.at_call(site, seed)
        return bool(values) and all(self._constant(v, resolve) for v in values)

    def _constant(self, value: Value, resolve: Resolve, depth: int = 4) -> bool:
        node = value.node
        if isinstance(node, Param) and self.model.values.cli_bound(Function(value.module, node.function)):
            return True  # a parameter `fire.Fire(main)` fills from the command line: an option
        if isinstance(node, Element) and not node.via_with and depth > 0:
            # `for ix in range(args.n_repeat):` — a counter over a range every rank walks alike.
            return self._same_range(value, node.iterable, resolve, depth - 1)
        if not isinstance(node, cst.BaseExpression):
            return False
        if int_value(node) is not None:
            return True
        if depth > 0 and isinstance(node, (cst.BinaryOperation, cst.UnaryOperation)):
            # `(ix + 1) * 42`, `args.seed + 1`: arithmetic on values that are the same everywhere.
            operands = [node.left, node.right] if isinstance(node, cst.BinaryOperation) else [node.expression]
            if _mentions_rank(node, resolve, self._unset_ranks(value.module, node)):
                return False
            return all(self._constant_expr(value, o, resolve, depth - 1) for o in operands)
        if isinstance(node, cst.Call) and dotted(node.func) in ("int", "float", "str") and len(node.args) == 1 \
                and not node.args[0].star and value.scope.owner_of(dotted(node.func) or "") is None:
            # `int(args.seed)`: a conversion of a value that is the same everywhere.
            return self._constant_expr(value, node.args[0].value, resolve, depth - 1)
        # A command-line option (`args.seed`) is the same on every rank, whatever its default
        # (`if args.seed is not None: torch.manual_seed(args.seed)` seeds only when it is given).
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name):
            if _option(value.module, node.attr.value):
                return True
        # `args.seed` of `args = parser.parse_args()` where a project helper declared it
        # (`add_gpu_params(parser)`), or `hps.train.seed` of `hps = load_config()`: a configuration
        # that every rank reads the same way, unless the file changes that field.
        base, field = _field_of(node)
        if base is None or field is None or _reassigned(value.module, field):
            return False
        bases = self.model.values.of(value.module, base, value.scope, value.frame, at=value.at)
        # (a `None` the loader returns when the file does not parse has no field: reading it
        # raises, so that path seeds nothing)
        bases = [b for b in bases if not (isinstance(b.node, cst.CSTNode) and is_none(b.node))] or bases
        if bases and all(self._alike(b, field) for b in bases):
            return True
        # `self.cfg["SEED"]` of `self.cfg = load_config(path)` set in the constructor: the
        # configuration the object holds, read through the attribute.
        if isinstance(node, (cst.Subscript, cst.Attribute)) and isinstance(node.value, cst.Attribute):
            held = self.model.values.of(value.module, node.value, value.scope, value.frame, at=value.at)
            return bool(held) and all(self._alike(h, field) for h in held)
        return False

    def _constant_expr(self, where: Value, expr: cst.BaseExpression, resolve: Resolve, depth: int) -> bool:
        """Whether `expr`, read where `where` was made, holds the same value on every rank."""
        if depth < 0:
            return False
        if isinstance(expr, cst.Call) and id(expr) in self._unset_ranks(where.module, expr):
            return True  # the rank read before the process group exists: the helper's literal
        inner = self.model.values.of(where.module, expr, where.scope, where.frame, at=where.at)
        return bool(inner) and all(self._constant(v, resolve, depth) for v in inner)

    def _same_range(self, where: Value, iterable: cst.BaseExpression, resolve: Resolve, depth: int) -> bool:
        """`range(n)`, `np.arange(n)` with bounds that are the same on every rank."""
        if not isinstance(iterable, cst.Call) or not iterable.args or any(a.star for a in iterable.args):
            return False
        name = self.model.qualname(where.module, iterable.func, where.scope) or dotted(iterable.func) or ""
        if name not in _RANGES:
            return False
        return all(self._constant_expr(where, a.value, resolve, depth) for a in iterable.args)

    def _composed(self, value: Value) -> bool:
        """Whether a leaf is the configuration Hydra hands the function it decorates
        (`@hydra.main(...) def main(cfg):`): composed on every rank from the same files and the
        same command line."""
        node = value.node
        if not isinstance(node, Param):
            return False
        for decorator in value.module.decorators.get(node.function, ()):
            called = decorator.func if isinstance(decorator, cst.Call) else decorator
            if self.model.qualname(value.module, called) == "hydra.main":
                return True
        return False

    def _config(self, value: Value) -> bool:
        """Whether a leaf is what a project configuration loader returns: a function that parses
        the command line or reads a file (`json.load`, `yaml.safe_load`) and, like every project
        function it calls, mentions nothing that differs between ranks (rank, environment, clock,
        random draws)."""
        node = value.node
        if not isinstance(node, cst.Call):
            return False
        # Built inside the loader (`HParams(**json.load(f))` followed out of `get_hparams()`).
        if value.scope.kind == "function" and self._loader(Function(value.module, value.scope.qualname)):
            return True
        site = value.module.call_at(node)
        if site is None:
            return False
        targets = self.model.graph.targets(site)
        # A loader function, or a project configuration class whose constructor reads the file
        # (`Config(args.config)` with `self.__dict__ = json.load(file)` in `__init__`).
        return bool(targets) and all(
            (bound == "" or bound == "constructor" and self._class_rank_free(function))
            and self._loader(function) for function, bound in targets)

    def _class_rank_free(self, function: Function) -> bool:
        """Whether the class a constructor belongs to mentions nothing that differs between ranks
        in any of its methods (a `self.seed += rank` in another method would make it differ)."""
        owner = function.owner
        return owner is not None and _per_rank(function.module.code(owner.node)) is None

    def _loader(self, function: Function) -> bool:
        return self._reads_settings(function, 2) and self._rank_free(function, 3)

    def _reads_settings(self, function: Function, depth: int) -> bool:
        """The function parses the command line or reads a settings file, itself or through a
        project function it calls (a constructor handing the reading to `self._load_files(paths)`)."""
        if _LOADS.search(function.module.code(function.node)) is not None:
            return True
        return depth > 0 and any(
            callee.node is not function.node and self._reads_settings(callee, depth - 1)
            for site in function.module.calls_in(function.qualname)
            for callee, _ in self.model.graph.targets(site))

    def _rank_free(self, function: Function, depth: int) -> bool:
        if depth <= 0 or _per_rank(function.module.code(function.node)) is not None:
            return False
        for site in function.module.calls_in(function.qualname):
            for callee, _bound in self.model.graph.targets(site):
                if callee.node is function.node:
                    continue
                owner = callee.owner
                text = callee.module.code(owner.node) if owner is not None and _bound == "constructor" else ""
                if text and _per_rank(text) is not None or not self._rank_free(callee, depth - 1):
                    return False
        return True

    def _loaded_alike(self, site: CallSite, expr: cst.BaseExpression, field: str) -> bool:
        """Whether `expr`, passed at `site`, is a namespace or configuration every rank holds
        alike: what `parse_args()` returns, a configuration loader's result, Hydra's `cfg`, a
        yacs configuration of the project, a parameter declared `argparse.Namespace`."""
        values = self.model.values.at_call(site, expr)
        return bool(values) and all(self._alike(v, field) for v in values)

    def _alike(self, value: Value, field: str, depth: int = 2) -> bool:
        if _parsed_arguments(value) or self._config(value) or self._composed(value) \
                or self._config_node(value, field) or _namespace_param(self.model, value):
            return True
        node = value.node
        # `wandb.config.update(args); args = wandb.config`: the run's configuration, filled from
        # the command line (or the sweep's settings), not from anything per rank.
        if isinstance(node, cst.Attribute) and self.model.qualname(value.module, node, value.scope) in _RUN_CONFIGS:
            return True
        # `args = vars(args)`: the dict of a namespace every rank holds alike.
        if depth > 0 and isinstance(node, cst.Call) and dotted(node.func) == "vars" and len(node.args) == 1:
            inner = self.model.values.of(value.module, node.args[0].value, value.scope, value.frame, at=value.at)
            return bool(inner) and all(self._alike(v, field, depth - 1) for v in inner)
        # `config = yaml.safe_load(f)`: a file every rank reads alike (its path names no rank).
        if isinstance(node, cst.Call) and self.model.qualname(value.module, node.func, value.scope) in _FILE_LOADS:
            resolve = self.model.resolver_for(value.module, value.scope)
            return not any(_mentions_rank(a.value, resolve) for a in node.args)
        # `train_config = config["train_params"]`: a section of a configuration held alike.
        if depth > 0 and isinstance(node, (cst.Subscript, cst.Attribute)):
            base = node.value
            inner = self.model.values.of(value.module, base, value.scope, value.frame, at=value.at)
            return bool(inner) and all(self._alike(v, field, depth - 1) for v in inner)
        return False

    def _config_node(self, value: Value, field: str) -> bool:
        """Whether a leaf is a configuration object a project module builds when it is imported
        (`_C = CN()` of yacs, `__C = AttrDict()`, `cfg = EasyDict()` at module level) whose
        `field` that module sets only at module level: every rank imports the same defaults and
        merges the same files and command line into them."""
        node = value.node
        if not isinstance(node, cst.Call) or value.scope is not value.module.module_scope:
            return False
        name = self.model.qualname(value.module, node.func) or dotted(node.func) or ""
        if name not in _CONFIG_NODES and _CONFIG_CLASS.search(name.rsplit(".", 1)[-1]) is None:
            return False
        # Set inside a function of that module (`cfg.SEED = seed + rank` in a setup helper): unknown.
        field_re = re.escape(field)
        return re.search(rf"^[ \t]+.*(\.{field_re}|\[['\"]{field_re}['\"]\])\s*(=[^=]|[-+*/|&]=)",
                         value.module.source, re.MULTILINE) is None

    def _namespace(self, site: CallSite, expr: cst.BaseExpression) -> bool:
        """Whether `expr`, passed at `site`, is the namespace `parse_args()` returned."""
        values = self.model.values.at_call(site, expr)
        return bool(values) and all(_parsed_arguments(v) for v in values)


_SEEDERS = frozenset({"torch.manual_seed", "torch.random.manual_seed"})
_GENERATOR = "torch.Generator"
# Readers of a configuration file: every rank that reads the same path holds the same values.
_FILE_LOADS = frozenset({
    "json.load", "json.loads", "yaml.safe_load", "yaml.load", "yaml.full_load", "toml.load", "tomllib.load",
    "omegaconf.OmegaConf.load",
})
# The configuration of an experiment-tracking run: what the command line or the sweep put there.
_RUN_CONFIGS = frozenset({"wandb.config"})
# Counters every rank walks alike when their bounds are alike.
_RANGES = frozenset({"range", "numpy.arange", "np.arange", "torch.arange"})
# Library helpers that seed torch's generator (with random and numpy) from their first argument.
_LIBRARY_SEEDERS = frozenset({
    "transformers.set_seed", "transformers.trainer_utils.set_seed", "accelerate.utils.set_seed",
    "lightning.seed_everything", "lightning.pytorch.seed_everything", "pytorch_lightning.seed_everything",
    "lhotse.utils.fix_random_seed", "lhotse.fix_random_seed", "recbole.utils.init_seed", "recbole.utils.utils.init_seed",
    "torch_geometric.seed_everything", "torch_geometric.seed.seed_everything",
    # MONAI: `set_determinism(seed=...)` calls `torch.manual_seed(seed)` (and seeds random, numpy).
    "monai.utils.set_determinism", "monai.utils.misc.set_determinism",
})
_SEEDERS = _SEEDERS | _LIBRARY_SEEDERS
# Functions that set up a run (its environment, its seeds), as named.
_SETUP_NAME = re.compile(r"seed|setup|set_up|env|init|random|prepare|configure", re.IGNORECASE)
# Seeders of the GPU generators only (torch.manual_seed seeds them too).
_GPU_SEEDERS = frozenset({"torch.cuda.manual_seed", "torch.cuda.manual_seed_all"})
# Starters whose workers begin in a fresh interpreter (the "spawn" start method), not in a copy
# of the parent's memory: the parent's generator state does not reach them.
_SPAWNERS = api.SPAWN | {"torch.multiprocessing.spawn.spawn"}


# How many calls deep a later per-rank seed is looked for: `main()` calling `train_distributed()`,
# whose `mp.spawn` starts the worker that calls `train_model()`, which seeds with the rank.
_RESEED_DEPTH = 4

# Checks a seeding helper makes before seeding the GPU generators too (`if torch.cuda.is_available():
# torch.cuda.manual_seed_all(seed)`).
_SEEDING_CHECKS = frozenset({"torch.cuda.is_available", "torch.cuda.device_count"})
# A worker_init_fn that seeds a generator.
_WORKER_SEEDS = re.compile(r"\b(manual_)?seed\s*\(")
# A configuration loader reads the command line or a file (JSON, YAML, TOML, INI).
_LOADS = re.compile(r"\bparse_(known_)?args\(|\bConfigParser\(|\b(json|yaml|toml|tomllib|omegaconf|OmegaConf)\.\w*load")
# Anything that may differ between ranks, in a loader's text (the clock, not `RuntimeError`).
_PER_RANK = re.compile(r"rank|environ|getenv|rand|seed\(|secrets|(?<!run)time|uuid|getpid|hostname|socket|device_count|dist\.",
                       re.IGNORECASE)


# String literals, one after another (a prefix, the quote, the text): a plain one with a space in
# it is a message (`'Ranking metrics and value metrics can not be used at the same time.'`), not a
# key (`cfg["local_rank"]`); an f-string formats values and stays.
_STRING = re.compile(r"""(?<![\w])([rRbBuUfF]{0,2})(['"])((?:(?!\2)[^\\\n]|\\.)*)\2""")


def _unprosed(m: re.Match[str]) -> str:
    prefix, quote, text = m.group(1), m.group(2), m.group(3)
    if "f" in prefix.lower() or not any(c.isspace() for c in text):
        return m.group(0)
    return prefix + quote + quote


def _per_rank(text: str) -> re.Match[str] | None:
    """What in a loader's or a configuration class's code may differ between ranks, read in its
    code only: its docstrings, comments and messages are prose."""
    return _PER_RANK.search(_STRING.sub(_unprosed, code_only(text)))


# A call that sets up a process group, by its name where it is a library's (`init_distributed`,
# `init_dist`, `setup_distributed`): the process that makes it may be a rank.
_JOINS = re.compile(r"^(?:init_process_group|init_dist\w*|setup_dist\w*|initialize_distributed\w*)$")


def _several_devices(guard: Guard) -> bool:
    """A guard that holds only with more than one process (`if torch.cuda.device_count() > 1:`,
    `if world_size > 1:`): the other arm trains in one process, where a shared seed matters not."""
    test = guard.test
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    target = test.comparisons[0]
    bound = int_value(target.comparator)
    operator = target.operator
    if guard.negated:
        return isinstance(operator, cst.Equal) and bound == 1 or isinstance(operator, cst.LessThanEqual) \
            and bound == 1 or isinstance(operator, cst.LessThan) and bound == 2
    return isinstance(operator, cst.GreaterThan) and bound == 1 \
        or isinstance(operator, cst.GreaterThanEqual) and bound == 2 \
        or isinstance(operator, cst.NotEqual) and bound == 1


def _field_of(node: cst.BaseExpression) -> tuple[cst.Name | None, str | None]:
    """The root name and the last field of `cfg.train.seed` or `opt["train"]["seed"]`."""
    field: str | None = None
    while True:
        if isinstance(node, cst.Attribute):
            field = field or node.attr.value
            node = node.value
        elif isinstance(node, cst.Subscript) and len(node.slice) == 1 \
                and isinstance(node.slice[0].slice, cst.Index) \
                and isinstance(node.slice[0].slice.value, cst.SimpleString):
            field = field or node.slice[0].slice.value.raw_value
            node = node.value
        elif field is None and isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
                and node.func.attr.value == "get" and 1 <= len(node.args) <= 2 \
                and not any(a.star or a.keyword is not None for a in node.args) \
                and isinstance(node.args[0].value, cst.SimpleString):
            # `cfg.get("seed", 42)`: the field, or a literal default when the file leaves it out
            # (also the field under another name of the same configuration, with a literal
            # default in turn: `cfg.get("seed", cfg.get("random_seed", 42))`).
            if len(node.args) == 2 and int_value(node.args[1].value) is None \
                    and not _same_root_default(node.args[1].value, node.func.value):
                break
            field = node.args[0].value.raw_value
            node = node.func.value
        else:
            break
    return (node, field) if isinstance(node, cst.Name) else (None, None)


def _same_root_default(default: cst.BaseExpression, owner: cst.BaseExpression) -> bool:
    """`default` reads another field of the configuration `owner` (the same text) with a literal
    default of its own: `cfg.get("random_seed", 42)` as the default of `cfg.get("seed", ...)`."""
    if not (isinstance(default, cst.Call) and isinstance(default.func, cst.Attribute)
            and default.func.attr.value == "get"):
        return False
    root, field = _field_of(default)
    return root is not None and field is not None \
        and cst.Module([]).code_for_node(default.func.value) == cst.Module([]).code_for_node(owner)


def _option(module: ModuleModel, dest: str) -> bool:
    """Whether `module` declares the command-line option `dest` and never assigns to it (a
    per-rank `args.seed = args.seed + rank` would make it differ)."""
    return dest in option_defaults(module) and not _reassigned(module, dest)


def _reassigned(module: ModuleModel, dest: str) -> bool:
    """Some code of the module writes the field (`args.seed = args.seed + rank`, `cfg["seed"] =
    seed` with `seed = base + rank`); copying it unchanged into another object (`self.seed =
    config.seed`) is no write, and neither is a write every rank makes alike (see `_alike_write`:
    `args.seed += epoch` in the epoch loop, `args.seed = saved` with `saved = args.seed`)."""
    field = re.escape(dest)
    copy = re.compile(rf"\s*[\w.]+\.{field}\s*(?:#[^\n]*)?$", re.M)
    source = module.source
    for m in re.finditer(rf"(\.{field}|\[['\"]{field}['\"]\])\s*(=[^=]|[-+*/|&]=)", source):
        if m.group(2).startswith("=") and copy.match(source, m.end() - 1):
            continue
        if _alike_write(source, m.start(), m.end() - (1 if m.group(2).startswith("=") else 0)):
            continue
        return True
    return False


def _alike_write(source: str, start: int, value_at: int) -> bool:
    """The write at `start` gives every rank the same value, read in the text: its value, and the
    names it reads, mention nothing per rank (`_PER_RANK`), each name being a loop variable
    (`for epoch in range(...)`) or assigned in the module only from such text (`saved =
    args.seed`), and no block around the write tests anything per rank (`if rank == 1:`). A
    name bound any other way (a parameter) leaves the write unknown: a write."""
    line_start = source.rfind("\n", 0, start) + 1
    line_end = source.find("\n", value_at)
    value = source[value_at:line_end if line_end >= 0 else len(source)]
    value = value.split("#", 1)[0]
    if not value.strip() or value.rstrip().endswith(("(", "[", "{", ",", "\\")) or _per_rank(value):
        return False
    if any(call not in ("int", "float", "str") for call in re.findall(r"([\w.]+)\s*\(", value)):
        return False  # what a call returns is not read here
    for name in set(re.findall(r"(?<![\w.])([A-Za-z_]\w*)\b(?!\s*\()", value)):
        if name in ("True", "False", "None", "int", "float"):
            continue
        loop = re.search(rf"^\s*(?:async\s+)?for\s+(?:[\w\s,()]*\b)?{name}\b[\w\s,()]*\bin\b([^\n]*)", source, re.M)
        bound = [b for b in re.findall(rf"^\s*{name}\s*=(?!=)([^\n]*)", source, re.M)]
        if loop is None and not bound and not re.search(rf"\b{name}\s*\.", value):
            return False
        if loop is not None and _per_rank(loop.group(1)) or any(_per_rank(b) or b.strip() == "" for b in bound):
            return False
    # The blocks around the write: each line above it that is indented less opens one.
    indent = len(source[line_start:start]) - len(source[line_start:start].lstrip())
    at = line_start
    while indent > 0 and at > 0:
        above_start = source.rfind("\n", 0, at - 1) + 1
        line = source[above_start:at - 1]
        stripped = line.lstrip()
        depth = len(line) - len(stripped)
        if stripped and not stripped.startswith("#") and depth < indent:
            if _per_rank(stripped.split("#", 1)[0]):
                return False
            indent = depth
        at = above_start
    return True


# Configuration nodes every rank builds alike from the same defaults, files and command line.
_CONFIG_NODES = frozenset({"yacs.config.CfgNode", "fvcore.common.config.CfgNode"})
# Project or library classes of attribute-style configurations, made empty and filled at import.
_CONFIG_CLASS = re.compile(r"^(AttrDict|EasyDict|edict|CfgNode|CN|ConfigDict|DotMap|Munch)$")


def _namespace_param(model: Model, value: Value) -> bool:
    """Whether a leaf is a parameter declared `argparse.Namespace` (`def main_worker(gpu, args:
    argparse.Namespace)`): the parsed command line, handed on."""
    node = value.node
    return isinstance(node, Param) and node.annotation is not None and (
        model.qualname(value.module, node.annotation) or "") == "argparse.Namespace"


def _parsed_arguments(value: Value) -> bool:
    """Whether a leaf is the namespace `parser.parse_args()` (or `parse_known_args()[0]`) returns."""
    node = value.node
    if isinstance(node, cst.Subscript):
        node = node.value
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return False
    return node.func.attr.value in ("parse_args", "parse_known_args")


def _seeding_or_bookkeeping(site: CallSite) -> bool:
    """A call a seeding helper makes: a seeder, a type check or a log line."""
    name = dotted(site.node.func) or ""
    last = name.rsplit(".", 1)[-1]
    return "seed" in last or name in ("isinstance", "int", "print", "str") or last in (
        "info", "debug", "warning", "use_deterministic_algorithms") or name in _SEEDING_CHECKS


def _seeded_parameter(model: Model, function: Function) -> tuple[Param, str | None] | None:
    """The parameter a project function seeds torch's generator with, unconditionally on the
    rank and unchanged: `torch.manual_seed(seed)` (attr None) or `torch.manual_seed(args.seed)`
    (attr "seed"); None when it seeds with anything else or not at all."""
    params = {p.name: p for p in function.params() if not p.star}
    calls = function.module.calls_in(function.qualname)
    # Only a dedicated helper (every call in it seeds something, or draws a seed when none is
    # given): in a worker such as `main(gpu, args)` the seeding call itself is where the rank is
    # known and the fix goes.
    if not calls or not all(_seeding_or_bookkeeping(c) or _when_unset(c, params) for c in calls):
        return None
    for site in calls:
        if model.api(site) not in _SEEDERS or model.paths.rank_guard(site) is not None:
            continue
        seed = site.arg("seed", 0)
        base, attr = seed, None
        if isinstance(seed, cst.Attribute) and isinstance(seed.value, cst.Name):
            base, attr = seed.value, seed.attr.value
        if isinstance(base, cst.Name) and attr is None and base.value not in params:
            # `seed = config.SEED` (or `seed = seed_arg`) first, then `torch.manual_seed(seed)`.
            held = function.scope.assignments.get(base.value, [])
            if len(held) == 1 and isinstance(held[0], cst.Attribute) and isinstance(held[0].value, cst.Name):
                base, attr = held[0].value, held[0].attr.value
            elif len(held) == 1 and isinstance(held[0], cst.Name):
                base = held[0]
        if not isinstance(base, cst.Name) or base.value not in params:
            continue
        if len(function.scope.assignments.get(base.value, ())) != 1:
            continue  # reassigned in the helper (`seed = seed + rank`)
        return params[base.value], attr
    return None


def _when_unset(site: CallSite, params: dict[str, Param]) -> bool:
    """Whether `site` runs only when the helper is given no seed: under `if seed is None:` (or
    `if args.seed is None:`) on a parameter of the helper (`seed = random.randint(1, 10000)`)."""
    for guard in site.guards:
        test = guard.test
        if guard.negated or not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
            continue
        target = test.comparisons[0]
        if not isinstance(target.operator, cst.Is) or dotted(target.comparator) != "None":
            continue
        left = test.left
        root = left.value if isinstance(left, cst.Attribute) else left
        if isinstance(root, cst.Name) and root.value in params:
            return True
    return False


def _draws_when_unset(function: Function) -> bool:
    """Whether a seeding helper draws a seed of its own when it is given none: then ranks given
    no seed each draw their own, and only a seed given alike is the same everywhere."""
    params = {p.name: p for p in function.params() if not p.star}
    return any(not _seeding_or_bookkeeping(c) and _when_unset(c, params)
               for c in function.module.calls_in(function.qualname))


def _mentions_rank(expr: cst.CSTNode, resolve: Resolve, unset: frozenset[int] = frozenset()) -> bool:
    """`unset`: calls that read the rank before the process group exists (see `_unset_ranks`)."""
    if id(expr) in unset:
        return False
    if isinstance(expr, cst.BaseExpression) and is_rank_value(expr, resolve):
        return True
    return any(_mentions_rank(child, resolve, unset) for child in children(expr))


def _zero_until_initialized(function: Function) -> bool:
    """`def get_rank(): if not is_dist_avail_and_initialized(): return 0; return dist.get_rank()`:
    a rank helper that returns a literal until the process group is set up."""
    body = function.node.body.body
    if not body or not isinstance(body[0], cst.If):
        return False
    first = body[0]
    test = first.test
    if not (isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)):
        return False
    if re.search(r"initiali[sz]ed", function.module.code(test.expression)) is None or first.orelse is not None:
        return False
    inner = first.body.body if isinstance(first.body, cst.IndentedBlock) else ()
    if len(inner) != 1 or not isinstance(inner[0], cst.SimpleStatementLine):
        return False
    statement = inner[0].body[0]
    return isinstance(statement, cst.Return) and statement.value is not None \
        and int_value(statement.value) is not None
