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
