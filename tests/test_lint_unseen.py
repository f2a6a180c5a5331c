"""Ways of writing DDP code met on public scripts the rules had not seen, through `ddpcheck lint`:
each test writes a small project in that style and reads what the user sees."""

from __future__ import annotations

from tests.helpers import lint_project


GLOBAL_RANK_EVERYWHERE = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train(rank, model, loader, optimizer):
        for x, y in loader:
            x, y = x.cuda(rank, non_blocking=True), y.cuda(rank, non_blocking=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


    def run():
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        torch.cuda.set_device(rank)
        generator = torch.nn.Linear(4, 4).cuda(rank)
        model = DDP(generator, device_ids=[rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = [(torch.randn(2, 4), torch.randn(2, 4))]
        train(rank, model, loader, optimizer)
        dist.destroy_process_group()


    if __name__ == "__main__":
        run()
"""


def test_a_global_rank_used_as_the_device_everywhere_is_one_finding_where_it_is_first_used(tmp_path):
    findings = lint_project(tmp_path, {"train.py": GLOBAL_RANK_EVERYWHERE}, "train.py", select="DDP007")
    assert [(f["code"], f["location"]["line"]) for f in findings] == [("DDP007", 18)]
    assert "the same value is the device in 4 more places" in findings[0]["message"]


def test_two_separate_reads_of_the_rank_are_two_findings(tmp_path):
    text = """\
        import os
        import torch
        import torch.distributed as dist
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["RANK"]))
        model = torch.nn.Linear(2, 2).cuda(dist.get_rank())
    """
    findings = lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP007")
    assert sorted(f["location"]["line"] for f in findings) == [5, 6]


EVAL_ON_RANK_ZERO = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Retrieval(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.text = torch.nn.Linear(8, 8)
            self.norm = torch.nn.BatchNorm1d(8)

        def similarity(self, text, video):
            if self.training:
                video = gather_all(video)
                {training_barrier}
            return self.norm(self.text(text)) @ video.t()


    def gather_all(x):
        parts = [torch.zeros_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, x)
        return torch.cat(parts)


    def evaluate(model, loader, device):
        {unwrap}
        model.eval()
        with torch.no_grad():
            for text, video in loader:
                scores = model.similarity(text.to(device), video.to(device))
        return scores


    def main():
        dist.init_process_group("nccl")
        local_rank = dist.get_rank() % torch.cuda.device_count()
        model = DDP(Retrieval().cuda(local_rank), device_ids=[local_rank])
        loader = [(torch.randn(2, 8), torch.randn(2, 8))]
        if dist.get_rank() == 0:
            evaluate(model, loader, "cuda")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""

UNWRAP = """if hasattr(model, "module"):
            model = model.module.to(device)
        else:
            model = model.to(device)"""


def test_rank_zero_evaluation_of_the_unwrapped_model_in_eval_mode_is_no_collective(tmp_path):
    text = EVAL_ON_RANK_ZERO.format(unwrap=UNWRAP, training_barrier="dist.barrier()")
    assert lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP009") == []


def test_a_collective_that_runs_in_eval_mode_too_is_still_reported(tmp_path):
    text = EVAL_ON_RANK_ZERO.format(unwrap=UNWRAP, training_barrier="pass").replace(
        "        return self.norm(self.text(text)) @ video.t()",
        "        dist.barrier()\n            return self.norm(self.text(text)) @ video.t()")
    findings = lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP009")
    assert [(f["code"], f["location"]["line"]) for f in findings] == [("DDP009", 44)]


def test_the_wrapper_itself_forwarded_on_rank_zero_is_still_reported(tmp_path):
    text = EVAL_ON_RANK_ZERO.format(unwrap="model = model.to(device)", training_barrier="pass").replace(
        "scores = model.similarity(text.to(device), video.to(device))", "scores = model(text.to(device))")
    findings = lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP009")
    assert [(f["code"], f["location"]["line"]) for f in findings] == [("DDP009", 40)]


def test_state_dict_of_a_model_unwrapped_by_a_type_test_has_no_prefix(tmp_path):
    utils = """\
        from torch.nn import DataParallel
        from torch.nn.parallel import DistributedDataParallel


        def de_parallel(model):
            return model.module if type(model) in (DataParallel, DistributedDataParallel) else model
    """
    train = """\
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        from utils import de_parallel

        dist.init_process_group("nccl")
        model = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[0])
        if dist.get_rank() == 0:
            torch.save({{"model": {saved}.state_dict()}}, "last.pt")
        dist.destroy_process_group()
    """
    files = {"utils.py": utils, "train.py": train.format(saved="de_parallel(model)")}
    assert lint_project(tmp_path, files, "train.py", select="DDP019") == []
    files["train.py"] = train.format(saved="model")
    assert [f["location"]["line"] for f in lint_project(tmp_path, files, "train.py", select="DDP019")] == [9]


def test_inner_module_upkeep_beside_a_wrapped_forward_is_not_a_bypass(tmp_path):
    text = """\
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        from model import TemporalNet

        dist.init_process_group("nccl")
        model = DDP(TemporalNet().cuda(), device_ids=[0])
        optimizer = torch.optim.Adam(model.parameters())
        for epoch in range(10):
            model.module.reset()
            for batch in loader:
                model.module.refresh_memory(batch)
                {forward}
                loss.backward()
                optimizer.step()
        dist.destroy_process_group()
    """
    net = """\
        import torch

        class TemporalNet(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.encoder = torch.nn.Linear(8, 8)

            def reset(self):
                pass

            def refresh_memory(self, batch):
                return self.encoder(batch)

            def forward(self, batch):
                return self.encoder(batch)
    """
    files = {"model.py": net, "train.py": text.format(forward="loss = model(batch).sum()")}
    assert lint_project(tmp_path, files, "train.py", select="DDP013") == []
    files["train.py"] = text.format(forward="loss = model.module.refresh_memory(batch).sum()")
    # Both calls are one mistake in one step, with one fix: one finding, at the first.
    assert [f["location"]["line"] for f in lint_project(tmp_path, files, "train.py", select="DDP013")] == [12]


def test_a_printing_helper_called_twice_in_one_loop_is_one_finding(tmp_path):
    text = """\
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP


        def evaluate(model, steps, scale):
            for i in range(steps):
                print("generation step {}/{}".format(i, steps))
                dist.barrier()


        def main():
            dist.init_process_group("nccl")
            model = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[0])
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(10):
                for x in loader:
                    model(x).sum().backward()
                    optimizer.step()
                evaluate(model, 4, scale=1.0)
                evaluate(model, 4, scale=2.0)
            dist.destroy_process_group()


        if __name__ == "__main__":
            main()
    """
    findings = lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP020")
    assert [f["location"]["line"] for f in findings] == [20]
