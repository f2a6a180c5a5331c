"""Scripts that train more than one model, as teaching code and experiments do: rank 0 trains a
single-process reference model beside the distributed one, or one loader feeds a hand-reduced
model and then a DDP model with the same order on purpose. Run through the real entry point on
2 gloo ranks: ddpcheck neither fails them nor hangs on its own exchanges, and the same script
with a real fault is still reported."""

from __future__ import annotations

import pytest

from tests.helpers import assert_no_survivors, cli_env, run_job, write_project

pytestmark = pytest.mark.slow

REFERENCE_ON_RANK_0 = """
    import os
    import torch
    import torch.distributed as dist
    from torch import nn, optim
    from torch.nn.parallel import DistributedDataParallel as DDP


    def reference_step(world_size):
        # A single-process baseline over everyone's data, on rank 0 only, to compare with later.
        torch.manual_seed(0)
        model = nn.Linear(8, 2)
        opt = optim.SGD(model.parameters(), lr=0.1)
        x = torch.cat([torch.randn(4, 8, generator=torch.Generator().manual_seed(r)) for r in range(world_size)])
        model(x).pow(2).mean().backward()
        opt.step()
        return model


    def main():
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        if rank == 0:
            reference_step(world)
        torch.manual_seed(0)
        model = DDP(nn.Linear(8, 2))
        opt = optim.SGD(model.parameters(), lr=0.1)
        for step in range(4):
            x = torch.randn(4, 8, generator=torch.Generator().manual_seed(rank + 10 * step))
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            if os.environ.get("EDIT_GRAD") and rank == 1:
                model.module.bias.grad.mul_(2.0)
            opt.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""

TWO_WAYS_ONE_LOADER = """
    import torch
    import torch.distributed as dist
    from torch import nn, optim
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


    def one_pass(model, loader, opt, by_hand):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            if by_hand:
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                    p.grad /= dist.get_world_size()
            opt.step()


    def main():
        dist.init_process_group("gloo")
        g = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.randn(64, 8, generator=g), torch.randn(64, 2, generator=g))
        sampler = DistributedSampler(data)
        loader = DataLoader(data, batch_size=8, sampler=sampler)

        torch.manual_seed(0)
        manual = nn.Linear(8, 2)
        one_pass(manual, loader, optim.SGD(manual.parameters(), lr=0.1), by_hand=True)

        torch.manual_seed(0)
        ddp = DDP(nn.Linear(8, 2))
        sampler.set_epoch(0)  # the same order again: the two ways see the same batches
        one_pass(ddp, loader, optim.SGD(ddp.parameters(), lr=0.1), by_hand=False)
        if EPOCHS > 1:
            sampler.set_epoch(0)
            one_pass(ddp, loader, optim.SGD(ddp.parameters(), lr=0.1), by_hand=False)
        dist.destroy_process_group()


    EPOCHS = 1

    if __name__ == "__main__":
        main()
"""


def _checks(job) -> dict[str, dict]:
    return {c["code"]: c for c in job.report["run"]["checks"]}


def test_a_reference_model_stepped_on_rank_0_alone_is_neither_a_failure_nor_a_hang(tmp_path):
    write_project(tmp_path, {"train.py": REFERENCE_ON_RANK_0})
    job = run_job(["--nproc", "2", str(tmp_path / "train.py")], tmp_path, cwd=tmp_path, timeout=180)
    assert_no_survivors(job.mark)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    checks = _checks(job)
    assert not [c for c in checks.values() if c["status"] == "fail"], checks
    assert "DDP123" not in {f["code"] for f in job.report["findings"]}
    # The step numbers stopped pairing up at the first step: rank 0 stepped its own optimizer there.
    grads = checks["DDP105"]
    assert grads["status"] == "skip", grads
    assert "compared only before optimizer step 1" in grads["detail"], grads
    assert "rank 0 at train.py:16" in grads["detail"] and "rank 1 at train.py:34" in grads["detail"], grads
    assert "some ranks also step an optimizer of their own" in checks["DDP129"]["detail"], checks["DDP129"]


def test_the_same_script_where_ranks_step_together_still_names_an_edited_gradient(tmp_path):
    # Without the reference step the ranks' steps pair up and the rank-1 edit is found at step 1.
    write_project(tmp_path, {"train.py": REFERENCE_ON_RANK_0.replace("        if rank == 0:\n"
                                                                     "            reference_step(world)\n", "")})
    env_job = run_job(["--nproc", "2", str(tmp_path / "train.py")], tmp_path, cwd=tmp_path, timeout=180,
                      env={**cli_env(columns=None), "EDIT_GRAD": "1"})
    assert_no_survivors(env_job.mark)
    assert env_job.returncode == 1, env_job.stdout[-3000:]
    grads = _checks(env_job)["DDP105"]
    assert grads["status"] == "fail" and "step 1" in grads["detail"], grads


def test_one_loader_feeding_two_models_in_the_same_order_is_not_a_missing_set_epoch(tmp_path):
    write_project(tmp_path, {"train.py": TWO_WAYS_ONE_LOADER})
    job = run_job(["--nproc", "2", str(tmp_path / "train.py")], tmp_path, cwd=tmp_path, timeout=180)
    assert_no_survivors(job.mark)
    assert job.returncode == 0, job.stdout[-3000:]
    assert _checks(job)["DDP103"]["status"] != "fail", _checks(job)["DDP103"]


def test_one_model_trained_twice_in_the_same_order_is_still_reported(tmp_path):
    # The control: the DDP model's second epoch repeats its first one's order (with an optimizer
    # made anew, which still trains the same model).
    write_project(tmp_path, {"train.py": TWO_WAYS_ONE_LOADER.replace("EPOCHS = 1", "EPOCHS = 2")})
    job = run_job(["--nproc", "2", str(tmp_path / "train.py")], tmp_path, cwd=tmp_path, timeout=180)
    assert_no_survivors(job.mark)
    assert job.returncode == 1, job.stdout[-3000:]
    assert "DDP103" in {f["code"] for f in job.report["findings"]}
