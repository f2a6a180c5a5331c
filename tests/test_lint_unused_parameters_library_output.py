"""`find_unused_parameters=True` on a model that keeps only part of a library model's output,
through `ddpcheck lint` (DDP027, off by default): a pretrained transformer's pooler makes the
`pooler_output` the forward leaves out, so its parameters get no gradient and the flag is
needed. A model whose layers are all used stays reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

MODEL = """\
    import torch
    from torch import nn
    from transformers import AutoModel


    class PairEncoder(nn.Module):
        def __init__(self, name, classes):
            super().__init__()
            self.query = AutoModel.from_pretrained(name)
            self.doc = AutoModel.from_pretrained(name)
            self.head = nn.Linear(2 * 768, classes)

        def forward(self, query_ids, doc_ids):
            q = self.query(query_ids)[0][:, 0]
            d = self.doc(doc_ids)[0][:, 0]
            return self.head(torch.cat([q, d], dim=1))
    """

TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from model import PairEncoder


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = PairEncoder("bert-base-uncased", 2).cuda()
        model = DistributedDataParallel(model, device_ids=[local_rank],
                                        find_unused_parameters=True)
        return model
    """


def test_first_output_of_a_pretrained_model_clean(tmp_path: Path) -> None:
    write_project(tmp_path, {"train.py": TRAIN, "model.py": MODEL})
    assert finding_set(tmp_path, "train.py", select="DDP027") == set()


def test_named_output_of_a_pretrained_model_clean(tmp_path: Path) -> None:
    model = MODEL.replace("(query_ids)[0]", "(query_ids).last_hidden_state").replace(
        "(doc_ids)[0]", "(doc_ids).last_hidden_state")
    write_project(tmp_path, {"train.py": TRAIN, "model.py": model})
    assert finding_set(tmp_path, "train.py", select="DDP027") == set()


def test_torch_layers_whose_first_output_is_kept_reported(tmp_path: Path) -> None:
    model = MODEL.replace("AutoModel.from_pretrained(name)", "nn.LSTM(768, 768, batch_first=True)").replace(
        "from transformers import AutoModel\n", "")
    write_project(tmp_path, {"train.py": TRAIN, "model.py": model})
    assert finding_set(tmp_path, "train.py", select="DDP027") == {("train.py", 16, "DDP027")}
