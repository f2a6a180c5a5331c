"""Launch modes, local ranks, usage notes and evaluation loops as training scripts write them,
through `ddpcheck lint`: each test writes a small project and checks the exact findings, with
the variant that is (or is not) reported."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write


def _lint(tmp_path, files: dict[str, str], target: str, select: str) -> set[tuple[str, int, str]]:
    _write(tmp_path, files)
    return _findings(tmp_path, target, select=select)


# --- DDP001: a flag that records the launch mode ---------------------------------------------

MODE_FLAG = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    def sharded_loader(rank, world, dataset, batch_size):
        sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=False)
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


    def train(rank, world_size, cfg):
        if world_size > 1:
            dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29500", rank=rank, world_size=world_size)
            device = rank
            {set_on}
        else:
            device = "cuda" if torch.cuda.is_available() else "cpu"
            Parallel = False
        texts = TextSet(cfg)
        if Parallel:
            text_data = sharded_loader(rank, world_size, texts, 32)
        else:
            text_data = DataLoader(texts, batch_size=32)
        model = Net().to(device)
        if Parallel:
            model = DDP(model, device_ids=[device])
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
        for batch in text_data:
            opt.zero_grad()
            model(batch.to(device)).mean().backward()
            opt.step()


    if __name__ == "__main__":
        gpus = torch.cuda.device_count()
        mp.spawn(train, args=(gpus, load_cfg()), nprocs=gpus)
    """


def test_a_loader_in_the_branch_a_launch_mode_flag_keeps_for_one_process_is_clean(tmp_path):
    files = {"train.py": MODE_FLAG.format(set_on="Parallel = True")}
    assert _lint(tmp_path, files, "train.py", "DDP001") == set()


def test_a_flag_that_is_not_the_launch_mode_leaves_the_loader_reported(tmp_path):
    # Set on every path the distributed run takes and also where a cache is on: not the mode.
    files = {"train.py": MODE_FLAG.format(set_on="Parallel = cfg.cache")}
    assert _lint(tmp_path, files, "train.py", "DDP001") == {("train.py", 25, "DDP001")}


# --- DDP001: the local rank given to a DistributedSampler ------------------------------------

SHARDS = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        world_size = dist.get_world_size()
        num_nodes = int(os.environ.get("NUM_NODES", 1))
        train_set, val_set = build_sets()
        train_sampler = DistributedSampler(train_set, num_replicas=world_size, rank={rank})
        val_sampler = DistributedSampler(val_set, num_replicas=world_size, rank=local_rank, shuffle=False)
        train_loader = DataLoader(train_set, batch_size=64, sampler=train_sampler)
        val_loader = DataLoader(val_set, batch_size=64, sampler=val_sampler)
        model = DDP(build_model().cuda(), device_ids=[local_rank])
        opt = torch.optim.SGD(model.parameters(), lr=float(os.environ["LR"]))
        for epoch in range(10):
            train_sampler.set_epoch(epoch)
            for x, y in train_loader:
                opt.zero_grad()
                model(x.cuda()).sum().backward()
                opt.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_a_training_sampler_given_the_local_rank_is_reported(tmp_path):
    for rank in ("local_rank", 'int(os.environ["LOCAL_RANK"])'):
        found = _lint(tmp_path, {"train.py": SHARDS.format(rank=rank)}, "train.py", "DDP001")
        # (the evaluation sampler's shards are not this rule's concern, as with its loader)
        assert found == {("train.py", 15, "DDP001")}, rank


