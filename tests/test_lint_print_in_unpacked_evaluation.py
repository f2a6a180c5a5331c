"""Prints in an evaluation helper whose results the epoch loop unpacks into several names
(`psnr, ssim = evaluate(...)`), through `ddpcheck lint --select DDP020`: every rank needs the
call's results, so the guard goes on the helper's prints, not around the call. A helper whose
result is dropped is still reported at its call."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str = "DDP020") -> list[tuple[str, int]]:
    return sorted((Path(f["path"]).name, f["location"]["line"]) for f in findings if f["code"] == code)


DENOISE = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    from nets import Denoiser, NoisyPairs, read_pair, score


    def evaluate(net, names, device):
        total_psnr, total_ssim = 0.0, 0.0
        net.eval()
        for k in range(len(names)):
            noisy, clean = read_pair(names[k])
            with torch.no_grad():
                out = net(noisy.to(device))
            psnr, ssim = score(out, clean.to(device))
            total_psnr += psnr
            total_ssim += ssim
            print("image", names[k], "psnr", psnr)
        net.train()
        return total_psnr / len(names), total_ssim / len(names)


    def main():
        dist.init_process_group("nccl")
        rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        net = DDP(Denoiser().to(device), device_ids=[rank])
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-4 * dist.get_world_size())
        data = NoisyPairs("train")
        sampler = DistributedSampler(data)
        loader = DataLoader(data, batch_size=8, sampler=sampler)
        names = sorted(os.listdir("test"))
        for epoch in range(100):
            sampler.set_epoch(epoch)
            for noisy, clean in loader:
                loss = torch.nn.functional.l1_loss(net(noisy.to(device)), clean.to(device))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            psnr, ssim = evaluate(net, names, device)
            if rank == 0 and psnr > 30:
                torch.save(net.module.state_dict(), "best.pth")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""

NETS = """\
    import torch


    class Denoiser(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 3, 3, padding=1)

        def forward(self, x):
            return self.conv(x)


    class NoisyPairs(torch.utils.data.Dataset):
        def __init__(self, split):
            self.split = split

        def __len__(self):
            return 16

        def __getitem__(self, i):
            return torch.zeros(3, 8, 8), torch.zeros(3, 8, 8)


    def read_pair(name):
        return torch.zeros(1, 3, 8, 8), torch.zeros(1, 3, 8, 8)


    def score(out, clean):
        return 30.0, 0.9
"""


def _lint(tmp_path: Path, source: str) -> list[tuple[str, int]]:
    return _lines(lint_project(tmp_path, {"denoise.py": source, "nets.py": NETS}, "denoise.py", select="DDP020"))


def test_prints_of_a_helper_whose_results_are_unpacked_are_reported_in_the_helper(tmp_path: Path) -> None:
    assert _lint(tmp_path, DENOISE) == [("denoise.py", 21)]


def test_a_helper_whose_result_is_dropped_is_reported_at_its_call(tmp_path: Path) -> None:
    source = DENOISE.replace("            psnr, ssim = evaluate(net, names, device)\n"
                             "            if rank == 0 and psnr > 30:\n",
                             "            evaluate(net, names, device)\n"
                             "            if rank == 0:\n")
    assert _lint(tmp_path, source) == [("denoise.py", 44)]


def test_a_guarded_print_in_the_helper_is_silent(tmp_path: Path) -> None:
    source = DENOISE.replace('            print("image", names[k], "psnr", psnr)\n',
                             '            if dist.get_rank() == 0:\n'
                             '                print("image", names[k], "psnr", psnr)\n')
    assert _lint(tmp_path, source) == []
