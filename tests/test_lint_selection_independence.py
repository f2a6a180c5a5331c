"""What a rule reports does not depend on which other rules run beside it, and a project whose
callees chain through many functions held in parameters is still checked (through `ddpcheck lint`)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

BRANCHES = 60  # more `if kind == ...: return fn` branches than Python's stack holds nested lookups for


def _tokenizer(branches: int) -> str:
    """A tokenizer module in the style of open_clip's: a factory picks one of many masking
    functions, each of which calls the encoder it is handed as a parameter."""
    lines = ["def get_masker(kind):"]
    for i in range(branches):
        lines += [f"    if kind == 'k{i}':", f"        return mask_{i}"]
    lines += ["    return None", ""]
    for i in range(branches):
        lines += [f"def mask_{i}(texts, encode_fn):",
                  "    out = [encode_fn(t) for t in texts]",
                  "    return [encode_fn(o) for o in out]", ""]
    lines += [
        "class Tokenizer:",
        "    def __init__(self, kind):",
        "        self.kind = kind",
        "    def encode(self, text):",
        "        return list(text)",
        "    def __call__(self, texts):",
        "        masker = get_masker(self.kind)",
        "        return masker(texts, encode_fn=self.encode)",
    ]
    return "\n".join(lines) + "\n"


TRAIN = """\
    import torch
    from pkg.tokenizer import Tokenizer


    def is_master(args):
        return args.rank == 0


    def evaluate(model, data, args):
        if not is_master(args):
            return {}
        tok = Tokenizer(args.kind)
        x = tok(data)
        return model(torch.tensor(x))
"""

MAIN = """\
    import argparse

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from pkg.tokenizer import Tokenizer
    from pkg.train import evaluate


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--kind", default="k0")
        args = parser.parse_args()
        dist.init_process_group("gloo")
        args.rank = dist.get_rank()
        model = DDP(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)))
        tok = Tokenizer(args.kind)
        print(tok(["x"]))
        for epoch in range(3):
            evaluate(model, ["abcd"], args)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def _project(root: Path) -> None:
    write_project(root, {"pkg/__init__.py": "", "pkg/tokenizer.py": _tokenizer(BRANCHES),
                         "pkg/train.py": TRAIN, "main.py": MAIN})
    (root / ".git").mkdir()


def test_many_functions_held_in_parameters_are_checked_not_an_internal_error(tmp_path: Path) -> None:
    _project(tmp_path)
    # (finding_set fails on an exit other than 0 under --exit-zero: a file that could not be checked)
    assert ("train.py", 14, "DDP009") in finding_set(tmp_path, "main.py", select="DDP009")


def test_a_rule_alone_reports_what_it_reports_among_all_rules(tmp_path: Path) -> None:
    _project(tmp_path)
    alone = finding_set(tmp_path, "main.py", "pkg/train.py", select="DDP009")
    among_all = {f for f in finding_set(tmp_path, "main.py", "pkg/train.py", select="ALL") if f[2] == "DDP009"}
    assert alone == among_all == {("train.py", 14, "DDP009")}
