"""Deterministic lint corpora: DDP training scripts in many styles, and a mixed project tree.

`python bench/corpus.py OUT` writes both under OUT (`ddp/` and `mixed/`). The same seed always
gives byte-identical files, so figures from different runs and machines describe the same input.

The scripts are what people write when they follow the PyTorch DDP tutorial, torchrun docs,
Lightning-free "minimal DDP" blog posts and research repos: torchrun (env://) or mp.spawn
launch, argparse or dataclass config, functions or a Trainer class, models from a small MLP
to a transformer block, with and without the classic mistakes (no DistributedSampler, no
set_epoch, saving on every rank, hard-coded ports, no no_sync in accumulation). They are
never run, only read.
"""

from __future__ import annotations

import random
import sys
import textwrap
from pathlib import Path

DDP_FILES = 220
MIXED_FILES = 300  # of which about 10 % use torch


def _dedent(block: str) -> str:
    return textwrap.dedent(block).strip("\n") + "\n"


# --- pieces of a training script ---------------------------------------------------------------

def _imports(r: random.Random, style: dict) -> str:
    lines = [f'"""{style["title"]}\n\n{style["blurb"]}\n"""', ""]
    std = ["argparse", "os", "time", "math", "random", "json", "logging"]
    if style["config"] == "dataclass":
        std.append("dataclasses")
    r.shuffle(std)
    lines += [f"import {m}" for m in sorted(std[: r.randint(3, len(std))] + (["argparse"] if style["config"] == "argparse" else []) + ["os"])
              if True]
    lines = list(dict.fromkeys(lines))
    if style["config"] == "dataclass":
        lines.append("from dataclasses import dataclass, field")
    lines.append("from pathlib import Path")
    lines.append("")
    lines.append("import torch")
    lines.append("import torch.nn as nn")
    lines.append("import torch.nn.functional as F")
    if style["dist_import"] == "module":
        lines.append("import torch.distributed as dist")
    elif style["dist_import"] == "names":
        lines.append("from torch.distributed import init_process_group, destroy_process_group, barrier, all_reduce, ReduceOp")
    else:
        lines.append("import torch.distributed")
    if style["ddp_import"] == "alias":
        lines.append("from torch.nn.parallel import DistributedDataParallel as DDP")
    elif style["ddp_import"] == "plain":
        lines.append("from torch.nn.parallel import DistributedDataParallel")
    if style["launch"] == "spawn":
        lines.append("import torch.multiprocessing as mp")
    lines.append("from torch.utils.data import DataLoader, Dataset" + (", DistributedSampler" if style["sampler_import"] else ""))
    if style["helpers"]:
        lines.append("")
        lines.append("from utils.distributed import is_main_process, reduce_tensor, setup_for_distributed")
    lines.append("")
    lines.append("logger = logging.getLogger(__name__)" if "import logging" in lines else "LOG_EVERY = 50")
    return "\n".join(lines) + "\n"


def _dist(style: dict, fn: str) -> str:
    """How this script spells a torch.distributed function."""
    if style["dist_import"] == "module":
        return f"dist.{fn}"
    if style["dist_import"] == "names" and fn in ("init_process_group", "destroy_process_group", "barrier", "all_reduce"):
        return fn
    return f"torch.distributed.{fn}"


def _ddp(style: dict) -> str:
    return {"alias": "DDP", "plain": "DistributedDataParallel"}.get(style["ddp_import"], "torch.nn.parallel.DistributedDataParallel")


def _config(r: random.Random, style: dict) -> str:
    opts = [
        ("epochs", "int", r.choice([10, 20, 90, 100])),
        ("batch_size", "int", r.choice([32, 64, 128, 256])),
        ("lr", "float", r.choice([0.1, 0.01, 3e-4, 1e-3])),
        ("weight_decay", "float", r.choice([0.0, 1e-4, 5e-4])),
        ("workers", "int", r.choice([0, 2, 4, 8])),
        ("hidden", "int", r.choice([256, 512, 1024])),
        ("layers", "int", r.choice([2, 4, 6])),
        ("accum_steps", "int", r.choice([1, 2, 4, 8])),
        ("seed", "int", r.choice([0, 42, 1234])),
        ("log_every", "int", r.choice([10, 50, 100])),
        ("save_every", "int", r.choice([1, 5, 10])),
        ("dataset_size", "int", r.choice([10000, 50000, 1281167])),
        ("warmup", "int", r.choice([0, 500, 2000])),
        ("clip", "float", r.choice([0.0, 1.0, 5.0])),
    ]
    opts = opts[: r.randint(8, len(opts))]
    if style["config"] == "argparse":
        out = ["def parse_args(argv=None):", f'    parser = argparse.ArgumentParser(description="{style["title"]}")']
        for name, typ, default in opts:
            out.append(f'    parser.add_argument("--{name.replace("_", "-")}", type={typ}, default={default!r}, help="{name.replace("_", " ")}")')
        out.append('    parser.add_argument("--checkpoint-dir", type=str, default="checkpoints")')
        out.append('    parser.add_argument("--resume", type=str, default="")')
        if r.random() < 0.5:
            out.append('    parser.add_argument("--amp", action="store_true", help="mixed precision")')
        out.append("    return parser.parse_args(argv)")
        return "\n".join(out) + "\n"
    out = ["@dataclass", "class TrainConfig:"]
    for name, typ, default in opts:
        out.append(f"    {name}: {typ} = {default!r}")
    out.append('    checkpoint_dir: str = "checkpoints"')
    out.append('    resume: str = ""')
    out.append("    tags: list = field(default_factory=list)")
    out.append("")
    out.append("")
    out.append("def parse_args(argv=None):")
    out.append("    cfg = TrainConfig()")
    out.append("    for key, value in os.environ.items():")
    out.append('        if key.startswith("TRAIN_") and hasattr(cfg, key[6:].lower()):')
    out.append("            field_type = type(getattr(cfg, key[6:].lower()))")
    out.append("            setattr(cfg, key[6:].lower(), field_type(value))")
    out.append("    return cfg")
    return "\n".join(out) + "\n"


