"""One mistake at a time, put into a correct script: each is found, and nothing else is; and the
mistakes of the tutorial are exactly what a user gets with the default rules."""

from __future__ import annotations

import pytest

from ddpcheck.lint.engine import lint_source
from ddpcheck.lint.rules import rule_classes
from tests.conftest import FIXTURES

ALL_RULES = rule_classes()
DEFAULT_RULES = tuple(r for r in ALL_RULES if r.default_enabled)


def test_the_tutorial_with_the_default_rules():
    path = FIXTURES / "lint" / "tutorial_ddp.py"
    found = {(f.code, f.line) for f in lint_source(str(path), path.read_text(), DEFAULT_RULES)}
    # The unscaled learning rate, set_epoch never called, the old launcher's --local_rank.
    assert found == {("DDP004", 34), ("DDP002", 44), ("DDP008", 60)}


# One mistake at a time, put into the correct script: each is found, and nothing else is.
_MUTATIONS = {
    "DDP001": ("sampler=train_sampler,\n", "shuffle=True,\n"),
    "DDP002": ("            train_sampler.set_epoch(epoch)\n", ""),
    "DDP003": ("    torch.cuda.set_device(local_rank)\n", ""),
    "DDP004": ("lr=lr, momentum", "lr=0.1, momentum"),
    "DDP005": ("        dist.destroy_process_group()\n", "        pass\n"),
    "DDP006": ("sampler=train_sampler,\n", "sampler=train_sampler, shuffle=True,\n"),
    "DDP007": ("device_ids=[local_rank]", "device_ids=[rank]"),
    "DDP008": (
        '    local_rank = int(os.environ["LOCAL_RANK"])\n',
        '    local_rank = args.local_rank\n',
        '    parser.add_argument("--out", default="checkpoint.pt")\n',
        '    parser.add_argument("--out", default="checkpoint.pt")\n'
        '    parser.add_argument("--local_rank", type=int, default=0)\n',
    ),
    "DDP009": (
        "            accuracy = evaluate(model, val_loader, device)\n",
        "            accuracy = 0.0\n            if rank == 0:\n"
        "                accuracy = evaluate(model, val_loader, device)\n",
    ),
    "DDP010": (  # the save moves out of the rank-0 branch (the print stays in)
        '                print(f"epoch {epoch}: accuracy {accuracy:.3f}")\n                torch.save(',
        '                print(f"epoch {epoch}: accuracy {accuracy:.3f}")\n            torch.save(',
    ),
    "DDP011": ("torch.load(args.resume, map_location=device)", "torch.load(args.resume)"),
    "DDP012": ("    if args.sync_bn:\n        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)\n", ""),
}


@pytest.mark.parametrize("code", sorted(_MUTATIONS))
def test_each_single_mistake_in_the_good_script_is_found(code):
    source = (FIXTURES / "lint" / "good_ddp.py").read_text()
    edits = _MUTATIONS[code]
    for old, new in zip(edits[::2], edits[1::2]):
        assert old in source, f"mutation for {code} no longer applies"
        source = source.replace(old, new, 1)
    codes = {f.code for f in lint_source("good_ddp.py", source, ALL_RULES)}
    assert codes == {code}
