"""A function that builds another training engine (`deepspeed.initialize`) only in one arm of a
backend switch still trains the DDP model in the other arms: the backward passes and loaders
there are DDP's (DDP016, DDP001), through `ddpcheck lint`."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

# The engine is built under `if backend == "deepspeed" and ...`; the loop back-propagates through
# the engine in the `backend == "deepspeed"` arm and through the DDP model (plain or scaled) in
# the others, stepping every `accum` micro-batches.
SWITCHED = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    try:
        import deepspeed
    except ImportError:
        deepspeed = None


    def run(settings):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = DDP(torch.nn.Linear(8, 1).cuda(), device_ids=[local_rank])
        opt = torch.optim.AdamW(net.parameters(), lr=settings["lr"])
        backend = settings.get("backend", "ddp")
        if ENGINE_TEST:
            net, opt, _, _ = deepspeed.initialize(model=net, optimizer=opt, config=settings["ds"])
        scaler = torch.cuda.amp.GradScaler(enabled=settings["fp16"])
        accum = settings["accum"]
        sampler = torch.utils.data.DistributedSampler(list(range(64)))
        loader = torch.utils.data.DataLoader(list(range(64)), sampler=sampler)
        for i, x in enumerate(loader):
            loss = net(x.cuda()).mean() / accum
            if backend == "deepspeed":
                net.backward(loss)
            elif scaler.is_enabled():
                scaler.scale(loss).backward()
            else:
                loss.backward()
            if (i + 1) % accum == 0:
                if backend == "deepspeed":
                    net.step()
                elif scaler.is_enabled():
                    scaler.step(opt)
                    scaler.update()
                else:
                    opt.step()
                opt.zero_grad()
        dist.destroy_process_group()


    if __name__ == "__main__":
        run({"lr": 1e-4, "accum": 8, "fp16": False, "ds": {}})
    """


def _lint(tmp_path, engine_test: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"train.py": SWITCHED.replace("ENGINE_TEST", engine_test)})
    return finding_set(tmp_path, "train.py", select="DDP016")


def test_backward_in_the_arm_the_engine_is_not_built_for_is_reported(tmp_path):
    # The scaled arm and the plain arm are one place to fix: reported once, at the last backward
    # before the step (the plain `loss.backward()`).
    assert _lint(tmp_path, 'backend == "deepspeed" and deepspeed is not None') == {("train.py", 33, "DDP016")}


def test_an_engine_built_under_another_value_of_the_same_setting_is_told_apart(tmp_path):
    assert _lint(tmp_path, 'backend == "deepspeed"') == {("train.py", 33, "DDP016")}


def test_an_engine_built_under_a_test_the_loop_does_not_deny_still_owns_the_loop(tmp_path):
    # `if settings["zero"]:` says nothing about `backend`: the engine may be what trains here.
    assert _lint(tmp_path, 'settings["zero"]') == set()


def test_an_engine_built_unconditionally_owns_the_loop(tmp_path):
    assert _lint(tmp_path, "True") == set()