def _setup(r: random.Random, style: dict) -> str:
    init = _dist(style, "init_process_group")
    backend = r.choice(['"nccl"', '"gloo"', '"nccl" if torch.cuda.is_available() else "gloo"'])
    if style["launch"] == "spawn":
        port = r.choice(['"12355"', '"29500"', 'str(29500 + random.randint(0, 1000))'])
        body = f"""
        def setup(rank, world_size):
            os.environ["MASTER_ADDR"] = "localhost"
            os.environ["MASTER_PORT"] = {port}
            {init}({backend}, rank=rank, world_size=world_size)
            {"torch.cuda.set_device(rank)" if style["set_device"] else "pass"}
        """
    elif style["init_method"] == "tcp":
        body = f"""
        def setup():
            rank = int(os.environ["RANK"])
            world_size = int(os.environ["WORLD_SIZE"])
            local_rank = int(os.environ.get("LOCAL_RANK", 0))
            {init}(backend={backend}, init_method="tcp://127.0.0.1:{r.choice([23456, 29400, 12345])}",
                   rank=rank, world_size=world_size)
            {"torch.cuda.set_device(local_rank)" if style["set_device"] else "pass"}
            return rank, world_size, local_rank
        """
    else:
        body = f"""
        def setup():
            {init}(backend={backend})
            rank = {_dist(style, "get_rank")}()
            world_size = {_dist(style, "get_world_size")}()
            local_rank = int(os.environ["LOCAL_RANK"])
            {"torch.cuda.set_device(local_rank)" if style["set_device"] else "pass"}
            return rank, world_size, local_rank
        """
    cleanup = f"""

        def cleanup():
            {_dist(style, "destroy_process_group")}()
        """
    return _dedent(body + cleanup)


def _model(r: random.Random, style: dict) -> str:
    kind = style["model"]
    n_blocks = r.randint(1, 5)
    out = []
    if kind == "mlp":
        out.append(_dedent(f"""
        class MLP(nn.Module):
            \"\"\"A plain multi-layer perceptron.\"\"\"

            def __init__(self, in_features=784, hidden=512, out_features=10, depth={r.randint(2, 6)}, dropout=0.1):
                super().__init__()
                layers = []
                width = in_features
                for _ in range(depth):
                    layers += [nn.Linear(width, hidden), nn.ReLU(inplace=True), nn.Dropout(dropout)]
                    width = hidden
                self.body = nn.Sequential(*layers)
                self.head = nn.Linear(width, out_features)

            def forward(self, x):
                x = x.flatten(1)
                return self.head(self.body(x))
        """))
        main_cls = "MLP"
    elif kind == "cnn":
        for i in range(n_blocks):
            out.append(_dedent(f"""
            class ConvBlock{i}(nn.Module):
                def __init__(self, cin, cout, stride=1):
                    super().__init__()
                    self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
                    self.bn1 = nn.BatchNorm2d(cout)
                    self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
                    self.bn2 = nn.BatchNorm2d(cout)
                    self.shortcut = nn.Sequential()
                    if stride != 1 or cin != cout:
                        self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

                def forward(self, x):
                    out = F.relu(self.bn1(self.conv1(x)))
                    out = self.bn2(self.conv2(out))
                    out = out + self.shortcut(x)
                    return F.relu(out)
            """))
            out.append("\n")
        blocks = ", ".join(f"ConvBlock{i}({32 * 2 ** min(i, 3)}, {32 * 2 ** min(i + 1, 3)}, stride={1 if i == 0 else 2})" for i in range(n_blocks))
        out.append(_dedent(f"""
        class ConvNet(nn.Module):
            def __init__(self, num_classes=10):
                super().__init__()
                self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(inplace=True))
                self.layers = nn.Sequential({blocks})
                self.pool = nn.AdaptiveAvgPool2d(1)
                self.fc = nn.Linear({32 * 2 ** min(n_blocks, 3)}, num_classes)

            def forward(self, x):
                x = self.stem(x)
                x = self.layers(x)
                x = self.pool(x).flatten(1)
                return self.fc(x)
        """))
        main_cls = "ConvNet"
    else:
        out.append(_dedent(f"""
        class Attention(nn.Module):
            def __init__(self, dim, heads=8, dropout=0.0):
                super().__init__()
                assert dim % heads == 0, "dim must be divisible by heads"
                self.heads = heads
                self.scale = (dim // heads) ** -0.5
                self.qkv = nn.Linear(dim, dim * 3, bias=False)
                self.proj = nn.Linear(dim, dim)
                self.drop = nn.Dropout(dropout)

            def forward(self, x, mask=None):
                b, t, c = x.shape
                q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
                att = (q @ k.transpose(-2, -1)) * self.scale
                if mask is not None:
                    att = att.masked_fill(mask[:, None, None, :] == 0, float("-inf"))
                att = self.drop(att.softmax(dim=-1))
                y = (att @ v).transpose(1, 2).reshape(b, t, c)
                return self.proj(y)


        class Block(nn.Module):
            def __init__(self, dim, heads, mlp_ratio={r.choice([2, 4])}):
                super().__init__()
                self.ln1 = nn.LayerNorm(dim)
                self.attn = Attention(dim, heads)
                self.ln2 = nn.LayerNorm(dim)
                self.mlp = nn.Sequential(nn.Linear(dim, dim * mlp_ratio), nn.GELU(), nn.Linear(dim * mlp_ratio, dim))

            def forward(self, x, mask=None):
                x = x + self.attn(self.ln1(x), mask)
                return x + self.mlp(self.ln2(x))


        class TinyTransformer(nn.Module):
            def __init__(self, vocab={r.choice([8000, 32000, 50257])}, dim={r.choice([128, 256, 512])}, depth={n_blocks}, heads=8, max_len=512):
                super().__init__()
                self.tok = nn.Embedding(vocab, dim)
                self.pos = nn.Parameter(torch.zeros(1, max_len, dim))
                self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(depth)])
                self.ln = nn.LayerNorm(dim)
                self.head = nn.Linear(dim, vocab, bias=False)

            def forward(self, idx, mask=None):
                x = self.tok(idx) + self.pos[:, : idx.size(1)]
                for block in self.blocks:
                    x = block(x, mask)
                return self.head(self.ln(x))
        """))
        main_cls = "TinyTransformer"
    style["model_cls"] = main_cls
    return "\n\n".join(out)


