from __future__ import annotations

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.module import CallSite
from ddpcheck.lint.model.syntax import argument, dotted, int_value, string_text
from ddpcheck.lint.model.values import Value
from ddpcheck.lint.rule import Invalid, Rule


class DeviceIndexPastLocalGpus(Rule):
    """The GPU index is the local rank plus a fixed offset (or times a factor): the last ranks of a node ask for GPUs that do not exist.

    torchrun starts `--nproc-per-node` processes per machine with `LOCAL_RANK` 0 … n-1, and the
    usual setting is one process per GPU. `torch.cuda.set_device(local_rank + 1)` (or
    `f"cuda:{local_rank + args.offset}"` with a literal, `device_ids=[2 * local_rank]`) then
    points the last rank(s) past the last GPU.

    ## Why it matters
    Those ranks fail at start-up with `CUDA error: invalid device ordinal` while the others wait
    in the first collective until the rendezvous times out. With fewer processes than GPUs it
    works, which is how it passes a test on a bigger machine and fails on the real one.

    Reported at the offset, once, when a device is chosen (`set_device`, `torch.device("cuda", i)`, `"cuda:{i}"`,
    `.cuda(i)`, `.to(i)`, `device_ids=[i]`, `output_device=i`) from a value that reads
    `LOCAL_RANK` (or `dist.get_node_local_rank()`) plus a positive integer literal, or times a
    literal of 2 or more. An index reduced with `% torch.cuda.device_count()` is not reported.

    ## How to fix
    Use the local rank itself (`torch.cuda.set_device(local_rank)`) and choose GPUs with
    `CUDA_VISIBLE_DEVICES` in the launch command (`CUDA_VISIBLE_DEVICES=1,2,3 torchrun
    --nproc-per-node 3 ...`), or keep the offset and start as many processes as the GPUs it
    leaves.

    ## References
    - https://pytorch.org/docs/stable/elastic/run.html (LOCAL_RANK and --nproc-per-node)
    - https://pytorch.org/docs/stable/notes/cuda.html
    """

    code = "DDP033"
    name = "device-index-past-local-gpus"
    severity = Severity.WARNING
    MESSAGE = (
        "device index `{expr}` adds a fixed offset to the local rank: with one process per GPU the "
        "last rank(s) of each node get 'invalid device ordinal'; use the local rank and pick GPUs "
        "with CUDA_VISIBLE_DEVICES"
    )

    VALID = [
        """
        import os
        import torch
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", (local_rank + 1) % torch.cuda.device_count())
        """,
        """
        # An offset that is not a literal (a configured first GPU) is not judged.
        import os
        import torch
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank + args.first_gpu)
        """,
    ]
    INVALID = [
        Invalid(
            """
            import os
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP

            local_rank = int(os.environ["LOCAL_RANK"])
            gpu = local_rank + 1  # GPU 0 drives the display
            torch.cuda.set_device(gpu)
            model = DDP(Net().cuda(gpu), device_ids=[gpu])
            """,
            lines=(6,),
        ),
        Invalid(
            """
            import os
            import torch
            device = torch.device(f"cuda:{int(os.environ['LOCAL_RANK']) * 2}")
            """,
            lines=(3,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        seen: set[int] = set()
        for site in model.root.calls:
            for expr in self._device_arguments(site):
                for node in self._offset_indices(site, expr):
                    if id(node) not in seen:
                        seen.add(id(node))
                        self.report(node, self.MESSAGE.format(expr=model.text_of(model.root, node)))

    def _device_arguments(self, site: CallSite) -> list[cst.BaseExpression]:
        name = self.model.api(site)
        out: list[cst.BaseExpression | None] = []
        if name in api.SET_DEVICE:
            out.append(site.arg("device", 0))
        elif name == api.TORCH_DEVICE:
            out += [site.arg("type", 0), site.arg("index", 1)]
        elif name == api.DDP:
            ids = site.arg("device_ids", 1)
            if isinstance(ids, (cst.List, cst.Tuple)):
                out += [e.value for e in ids.elements]
            out.append(site.arg("output_device", 2))
        elif site.method in ("cuda", "to") and name is None:
            out.append(site.arg("device", 0))
        return [e for e in out if e is not None]

    def _offset_indices(self, site: CallSite, expr: cst.BaseExpression) -> list[cst.BaseExpression]:
        """The index expressions in `expr` (itself, an f-string's fields, a variable's values)
        that offset a local rank."""
        found: list[cst.BaseExpression] = []
        if isinstance(expr, cst.FormattedString):
            text = "".join(p.value for p in expr.parts if isinstance(p, cst.FormattedStringText))
            if text.startswith("cuda"):
                for part in expr.parts:
                    if isinstance(part, cst.FormattedStringExpression) and self._offsets_local_rank(site, part.expression):
                        found.append(part.expression)
            return found
        if self._offsets_local_rank(site, expr):
            return [expr]
        if isinstance(expr, (cst.Name, cst.Attribute)):
            # `gpu = local_rank + 1` ... `set_device(gpu)`: reported once, where the offset is.
            for value in self.model.values.at_call(site, expr):
                node = value.node
                if value.module is self.model.root and isinstance(node, cst.BaseExpression) \
                        and self._offsets_local_rank_value(value):
                    found.append(node)
        return found

    def _offsets_local_rank_value(self, value: Value) -> bool:
        node = value.node
        assert isinstance(node, cst.BaseExpression)
        offset = _offset(node)
        return offset is not None and any(
            self._is_local_rank(v) for v in self.model.values.of(value.module, offset, value.scope, value.frame, at=value.at))

    def _offsets_local_rank(self, site: CallSite, expr: cst.BaseExpression) -> bool:
        base = _offset(expr)
        return base is not None and any(self._is_local_rank(v) for v in self.model.values.at_call(site, base))

    def _is_local_rank(self, value: Value, depth: int = 3) -> bool:
        node = value.node
        if isinstance(node, cst.Call):
            name = self.model.api_of(value)
            if name in api.LOCAL_RANK_CALLS:
                return True
            if name in api.ENV_GETTERS:
                return string_text(argument(node, "key", 0)) in api.LOCAL_RANK_ENV
            if dotted(node.func) == "int" and node.args and depth > 0:
                return any(self._is_local_rank(v, depth - 1) for v in self.model.values.of(
                    value.module, node.args[0].value, value.scope, value.frame, at=value.at))
            return False
        if isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
            base = node.value
            named = base.attr.value if isinstance(base, cst.Attribute) else base.value if isinstance(base, cst.Name) else ""
            return named == "environ" and string_text(node.slice[0].slice.value) in api.LOCAL_RANK_ENV
        return False


def _offset(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """`x + k` / `k + x` (k ≥ 1) or `x * k` / `k * x` (k ≥ 2): x; else None."""
    if isinstance(expr, cst.BinaryOperation):
        left, right = expr.left, expr.right
        if isinstance(expr.operator, cst.Add):
            for a, b in ((left, right), (right, left)):
                k = int_value(b)
                if k is not None and k >= 1:
                    return a
        if isinstance(expr.operator, cst.Multiply):
            for a, b in ((left, right), (right, left)):
                k = int_value(b)
                if k is not None and k >= 2:
                    return a
    return None