def test_the_local_rank_in_a_job_that_never_counts_machines_is_clean(tmp_path):
    # Nothing in the job plans for a second machine (no node count or rank, no scheduler's
    # hosts; a graph's node features are not machines): it runs on one, where the local rank is the rank.
    for text in (SHARDS.format(rank="local_rank").replace('        num_nodes = int(os.environ.get("NUM_NODES", 1))\n', ""),
                 SHARDS.format(rank="local_rank").replace('num_nodes = int(os.environ.get("NUM_NODES", 1))',
                                                          "node_features = train_features(graph)")):
        assert _lint(tmp_path, {"train.py": text}, "train.py", "DDP001") == set()
    # ... and a helper module that reads the scheduler's node list counts as the job's code.
    helper = "import os\n\n\ndef hosts():\n    return os.environ[\"SLURM_JOB_NODELIST\"]\n"
    text = SHARDS.format(rank="local_rank").replace('        num_nodes = int(os.environ.get("NUM_NODES", 1))\n', "")
    text = text.replace("    import os\n", "    import os\n    from cluster import hosts\n", 1)
    assert _lint(tmp_path, {"train.py": text, "cluster.py": helper}, "train.py", "DDP001") == {
        ("train.py", 15, "DDP001")}


def test_a_training_sampler_given_the_global_rank_is_clean(tmp_path):
    for rank in ("dist.get_rank()", 'int(os.environ["RANK"])'):
        assert _lint(tmp_path, {"train.py": SHARDS.format(rank=rank)}, "train.py", "DDP001") == set(), rank


def test_local_shards_counted_by_this_machines_gpus_are_clean(tmp_path):
    # A job of one machine by construction: the local rank numbers its GPUs' shards.
    text = SHARDS.format(rank="local_rank").replace("world_size = dist.get_world_size()",
                                                      "world_size = torch.cuda.device_count()")
    assert _lint(tmp_path, {"train.py": text}, "train.py", "DDP001") == set()


SPAWN_WORKER = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.utils.data import DataLoader, DistributedSampler


    def worker(local_rank, cfg, gpus_per_node):
        global_rank = cfg.node_rank * gpus_per_node + local_rank
        dist.init_process_group("nccl", init_method=cfg.dist_url, rank=global_rank, world_size=cfg.world_size)
        torch.cuda.set_device(local_rank)
        dataset = build_dataset(cfg)
        sampler = DistributedSampler(dataset, num_replicas=cfg.world_size, rank={rank}, drop_last=True)
        loader = DataLoader(dataset, batch_size=cfg.batch_size, sampler=sampler)
        run(loader, cfg)


    if __name__ == "__main__":
        cfg = parse()
        gpus = torch.cuda.device_count()
        mp.spawn(worker, args=(cfg, gpus), nprocs=gpus)
    """


def test_a_spawned_workers_local_index_as_the_sampler_rank_is_reported(tmp_path):
    found = _lint(tmp_path, {"main.py": SPAWN_WORKER.format(rank="local_rank")}, "main.py", "DDP001")
    assert found == {("main.py", 12, "DDP001")}
    found = _lint(tmp_path, {"main.py": SPAWN_WORKER.format(rank="global_rank")}, "main.py", "DDP001")
    assert found == set()


# --- DDP004: rates bound from a config file; the global batch held fixed ----------------------

GIN_OPTIONS = """\
    import gin
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    @gin.configurable("options")
    def get_options(batch_size=64, lr=2e-4, steps=100000):
        return {"batch_size": batch_size, "lr": lr, "steps": steps}


    def worker(gpu, cfg):
        gin.parse_config_files_and_bindings([cfg.gin_file], [])
        options = get_options()
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:10001", rank=gpu, world_size=cfg.gpus)
        model = DDP(build().cuda(gpu), device_ids=[gpu])
        opt = torch.optim.Adam(model.parameters(), lr=options["lr"])
        train(model, opt, options)
    """


def test_a_rate_of_a_config_bound_function_is_clean(tmp_path):
    assert _lint(tmp_path, {"train.py": GIN_OPTIONS}, "train.py", "DDP004") == set()
    plain = GIN_OPTIONS.replace('@gin.configurable("options")', "# the options")
    assert _lint(tmp_path, {"train.py": plain}, "train.py", "DDP004") == {("train.py", 8, "DDP004")}


ACCUMULATION = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def main():
        dist.init_process_group("nccl")
        world_size = int(os.environ["WORLD_SIZE"])
        local_rank = int(os.environ["LOCAL_RANK"])
        batch_size, seq_len = 16, 1024
        total_tokens = 2 ** 19
        {accumulation}
        model = DDP(build().cuda(local_rank), device_ids=[local_rank])
        optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4)
        for step in range(5000):
            for micro in range(accum_steps):
                model(next_batch()).mean().backward()
            optimizer.step()
            optimizer.zero_grad()


    if __name__ == "__main__":
        main()
    """


