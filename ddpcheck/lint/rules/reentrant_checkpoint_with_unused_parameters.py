from __future__ import annotations

import libcst as cst

from ddpcheck.findings import Applicability, Severity
from ddpcheck.lint.model.ddp import wraps
from ddpcheck.lint.model.module import CallSite
from ddpcheck.lint.model.syntax import is_false, is_true
from ddpcheck.lint.rule import Invalid, Replace, Rule
from ddpcheck.lint.rules._classes import class_closure, classes_of, reached_calls


class ReentrantCheckpointWithUnusedParameters(Rule):
    """Reentrant activation checkpointing in a model that DDP wraps with `find_unused_parameters=True`: the first backward raises.

    `torch.utils.checkpoint.checkpoint(fn, x)` without `use_reentrant` (or with
    `use_reentrant=True`) runs `fn` under `torch.no_grad()` in the forward pass and runs it again,
    with its own nested backward, when gradients are needed. DDP with
    `find_unused_parameters=True` searches the autograd graph of the forward's output for the
    parameters that will get a gradient: the checkpointed ones are not in it, so DDP marks them
    ready at once — and again when the recomputation produces their gradients.

    ## Why it matters
    The first `backward()` fails on every rank with `RuntimeError: Expected to mark a variable
    ready only once` (measured with torch 2.13, gloo, 2 ranks). In torch 2.13 `use_reentrant`
    still defaults to `True` when it is not passed (with only a warning), so code that never
    mentions it is affected. PyTorch's DDP documentation states the limits of reentrant
    checkpointing: no unused parameters, each layer checkpointed at most once, and not together
    with `find_unused_parameters=True`; `static_graph=True` lifts them.

    Reported at the checkpoint call, in the file or in the project classes the wrapped model is
    built from (its methods, the plain functions they call and the classes they construct), when
    the model's DDP wrap passes `find_unused_parameters=True` and not `static_graph=True`.
    Non-reentrant checkpointing (`use_reentrant=False`) is not reported: it works with DDP without
    limits.

    ## How to fix
    Pass `use_reentrant=False` to `checkpoint(...)` (PyTorch's recommendation; the fix does it
    where the call is in the linted file, and is safe: the same function is recomputed, with the
    same RNG state, and DDP then sees every parameter). Or, when the set of used parameters never
    changes, build DDP with `static_graph=True`; or drop `find_unused_parameters=True` if every
    parameter gets a gradient.

    ## References
    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
      (the note on `torch.utils.checkpoint` and the `static_graph` argument)
    - https://pytorch.org/docs/stable/checkpoint.html
    - https://github.com/pytorch/pytorch/issues/24005 (checkpoint_sequential with
      `find_unused_parameters=True` fails with this error)
    - https://github.com/huggingface/transformers/pull/4659 (BERT gradient checkpointing under DDP)
    - https://github.com/microsoft/FocalNet/issues/4 (`use_checkpoint` works on one GPU, fails under DDP)
    """

    code = "DDP023"
    name = "reentrant-checkpoint-with-unused-parameters"
    severity = Severity.ERROR
    fixable = True
    MESSAGE = (
        "reentrant `checkpoint(...)` in a model DDP wraps with `find_unused_parameters=True`: the "
        "first backward raises 'Expected to mark a variable ready only once'; pass "
        "`use_reentrant=False` (or build DDP with `static_graph=True`)"
    )

    VALID = [
        """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.utils.checkpoint import checkpoint

        class Encoder(torch.nn.Module):
            def __init__(self, layers):
                super().__init__()
                self.layers = torch.nn.ModuleList(layers)

            def forward(self, x):
                for layer in self.layers:
                    x = checkpoint(layer, x, use_reentrant=False)
                return x

        model = DDP(Encoder(make_layers()).cuda(), device_ids=[local_rank], find_unused_parameters=True)
        """,
        """
        # static_graph=True supports reentrant checkpointing with unused parameters.
        import torch.utils.checkpoint as cp
        from torch import nn
        from torch.nn.parallel import DistributedDataParallel

        class Net(nn.Module):
            def forward(self, x):
                return cp.checkpoint(self.body, x)

        net = DistributedDataParallel(Net(), find_unused_parameters=True, static_graph=True)
        """,
        """
        # Reentrant checkpointing without find_unused_parameters works (each layer once).
        from torch import nn
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.utils.checkpoint import checkpoint

        class Net(nn.Module):
            def forward(self, x):
                return checkpoint(self.body, x, use_reentrant=True)

        model = DDP(Net(), device_ids=[rank])
        """,
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            from torch.utils.checkpoint import checkpoint

            class Encoder(torch.nn.Module):
                def __init__(self, layers):
                    super().__init__()
                    self.layers = torch.nn.ModuleList(layers)

                def forward(self, x):
                    for layer in self.layers:
                        x = checkpoint(layer, x)
                    return x

            model = DDP(Encoder(make_layers()).cuda(), device_ids=[local_rank], find_unused_parameters=True)
            """,
            lines=(12,),
            fixed="""
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            from torch.utils.checkpoint import checkpoint

            class Encoder(torch.nn.Module):
                def __init__(self, layers):
                    super().__init__()
                    self.layers = torch.nn.ModuleList(layers)

                def forward(self, x):
                    for layer in self.layers:
                        x = checkpoint(layer, x, use_reentrant=False)
                    return x

            model = DDP(Encoder(make_layers()).cuda(), device_ids=[local_rank], find_unused_parameters=True)
            """,
        ),
        Invalid(
            """
            # The checkpoint sits in a block class the model builds; use_reentrant=True is explicit.
            import torch.utils.checkpoint as cp
            from torch import nn
            from torch.nn.parallel import DistributedDataParallel

            class Block(nn.Module):
                def forward(self, x):
                    return cp.checkpoint(self.mlp, x, use_reentrant=True)

            class Net(nn.Module):
                def __init__(self, depth):
                    super().__init__()
                    self.blocks = nn.ModuleList([Block() for _ in range(depth)])

            def main(args):
                net = Net(args.depth).to(args.gpu)
                net = DistributedDataParallel(net, device_ids=[args.gpu], find_unused_parameters=True)
            """,
            lines=(8,),
            fixed="""
            # The checkpoint sits in a block class the model builds; use_reentrant=True is explicit.
            import torch.utils.checkpoint as cp
            from torch import nn
            from torch.nn.parallel import DistributedDataParallel

            class Block(nn.Module):
                def forward(self, x):
                    return cp.checkpoint(self.mlp, x, use_reentrant=False)

            class Net(nn.Module):
                def __init__(self, depth):
                    super().__init__()
                    self.blocks = nn.ModuleList([Block() for _ in range(depth)])

            def main(args):
                net = Net(args.depth).to(args.gpu)
                net = DistributedDataParallel(net, device_ids=[args.gpu], find_unused_parameters=True)
            """,
        ),
    ]

    def finish(self) -> None:
        model = self.model
        reported: set[int] = set()
        for wrap in wraps(model, model.root):
            site = wrap.site
            if not _true_keyword(site, "find_unused_parameters") or _true_keyword(site, "static_graph"):
                continue
            if wrap.inner is None:
                continue
            classes = class_closure(model, classes_of(model, model.values.at_call(site, wrap.inner)))
            for owner_module, info in classes:
                for module, call in reached_calls(model, owner_module, info):
                    if model.api(call) not in _CHECKPOINTS or id(call.node) in reported:
                        continue
                    flag = call.arg("use_reentrant")
                    if flag is not None and (is_false(flag) or not is_true(flag)):
                        continue  # non-reentrant, or decided at run time
                    reported.add(id(call.node))
                    self.report(call.node, fix=_non_reentrant(call, flag) if module is model.root else None,
                                module=module)


_CHECKPOINTS = frozenset({"torch.utils.checkpoint.checkpoint", "torch.utils.checkpoint.checkpoint_sequential"})


def _true_keyword(site: CallSite, keyword: str) -> bool:
    return is_true(site.arg(keyword))


def _non_reentrant(call: CallSite, flag: cst.BaseExpression | None) -> Replace:
    node = call.node
    if flag is not None:
        args = [a.with_changes(value=cst.Name("False")) if a.value is flag else a for a in node.args]
    else:
        args = list(node.args)
        new = cst.Arg(cst.Name("False"), keyword=cst.Name("use_reentrant"),
                      equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
        last = args[-1]
        if isinstance(last.comma, cst.Comma):  # a trailing comma: keep the call's layout
            new = new.with_changes(comma=cst.Comma(whitespace_after=last.comma.whitespace_after))
            args[-1] = last.with_changes(comma=last.comma.with_changes(whitespace_after=cst.SimpleWhitespace(" ")))
        else:
            args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(new)
    return Replace(node, node.with_changes(args=args), "Pass `use_reentrant=False`", Applicability.SAFE)
