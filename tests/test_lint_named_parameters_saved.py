"""A checkpoint dict keyed by the names of the DDP wrapper's `named_parameters()` (LoRA or
adapter weights picked out by name) carries the same `module.` prefix as its `state_dict()`
(DDP019), whether the dict is written beside the save or in a project helper handed the pairs,
through `ddpcheck lint`."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

# The helper filters the pairs into a dict keyed by their names, then copies it to the CPU
# under the same keys: the keys are the names the caller's module gives its parameters.
HELPERS = """\
    def adapter_weights(named_params, keep_bias=False):
        kept = {k: t for k, t in named_params if "adapter_" in k or (keep_bias and "bias" in k)}
        return {k: t.detach().cpu().clone() for k, t in kept.items()}


    def parameter_count(named_params):
        return {"total": sum(t.numel() for _, t in named_params)}
    """

TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from helpers import adapter_weights, parameter_count


    def save_adapters(net, out_dir):
        weights = SAVED
        if dist.get_rank() == 0:
            torch.save(weights, os.path.join(out_dir, "adapters.bin"))


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = DDP(torch.nn.Linear(8, 8).cuda(), device_ids=[local_rank])
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for x in torch.utils.data.DataLoader(list(range(8))):
            net(x.float().cuda()).sum().backward()
            opt.step()
        save_adapters(net, "out")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def _lint(tmp_path, saved: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"helpers.py": HELPERS, "train.py": TRAIN.replace("SAVED", saved)})
    return finding_set(tmp_path, "train.py", select="DDP019")


def test_a_helper_that_keys_a_dict_by_the_wrappers_parameter_names_is_reported(tmp_path):
    assert _lint(tmp_path, "adapter_weights(net.named_parameters())") == {("train.py", 11, "DDP019")}


def test_a_comprehension_keyed_by_the_names_is_reported(tmp_path):
    assert _lint(tmp_path, '{k: v.cpu() for k, v in net.named_parameters() if "adapter_" in k}') \
        == {("train.py", 11, "DDP019")}


def test_dict_of_the_pairs_is_reported(tmp_path):
    assert _lint(tmp_path, "dict(net.named_parameters())") == {("train.py", 11, "DDP019")}


def test_the_inner_models_names_are_clean(tmp_path):
    assert _lint(tmp_path, "adapter_weights(net.module.named_parameters())") == set()


def test_a_helper_that_keeps_no_names_is_clean(tmp_path):
    # Figures computed from the pairs, not keyed by their names.
    assert _lint(tmp_path, "parameter_count(net.named_parameters())") == set()


def test_a_comprehension_keyed_by_something_else_is_clean(tmp_path):
    assert _lint(tmp_path, "{i: v.cpu() for i, (k, v) in enumerate(net.named_parameters())}") == set()