def test_accumulation_divided_by_a_product_with_the_world_size_holds_the_global_batch(tmp_path):
    fixed = "accum_steps = total_tokens // (batch_size * seq_len * world_size)"
    assert _lint(tmp_path, {"train.py": ACCUMULATION.format(accumulation=fixed)}, "train.py", "DDP004") == set()
    grows = "accum_steps = total_tokens // (batch_size * seq_len)"
    assert _lint(tmp_path, {"train.py": ACCUMULATION.format(accumulation=grows)}, "train.py", "DDP004") \
        == {("train.py", 15, "DDP004")}


# --- DDP018: evaluation that reads a fixed number of batches ----------------------------------

TRAINER = """\
    import torch
    import torch.distributed as dist


    class Trainer:
        def __init__(self, model, optimizer, train_loader, eval_loader, eval_iters, max_iters):
            self.model, self.optimizer = model, optimizer
            self.train_loader, self.eval_loader = train_loader, eval_loader
            self.eval_iters, self.max_iters = eval_iters, max_iters

        def _step(self, batch):
            loss = self.model(batch.cuda()).mean()
            loss.backward()
            return loss

        def train(self):
            it = iter(self.train_loader)
            for step in range(self.max_iters):
                loss = self._step(next(it))
                self.optimizer.step()
                self.optimizer.zero_grad()
                logged = loss.detach().clone()
                dist.all_reduce(logged)

        @torch.no_grad()
        def evaluate(self):
            total = 0.0
            {loop}
                total += self.model(batch.cuda()).mean().item()
            summed = torch.tensor([total], device="cuda")
            dist.all_reduce(summed)
            return summed.item()
    """

EVAL_MAIN = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    from trainer import Trainer


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        train_set, eval_set = TokenChunks("train.bin"), TokenChunks("val.bin")
        train_sampler = DistributedSampler(train_set, shuffle=True)
        eval_sampler = DistributedSampler(eval_set, shuffle=False)
        model = DDP(build().cuda(), device_ids=[local_rank])
        trainer = Trainer(model, torch.optim.AdamW(model.parameters(), lr=float(os.environ["LR"])),
                          DataLoader(train_set, batch_size=8, sampler=train_sampler),
                          DataLoader(eval_set, batch_size=8, sampler=eval_sampler), 200, 10000)
        trainer.train()
        trainer.evaluate()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_an_evaluation_of_a_fixed_number_of_drawn_batches_is_clean(tmp_path):
    loop = "batches = iter(self.eval_loader)\n        for _ in tqdm(range(self.eval_iters)):\n            batch = next(batches)"
    files = {"main.py": EVAL_MAIN, "trainer.py": TRAINER.format(loop=loop)}
    assert _lint(tmp_path, files, "main.py", "DDP018") == set()


def test_an_evaluation_of_the_whole_padded_set_is_reported(tmp_path):
    files = {"main.py": EVAL_MAIN, "trainer.py": TRAINER.format(loop="for batch in self.eval_loader:")}
    assert _lint(tmp_path, files, "main.py", "DDP018") == {("main.py", 16, "DDP018")}


CLASS_HANDED_IN = """\
    import torch
    from torch.utils.data import DataLoader, DistributedSampler, RandomSampler


    def get_loaders(cfg):
        if cfg.ddp:
            return build_loaders(cfg, DistributedSampler)
        return build_loaders(cfg, RandomSampler)


    def build_loaders(cfg, sampler):
        train_set, val_set = SceneSet(cfg, "train"), SceneSet(cfg, "val")
        train_sampler = sampler(train_set)
        val_sampler = sampler(val_set{drop})
        return (DataLoader(train_set, batch_size=cfg.batch, sampler=train_sampler),
                DataLoader(val_set, batch_size=1, sampler=val_sampler))
    """

