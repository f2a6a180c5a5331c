"""A correct DDP training script for the runtime benchmark: the same file runs under plain
torchrun and under `ddpcheck run`. It times itself and writes one JSON line per rank.

    torchrun --nproc-per-node N bench/workloads/train_ddp.py --model {1m,25m} --steps S --out DIR

Written per rank to DIR/rank<R>.json: the median and mean step time (batch fetch + forward +
backward + optimizer step) over the steps after the warm-up, the time from launch (BENCH_T0, seconds since the epoch, set by the bench)
to the first step, and the peak resident memory of the rank.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

WIDTHS = {
    # 784*1024 + 1024*256 + 256*10 (+ biases) = 1.07 M parameters
    "1m": [784, 1024, 256, 10],
    # 1024*4096 + 4096*4096 + 4096*1024 + 1024*10 (+ biases) = 25.2 M parameters
    "25m": [1024, 4096, 4096, 1024, 10],
    # 64*128 + 128*10 (+ biases) = 9.6 k parameters: the rank's memory is torch's and the launcher's
    "small": [64, 128, 10],
}


def vmhwm_mib() -> float | None:
    """The rank's peak resident set (VmHWM) as the kernel keeps it; None off Linux."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def build(name: str) -> nn.Sequential:
    widths = WIDTHS[name]
    layers: list[nn.Module] = []
    for a, b in zip(widths, widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(WIDTHS), default="1m")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=20)  # = ddpcheck's default --check-first
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(build(args.model))
    params = sum(p.numel() for p in model.parameters())
    # The benchmark times a step, not convergence: the rate is a fixed, deliberately tiny constant
    # that does not grow with the world, so scaling it would only change what is being measured.
    opt = torch.optim.SGD(model.parameters(), lr=0.01)  # noqa: DDP004
    n = args.batch * world * (args.steps + args.warmup)
    data = TensorDataset(torch.randn(n, WIDTHS[args.model][0]), torch.randint(0, 10, (n,)))
    sampler: DistributedSampler[int] = DistributedSampler(data, shuffle=True, seed=0)
    sampler.set_epoch(0)
    loader = DataLoader(data, batch_size=args.batch, sampler=sampler)
    loss_fn = nn.CrossEntropyLoss()

    ready = time.time()
    times = []
    last = time.perf_counter()
    cpu_start = thread_start = None
    for i, (x, y) in enumerate(loader):  # a step's time includes fetching its batch
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()
        now = time.perf_counter()
        if i >= args.warmup:
            times.append(now - last)
        elif i == args.warmup - 1:
            cpu_start, thread_start = time.process_time(), time.thread_time()
        last = now
    # CPU seconds of the whole rank process (every thread: ddpcheck's and gloo's included) over the
    # timed steps: less sensitive than wall time to other processes taking the cores.
    cpu_end = time.process_time()
    # ...and of the training thread alone: the thread that runs ddpcheck's step work, without
    # gloo's threads, whose polling varies with how the ranks happen to be scheduled.
    thread_end = time.thread_time()
    dist.barrier()
    t0 = float(os.environ.get("BENCH_T0", ready))
    record = {
        "rank": rank,
        "world": world,
        "params": params,
        "steps": len(times),
        "step_median_s": statistics.median(times),
        "step_mean_s": statistics.fmean(times),
        "steps_s": times,
        "cpu_step_mean_s": (cpu_end - cpu_start) / len(times) if cpu_start is not None and times else None,
        "thread_cpu_step_mean_s": ((thread_end - thread_start) / len(times)
                                   if thread_start is not None and times else None),
        "launch_to_first_step_s": ready - t0,
        "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as fh:
        json.dump(record, fh)
    dist.destroy_process_group()
    # The peak after the process group is gone: what a rank held at its highest, read at exit.
    with open(os.path.join(args.out, f"rank{rank}.vmhwm"), "w") as fh:
        fh.write(f"{vmhwm_mib()}\n")


if __name__ == "__main__":
    main()