def _dataset(r: random.Random, style: dict) -> str:
    shape = {"mlp": "(784,)", "cnn": "(3, 32, 32)", "transformer": None}[style["model"]]
    if shape is None:
        sample = "torch.randint(0, 8000, (self.seq_len,), generator=g)"
        target = "torch.randint(0, 8000, (self.seq_len,), generator=g)"
    else:
        sample = f"torch.randn{shape}".replace("randn(", "randn(*") if False else f"torch.randn({shape[1:-1].rstrip(',')}, generator=g)"
        target = "torch.randint(0, 10, (), generator=g)"
    extra = ""
    if r.random() < 0.5:
        extra = _dedent("""

        def collate(batch):
            xs, ys = zip(*batch)
            return torch.stack(xs), torch.stack(ys)
        """)
    return _dedent(f"""
    class SyntheticDataset(Dataset):
        \"\"\"Random samples, reproducible per index (stands in for the real data).\"\"\"

        def __init__(self, size, seq_len=128, seed=0):
            self.size = size
            self.seq_len = seq_len
            self.seed = seed

        def __len__(self):
            return self.size

        def __getitem__(self, index):
            g = torch.Generator().manual_seed(self.seed * 1000003 + index)
            return {sample}, {target}
    """) + extra


def _utils(r: random.Random, style: dict) -> str:
    pieces = [
        """
        class AverageMeter:
            \"\"\"Computes and stores the average and current value.\"\"\"

            def __init__(self, name, fmt=":f"):
                self.name = name
                self.fmt = fmt
                self.reset()

            def reset(self):
                self.val = 0
                self.avg = 0
                self.sum = 0
                self.count = 0

            def update(self, val, n=1):
                self.val = val
                self.sum += val * n
                self.count += n
                self.avg = self.sum / self.count

            def __str__(self):
                fmtstr = "{name} {val" + self.fmt + "} ({avg" + self.fmt + "})"
                return fmtstr.format(**self.__dict__)
        """,
        """
        def accuracy(output, target, topk=(1,)):
            \"\"\"Computes the accuracy over the k top predictions.\"\"\"
            with torch.no_grad():
                maxk = max(topk)
                batch_size = target.size(0)
                _, pred = output.topk(maxk, 1, True, True)
                pred = pred.t()
                correct = pred.eq(target.view(1, -1).expand_as(pred))
                res = []
                for k in topk:
                    correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
                    res.append(correct_k.mul_(100.0 / batch_size))
                return res
        """,
        """
        def cosine_lr(step, total, base_lr, warmup=0):
            if step < warmup:
                return base_lr * (step + 1) / max(1, warmup)
            progress = (step - warmup) / max(1, total - warmup)
            return 0.5 * base_lr * (1.0 + math.cos(math.pi * progress))
        """,
        """
        def set_seed(seed):
            random.seed(seed)
            torch.manual_seed(seed)
            torch.cuda.manual_seed_all(seed)
        """,
        """
        def count_parameters(model):
            return sum(p.numel() for p in model.parameters() if p.requires_grad)
        """,
        f"""
        def average_across_ranks(value, world_size):
            tensor = torch.tensor([value], dtype=torch.float64)
            {_dist(style, "all_reduce")}(tensor)
            return tensor.item() / world_size
        """,
        """
        def format_time(seconds):
            minutes, seconds = divmod(int(seconds), 60)
            hours, minutes = divmod(minutes, 60)
            return f"{hours:d}:{minutes:02d}:{seconds:02d}"
        """,
    ]
    chosen = r.sample(pieces, r.randint(2, len(pieces)))
    return "\n\n".join(_dedent(p) for p in chosen)


