"""The module inside DDP run by a loss helper the training step calls (DDP013): the helper
unwraps the projection heads it is handed (`if isinstance(proj, DDP): proj = proj.module`) and
runs them in a loop over the distilled layers (`for i in range(3): proj[str(i)](h)`). Through
`ddpcheck lint` on a distillation script written in that style, with variants that must stay
silent."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines

DISTILL = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


    def distill_loss(student_hidden, teacher_hidden, proj):
        {unwrap}
        total = 0.0
        for {loop}:
            projected = {call}
            total = total + torch.nn.functional.mse_loss(student_hidden[i], projected)
        return total / 3


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        student = DDP(torch.nn.Linear(16, 48).cuda(), device_ids=[local_rank])
        heads = torch.nn.ModuleDict({{str(i): torch.nn.Linear(16, 16) for i in range(3)}})
        proj = DDP(heads.cuda(), device_ids=[local_rank])
        optimizer = torch.optim.AdamW(list(student.parameters()) + list(proj.parameters()))
        dataset = TensorDataset(torch.randn(256, 16), torch.randn(256, 3, 16))
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=16, sampler=sampler)
        for epoch in range(10):
            sampler.set_epoch(epoch)
            for x, teacher in loader:
                student_hidden = student(x.cuda()).view(-1, 3, 16).unbind(1)
                teacher_hidden = teacher.cuda().unbind(1)
                loss = distill_loss(student_hidden, teacher_hidden, proj)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""

UNWRAP = "if isinstance(proj, DDP):\n            proj = proj.module"
KEEP = "pass"


def script(unwrap: str = UNWRAP, loop: str = "i in range(3)", call: str = "proj[str(i)](teacher_hidden[i])") -> dict[str, str]:
    return {"train.py": DISTILL.format(unwrap=unwrap, loop=loop, call=call)}


def test_an_entry_of_the_unwrapped_heads_run_in_a_loop_over_layers_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, script(), "DDP013") == [("train.py", 14)]


def test_the_unwrapped_heads_called_whole_in_the_loop_are_reported(tmp_path: Path) -> None:
    files = script(call="proj(teacher_hidden[i])")
    assert lines(tmp_path, files, "DDP013") == [("train.py", 14)]


def test_heads_kept_in_their_wrapper_are_clean(tmp_path: Path) -> None:
    # The DDP wrapper of a ModuleDict has no entries: calling the wrapper is the fix.
    assert lines(tmp_path, script(unwrap=KEEP, call="proj(teacher_hidden[i])"), "DDP013") == []


def test_a_helper_looping_over_data_is_an_evaluation_not_the_step(tmp_path: Path) -> None:
    # A loop over batches inside the helper is work of its own, not the caller's step.
    files = script(loop="i, batch in enumerate(torch.utils.data.DataLoader(teacher_hidden))",
                   call="proj[str(i % 3)](batch)")
    assert lines(tmp_path, files, "DDP013") == []


def test_a_rollout_that_reads_the_inner_module_out_as_numbers_is_clean(tmp_path: Path) -> None:
    # A counted loop whose results leave the graph (`.cpu().numpy()` into buffers) makes no
    # loss for the step: collecting experience with the inner module is not training it.
    files = script(call="proj[str(i)](teacher_hidden[i]).cpu().numpy()")
    files["train.py"] = files["train.py"].replace(
        "total = total + torch.nn.functional.mse_loss(student_hidden[i], projected)",
        "total = total + float(projected.sum())").replace(
        "return total / 3", "return torch.nn.functional.mse_loss(student_hidden[0], teacher_hidden[0]) * total")
    assert "numpy" in files["train.py"]
    assert lines(tmp_path, files, "DDP013") == []
