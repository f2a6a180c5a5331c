from __future__ import annotations

from typing import TYPE_CHECKING

from ddpcheck.findings import Severity
from ddpcheck.lint.model.ddp import wraps
from ddpcheck.lint.model.syntax import is_true, last_name
from ddpcheck.lint.rule import Invalid, Rule
from ddpcheck.lint.rules._classes import (
    class_closure,
    classes_of,
    dynamic_members,
    parameter_submodules,
    self_references,
)

if TYPE_CHECKING:
    from ddpcheck.lint.model.module import ClassInfo, ModuleModel


class UnusedSubmoduleWithoutFindUnused(Rule):
    """A layer of the DDP model is never used, and DDP is built without `find_unused_parameters=True`: the second iteration raises.

    DDP's reducer waits, in every backward, for a gradient of every parameter that requires one.
    A layer built in `__init__` and never called gets none, so the reduction of the first
    iteration never finishes.

    ## Why it matters
    The job crashes on every rank at the start of the second iteration with `RuntimeError:
    Expected to have finished reduction in the prior iteration before starting a new one. This
    error indicates that your module has parameters that were not used in producing loss`
    (measured with torch 2.13, gloo, 2 ranks). Typical causes: a head kept for another task, an
    auxiliary classifier used only in `eval`, a layer left over from a refactoring.

    Reported at the layer's construction when the class DDP wraps (or a class it builds) assigns
    a layer that owns parameters (`nn.Linear`, `nn.Conv2d`, `nn.Embedding`, `nn.LayerNorm`, ...,
    or `nn.Parameter`) to `self.x` and no method of the class ever reads `self.x`; DDP is built
    without `find_unused_parameters=True` and without `static_graph=True`. Classes that reach
    their members dynamically (`getattr(self, ...)`, `self.children()`, `self.parameters()`) and
    files that change `requires_grad` are not judged.

    ## How to fix
    Delete the layer, or freeze it (`self.x.requires_grad_(False)`), or pass
    `find_unused_parameters=True` (it costs a traversal of the autograd graph every iteration),
    or `static_graph=True` when the set of unused parameters never changes.

    ## References
    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
      (`find_unused_parameters`, `static_graph`)
    - https://pytorch.org/docs/stable/notes/ddp.html
    """

    code = "DDP026"
    name = "unused-submodule-without-find-unused"
    severity = Severity.ERROR
    MESSAGE = (
        "`self.{attr}` of `{cls}` is never used, so its parameters get no gradient and DDP (without "
        "`find_unused_parameters=True`) fails at the second iteration; remove the layer, freeze it, "
        "or pass `find_unused_parameters=True`"
    )

    VALID = [
        """
        from torch import nn
        from torch.nn.parallel import DistributedDataParallel as DDP

        class Classifier(nn.Module):
            def __init__(self, dim, classes):
                super().__init__()
                self.backbone = nn.Linear(dim, dim)
                self.head = nn.Linear(dim, classes)
                self.act = nn.ReLU()

            def forward(self, x):
                return self.head(self.act(self.backbone(x)))

        model = DDP(Classifier(512, 10).cuda(), device_ids=[local_rank])
        """,
        """
        # The auxiliary head is used in eval only, and DDP is told so.
        from torch import nn
        from torch.nn.parallel import DistributedDataParallel as DDP

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Linear(8, 8)
                self.aux = nn.Linear(8, 2)

            def forward(self, x):
                return self.body(x)

        model = DDP(Net(), find_unused_parameters=True)
        """,
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch import nn
            from torch.nn.parallel import DistributedDataParallel as DDP

            class Encoder(nn.Module):
                def __init__(self, vocab, dim):
                    super().__init__()
                    self.embed = nn.Embedding(vocab, dim)
                    self.proj = nn.Linear(dim, dim)
                    self.pooler = nn.Linear(dim, dim)  # from the pretraining recipe

                def forward(self, tokens):
                    return self.proj(self.embed(tokens)).mean(1)

            model = DDP(Encoder(30522, 768).to(local_rank), device_ids=[local_rank])
            """,
            lines=(10,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        if "requires_grad" in model.root.source:
            return
        reported: set[int] = set()
        for wrap in wraps(model, model.root):
            site = wrap.site
            if is_true(site.arg("find_unused_parameters")) or is_true(site.arg("static_graph")) or wrap.inner is None:
                continue
            if site.has_star_kwargs:
                continue
            for module, info in class_closure(model, classes_of(model, model.values.at_call(site, wrap.inner))):
                if dynamic_members(module, info) or "requires_grad" in module.source:
                    continue
                for attr, node in parameter_submodules(model, module, info):
                    if id(node) in reported or self._read_anywhere(module, info, attr):
                        continue
                    reported.add(id(node))
                    self.report(node, self.MESSAGE.format(attr=attr, cls=info.qualname), module=module)

    @staticmethod
    def _read_anywhere(module: ModuleModel, info: ClassInfo, attr: str) -> bool:
        """`self.attr` is read in a method of the class or of a project subclass in the module."""
        if self_references(module, info, attr):
            return True
        name = info.qualname.rsplit(".", 1)[-1]
        for other in module.classes.values():
            if other is not info and any(last_name(b) == name for b in other.bases):
                if self_references(module, other, attr):
                    return True
        return False