def _checkpoint(r: random.Random, style: dict) -> str:
    guard = r.random() < 0.6
    state = "model.module.state_dict()" if r.random() < 0.7 else "model.state_dict()"
    body = f"""
    def save_checkpoint(model, optimizer, epoch, path, rank):
        state = {{"model": {state}, "optimizer": optimizer.state_dict(), "epoch": epoch}}
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    """
    if guard:
        body += """
        if rank == 0:
            torch.save(state, path)
    """
    else:
        body += """
        torch.save(state, path)
    """
    body += f"""

    def load_checkpoint(model, optimizer, path, device):
        checkpoint = torch.load(path, map_location=device)
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        return checkpoint.get("epoch", 0) + 1
    """
    return _dedent(body)


def _train(r: random.Random, style: dict) -> str:
    set_epoch = style["set_epoch"]
    accum = style["accum"]
    log_rank0 = r.random() < 0.6
    device = "device"
    lines = [
        "def train_one_epoch(model, loader, optimizer, criterion, epoch, args, rank, device):",
        "    model.train()",
        "    start = time.time()",
        "    running = 0.0",
    ]
    if set_epoch == "inside":
        lines.append("    loader.sampler.set_epoch(epoch)")
    lines.append("    for step, (inputs, targets) in enumerate(loader):")
    lines.append(f"        inputs = inputs.to({device}, non_blocking=True)")
    lines.append(f"        targets = targets.to({device}, non_blocking=True)")
    if accum == "no_sync":
        lines += [
            "        last = (step + 1) % args.accum_steps == 0",
            "        context = model.no_sync() if not last else contextlib.nullcontext()",
            "        with context:",
            "            outputs = model(inputs)",
            "            loss = criterion(outputs.view(-1, outputs.size(-1)), targets.view(-1)) / args.accum_steps",
            "            loss.backward()",
            "        if last:",
            "            optimizer.step()",
            "            optimizer.zero_grad(set_to_none=True)",
        ]
    elif accum == "plain":
        lines += [
            "        outputs = model(inputs)",
            "        loss = criterion(outputs.view(-1, outputs.size(-1)), targets.view(-1)) / args.accum_steps",
            "        loss.backward()",
            "        if (step + 1) % args.accum_steps == 0:",
            "            optimizer.step()",
            "            optimizer.zero_grad()",
        ]
    else:
        lines += [
            "        optimizer.zero_grad()",
            "        outputs = model(inputs)",
            "        loss = criterion(outputs.view(-1, outputs.size(-1)), targets.view(-1))",
            "        loss.backward()",
        ]
        if r.random() < 0.4:
            lines.append("        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)")
        lines.append("        optimizer.step()")
    lines.append("        running += loss.item()")
    lines.append("        if step % args.log_every == 0:")
    msg = 'f"epoch {epoch} step {step} loss {running / (step + 1):.4f} ({time.time() - start:.1f}s)"'
    if log_rank0:
        lines.append("            if rank == 0:")
        lines.append(f"                print({msg})")
    else:
        lines.append(f"            print({msg})")
    lines.append("    return running / max(1, len(loader))")
    return "\n".join(lines) + "\n"


def _evaluate(r: random.Random, style: dict) -> str:
    return _dedent(f"""
    @torch.no_grad()
    def evaluate(model, loader, criterion, device, world_size):
        model.eval()
        total, correct, loss_sum = 0, 0, 0.0
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            outputs = model(inputs)
            loss_sum += criterion(outputs.view(-1, outputs.size(-1)), targets.view(-1)).item() * targets.size(0)
            correct += (outputs.argmax(-1) == targets).sum().item()
            total += targets.numel()
        stats = torch.tensor([loss_sum, correct, total], dtype=torch.float64, device=device)
        {_dist(style, "all_reduce")}(stats)
        return stats[0].item() / stats[2].item(), stats[1].item() / stats[2].item()
    """)


