"""Code the run reaches beyond the script itself, through `ddpcheck lint`: set-up helpers in other
modules, spawned workers, launch hints in helper text, teardown only in error handlers. Each test
writes a small project in the style of public DDP code and reads what the user sees."""

from __future__ import annotations


from tests.helpers import write_project as _write, finding_set as _findings


def test_a_script_that_sets_up_ddp_at_module_level_through_a_helper_is_an_entry_point(tmp_path):
    _write(tmp_path, {
        "dist_utils.py": """\
            import os
            import torch
            import torch.distributed as dist


            def init_distributed(args):
                args.rank = int(os.environ["RANK"])
                args.gpu = int(os.environ["LOCAL_RANK"])
                torch.cuda.set_device(args.gpu)
                dist.init_process_group("nccl", init_method="env://")
            """,
        "train.py": """\
            import argparse
            from dist_utils import *

            parser = argparse.ArgumentParser()
            parser.add_argument("--epochs", type=int, default=10)
            args = parser.parse_args()
            init_distributed(args)

            for epoch in range(args.epochs):
                pass
            """,
    })
    assert _findings(tmp_path, "train.py", select="DDP005") == {("dist_utils.py", 10, "DDP005")}


SPAWNED_WORKER = {
    "trainer.py": """\
        import os
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP


        def setup(rank, world_size):
            os.environ["MASTER_ADDR"] = "localhost"
            os.environ["MASTER_PORT"] = "29500"
            dist.init_process_group("nccl", rank=rank, world_size=world_size)


        def train_fn(rank, world_size, loader):
            setup(rank, world_size)
            model = DDP(torch.nn.Linear(4, 1).to(rank), device_ids=[rank])
            optim = torch.optim.SGD(model.parameters(), lr=0.01)
            for x, y in loader:
                loss = (model(x.to(rank)) - y.to(rank)).pow(2).mean()
                optim.zero_grad()
                loss.backward()
                optim.step()
            dist.destroy_process_group()
        """,
    "main.py": """\
        import torch
        import torch.multiprocessing as mp
        from absl import app

        from trainer import train_fn


        def _main(argv):
            world_size = torch.cuda.device_count()
            mp.spawn(train_fn, args=(world_size, None), nprocs=world_size, join=True)


        if __name__ == "__main__":
            app.run(_main)
        """,
}


def test_cuda_work_in_a_spawned_worker_of_another_module_needs_set_device(tmp_path):
    _write(tmp_path, SPAWNED_WORKER)
    assert _findings(tmp_path, "main.py", select="DDP003") == {("trainer.py", 10, "DDP003")}


def test_a_spawned_worker_that_sets_its_device_is_clean(tmp_path):
    files = dict(SPAWNED_WORKER)
    files["trainer.py"] = files["trainer.py"].replace(
        "    setup(rank, world_size)\n", "    setup(rank, world_size)\n    torch.cuda.set_device(rank)\n")
    _write(tmp_path, files)
    assert _findings(tmp_path, "main.py", select="DDP003") == set()


TORCHRUN_SETUP = """\
    import os
    import torch
    import torch.distributed as dist


    def setup():
        if "SLURM_NODELIST" in os.environ:
            os.environ["MASTER_ADDR"] = os.environ["SLURM_NODELIST"].split(",")[0]
        {branch}
            os.environ["MASTER_ADDR"] = "localhost"
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        return local_rank


    if __name__ == "__main__":
        setup()
        dist.destroy_process_group()
    """


def test_a_literal_address_in_the_else_of_a_slurm_test_is_torchruns_path(tmp_path):
    _write(tmp_path, {"train.py": TORCHRUN_SETUP.replace("{branch}", "else:")})
    assert _findings(tmp_path, "train.py", select="DDP015") == {("train.py", 10, "DDP015")}


def test_a_literal_address_under_a_test_that_no_launcher_set_it_is_a_fallback(tmp_path):
    _write(tmp_path, {"train.py": TORCHRUN_SETUP.replace("{branch}", 'if "MASTER_ADDR" not in os.environ:')})
    assert _findings(tmp_path, "train.py", select="DDP015") == set()


LAUNCH_HINT = {
    "common/dist.py": """\
        import os
        import torch
        import torch.distributed as dist


        def init_distributed(gpus):
            world_size = int(os.environ.get("WORLD_SIZE", 1))
            if gpus and len(gpus) != world_size:
                raise ValueError("{hint}")
            if world_size > 1:
                dist.init_process_group("nccl", init_method="env://")
                torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        """,
    "train.py": """\
        import torch.distributed as dist
        from common.dist import init_distributed


        def main():
            init_distributed([0, 1])
            dist.destroy_process_group()


        if __name__ == "__main__":
            main()
        """,
}


def test_a_helpers_error_text_that_tells_users_to_launch_with_the_old_launcher(tmp_path):
    files = dict(LAUNCH_HINT)
    files["common/dist.py"] = files["common/dist.py"].replace(
        "{hint}", "GPU list does not match the world size. Did you launch with python -m torch.distributed.launch?")
    _write(tmp_path, files)
    assert _findings(tmp_path, "train.py", select="DDP008") == {("dist.py", 9, "DDP008")}


def test_a_helpers_error_text_naming_torchrun_is_clean(tmp_path):
    files = dict(LAUNCH_HINT)
    files["common/dist.py"] = files["common/dist.py"].replace(
        "{hint}", "GPU list does not match the world size. Did you launch with torchrun --nproc_per_node=N?")
    _write(tmp_path, files)
    assert _findings(tmp_path, "train.py", select="DDP008") == set()


ERROR_ONLY_TEARDOWN = {
    "dist_utils.py": """\
        import os
        import torch
        import torch.distributed as dist


        def init_ddp():
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
            dist.init_process_group("nccl")


        def cleanup_ddp():
            dist.destroy_process_group()
        """,
    "train.py": """\
        import dist_utils


        def run(epochs):
            try:
                for epoch in range(epochs):
                    pass
            except BaseException:
                dist_utils.cleanup_ddp()
                raise
            {after}


        if __name__ == "__main__":
            dist_utils.init_ddp()
            run(10)
        """,
}


def test_a_teardown_only_in_an_exception_handler_does_not_run_at_the_end_of_training(tmp_path):
    files = dict(ERROR_ONLY_TEARDOWN)
    files["train.py"] = files["train.py"].replace("{after}", "")
    _write(tmp_path, files)
    assert _findings(tmp_path, "train.py", select="DDP005") == {("dist_utils.py", 8, "DDP005")}


def test_a_teardown_after_the_training_too_is_clean(tmp_path):
    files = dict(ERROR_ONLY_TEARDOWN)
    files["train.py"] = files["train.py"].replace("{after}", "dist_utils.cleanup_ddp()")
    _write(tmp_path, files)
    assert _findings(tmp_path, "train.py", select="DDP005") == set()
