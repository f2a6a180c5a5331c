from __future__ import annotations

import re

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.conditions import Resolve, is_rank_value
from ddpcheck.lint.model.index import code_only
from ddpcheck.lint.model.module import Augmented, CallSite, Item, ModuleModel, Scope
from ddpcheck.lint.model.options import option_defaults
from ddpcheck.lint.model.syntax import children, dotted, subexpressions
from ddpcheck.lint.rule import Invalid, Rule

_MEAN_LIKE = re.compile(r"loss|acc|mean|avg|average|metric|ppl|perplexity|error|score|top1|top5|iou|dice", re.I)
_SUM_LIKE = re.compile(r"sum|total|count|num|correct|cnt|^n_|tp|fp|fn|hist|confusion|size", re.I)
# Names of a count of ranks (an option so named may well be set to the world size).
_WORLD_LIKE = re.compile(r"world|size|gpu|proc|replica|node|device|rank|dist|card|parallel", re.I)
_SCALES = ("world_size", "get_world_size", "nprocs", "num_gpus", "ngpus", "n_gpu", "num_replicas",
           "num_processes", "AVG", "WORLD_SIZE")


class AllReduceSumAsMean(Rule):
    """A loss or metric is all-reduced with the default SUM and never divided by the world size.

    `dist.all_reduce(t)` adds the tensors of all ranks (`op` defaults to `ReduceOp.SUM`). A value
    that is a mean on each rank (a loss, an accuracy) becomes N times the mean.

    ## Why it matters
    Logged losses and accuracies scale with the number of GPUs (an accuracy of 380% on 4 GPUs is
    the visible case; a loss 8x too high the quiet one), early stopping and best-checkpoint
    selection compare the wrong numbers, and results change when the job is resized. Users hit
    it in research code again and again (see References).

    Also reported: the same tensor SUM-reduced twice in a row (a copy-pasted `all_reduce` line,
    nothing assigned to it between): the second reduce multiplies the sum by N again, and the one
    division by the world size that follows leaves it N times too large.

    Also reported: a DDP communication hook (`model.register_comm_hook(state, hook)`) that
    SUM-reduces its gradient bucket (`bucket.buffer()`, the parameter annotated `GradBucket` or
    named as a bucket; also a tensor made from it, compressed or packed) and divides or scales
    nowhere in the hook: the bucket holds this rank's mean gradient, DDP expects the hook to
    average it (its own `allreduce_hook` divides by the group's size), and every step then applies
    world_size times the gradient.

    One finding per tensor and function: the same loss reduced again further on (the flipped
    input's pass of an evaluation loop) has the same fix. Functions of a script that nothing
    calls never run and are not read.

    Not reported: `op=` other than SUM (`AVG`, `MAX`, ...), tensors named as sums or counts
    (`total`, `correct`, `num_samples`, confusion matrices), tensors made from names that hold
    counts (`iou_acc_tensor = torch.tensor(iou_acc)` where `iou_acc += fast_hist(...)`, a
    histogram, bincount or confusion matrix), tensors each rank fills only at its own entries
    (`scores[start + i, idx] = s` with `start = rank * step`, in the reducing function or a
    project function that returns the tensor: the SUM gathers the parts), and functions that mention the world
    size (or a division of the tensor, also of a value read back from it by another,
    `loss_sum, n = stats.tolist()` then `loss_sum / max(n, 1)`) in the loop around the reduce or, outside loops, anywhere in
    the function — for an attribute (`self.dice`), anywhere in its class (a `value` property that
    divides it by a count). Nor is a local of a function that nothing reads after the reduce
    (the epoch's summed training loss reduced beside the accuracy counts, only the counts read).

    ## How to fix
    Divide after the reduce (`t /= dist.get_world_size()`), or reduce sums and counts and divide
    them (exact when ranks hold different numbers of samples). `op=dist.ReduceOp.AVG` works on
    NCCL only.

    ## References
    - https://pytorch.org/docs/stable/distributed.html#torch.distributed.all_reduce
    - https://github.com/HRNet/HRNet-Semantic-Segmentation/issues/34 (logged loss was the sum
      over processes, "but it should be averaged")
    - https://github.com/cybertronai/transformer-xl/issues/14 (reducing a loss needs the
      division by the world size)
    - https://github.com/karpathy/nanochat/issues/403 (SUM vs AVG when reducing losses)
    """

    code = "DDP022"
    name = "all-reduce-sum-as-mean"
    severity = Severity.WARNING

    VALID = [
        """
        import torch.distributed as dist
        def reduce_mean(loss):
            rt = loss.clone()
            dist.all_reduce(rt)
            return rt / dist.get_world_size()
        """,
        """
        import torch.distributed as dist
        dist.all_reduce(correct)
        dist.all_reduce(total)
        acc = correct / total
        dist.all_reduce(val_loss, op=dist.ReduceOp.AVG)
        """,
        """
        import torch.distributed as dist
        def evaluate():
            dist.all_reduce(avg_loss)
            avg_loss /= world
        """,
        """
        # Sums and counts reduced together, divided after.
        import torch
        import torch.distributed as dist
        def evaluate(loss_sum, n):
            metrics = torch.tensor([loss_sum, n])
            dist.all_reduce(metrics)
            return metrics[0] / metrics[1]
        """,
        """
        # Reduced once per step of the loop, or reduced again after a reset.
        import torch.distributed as dist
        for step, batch in enumerate(loader):
            loss_sum = model(batch).detach()
            dist.all_reduce(loss_sum)
            total += loss_sum.item() / world_size
        dist.all_reduce(count)
        count.zero_()
        dist.all_reduce(count)
        """,
        """
        # A metric object: the reduced attribute is a running sum, divided by a reduced count.
        import torch
        import torch.distributed as dist

        class DiceCoefficient:
            def __init__(self):
                self.cumulative_dice = None
                self.count = None

            def update(self, pred, target):
                if self.cumulative_dice is None:
                    self.cumulative_dice = torch.zeros(1, device=pred.device)
                    self.count = torch.zeros(1, device=pred.device)
                self.cumulative_dice += dice_coeff(pred, target)
                self.count += 1

            @property
            def value(self):
                return self.cumulative_dice / self.count

            def reduce_from_all_processes(self):
                dist.barrier()
                dist.all_reduce(self.cumulative_dice)
                dist.all_reduce(self.count)
        """,
    ]
    INVALID = [
        Invalid(
            """
            # A communication hook that sums the gradient bucket and returns it undivided.
            import torch.distributed as dist
            def sum_hook(state, bucket: dist.GradBucket):
                grads = bucket.buffer()
                fut = dist.all_reduce(grads, async_op=True).get_future()
                return fut.then(lambda f: f.value()[0])
            """,
            lines=(5,),
        ),
        Invalid(
            """
            import torch.distributed as dist
            def train_one_epoch():
                loss = criterion(out, y)
                reduced_loss = loss.detach().clone()
                dist.all_reduce(reduced_loss)
                print(reduced_loss.item())
            """,
            lines=(5,),
        ),
        Invalid(
            """
            import torch.distributed as dist
            acc1 = accuracy(output, target)
            dist.all_reduce(acc1, op=dist.ReduceOp.SUM)
            """,
            lines=(3,),
        ),
        Invalid(
            """
            # A copy-pasted line reduces the same accuracy twice; one division cannot undo both.
            import torch.distributed as dist
            def report(model, loaders, rank, world_size):
                train_acc = evaluate(loaders["train"], model, rank)
                val_acc = evaluate(loaders["val"], model, rank)
                if world_size > 1:
                    dist.all_reduce(train_acc, op=dist.ReduceOp.SUM)
                    dist.all_reduce(train_acc, op=dist.ReduceOp.SUM)
                    dist.all_reduce(val_acc, op=dist.ReduceOp.SUM)
                    train_acc /= world_size
                    val_acc /= world_size
                return train_acc, val_acc
            """,
            lines=(8,),
        ),
        Invalid(
            """
            # A metric object holding the last batch's dice, reduced with SUM and never divided.
            import torch.distributed as dist

            class DiceMetric:
                def update(self, pred, target):
                    self.dice = dice_coeff(pred, target)

                def reduce_from_all_processes(self):
                    dist.all_reduce(self.dice)
            """,
            lines=(9,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        reduced: dict[tuple[int, str], list[CallSite]] = {}  # (scope, tensor) → its SUM reductions
        # (scope, tensor) already reported as an unscaled mean: the same tensor reduced again in
        # the same function (the flipped-input pass of an evaluation loop) has the same fix.
        reported: set[tuple[int, str]] = set()
        for site in model.paths.sites():
            name = model.api(site)
            if name not in api.SUM_REDUCTIONS:
                continue
            if model.paths.uncalled(site) or model.paths.dead(site):
                continue  # a function of the script that never runs (a variant left unused)
            again = self._reduced_again(site, name, reduced)
            if again is not None:
                self.report(
                    site.node,
                    f"`{again}` was already summed over ranks just before; summing it again multiplies it by "
                    f"world_size once more, which one division by the world size does not undo; reduce it once",
                    module=site.module, related=model.paths.chain(site),
                )
                continue
            wrong = self._divided_by_an_option(site, name)
            if wrong is not None:
                summed, divisor = wrong
                reported.add((id(site.scope), summed))
                self.report(
                    site.node,
                    f"`{summed}` is summed over ranks and divided by `{divisor}`, a command-line option that "
                    f"is not the world size, so the mean is off whenever the two differ; divide by "
                    f"`dist.get_world_size()`",
                    module=site.module, related=model.paths.chain(site),
                )
                continue
            gradient = self._unscaled_bucket(site, name)
            if gradient is not None and (id(site.scope), gradient) not in reported:
                reported.add((id(site.scope), gradient))
                self.report(
                    site.node,
                    f"`{gradient}` holds this rank's gradient bucket and is summed over ranks in a DDP "
                    f"communication hook that never divides by the world size: every step applies "
                    f"world_size times the mean gradient; divide the bucket by the process group's size",
                    module=site.module, related=model.paths.chain(site),
                )
                continue
            tensor = self._unscaled_mean(site, name)
            if tensor is not None and (id(site.scope), tensor) not in reported:
                reported.add((id(site.scope), tensor))
                self.report(
                    site.node,
                    f"`{tensor}` is summed over ranks (all_reduce's default op is SUM), so it is world_size "
                    f"times the mean; divide it by `dist.get_world_size()` after the reduce",
                    module=site.module, related=model.paths.chain(site),
                )

    def _divided_by_an_option(self, site: CallSite, name: str) -> tuple[str, str] | None:
        """A mean helper (`reduce_mean(t, nprocs)`: sum, then divide by a parameter) whose
        every caller passes for the divisor a command-line option that does not name the world
        size (`args.workers`, declared by `add_argument('--workers', ...)` and assigned nowhere):
        the option holds whatever the command line says, not the number of ranks."""
        if not self._sums(site, name):
            return None
        tensor = site.arg("tensor", 0)
        if not isinstance(tensor, cst.Name) or site.scope.kind != "function":
            return None
        written = tensor.value
        function = self.model.paths.function_of(site)
        if function is None:
            return None
        code = site.module.code(site.scope.node)
        if "get_world_size" in code or "WORLD_SIZE" in code:
            return None
        found = re.search(rf"\b{re.escape(written)}\s*/=?\s*(\w+)\b|\b{re.escape(written)}\.div_?\(\s*(\w+)\s*\)", code)
        if found is None:
            return None
        divisor = found.group(1) or found.group(2)
        param = next((p for p in function.params() if p.name == divisor and not p.star), None)
        if param is None:
            return None
        callers = self.model.graph.callers(function)
        if not callers:
            return None
        shown: str | None = None
        for call, bound in callers:
            passed = self.model.graph.argument_for(call, function, param, bound)
            if not isinstance(passed, cst.Attribute) or not self._an_option_not_the_world(passed.attr.value):
                return None
            shown = shown or dotted(passed)
        return (written, shown) if shown is not None else None

    def _an_option_not_the_world(self, attr: str) -> bool:
        """`attr` is an option some module of the run declares with argparse, its name says
        nothing of ranks, processes or devices, and no module of the run assigns it."""
        if _WORLD_LIKE.search(attr):
            return False
        modules = self.model.paths.modules()
        if not any(attr in option_defaults(m) for m in modules):
            return False
        assigned = re.compile(rf"\.{re.escape(attr)}\s*(=[^=]|[-+*/]=)|setattr\("
                              r"|(vars\([^)]*\)|__dict__)\s*(\[|\.update\()")
        return not any(assigned.search(m.source) for m in modules)

    def _reduced_again(self, site: CallSite, name: str,
                       reduced: dict[tuple[int, str], list[CallSite]]) -> str | None:
        """The tensor was SUM-reduced earlier in the same block, and nothing between the two
        reductions gives it a new value (a copy-pasted `all_reduce` line)."""
        if not self._sums(site, name):
            return None
        tensor = site.arg("tensor", 0)
        written = dotted(tensor) if tensor is not None else None
        if written is None:
            return None
        earlier = reduced.setdefault((id(site.scope), written), [])
        earlier.append(site)
        for first in earlier[:-1]:
            if first.module is site.module and first.loops == site.loops and first.guards == site.guards \
                    and not self._changed_between(first, site, written):
                return written
        return None

    def _sums(self, site: CallSite, name: str) -> bool:
        op = site.arg("op", 1 if name.endswith("all_reduce") else 2)
        if op is None:
            return True
        resolved = self.model.qualname(site.module, op, site.scope) or dotted(op) or ""
        return resolved.endswith("SUM")

    @staticmethod
    def _changed_between(first: CallSite, second: CallSite, name: str) -> bool:
        """A binding of `name`, or an in-place method call on it (`t.div_(n)`, `t.zero_()`),
        between two calls of the same scope."""
        scope = first.scope
        if any(p is None or first.tick < p.tick < second.tick for p in scope.points.get(name, [])):
            return True
        return any(
            call.receiver_name == name and (call.method or "").endswith("_")
            for call in first.module.calls[first.index + 1:second.index]
        )

    @staticmethod
    def _made_from_counts(site: CallSite, written: str) -> bool:
        """The tensor is made, in the reducing function, from names that hold counts: every
        value bound to it reads only names that are themselves named as counts or accumulate
        counting calls (`iou_acc += fast_hist(pred, gt, n)`, `hits = np.bincount(...)`), as in
        `iou_acc_tensor = torch.cuda.FloatTensor(iou_acc)`: a confusion matrix, summed right."""
        scope = site.scope
        bound = scope.assignments.get(written, [])
        if not bound or not all(isinstance(b, cst.BaseExpression) for b in bound):
            return False
        for value in bound:
            assert isinstance(value, cst.BaseExpression)
            names = {n.value for n in subexpressions(value) if isinstance(n, cst.Name)} - {written}
            sources = [n for n in names if n in scope.assignments]
            if not sources or not all(_counts(scope, n, written) for n in sources):
                return False
        return True

    def _read_after(self, site: CallSite, name: str) -> bool:
        """Whether the local `name` is read after the reduce at `site`: later in its function, or
        anywhere in the loop around it (the next iteration, unless the loop sets it afresh: `loss
        = 0` at the top of each epoch), other than by another SUM reduce."""
        function = site.scope.node
        loop = site.loops[-1] if site.loops else None
        if loop is not None and any(
                isinstance(b, cst.BaseExpression) and p is not None and loop in p.loops
                for b, p in zip(site.scope.assignments.get(name, []), site.scope.points.get(name, []))):
            loop = None
        reductions = {id(c.node.args[0].value) for c in site.module.calls
                      if c.scope is site.scope and c.node.args and self.model.api(c) in api.SUM_REDUCTIONS}
        passed = False
        stack: list[tuple[cst.CSTNode, bool]] = [(function, False)]
        while stack:
            node, in_loop = stack.pop()
            if node is site.node:
                passed = True
                continue
            if isinstance(node, cst.Name) and node.value == name and id(node) not in reductions \
                    and (passed or in_loop):
                return True
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in ("locals", "vars"):
                return True
            inner = in_loop or node is loop
            stack.extend((child, inner) for child in reversed(list(children(node))))
        return False

    def _unscaled_bucket(self, site: CallSite, name: str) -> str | None:
        """A DDP communication hook's SUM: the reduced tensor is made, in the hook, from its
        gradient bucket (`bucket.buffer()`, `bucket.get_tensor()`, where `bucket` is a parameter
        annotated `GradBucket`, or unannotated and named as a bucket), and nothing in the hook (its callbacks included) divides or
        scales: the bucket holds this rank's mean gradient, which DDP expects the hook to
        average (its own `allreduce_hook` divides by the group's size first)."""
        if not self._sums(site, name) or site.scope.kind != "function":
            return None
        tensor = site.arg("tensor", 0)
        if not isinstance(tensor, cst.Name):
            return None
        function = site.scope.node
        assert isinstance(function, cst.FunctionDef)
        buckets = {p.name.value for p in function.params.params if (
            (dotted(p.annotation.annotation) or "").rsplit(".", 1)[-1] == "GradBucket" if p.annotation is not None
            else "bucket" in p.name.value.lower())}
        if not buckets or not _made_from_bucket(site.scope, tensor.value, buckets, 4):
            return None
        code = code_only(site.module.code(function))
        # Any division or scaling (`tensor.div_(group.size())`, `/ world_size`, `mul_(1 / n)`),
        # floor division of a length aside (`tensor.size(0) // 2` picks a slice), or any
        # mention of the number of ranks: the hook may average; unknown.
        if any(s in code for s in _SCALES) or re.search(r"div|mul|(?<!/)/(?!/)|\.size\(\s*\)|world|nranks", code):
            return None
        return tensor.value

    def _unscaled_mean(self, site: CallSite, name: str) -> str | None:
        op = site.arg("op", 1 if name.endswith("all_reduce") else 2)
        if op is not None:
            resolved = self.model.qualname(site.module, op, site.scope) or dotted(op) or ""
            if not resolved.endswith("SUM"):
                return None
        tensor = site.arg("tensor", 0)
        written = dotted(tensor) if tensor is not None else None
        if written is None:
            return None
        last = written.rsplit(".", 1)[-1]
        if not _MEAN_LIKE.search(last) or _SUM_LIKE.search(last):
            return None
        if self._made_from_counts(site, written):
            return None
        if tensor is not None and self._filled_per_rank(site, tensor):
            return None
        if "." not in written and site.scope.kind == "function" and not self._read_after(site, written):
            return None  # a local sum nobody reads afterwards misleads no one
        function = site.scope.function
        if function is not None and any(dotted(v) == written for v in site.module.returns.get(function.qualname, ())):
            return None  # handed back to callers, who may divide it
        owner = site.scope.class_scope if written.startswith("self.") else None
        # Where a division would be: the class for an attribute (its `value` property divides
        # it), else the loop around the reduce, else the whole function.
        code = site.module.code(owner.node if owner is not None else site.loops[-1] if site.loops else site.scope.node)
        if any(s in code for s in _SCALES):
            return None
        # `loss / n`, `loss.div_(n)`, `metrics[0] / metrics[1]`, `loss.item() / n`
        if re.search(rf"\b{re.escape(written)}(\[[^\]]*\])?(\.item\(\))?\s*(/|\.div|\*|\.mul)", code):
            return None
        if _divided_after_unpacking(site.scope, written, code):
            return None
        return written


    def _filled_per_rank(self, site: CallSite, tensor: cst.BaseExpression) -> bool:
        """The tensor is made where each rank fills only its own entries of a shared shape
        (`scores = torch.full((n, m), -100.0)`, then `scores[start + i, idx] = s` with `start =
        rank * step`), in the reducing function or a project function that returns it: the SUM
        puts the ranks' parts together, a gather, not a mean."""
        values = self.model.values.at_call(site, tensor)
        return bool(values) and all(
            isinstance(v.node, cst.BaseExpression) and self._indexed_by_rank(v.module, v.scope, v.node)
            for v in values)

    def _indexed_by_rank(self, module: ModuleModel, scope: Scope, made: cst.BaseExpression) -> bool:
        # The name bound to it (`scores = torch.full(...).to(device)`: the value is followed
        # through `.to(...)` to the tensor it copies).
        names = [name for name, bound in scope.assignments.items()
                 if any(isinstance(b, cst.CSTNode) and any(sub is made for sub in subexpressions(b)) for b in bound)]
        if len(names) != 1:
            return False
        name = names[0]
        resolve = self.model.resolver_for(module, scope)
        for node in subexpressions(scope.node):
            if not isinstance(node, cst.Subscript) or dotted(node.value) != name:
                continue
            if any(_rank_index(element.slice, scope, resolve, 2) for element in node.slice):
                return _written(scope.node, node)
        return False


def _made_from_bucket(scope: Scope, name: str, buckets: set[str], depth: int) -> bool:
    """Every value bound to `name` in `scope` reads a gradient bucket's tensor (`b.buffer()`,
    `b.get_tensor()`, `b` in `buckets`), directly or through locals bound from it (`tensor =
    bucket.buffer()`, then `compressed = dct(tensor)[:n]`)."""
    bound = scope.assignments.get(name, [])
    if not bound or not all(isinstance(b, cst.BaseExpression) for b in bound):
        return False
    for value in bound:
        assert isinstance(value, cst.BaseExpression)
        found = False
        for sub in subexpressions(value):
            if isinstance(sub, cst.Call) and isinstance(sub.func, cst.Attribute) \
                    and sub.func.attr.value in ("buffer", "get_tensor") and dotted(sub.func.value) in buckets:
                found = True
            elif depth > 0 and isinstance(sub, cst.Name) and sub.value != name and sub.value in scope.assignments \
                    and _made_from_bucket(scope, sub.value, buckets, depth - 1):
                found = True
            if found:
                break
        if not found:
            return False
    return True


def _divided_after_unpacking(scope: Scope, written: str, code: str) -> bool:
    """Sums and their count reduced in one tensor, read back into names and divided:
    `loss_sum, n = stats.tolist()` then `loss_sum / max(n, 1)` — one name read from the tensor
    divided by another read from it (the reduced count), as `stats[0] / stats[1]` is."""
    unpacked: dict[int, list[str]] = {}  # the unpacked value -> the names it is read into
    for name, bound in scope.assignments.items():
        for item in bound:
            if not isinstance(item, Item):
                continue
            # (`stats.tolist()`, `stats.cpu().numpy()`, `stats`: rooted at the reduced tensor.)
            root = item.value
            while isinstance(root, cst.Call) and isinstance(root.func, cst.Attribute):
                root = root.func.value
            if dotted(root) == written:
                unpacked.setdefault(id(item.value), []).append(name)
    for names in unpacked.values():
        for part in names:
            for count in names:
                if part != count and re.search(
                        rf"\b{re.escape(part)}\b\s*/\s*(?:\w+\()?\s*{re.escape(count)}\b", code):
                    return True
    return False


def _written(root: cst.CSTNode, target: cst.Subscript) -> bool:
    """`target` is what an assignment writes (`t[i] = v`, `t[i] += v`)."""
    stack: list[cst.CSTNode] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Assign) and any(t.target is target for t in node.targets):
            return True
        if isinstance(node, cst.AugAssign) and node.target is target:
            return True
        stack.extend(children(node))
    return False


def _rank_index(node: cst.CSTNode, scope: Scope, resolve: Resolve, depth: int) -> bool:
    """An index that depends on the rank: it reads the rank, or a local made from it (`start =
    rank * step`)."""
    for sub in subexpressions(node):
        if isinstance(sub, cst.BaseExpression) and is_rank_value(sub, resolve):
            return True
        if depth > 0 and isinstance(sub, cst.Name):
            bound = scope.assignments.get(sub.value, [])
            if bound and all(isinstance(b, cst.BaseExpression) for b in bound) and any(
                    _rank_index(b, scope, resolve, depth - 1) for b in bound if isinstance(b, cst.BaseExpression)):
                return True
    return False


def _counts(scope: Scope, name: str, tensor: str) -> bool:
    """`name` holds counts in `scope`: named as one, or every value bound or added to it is a
    number literal, a new array (`np.zeros(...)`) or a call of a counting function
    (`fast_hist(...)`, `np.bincount(...)`, `confusion_matrix(...)`); a value read back from the
    reduced `tensor` (`iou_acc = iou_acc_tensor.cpu().numpy()`) is the same counts."""
    if _SUM_LIKE.search(name):
        return True
    counting = False
    for value in scope.assignments.get(name, []):
        expr = value.node.value if isinstance(value, Augmented) else value
        if not isinstance(expr, cst.BaseExpression):
            return False
        if any(isinstance(n, cst.Name) and n.value == tensor for n in subexpressions(expr)):
            continue
        if isinstance(expr, (cst.Integer, cst.Float)):
            continue
        if not isinstance(expr, cst.Call):
            return False
        last = (dotted(expr.func) or "").rsplit(".", 1)[-1]
        if last in ("zeros", "zeros_like", "empty"):
            continue
        if not _COUNTING.search(last):
            return False
        counting = True
    return counting


# Functions that count: histograms, confusion matrices, bincounts.
_COUNTING = re.compile(r"hist|confusion|bincount|count", re.I)
