"""A `require_backward_grad_sync` switch set in the training loop from values the loop never
changes (`accum_steps == 1`), with the optimizer stepping after every backward, through `ddpcheck
lint --select DDP031`: whenever the test is false every step follows a backward that did not
all-reduce. Clean variants (the test on the micro-step counter, the step under the same counter,
a hand all-reduce in the loop) stay silent."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str = "DDP031") -> list[tuple[str, int]]:
    return sorted((Path(f["path"]).name, f["location"]["line"]) for f in findings if f["code"] == code)


FINETUNE = """\
    import os
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from lm import TinyLM, load_batches


    def run_epoch(model, optimizer, scaler, batches, cfg, device):
        for it, (tokens, targets) in enumerate(batches):
            tokens = tokens.to(device)
            targets = targets.to(device)
            if cfg["distributed"]:
                model.require_backward_grad_sync = cfg["accum_steps"] - 1 == 0
            logits = model(tokens)
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        cfg = {"distributed": True, "accum_steps": 8}
        model = DDP(TinyLM().to(device), device_ids=[local_rank])
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        scaler = torch.cuda.amp.GradScaler()
        for epoch in range(4):
            run_epoch(model, optimizer, scaler, load_batches(epoch), cfg, device)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""

LM = """\
    import torch


    class TinyLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(100, 16)
            self.out = torch.nn.Linear(16, 100)

        def forward(self, x):
            return self.out(self.emb(x))


    def load_batches(epoch):
        return [(torch.zeros(2, 8, dtype=torch.long), torch.zeros(2, 8, dtype=torch.long))]
"""


def _lint(tmp_path: Path, source: str) -> list[tuple[str, int]]:
    return _lines(lint_project(tmp_path, {"finetune.py": source, "lm.py": LM}, "finetune.py", select="DDP031"))


def test_switch_from_a_setting_with_a_step_on_every_pass_is_reported(tmp_path: Path) -> None:
    assert _lint(tmp_path, FINETUNE) == [("finetune.py", 15)]


def test_switch_on_the_micro_step_counter_is_silent(tmp_path: Path) -> None:
    source = FINETUNE.replace('cfg["accum_steps"] - 1 == 0', '(it + 1) % cfg["accum_steps"] == 0')
    assert _lint(tmp_path, source) == []


def test_step_only_when_the_switch_is_on_is_silent(tmp_path: Path) -> None:
    source = FINETUNE.replace(
        "            scaler.step(optimizer)\n"
        "            scaler.update()\n"
        "            optimizer.zero_grad(set_to_none=True)\n",
        "            if (it + 1) % cfg[\"accum_steps\"] == 0:\n"
        "                scaler.step(optimizer)\n"
        "                scaler.update()\n"
        "                optimizer.zero_grad(set_to_none=True)\n")
    assert _lint(tmp_path, source) == []


def test_switch_set_from_a_value_the_loop_updates_is_silent(tmp_path: Path) -> None:
    source = FINETUNE.replace(
        '                model.require_backward_grad_sync = cfg["accum_steps"] - 1 == 0\n',
        '                last = (it + 1) % cfg["accum_steps"] == 0\n'
        '                model.require_backward_grad_sync = last == True\n')
    assert _lint(tmp_path, source) == []


def test_gradients_reduced_by_hand_in_the_loop_are_silent(tmp_path: Path) -> None:
    source = FINETUNE.replace(
        "            scaler.step(optimizer)\n",
        "            for p in model.parameters():\n"
        "                dist.all_reduce(p.grad)\n"
        "            scaler.step(optimizer)\n")
    assert _lint(tmp_path, source) == []


def test_switch_on_a_plain_model_is_silent(tmp_path: Path) -> None:
    source = FINETUNE.replace("model = DDP(TinyLM().to(device), device_ids=[local_rank])",
                              "model = TinyLM().to(device)")
    assert _lint(tmp_path, source) == []