def _main(r: random.Random, style: dict) -> str:
    ddp = _ddp(style)
    cls = style["model_cls"]
    spawn = style["launch"] == "spawn"
    sig = "def main_worker(rank, world_size, args):" if spawn else "def main(argv=None):"
    lines = [sig]
    if spawn:
        lines.append("    setup(rank, world_size)")
        lines.append('    device = torch.device(f"cuda:{rank}" if torch.cuda.is_available() else "cpu")')
    else:
        lines.append("    args = parse_args(argv)")
        lines.append("    rank, world_size, local_rank = setup()")
        lines.append('    device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")')
    if style["seed"]:
        lines.append("    torch.manual_seed(args.seed)")
    lines.append(f"    model = {cls}().to(device)")
    if style["moved_after"]:
        lines.append(f"    model = {ddp}(model)")
        lines.append("    model.to(device)")
    elif style["wrap"]:
        ids = "[rank]" if spawn else "[local_rank]"
        lines.append(f"    model = {ddp}(model, device_ids={ids} if torch.cuda.is_available() else None)")
    lines.append(f"    optimizer = torch.optim.{r.choice(['SGD', 'AdamW', 'Adam'])}(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)")
    lines.append("    criterion = nn.CrossEntropyLoss()")
    lines.append("    train_set = SyntheticDataset(args.dataset_size if hasattr(args, 'dataset_size') else 10000)")
    lines.append("    val_set = SyntheticDataset(2000, seed=1)")
    sampler_cls = "DistributedSampler" if style["sampler_import"] else "torch.utils.data.distributed.DistributedSampler"
    if style["sampler"]:
        lines.append(f"    train_sampler = {sampler_cls}(train_set, num_replicas=world_size, rank=rank, shuffle=True)")
        lines.append(f"    val_sampler = {sampler_cls}(val_set, shuffle=False)")
        lines.append("    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler,")
        lines.append("                              num_workers=args.workers, pin_memory=True, drop_last=True)")
        lines.append("    val_loader = DataLoader(val_set, batch_size=args.batch_size, sampler=val_sampler, num_workers=args.workers)")
    else:
        lines.append("    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, num_workers=args.workers)")
        lines.append("    val_loader = DataLoader(val_set, batch_size=args.batch_size, shuffle=False)")
    lines.append("    start_epoch = 0")
    lines.append("    if args.resume:")
    lines.append("        start_epoch = load_checkpoint(model, optimizer, args.resume, device)")
    lines.append("    for epoch in range(start_epoch, args.epochs):")
    if style["set_epoch"] == "outer" and style["sampler"]:
        lines.append("        train_sampler.set_epoch(epoch)")
    lines.append("        train_loss = train_one_epoch(model, train_loader, optimizer, criterion, epoch, args, rank, device)")
    lines.append("        val_loss, val_acc = evaluate(model, val_loader, criterion, device, world_size)")
    lines.append("        if rank == 0:")
    lines.append('            print(f"epoch {epoch}: train {train_loss:.4f} val {val_loss:.4f} acc {val_acc:.3f}")')
    lines.append("        if (epoch + 1) % args.save_every == 0:")
    lines.append('            save_checkpoint(model, optimizer, epoch, os.path.join(args.checkpoint_dir, f"epoch{epoch}.pt"), rank)')
    if style["barrier"]:
        lines.append(f"        {_dist(style, 'barrier')}()")
    if style["cleanup"]:
        lines.append("    cleanup()")
    out = "\n".join(lines) + "\n"
    if spawn:
        guard = style["main_guard"]
        body = [
            "",
            "",
            "def main():",
            "    args = parse_args()",
            "    world_size = torch.cuda.device_count() or 2",
            "    mp.spawn(main_worker, args=(world_size, args), nprocs=world_size, join=True)",
        ]
        out += "\n".join(body) + "\n"
        if guard:
            out += '\n\nif __name__ == "__main__":\n    main()\n'
        else:
            out += "\n\nmain()\n"
    else:
        out += '\n\nif __name__ == "__main__":\n    main()\n'
    return out


TITLES = [
    ("Distributed training of {m} on synthetic data.", "Launch with torchrun --nproc-per-node N train.py."),
    ("DDP example: {m}.", "Adapted from the PyTorch DDP tutorial."),
    ("Multi-process {m} trainer.", "One process per GPU; falls back to CPU and gloo."),
    ("Train {m} with DistributedDataParallel.", "Checkpoints go to --checkpoint-dir."),
]


def ddp_script(index: int, seed: int = 0) -> str:
    r = random.Random(seed * 7919 + index)
    model = r.choice(["mlp", "cnn", "transformer"])
    title, blurb = r.choice(TITLES)
    style = {
        "title": title.format(m=model),
        "blurb": blurb,
        "model": model,
        "launch": r.choices(["torchrun", "spawn"], [3, 1])[0],
        "init_method": r.choices(["env", "tcp"], [5, 1])[0],
        "config": r.choice(["argparse", "argparse", "dataclass"]),
        "dist_import": r.choice(["module", "module", "names", "full"]),
        "ddp_import": r.choice(["alias", "plain", "full"]),
        "sampler_import": r.random() < 0.7,
        "helpers": r.random() < 0.15,
        "set_device": r.random() < 0.7,
        "sampler": r.random() < 0.8,
        "set_epoch": r.choice(["outer", "outer", "inside", "none"]),
        "accum": r.choice(["none", "none", "plain", "no_sync"]),
        "wrap": r.random() < 0.95,
        "moved_after": r.random() < 0.1,
        "seed": r.random() < 0.5,
        "barrier": r.random() < 0.3,
        "cleanup": r.random() < 0.75,
        "main_guard": r.random() < 0.8,
    }
    if style["launch"] == "spawn" and style["config"] == "dataclass":
        style["config"] = "argparse"
    parts = [_imports(r, style)]
    if style["accum"] == "no_sync":
        parts[0] = parts[0].replace("import os\n", "import contextlib\nimport os\n", 1)
    parts += [_config(r, style), _setup(r, style), _model(r, style), _dataset(r, style),
              _utils(r, style), _checkpoint(r, style), _train(r, style), _evaluate(r, style)]
    if r.random() < 0.5:
        parts.append(_utils(random.Random(index + 99991), style))  # some files carry more helpers
    parts.append(_main(r, style))
    return "\n\n".join(p.rstrip("\n") + "\n" for p in parts)


# --- a mixed project tree: mostly plain Python, a few training files ----------------------------

