"""`find_unused_parameters=True` on a Hugging Face causal LM of a dense decoder family (DDP027):
every parameter is on the path to the logits the loss is computed from, through `ddpcheck lint`."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project

# A full fine-tune of a pretrained decoder: the flag is set out of habit.
FINETUNE = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from transformers import AutoModelForCausalLM, GPT2LMHeadModel
    from transformers.models.llama.modeling_llama import LlamaForCausalLM


    def main(path):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = BUILD
        model.to(local_rank)
        model = DDP(model, device_ids=[local_rank], find_unused_parameters=True)
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
        return model, optimizer


    if __name__ == "__main__":
        main("checkpoints/base")
    """


def _lines(tmp_path: Path, build: str) -> list[int]:
    found = lint_project(tmp_path, {"train.py": FINETUNE.replace("BUILD", build)}, "train.py", select="DDP027")
    return [f["location"]["line"] for f in found]


def test_a_pretrained_llama_with_the_flag_is_reported(tmp_path: Path) -> None:
    assert _lines(tmp_path, "LlamaForCausalLM.from_pretrained(path)") == [16]


def test_a_gpt2_lm_head_model_with_the_flag_is_reported(tmp_path: Path) -> None:
    assert _lines(tmp_path, "GPT2LMHeadModel.from_pretrained(path)") == [16]


def test_an_auto_model_that_may_be_a_mixture_of_experts_is_clean(tmp_path: Path) -> None:
    assert _lines(tmp_path, "AutoModelForCausalLM.from_pretrained(path)") == []


def test_a_head_of_the_scripts_own_on_the_model_is_clean(tmp_path: Path) -> None:
    # A member the script hangs on the model may go unused; the model is no longer the library's.
    assert _lines(tmp_path, "LlamaForCausalLM.from_pretrained(path)\n        model.value_head = ValueHead(4096)") == []


def test_a_torch_layer_added_beside_the_library_members_is_clean(tmp_path: Path) -> None:
    # Unlike a torchvision classifier's replaced `fc`, a new member of a transformers model is
    # never called by its forward: its parameters may get no gradient through the model's output.
    assert _lines(tmp_path, "LlamaForCausalLM.from_pretrained(path)\n        model.value_head = torch.nn.Linear(4096, 1)") == []
