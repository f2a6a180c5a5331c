"""A save that fills a cache the same function otherwise loads (`try: vocab = torch.load(f)` /
`except: vocab = build(); torch.save(vocab, f)`, or the two arms of `if os.path.exists(f):`) writes
data the run computes, not a checkpoint of the model. Through `ddpcheck lint`."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def build_vocab(path):
        words = sorted({w for line in open(path) for w in line.split()})
        return {w: i for i, w in enumerate(words)}


    def prepare(args, model):
        FILL
        return vocab


    def main(args):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(torch.nn.Embedding(1000, 8).cuda(), device_ids=[local_rank])
        vocab = prepare(args, model)
        for step in range(10):
            model(torch.randint(0, len(vocab), (4,)).cuda()).sum().backward()
        dist.destroy_process_group()
    """

TRY = """try:
            vocab = torch.load(args.vocab_file)
        except FileNotFoundError:
            vocab = build_vocab(args.corpus)
            torch.save(vocab, args.vocab_file)"""

ARMS = """if os.path.exists(args.vocab_file):
            vocab = torch.load(args.vocab_file)
        else:
            vocab = build_vocab(args.corpus)
            torch.save(vocab, args.vocab_file)"""


def _saves(tmp_path, fill: str) -> set[tuple[str, int, str]]:
    _write(tmp_path, {"train.py": TRAIN.replace("FILL", fill)})
    return _findings(tmp_path, "train.py", select="DDP010")


def test_a_cache_filled_in_the_except_of_its_load_is_no_checkpoint(tmp_path):
    assert _saves(tmp_path, TRY) == set()


def test_a_cache_filled_in_the_other_arm_of_its_load_is_no_checkpoint(tmp_path):
    assert _saves(tmp_path, ARMS) == set()


def test_model_weights_kept_the_same_way_are_a_checkpoint(tmp_path):
    fill = ARMS.replace("vocab = build_vocab(args.corpus)", "vocab = model.module.state_dict()")
    assert _saves(tmp_path, fill) == {("train.py", 18, "DDP010")}


def test_a_save_of_another_value_beside_the_load_is_reported(tmp_path):
    fill = TRY.replace("torch.save(vocab, args.vocab_file)", "torch.save(model.module.state_dict(), args.out)")
    assert _saves(tmp_path, fill) == {("train.py", 18, "DDP010")}