def _plain_module(r: random.Random, index: int) -> str:
    kinds = ["cli", "parser", "model", "http", "report"]
    kind = r.choice(kinds)
    funcs = []
    for i in range(r.randint(6, 20)):
        name = f"{r.choice(['load', 'parse', 'render', 'compute', 'merge', 'check', 'build'])}_{r.choice(['items', 'rows', 'config', 'table', 'user', 'graph', 'cache'])}_{i}"
        funcs.append(_dedent(f'''
        def {name}(data, *, limit={r.randint(1, 100)}, strict=False):
            """{kind.title()} helper {i}: keeps the first `limit` entries that pass the check."""
            out = []
            for position, item in enumerate(data):
                if position >= limit:
                    break
                if isinstance(item, dict):
                    key = item.get("id", position)
                    value = item.get("value")
                elif isinstance(item, (list, tuple)) and len(item) == 2:
                    key, value = item
                else:
                    if strict:
                        raise ValueError(f"entry {{position}}: expected a pair or a mapping, got {{item!r}}")
                    continue
                out.append((key, value))
            return sorted(out, key=lambda pair: str(pair[0]))
        '''))
    classes = []
    for i in range(r.randint(1, 4)):
        classes.append(_dedent(f'''
        @dataclass
        class Record{i}:
            name: str
            size: int = 0
            tags: list = field(default_factory=list)

            def describe(self):
                return f"{{self.name}} ({{self.size}} bytes, {{len(self.tags)}} tags)"

            def merge(self, other):
                return Record{i}(self.name, self.size + other.size, self.tags + other.tags)
        '''))
    head = f'"""Module {index}: {kind} utilities."""\n\nfrom __future__ import annotations\n\nimport json\nimport os\nimport re\nfrom dataclasses import dataclass, field\n'
    if index % 5 == 0:
        head += f"\nfrom pkg.common import helpers_{index % 3}\n"
    return head + "\n\n" + "\n\n".join(classes + funcs)


def write_corpus(out: Path, seed: int = 0) -> tuple[list[Path], list[Path]]:
    """Write `out/ddp/*.py` and `out/mixed/**.py`; return the two file lists."""
    ddp_dir = out / "ddp"
    ddp_dir.mkdir(parents=True, exist_ok=True)
    ddp = []
    for i in range(DDP_FILES):
        p = ddp_dir / f"train_{i:03d}.py"
        p.write_text(ddp_script(i, seed))
        ddp.append(p)
    # The helper module some scripts import (`utils.distributed`), as research repos have it.
    (ddp_dir / "utils").mkdir(exist_ok=True)
    (ddp_dir / "utils" / "__init__.py").write_text("")
    (ddp_dir / "utils" / "distributed.py").write_text(_dedent('''
        """Helpers every rank calls (DETR/DeiT style)."""

        import builtins

        import torch
        import torch.distributed as dist


        def is_dist_avail_and_initialized():
            return dist.is_available() and dist.is_initialized()


        def is_main_process():
            return not is_dist_avail_and_initialized() or dist.get_rank() == 0


        def reduce_tensor(tensor):
            rt = tensor.clone()
            dist.all_reduce(rt, op=dist.ReduceOp.SUM)
            return rt / dist.get_world_size()


        def setup_for_distributed(is_master):
            builtin_print = builtins.print

            def print(*args, **kwargs):
                force = kwargs.pop("force", False)
                if is_master or force:
                    builtin_print(*args, **kwargs)

            builtins.print = print
        '''))
    ddp.append(ddp_dir / "utils" / "__init__.py")
    ddp.append(ddp_dir / "utils" / "distributed.py")

    mixed_dir = out / "mixed"
    mixed = []
    r = random.Random(seed + 17)
    for i in range(MIXED_FILES):
        sub = mixed_dir / "pkg" / f"part{i % 6}"
        sub.mkdir(parents=True, exist_ok=True)
        p = sub / f"module_{i:03d}.py"
        if i % 10 == 3:
            p.write_text(ddp_script(1000 + i, seed))
        else:
            p.write_text(_plain_module(r, i))
        mixed.append(p)
    (mixed_dir / "pkg" / "__init__.py").write_text("")
    common = mixed_dir / "pkg" / "common"
    common.mkdir(exist_ok=True)
    (common / "__init__.py").write_text("")
    for k in range(3):
        (common / f"helpers_{k}.py").write_text(f'"""Shared helpers {k}."""\n\n\ndef helper(x):\n    return x * {k + 1}\n')
    for part in sorted((mixed_dir / "pkg").glob("part*")):
        (part / "__init__.py").write_text("")
    return ddp, sorted(mixed_dir.rglob("*.py"))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python bench/corpus.py OUT_DIR")
    ddp, mixed = write_corpus(Path(sys.argv[1]))
    lines = [len(p.read_text().splitlines()) for p in ddp if p.name.startswith("train_")]
    print(f"{len(ddp)} DDP files ({min(lines)}-{max(lines)} lines, {sum(lines)} total); {len(mixed)} mixed files")


# --- a research repository: one long script and the project modules it imports -------------------

REAL_HELPERS = ("utils/distributed.py", "utils/misc.py", "engine.py", "datasets/builder.py",
                "optim_factory.py", "checkpoint.py")  # what a DDP review reads besides the script
REAL_MODELS = ("models/backbone.py", "models/heads.py", "models/blocks.py", "models/losses.py")


