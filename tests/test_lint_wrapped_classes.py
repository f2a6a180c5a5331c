"""Classes of other libraries that derive from torch's and hand their options on to it, through
`ddpcheck lint`: a known one is read as the torch class it wraps; an unknown one stays silent."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

GRAPH_TRAIN = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data.distributed import DistributedSampler
    {loader_import}
    from molecules import GraphRegressor, load_split


    def worker(rank, world_size):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        train_set = load_split("train")
        sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank)
        train_loader = {loader}(train_set, batch_size=64, {shuffle}sampler=sampler)
        model = DistributedDataParallel(GraphRegressor().cuda(rank), device_ids=[rank])
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3 * world_size)
        for epoch in range(50):
            {set_epoch}for graph in train_loader:
                graph = graph.to(rank)
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(model(graph.x, graph.edge_index, graph.batch), graph.y)
                loss.backward()
                optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        gpus = torch.cuda.device_count()
        mp.spawn(worker, args=(gpus,), nprocs=gpus)
    """

MOLECULES = """\
    import torch


    class GraphRegressor(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.head = torch.nn.Linear(16, 1)

        def forward(self, x, edge_index, batch):
            return self.head(x)


    def load_split(name):
        return torch.load(f"data/{name}.pt")
    """


def _graph_project(tmp_path, loader_import: str, loader: str = "DataLoader", shuffle: str = "",
                   set_epoch: str = "") -> None:
    _write(tmp_path, {"molecules.py": MOLECULES,
                      "train.py": GRAPH_TRAIN.format(loader_import=loader_import, loader=loader,
                                                     shuffle=shuffle, set_epoch=set_epoch)})


def test_a_pyg_loader_with_shuffle_and_a_sampler_and_no_set_epoch_is_reported(tmp_path):
    _graph_project(tmp_path, "from torch_geometric.loader import DataLoader", shuffle="shuffle=True, ")
    assert _findings(tmp_path, "train.py", select="DDP002,DDP006") == {
        ("train.py", 15, "DDP006"), ("train.py", 18, "DDP002")}


def test_the_deprecated_pyg_data_loader_is_the_same_loader(tmp_path):
    _graph_project(tmp_path, "from torch_geometric import data as pyg_data", loader="pyg_data.DataLoader",
                   shuffle="shuffle=True, ")
    assert _findings(tmp_path, "train.py", select="DDP002,DDP006") == {
        ("train.py", 15, "DDP006"), ("train.py", 18, "DDP002")}


def test_a_pyg_loader_without_shuffle_and_with_set_epoch_is_clean(tmp_path):
    _graph_project(tmp_path, "from torch_geometric.loader import DataLoader",
                   set_epoch="sampler.set_epoch(epoch)\n            ")
    assert _findings(tmp_path, "train.py", select="DDP001,DDP002,DDP006") == set()


def test_a_pyg_loader_without_a_sampler_is_reported(tmp_path):
    _write(tmp_path, {"molecules.py": MOLECULES, "train.py": GRAPH_TRAIN.format(
        loader_import="from torch_geometric.loader import DataLoader", loader="DataLoader",
        shuffle="shuffle=True, ", set_epoch="").replace(", sampler=sampler)", ")")})
    assert _findings(tmp_path, "train.py", select="DDP001") == {("train.py", 15, "DDP001")}


def test_a_loader_class_the_lint_does_not_know_stays_silent(tmp_path):
    # Whether this library's loader hands `shuffle`/`sampler` to torch's is not known.
    _graph_project(tmp_path, "from graphkit.loading import GraphLoader", loader="GraphLoader",
                   shuffle="shuffle=True, ")
    assert _findings(tmp_path, "train.py", select="DDP001,DDP002,DDP006") == set()


STREAM_DATA = """\
    import glob

    import torch
    from torch.utils.data import DataLoader, IterableDataset


    class TokenStream(IterableDataset):
        def __init__(self, folder, tokenizer, block):
            self.files = sorted(glob.glob(f"{folder}/*.txt"))
            self.tokenizer = tokenizer
            self.block = block

        def __iter__(self):
            for path in self.files:
                with open(path) as f:
                    ids = self.tokenizer.encode(f.read())
                for i in range(0, len(ids) - self.block, self.block):
                    yield torch.tensor(ids[i:i + self.block]), torch.tensor(ids[i + 1:i + self.block + 1])


    def make_loader(folder, tokenizer, batch_size=8, block=256):
        return DataLoader(TokenStream(folder, tokenizer, block), batch_size=batch_size, num_workers=2)
    """

STREAM_TRAIN = """\
    import os

    import tiktoken
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from stream_data import make_loader


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        loader = make_loader("corpus", tiktoken.get_encoding("gpt2"))
        model = DDP(torch.nn.Embedding(50257, 64).cuda(), device_ids=[local_rank])
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4 * dist.get_world_size())
        for x, y in loader:
            opt.zero_grad()
            model(x.cuda()).sum().backward()
            opt.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_an_iterable_dataset_that_yields_everything_on_every_rank_is_reported(tmp_path):
    _write(tmp_path, {"stream_data.py": STREAM_DATA, "train.py": STREAM_TRAIN})
    assert _findings(tmp_path, "train.py", select="DDP001") == {("stream_data.py", 22, "DDP001")}


def test_an_iterable_dataset_that_skips_the_other_ranks_items_is_clean(tmp_path):
    sharded = STREAM_DATA.replace(
        "            for path in self.files:",
        "            rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()\n"
        "            for path in self.files[rank::world]:")
    _write(tmp_path, {"stream_data.py": sharded, "train.py": STREAM_TRAIN})
    assert _findings(tmp_path, "train.py", select="DDP001") == set()


def test_an_iterable_dataset_given_its_files_per_rank_or_of_an_unknown_base_is_clean(tmp_path):
    per_rank = STREAM_TRAIN.replace('make_loader("corpus"', 'make_loader(f"corpus/part{dist.get_rank()}"')
    _write(tmp_path, {"stream_data.py": STREAM_DATA, "train.py": per_rank})
    assert _findings(tmp_path, "train.py", select="DDP001") == set()
    library_base = STREAM_DATA.replace(
        "class TokenStream(IterableDataset):", "class TokenStream(StreamingBase):").replace(
        "import glob\n", "import glob\n\nfrom streamkit import StreamingBase\n")
    _write(tmp_path, {"stream_data.py": library_base, "train.py": STREAM_TRAIN})
    assert _findings(tmp_path, "train.py", select="DDP001") == set()


def test_an_iterable_dataset_that_streams_a_pipeline_it_is_handed_is_clean(tmp_path):
    # What a pipeline built elsewhere yields on each rank is not known here.
    wrapper = STREAM_DATA.replace(
        "            for path in self.files:\n"
        "                with open(path) as f:\n"
        "                    ids = self.tokenizer.encode(f.read())\n"
        "                for i in range(0, len(ids) - self.block, self.block):\n"
        "                    yield torch.tensor(ids[i:i + self.block]), torch.tensor(ids[i + 1:i + self.block + 1])\n",
        "            for record in self.pipeline.as_numpy_iterator():\n"
        "                yield record\n").replace(
        "        def __init__(self, folder, tokenizer, block):\n",
        "        def __init__(self, pipeline, tokenizer, block):\n            self.pipeline = pipeline\n").replace(
        '            self.files = sorted(glob.glob(f"{folder}/*.txt"))\n', "")
    assert "self.pipeline.as_numpy_iterator()" in wrapper
    _write(tmp_path, {"stream_data.py": wrapper, "train.py": STREAM_TRAIN})
    assert _findings(tmp_path, "train.py", select="DDP001") == set()