CLASS_MAIN = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from data import get_loaders


    def validate(model, loader):
        hits = torch.zeros(20, device="cuda")
        for points, labels in loader:
            hits += count_hits(model(points.cuda()), labels.cuda())
        dist.all_reduce(hits)
        return hits


    def main(cfg):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        model = DDP(build().cuda(local_rank), device_ids=[local_rank])
        train_loader, val_loader = get_loaders(cfg)
        validate(model, val_loader)


    if __name__ == "__main__":
        main(parse())
    """


def test_a_sampler_class_handed_to_the_builder_pads_the_evaluation_set(tmp_path):
    files = {"train.py": CLASS_MAIN, "data.py": CLASS_HANDED_IN.format(drop="")}
    assert _lint(tmp_path, files, "train.py", "DDP018") == {("data.py", 14, "DDP018")}
    files = {"train.py": CLASS_MAIN, "data.py": CLASS_HANDED_IN.format(drop=", drop_last=True")}
    assert _lint(tmp_path, files, "train.py", "DDP018") == set()


# --- DDP008: the old launcher's flag and its usage notes --------------------------------------

ABSL_SCRIPT = """\
    import torch
    import torch.distributed as dist
    from absl import app, flags
    from torch.nn.parallel import DistributedDataParallel as DDP

    FLAGS = flags.FLAGS
    flags.DEFINE_integer("{name}", 0, "local rank for distributed training.")
    flags.DEFINE_string("task", "nli", "task to train")


    def main(argv):
        dist.init_process_group("nccl", init_method="env://")
        torch.cuda.set_device(FLAGS.{name})
        model = DDP(build(FLAGS.task).cuda(), device_ids=[FLAGS.{name}])
        train(model)


    if __name__ == "__main__":
        app.run(main)

    # python -m torch.distributed.launch --nproc_per_node=2 train.py --task nli
    # python -m torch.distributed.launch --nproc_per_node=2 train.py --task sts
    # python -m torch.distributed.launch --nproc_per_node=4 train.py --task qa
    """


def test_an_absl_local_rank_flag_is_reported_once_with_its_usage_notes(tmp_path):
    assert _lint(tmp_path, {"train.py": ABSL_SCRIPT.format(name="local_rank")}, "train.py", "DDP008") \
        == {("train.py", 7, "DDP008")}


def test_a_list_of_launch_commands_is_reported_once(tmp_path):
    # No flag of the old launcher: the notes alone, once, at the first.
    assert _lint(tmp_path, {"train.py": ABSL_SCRIPT.format(name="gpu")}, "train.py", "DDP008") \
        == {("train.py", 21, "DDP008")}


PARSER = """\
    import argparse
    import os


    def get_args():
        parser = argparse.ArgumentParser()
        parser.add_argument("--config", type=str)
        parser.add_argument("--launcher", choices=["none", "pytorch"], default="none")
        parser.add_argument("--local_rank", type=int, default=0)
        args = parser.parse_args()
        if "LOCAL_RANK" not in os.environ:
            os.environ["LOCAL_RANK"] = str(args.local_rank)
        return args
    """

DIST_UTILS = """\
    import os
    import torch
    import torch.distributed as dist


    def init_dist(backend="nccl"):
        rank = int(os.environ["RANK"])
        torch.cuda.set_device(rank % torch.cuda.device_count())
        dist.init_process_group(backend=backend)
    """

RUNNER = """\
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    import dist_utils
    import parser


    def main():
        args = parser.get_args()
        if args.launcher != "none":
            dist_utils.init_dist()
        {use}


    if __name__ == "__main__":
        main()
    """


def test_a_flag_handed_on_to_the_environment_but_read_elsewhere_is_reported(tmp_path):
    use = "model = DDP(build().to(args.local_rank), device_ids=[args.local_rank])"
    files = {"main.py": RUNNER.format(use=use), "parser.py": PARSER, "dist_utils.py": DIST_UTILS}
    assert _lint(tmp_path, files, "main.py", "DDP008") == {("parser.py", 9, "DDP008")}


def test_a_flag_only_handed_on_to_the_environment_is_clean(tmp_path):
    # The flag fills LOCAL_RANK where no launcher set it: torchrun's value wins.
    use = "model = DDP(build().cuda())"
    files = {"main.py": RUNNER.format(use=use), "parser.py": PARSER, "dist_utils.py": DIST_UTILS}
    assert _lint(tmp_path, files, "main.py", "DDP008") == set()


# --- DDP037 (values of one machine) and DDP015 (the single-process branch) --------------------------------

TORCHRUN = """\
    import os
    import torch
    import torch.distributed as dist
    from absl import app


    def train_loop(rank, world_size):
        dist.init_process_group(backend="nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank % torch.cuda.device_count())
        run(rank)


    def main(argv):
        world_size = {world}
        rank = int(os.environ.get("RANK", 0))
        train_loop(rank, world_size)


    if __name__ == "__main__":
        app.run(main)
    """


def test_the_gpu_count_as_the_world_size_under_torchrun_is_reported(tmp_path):
    found = _lint(tmp_path, {"train.py": TORCHRUN.format(world="torch.cuda.device_count()")}, "train.py", "DDP037")
    assert found == {("train.py", 8, "DDP037")}
    # Not a hard-coded rendezvous: the rendezvous is the launcher's, the count is this machine's.
    assert _lint(tmp_path, {"train.py": TORCHRUN.format(world="torch.cuda.device_count()")}, "train.py", "DDP015") == set()
    world = 'int(os.environ.get("WORLD_SIZE", torch.cuda.device_count()))'
    assert _lint(tmp_path, {"train.py": TORCHRUN.format(world=world)}, "train.py", "DDP037") == set()


LOCAL_INIT = """\
    import argparse
    import os
    import torch
    import torch.distributed as dist


    def main(args):
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            args.rank = int(os.environ["RANK"])
            local_rank = args.local_rank
            torch.cuda.set_device(local_rank)
            dist.init_process_group(backend="nccl", world_size=args.world_size, rank={rank})
        else:
            local_rank = 0
        train(args, local_rank)


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=0)
        parser.add_argument("--world_size", type=int, default=1)
        main(parser.parse_args())
    """


def test_the_local_rank_as_the_rank_under_a_launcher_is_reported(tmp_path):
    found = _lint(tmp_path, {"train.py": LOCAL_INIT.format(rank="local_rank")}, "train.py", "DDP037")
    assert found == {("train.py", 12, "DDP037")}
    assert _lint(tmp_path, {"train.py": LOCAL_INIT.format(rank="local_rank")}, "train.py", "DDP015") == set()
    assert _lint(tmp_path, {"train.py": LOCAL_INIT.format(rank="args.rank")}, "train.py", "DDP037") == set()


SINGLE_BRANCH = """\
    import os
    import torch


    def main(strategy):
        if strategy == "ddp":
            torch.distributed.init_process_group(backend="nccl")
            local_rank = int(os.environ["LOCAL_RANK"])
        else:
            os.environ["RANK"] = "0"
            local_rank = 0
        {after}
        train(local_rank)


    if __name__ == "__main__":
        main("ddp")
    """


def test_a_launcher_variable_set_on_the_single_process_branch_is_clean(tmp_path):
    assert _lint(tmp_path, {"train.py": SINGLE_BRANCH.format(after="pass")}, "train.py", "DDP015") == set()
    # Set on every path, it overrides what torchrun exported.
    after = 'os.environ["MASTER_PORT"] = "29500"'
    assert _lint(tmp_path, {"train.py": SINGLE_BRANCH.format(after=after)}, "train.py", "DDP015") \
        == {("train.py", 12, "DDP015")}