def _filler_functions(r: random.Random, prefix: str, count: int) -> str:
    """Plain helper functions (argument checks, table formatting) that make a module long."""
    out = []
    for i in range(count):
        out.append(_dedent(f'''
        def {prefix}_{i}(values, scale={r.randint(1, 9)}, clip=None):
            """Normalise `values` ({prefix} step {i}): scale, clip, and drop empty entries."""
            result = []
            for index, value in enumerate(values):
                if value is None:
                    continue
                scaled = value * scale
                if clip is not None and abs(scaled) > clip:
                    scaled = clip if scaled > 0 else -clip
                result.append((index, scaled))
            if not result:
                raise ValueError("{prefix}_{i}: nothing left after filtering")
            return result
        '''))
    return "\n\n".join(out)


def _model_module(r: random.Random, name: str, blocks: int) -> str:
    parts = [f'"""Network pieces: {name}."""\n\nimport math\n\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n']
    for i in range(blocks):
        parts.append(_dedent(f'''
        class {name.title()}Block{i}(nn.Module):
            def __init__(self, dim, hidden={r.choice([2, 4])} * 64, dropout=0.{r.randint(0, 3)}):
                super().__init__()
                self.norm = nn.LayerNorm(dim)
                self.fc1 = nn.Linear(dim, hidden)
                self.fc2 = nn.Linear(hidden, dim)
                self.drop = nn.Dropout(dropout)
                self.scale = 1.0 / math.sqrt(dim)

            def forward(self, x):
                h = self.norm(x)
                h = self.drop(F.gelu(self.fc1(h)))
                h = self.drop(self.fc2(h))
                return x + h * self.scale
        '''))
    parts.append(_dedent(f'''
    class {name.title()}(nn.Module):
        def __init__(self, dim=256, depth={blocks}):
            super().__init__()
            self.blocks = nn.ModuleList([{name.title()}Block0(dim) for _ in range(depth)])
            self.head = nn.Linear(dim, 10)

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return self.head(x.mean(dim=1))
    '''))
    return "\n\n".join(parts)


def _real_helpers(r: random.Random) -> dict[str, str]:
    files = {}
    files["utils/__init__.py"] = ""
    files["utils/distributed.py"] = _dedent('''
        """Process-group set-up from the launcher's environment."""
        import builtins
        import os

        import torch
        import torch.distributed as dist


        def init_distributed_mode(args):
            if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
                args.rank = int(os.environ["RANK"])
                args.world_size = int(os.environ["WORLD_SIZE"])
                args.gpu = int(os.environ["LOCAL_RANK"])
            else:
                args.distributed = False
                return
            args.distributed = True
            torch.cuda.set_device(args.gpu)
            dist.init_process_group(backend="nccl", init_method="env://",
                                    world_size=args.world_size, rank=args.rank)
            dist.barrier()
            setup_for_distributed(args.rank == 0)


        def setup_for_distributed(is_master):
            builtin_print = builtins.print

            def print(*args, **kwargs):
                if is_master or kwargs.pop("force", False):
                    builtin_print(*args, **kwargs)

            builtins.print = print


        def get_rank():
            return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


        def get_world_size():
            return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


        def is_main_process():
            return get_rank() == 0
        ''') + "\n\n" + _filler_functions(r, "dist_table", 8)
    files["utils/misc.py"] = _dedent('''
        """Meters and logging."""
        from collections import defaultdict

        import torch
        import torch.distributed as dist


        class SmoothedValue:
            def __init__(self):
                self.total = 0.0
                self.count = 0

            def update(self, value, n=1):
                self.total += value * n
                self.count += n

            def synchronize_between_processes(self):
                t = torch.tensor([self.count, self.total], dtype=torch.float64, device="cuda")
                dist.barrier()
                dist.all_reduce(t)
                self.count, self.total = int(t[0].item()), t[1].item()


        class MetricLogger:
            def __init__(self):
                self.meters = defaultdict(SmoothedValue)

            def update(self, **kwargs):
                for name, value in kwargs.items():
                    self.meters[name].update(value)

            def synchronize_between_processes(self):
                for meter in self.meters.values():
                    meter.synchronize_between_processes()
        ''') + "\n\n" + _filler_functions(r, "meter_table", 10)
    files["engine.py"] = _dedent('''
        """The loops."""
        import torch

        from utils.misc import MetricLogger


        def train_one_epoch(model, loader, optimizer, scaler, accum_iter, epoch):
            model.train()
            logger = MetricLogger()
            for step, (samples, targets) in enumerate(loader):
                with torch.cuda.amp.autocast():
                    loss = torch.nn.functional.cross_entropy(model(samples.cuda()), targets.cuda())
                scaler.scale(loss / accum_iter).backward()
                if (step + 1) % accum_iter == 0:
                    scaler.step(optimizer)
                    scaler.update()
                    optimizer.zero_grad()
                logger.update(loss=loss.item())
            logger.synchronize_between_processes()
            return {name: meter.total / max(meter.count, 1) for name, meter in logger.meters.items()}


        @torch.no_grad()
        def evaluate(model, loader):
            model.eval()
            logger = MetricLogger()
            for samples, targets in loader:
                output = model(samples.cuda())
                acc = (output.argmax(-1) == targets.cuda()).float().mean()
                logger.update(acc=acc.item())
            logger.synchronize_between_processes()
            return logger.meters["acc"].total / max(logger.meters["acc"].count, 1)
        ''') + "\n\n" + _filler_functions(r, "engine_table", 6)
    files["datasets/__init__.py"] = ""
    files["datasets/builder.py"] = _dedent('''
        """Datasets, samplers and loaders."""
        import torch
        from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


        def build_dataset(is_train, size):
            return TensorDataset(torch.randn(size, 16, 32), torch.randint(0, 10, (size,)))


        def build_loaders(args):
            train_set = build_dataset(True, 4096)
            val_set = build_dataset(False, 512)
            if args.distributed:
                train_sampler = DistributedSampler(train_set)
                val_sampler = DistributedSampler(val_set, shuffle=False)
            else:
                train_sampler = torch.utils.data.RandomSampler(train_set)
                val_sampler = torch.utils.data.SequentialSampler(val_set)
            train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler, drop_last=True)
            val_loader = DataLoader(val_set, batch_size=args.batch_size, sampler=val_sampler)
            return train_loader, val_loader, train_sampler
        ''') + "\n\n" + _filler_functions(r, "augment", 8)
    files["optim_factory.py"] = _dedent('''
        import torch


        def create_optimizer(args, model):
            decay, no_decay = [], []
            for name, param in model.named_parameters():
                (no_decay if param.ndim <= 1 else decay).append(param)
            groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
            return torch.optim.AdamW(groups, lr=args.lr)
        ''') + "\n\n" + _filler_functions(r, "schedule", 6)
    files["checkpoint.py"] = _dedent('''
        import torch

        from utils.distributed import is_main_process


        def save_on_master(state, path):
            if is_main_process():
                torch.save(state, path)


        def load_checkpoint(path, model):
            state = torch.load(path, map_location="cpu")
            model.load_state_dict(state["model"])
            return state.get("epoch", 0)
        ''')
    for name, blocks in zip(REAL_MODELS, (14, 10, 12, 6)):
        stem = name.split("/")[1][:-3]
        files[name] = _model_module(r, stem, blocks) + "\n\n" + _filler_functions(r, f"{stem}_init", 6)
    files["models/__init__.py"] = "from .backbone import Backbone\nfrom .heads import Heads\n"
    return files


