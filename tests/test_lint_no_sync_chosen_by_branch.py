"""A context chosen by branch (`model.no_sync()` on the accumulation steps, `nullcontext()` on the
step that updates): the optimizer step under the update's own test runs in the `nullcontext()`,
outside `no_sync`. Through `ddpcheck lint`."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

ACCUMULATE = """\
    import os
    from contextlib import nullcontext

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def fit(model, loader, optimizer, accum):
        for step, batch in enumerate(loader):
            CHOOSE
            with ctx:
                model(batch.cuda()).mean().backward()
                if STEP_TEST:
                    optimizer.step()
                    optimizer.zero_grad()


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(torch.nn.Linear(8, 8).cuda(), device_ids=[local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = [torch.randn(4, 8) for _ in range(32)]
        fit(model, loader, optimizer, accum=4)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """

STATEMENTS = """if dist.is_initialized() and not (step % accum == accum - 1):
                ctx = model.no_sync()
            else:
                ctx = nullcontext()"""

EXPRESSION = "ctx = model.no_sync() if not (step % accum == accum - 1) else nullcontext()"


def _steps(tmp_path, choose: str, step_test: str) -> set[tuple[str, int, str]]:
    _write(tmp_path, {"train.py": ACCUMULATE.replace("CHOOSE", choose).replace("STEP_TEST", step_test)})
    return _findings(tmp_path, "train.py", select="DDP021")


def test_the_step_under_the_update_test_runs_in_the_other_branch_context(tmp_path):
    assert _steps(tmp_path, STATEMENTS, "step % accum == accum - 1") == set()


def test_a_context_chosen_in_a_conditional_expression_is_read_alike(tmp_path):
    assert _steps(tmp_path, EXPRESSION, "step % accum == accum - 1") == set()


def test_a_step_under_another_test_may_run_inside_no_sync(tmp_path):
    # `step % 10 == 0` does not exclude the accumulation steps: some of them step unsynchronized.
    assert _steps(tmp_path, STATEMENTS, "step % 10 == 0") == {("train.py", 18, "DDP021")}


def test_an_unconditional_step_in_a_chosen_context_is_reported(tmp_path):
    assert _steps(tmp_path, EXPRESSION, "True") == {("train.py", 15, "DDP021")}