def _real_script(r: random.Random) -> str:
    head = _dedent('''
        """Train a classifier on several GPUs (torchrun --nproc_per_node=8 train.py)."""
        import argparse
        import json
        import os
        import time

        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        import engine
        from checkpoint import load_checkpoint, save_on_master
        from datasets.builder import build_loaders
        from models import Backbone
        from optim_factory import create_optimizer
        from utils.distributed import get_world_size, init_distributed_mode
        from utils.misc import MetricLogger
        ''')
    options = ["def get_args_parser():", '    parser = argparse.ArgumentParser("classifier", add_help=False)']
    for i in range(120):
        options.append(f'    parser.add_argument("--option-{i}", type=float, default={r.random():.4f}, help="tuning knob {i}")')
    options += ['    parser.add_argument("--lr", type=float, default=1e-3)', '    parser.add_argument("--weight-decay", type=float, default=0.05)',
                '    parser.add_argument("--batch-size", type=int, default=64)', '    parser.add_argument("--epochs", type=int, default=100)',
                '    parser.add_argument("--accum-iter", type=int, default=1)', '    parser.add_argument("--resume", default="")',
                '    parser.add_argument("--output-dir", default="runs")', "    return parser"]
    main = _dedent('''
        def main(args):
            init_distributed_mode(args)
            train_loader, val_loader, train_sampler = build_loaders(args)
            model = Backbone().cuda()
            model_without_ddp = model
            if args.distributed:
                model = DDP(model, device_ids=[args.gpu])
                model_without_ddp = model.module
            args.lr = args.lr * args.batch_size * get_world_size() / 256
            optimizer = create_optimizer(args, model_without_ddp)
            scaler = torch.cuda.amp.GradScaler()
            start_epoch = load_checkpoint(args.resume, model_without_ddp) if args.resume else 0
            for epoch in range(start_epoch, args.epochs):
                if args.distributed:
                    train_sampler.set_epoch(epoch)
                stats = engine.train_one_epoch(model, train_loader, optimizer, scaler, args.accum_iter, epoch)
                acc = engine.evaluate(model, val_loader)
                save_on_master({"model": model_without_ddp.state_dict(), "epoch": epoch}, os.path.join(args.output_dir, "last.pt"))
                print(json.dumps({"epoch": epoch, "acc": acc, **stats}))


        if __name__ == "__main__":
            main(get_args_parser().parse_args())
        ''')
    body = "\n\n".join([head, "\n".join(options) + "\n", _filler_functions(r, "report", 56), main])
    return body


def write_real_project(out: Path, seed: int = 0) -> tuple[Path, list[Path], list[Path]]:
    """A ~1,000-line training script and the 10 project modules it imports: returns the script,
    the helper modules a DDP review needs, and every module it imports."""
    r = random.Random(seed + 4242)
    (out / ".git").mkdir(parents=True, exist_ok=True)  # the project root, as in a clone
    for name, text in _real_helpers(r).items():
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    script = out / "train.py"
    script.write_text(_real_script(r))
    helpers = [out / n for n in REAL_HELPERS]
    imported = helpers + [out / n for n in REAL_MODELS]
    return script, helpers, imported
