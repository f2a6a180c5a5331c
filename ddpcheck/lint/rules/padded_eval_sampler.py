from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.ddp import (
    bypassed_sampler, is_eval_name, pads, read_without_grad, sampler_values, strip_moves, unread_loader,
)
from ddpcheck.lint.model.module import CallSite, Item
from ddpcheck.lint.model.symbols import Function
from ddpcheck.lint.model.values import Frame, Value
from ddpcheck.lint.model.syntax import argument, children, dotted, is_false, is_true, string_text, subexpressions
from ddpcheck.lint.rule import Invalid, Rule


# Keyword arguments that turn a builder's training behaviour off: `build_loader(ds, train=False)`.
_TRAINING_SWITCHES = frozenset({"train", "training", "is_train", "is_training", "shuffle", "augment"})
# Reductions of a gathered list of per-rank values: the same as an all-reduce.
_AVERAGES = frozenset({"sum", "mean", "statistics.mean", "numpy.mean", "np.mean", "torch.mean", "math.fsum"})


# Tensors made of constants, and the calls that move one.
_CONSTANT_TENSORS = frozenset({"torch.ones", "torch.zeros", "torch.tensor", "torch.full", "torch.Tensor",
                               "torch.FloatTensor", "torch.LongTensor"})
# How many project calls deep an all-reduce is looked for before any one counts.
_DEPTH = 8
# torcheval's helpers that gather a metric's states from every rank before computing it.
_METRIC_SYNCS = frozenset({
    "torcheval.metrics.toolkit.sync_and_compute", "torcheval.metrics.toolkit.sync_and_compute_collection",
    "torcheval.metrics.toolkit.get_synced_metric", "torcheval.metrics.toolkit.get_synced_metric_collection",
})
_MOVES = frozenset({"cuda", "to", "cpu", "float", "long", "int", "double", "half"})


def _literal(expr: cst.BaseExpression) -> bool:
    """A number, or a list/tuple of numbers."""
    if isinstance(expr, (cst.Integer, cst.Float)):
        return True
    if isinstance(expr, cst.UnaryOperation):
        return _literal(expr.expression)
    if isinstance(expr, (cst.List, cst.Tuple)):
        return all(isinstance(e, cst.Element) and _literal(e.value) for e in expr.elements)
    return False


def _only_read(body: cst.CSTNode, name: str, reduction: cst.Call) -> bool:
    """Whether `name` in `body` is only bound, moved (`t = t.cuda()`), reduced by `reduction`
    and read: never added to (`t += x`, `t[0] = x`, `t.add_(x)`) nor handed to another call
    that might."""
    stack: list[tuple[cst.CSTNode, tuple[cst.CSTNode, ...]]] = [(body, ())]
    while stack:
        node, parents = stack.pop()
        if isinstance(node, cst.Name) and node.value == name and parents:
            parent = parents[-1]
            if isinstance(parent, cst.AugAssign) and parent.target is node:
                return False
            if isinstance(parent, cst.Subscript) and any(
                    isinstance(p, (cst.AssignTarget, cst.AugAssign)) for p in parents[-3:]):
                return False
            if isinstance(parent, cst.Attribute) and parent.value is node:
                if parent.attr.value.endswith("_") and not parent.attr.value.startswith("_"):
                    return False  # an in-place method: `t.add_(x)`
            if isinstance(parent, cst.Arg) and len(parents) > 1:
                call = parents[-2]
                if call is not reduction and not (isinstance(call, cst.Call) and dotted(call.func) == "print"):
                    return False
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)) and parents:
            continue  # a nested function has its own names
        stack.extend((child, parents + (node,)) for child in children(node))
    return True


# Words of a test that picks which data set a builder makes.
_SET_WORDS = re.compile(r"train|val|test|eval|split|mode|phase|stage", re.I)


def _in_backward_loop(site: CallSite) -> bool:
    """A call inside a loop (of its function) that itself calls `backward()`, not only in a loop
    nested in it: a training step. (An epoch loop holds both the training loop and the
    evaluation after it.)"""
    return any(_calls_backward_at_its_level(loop) for loop in site.loops)


def _calls_backward_at_its_level(node: cst.CSTNode) -> bool:
    for child in children(node):
        if isinstance(child, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(child, cst.Call) and isinstance(child.func, cst.Attribute) and child.func.attr.value == "backward":
            return True
        if _calls_backward_at_its_level(child):
            return True
    return False


def _steps_optimizer_at_its_level(node: cst.CSTNode) -> bool:
    """`optimizer.step()`, `scaler.step(optimizer)` or `optimizer.zero_grad()` in the loop
    `node` itself, not in a loop nested in it."""
    for child in children(node):
        if isinstance(child, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(child, cst.Call) and isinstance(child.func, cst.Attribute):
            method, owner = child.func.attr.value, (dotted(child.func.value) or "").rsplit(".", 1)[-1].lower()
            if method == "zero_grad" or method == "step" and ("optim" in owner or owner.startswith("opt")
                                                               or "scaler" in owner and child.args):
                return True
        if _steps_optimizer_at_its_level(child):
            return True
    return False


def _evaluation_loop(function: cst.FunctionDef) -> bool:
    """`function` holds a loop that calls no `backward()` and steps no optimizer, nor do the
    loops nested in it."""
    return any(isinstance(loop, (cst.For, cst.While)) and not any(
        isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value in ("backward", "step")
        for n in subexpressions(loop)) for loop in subexpressions(function.body))


def _capped_loop(scope: cst.CSTNode) -> bool:
    """`scope` holds an evaluation loop (no `backward()`) over `enumerate(...)` that breaks once
    its counter reaches a bound: `for k, batch in enumerate(loader): if k >= n: break` (not a
    bound set to the loader's length on some path: `n = len(loader)` when no cap is given); or one
    that counts a fixed number of steps and draws a batch from an iterator on each (`for _ in
    range(eval_iters): batch = next(it)`)."""
    for loop in subexpressions(scope):
        if isinstance(loop, cst.For) and _counts_steps(loop.iter):
            inside = list(subexpressions(loop.body))
            if any(isinstance(n, cst.Call) and dotted(n.func) == "next" for n in inside) and not any(
                    isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value == "backward"
                    for n in inside):
                return True
        if not (isinstance(loop, cst.For) and isinstance(loop.iter, cst.Call) and dotted(loop.iter.func) == "enumerate"
                and isinstance(loop.target, cst.Tuple) and loop.target.elements
                and isinstance(loop.target.elements[0].value, cst.Name)):
            continue
        counter = loop.target.elements[0].value.value
        inside = list(subexpressions(loop.body))
        if any(isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value == "backward"
               for n in inside):
            continue
        whole = _set_to_a_length(scope)
        for node in inside:
            if isinstance(node, cst.If) and isinstance(node.test, cst.Comparison) \
                    and any(isinstance(n, cst.Name) and n.value == counter for n in subexpressions(node.test)) \
                    and any(isinstance(n, cst.Break) for n in subexpressions(node.body)) \
                    and not any(isinstance(n, cst.Name) and n.value in whole for n in subexpressions(node.test)):
                return True
    return False


def _set_to_a_length(scope: cst.CSTNode) -> set[str]:
    """Names `scope` sets to a length on some path (`n = len(loader)` when no cap is given): a
    bound that lets the loop run over the whole loader."""
    found: set[str] = set()
    for node in subexpressions(scope):
        if isinstance(node, cst.Assign) and isinstance(node.value, cst.Call) and dotted(node.value.func) == "len":
            found |= {t.target.value for t in node.targets if isinstance(t.target, cst.Name)}
    return found


def _counts_steps(expr: cst.BaseExpression) -> bool:
    """`range(n)`, also through a progress bar or `enumerate` (`tqdm(range(n))`, `trange(n)`)."""
    while isinstance(expr, cst.Call):
        name = (dotted(expr.func) or "").rsplit(".", 1)[-1]
        if name in ("range", "trange"):
            return True
        if name not in ("tqdm", "enumerate") or not expr.args:
            return False
        expr = expr.args[0].value
    return False


def _averaged_whole(gather: CallSite) -> bool:
    """What `gather` returns is bound to one name and, before that name is bound again in its
    function, summed or averaged whole (`preds = gather(preds)`, then `preds.sum() /
    len(preds)`): every gathered element counts, the padding's repeats included. A trim
    (`preds = preds[:len(dataset)]`) rebinds the name first, and is not this."""
    names = gather.module.assigned_names(gather.node)
    if len(names) != 1 or "." in names[0]:
        return False
    name = names[0]
    after = False
    for node in _in_source_order(gather.scope.node):
        if node is gather.node:
            after = True
        elif not after:
            continue
        elif isinstance(node, (cst.AssignTarget, cst.AugAssign)) and isinstance(node.target, cst.Name) \
                and node.target.value == name:
            return False
        elif isinstance(node, cst.Call) and not node.args and isinstance(node.func, cst.Attribute) \
                and node.func.attr.value in ("sum", "mean") and isinstance(node.func.value, cst.Name) \
                and node.func.value.value == name:
            return True
    return False


# Calls that drop repeated rows or cut a gathered batch to a length.
_TRIMS = frozenset({"unique", "narrow", "drop_duplicates", "set", "fromkeys"})


def _trims(scope: cst.CSTNode) -> bool:
    """`scope` cuts rows to a length (`x[:n]`, `x[a:b]`; a cut along a later dimension, `y[:,
    :n]`, keeps every row; a literal bound, `str(t)[:2]`, is no set's length), drops repeats (`np.unique`, `set(ids)`) or keys rows by sample
    (`dict(zip(ids, preds))`, or a merge of the gathered parts by their keys: `_merged_by_key`)."""
    if _merged_by_key(scope):
        return True
    for node in subexpressions(scope):
        if isinstance(node, cst.Subscript) and node.slice and isinstance(node.slice[0].slice, cst.Slice) \
                and node.slice[0].slice.upper is not None and not _literal(node.slice[0].slice.upper):
            return True  # (a literal bound, `text[:2]`, cuts to no set's length)
        if not isinstance(node, cst.Call):
            continue
        name = (dotted(node.func) or "").rsplit(".", 1)[-1]
        if name in _TRIMS or name in ("dict", "OrderedDict") and any(
                isinstance(a.value, cst.Call) and dotted(a.value.func) == "zip" for a in node.args):
            return True
    return False


def _merged_by_key(scope: cst.CSTNode) -> bool:
    """What each rank sent (the list an `all_gather_object` in `scope` filled) is merged by key:
    `for part in gathered: for idx, pred in part.items(): merged[idx] = pred`. Each rank keyed
    its predictions by sample index, so a padded repeat writes its sample's slot again."""
    gathered = {dotted(node.args[0].value) for node in subexpressions(scope)
                if isinstance(node, cst.Call) and node.args
                and (dotted(node.func) or "").rsplit(".", 1)[-1] == "all_gather_object"}
    gathered.discard(None)
    if not gathered:
        return False
    for node in _in_source_order(scope):
        if isinstance(node, cst.For) and isinstance(node.target, cst.Name) and dotted(node.iter) in gathered:
            part = node.target.value
            for inner in _in_source_order(node.body):
                if isinstance(inner, cst.For) and _rekeys_by_sample(inner, part):
                    return True
    return False


def _rekeys_by_sample(loop: cst.For, rows: str) -> bool:
    """`for key, value in rows.items():` whose body stores `value` under `key` (`merged[key] =
    value`): the rows are kept by their own key, once each."""
    target = loop.target
    call = loop.iter
    if not (isinstance(target, cst.Tuple) and len(target.elements) == 2 and isinstance(call, cst.Call)
            and isinstance(call.func, cst.Attribute) and call.func.attr.value == "items" and not call.args
            and dotted(call.func.value) == rows):
        return False
    key, value = (e.value for e in target.elements)
    if not (isinstance(key, cst.Name) and isinstance(value, cst.Name)):
        return False
    for node in _in_source_order(loop.body):
        if isinstance(node, cst.Assign) and isinstance(node.value, cst.Name) and node.value.value == value.value:
            for t in node.targets:
                sub = t.target
                if isinstance(sub, cst.Subscript) and len(sub.slice) == 1 and isinstance(sub.slice[0].slice, cst.Index) \
                        and isinstance(sub.slice[0].slice.value, cst.Name) and sub.slice[0].slice.value.value == key.value:
                    return True
    return False


def _selects_training(test: cst.BaseExpression, negated: bool) -> bool:
    """A test that, held true (`negated` False) or false, picks the training set: `flag ==
    "train"` or `flag in ("train",)` held true, `flag != "train"` held false, `is_train` /
    `self.training` held true (and the same under `not`)."""
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, negated = test.expression, not negated
    if isinstance(test, (cst.Name, cst.Attribute)):
        name = (dotted(test) or "").rsplit(".", 1)[-1].lower()
        return not negated and name in _TRAINING_FLAGS
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    target = test.comparisons[0]
    literals = [test.left, target.comparator]
    if isinstance(target.comparator, (cst.Tuple, cst.List, cst.Set)):
        literals = [e.value for e in target.comparator.elements]
    texts = [string_text(e) for e in literals]
    if not any(t is not None for t in texts) or not all(t is None or t.lower() == "train" for t in texts):
        return False
    operator = target.operator
    if isinstance(operator, (cst.Equal, cst.In)):
        return not negated
    if isinstance(operator, (cst.NotEqual, cst.NotIn)):
        return negated
    return False


# Flags that hold on the training arm of a builder.
_TRAINING_FLAGS = frozenset({"train", "training", "is_train", "is_training", "for_train", "train_mode"})


def _split_key(expr: cst.BaseExpression) -> str | None:
    """The string key of a split taken from a dict of them (`datasets["test"]` → "test")."""
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
        return string_text(expr.slice[0].slice.value)
    return None


def _in_source_order(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in children(node):
        yield from _in_source_order(child)


def _inside_gathering_helper(gather: CallSite, gathers: list[CallSite]) -> bool:
    """`dist.all_gather_object` inside a helper (`dist_gather(x)`) whose own calls are judged."""
    function = gather.scope.function
    return function is not None and any(
        g is not gather and g.target is not None and g.target.name == function.qualname for g in gathers)


# Method names that put data into an object (a meter, a logger of meters, a metric).
_FEEDS = ("update", "add", "append", "extend", "record", "put", "push", "log", "accumulate", "step")
# Methods that set an object up or read it out without feeding it data.
_NOT_FEEDING = frozenset({"add_meter", "log_every", "synchronize_between_processes", "reset"})
# A method that synchronises what an object holds (`synchronize_between_processes`, `sync`,
# `all_reduce`, `gather_metrics`), not one that may read the data itself (`evaluate`).
_SYNCS = re.compile(r"sync|reduce|gather", re.I)
# Calls that only show an object.
_SHOWS = frozenset({"print", "str", "repr", "format", "info", "debug", "warning"})


def _after_training_only(site: CallSite) -> bool:
    """`site` is a method of an object its function's training loop fed (`metric_logger.update(
    loss=...)` in a loop that calls `backward()` at its own level), in a function none of whose
    loops evaluates (a loop with no `backward()` or `step()`): a training epoch that synchronises
    its loss meters after its loop (`metric_logger.synchronize_between_processes()`) reduces
    training statistics, not an evaluation's metric."""
    function = site.scope.function
    receiver = site.receiver
    if function is None or not isinstance(function.node, cst.FunctionDef) or not isinstance(receiver, cst.Name) \
            or receiver.value == "self" or site.method is None or not _SYNCS.search(site.method):
        return False  # (`self.validate(loader)` is no synchronisation of what the loop fed)
    node = function.node
    training = [n for n in subexpressions(node.body)
                if isinstance(n, (cst.For, cst.While)) and _calls_backward_at_its_level(n)]
    if not training or _evaluation_loop(node):
        return False
    return any(c.scope is site.scope and c is not site and any(loop in c.loops for loop in training)
               and _root_name(c.receiver) == receiver.value for c in site.module.calls)


def _root_name(expr: cst.BaseExpression | None) -> str | None:
    """`logger` of `logger.meters["loss"]`, of `logger`."""
    while isinstance(expr, (cst.Attribute, cst.Subscript)):
        expr = expr.value
    return expr.value if isinstance(expr, cst.Name) else None


def _unfed_local(site: CallSite) -> bool:
    """`site` is a method call (not a direct collective) on an object its function makes itself
    (`metric_logger = MetricLogger()`, then `metric_logger.synchronize_between_processes()`)
    and nothing in the function feeds it: no method that puts data in (`update`, `add`,
    `log`, ...), also through an attribute (`metric_logger.meters["acc"].update(v)`), no
    assignment into it, and it is handed to no call. Its reduction sums meters that hold no
    sample of the evaluation."""
    receiver = site.receiver
    if not isinstance(receiver, cst.Name) or site.scope.kind != "function" or site.method is None \
            or not _SYNCS.search(site.method):
        return False  # (`trainer.evaluate()` may read the data itself)
    name = receiver.value
    bound = site.scope.assignments.get(name, ())
    if not bound or not all(isinstance(b, cst.Call) for b in bound):
        return False  # a parameter, or not a new object: a caller may have fed it
    for node, parents in _with_parents(site.scope.node):
        if not (isinstance(node, cst.Name) and node.value == name) or not parents:
            continue
        # The chain of attributes, subscripts and calls the name heads.
        top: cst.CSTNode = node
        chain: list[cst.CSTNode] = []
        for i in range(len(parents) - 1, -1, -1):
            parent = parents[i]
            if isinstance(parent, cst.Attribute) and parent.value is top \
                    or isinstance(parent, cst.Subscript) and parent.value is top \
                    or isinstance(parent, cst.Call) and parent.func is top:
                chain.append(parent)
                top = parent
                continue
            if isinstance(parent, cst.Arg) and not chain and i > 0:
                call = parents[i - 1]
                shown = isinstance(call, cst.Call) and (dotted(call.func) or "").rsplit(".", 1)[-1] in _SHOWS
                if not shown:
                    return False  # handed whole to a call, which may feed it
            if isinstance(parent, (cst.AssignTarget, cst.AugAssign)) and chain:
                return False  # `logger.meters["x"] = ...`, `logger.total += v`
            break
        methods = [c.func.attr.value for c in chain
                   if isinstance(c, cst.Call) and isinstance(c.func, cst.Attribute)]
        if any(m not in _NOT_FEEDING and any(m.startswith(f) or m.endswith(f) for f in _FEEDS) for m in methods):
            return False
    return True


def _with_parents(root: cst.CSTNode) -> Iterator[tuple[cst.CSTNode, tuple[cst.CSTNode, ...]]]:
    stack: list[tuple[cst.CSTNode, tuple[cst.CSTNode, ...]]] = [(root, ())]
    while stack:
        node, parents = stack.pop()
        yield node, parents
        stack.extend((child, parents + (node,)) for child in children(node))


class PaddedEvalSampler(Rule):
    """An evaluation loader uses a padding DistributedSampler and the metric is all-reduced: some samples count twice.

    `DistributedSampler` (with the default `drop_last=False`) pads the dataset by repeating
    samples until its length divides by the world size, so every rank gets the same number of
    batches. For training that is harmless; for a validation or test set whose metric is then
    summed with `all_reduce`, the repeated samples are counted twice.

    ## Why it matters
    The reported accuracy or loss differs from a single-GPU evaluation of the same checkpoint,
    and changes with the number of GPUs (up to `world_size - 1` duplicated samples). Small, but
    enough to make a paper's number irreproducible.

    Informational: with a large evaluation set the bias is tiny. Not reported when the sampler is
    built in a function of the script that nothing calls or names, or when the sampler
    passes `drop_last=True` (a known, unbiased subset), or when the run reduces nothing with
    `all_reduce` and the predictions it gathers (`all_gather*`, `gather*`) are cut to the set's
    length (`preds[:len(dataset)]`; a literal bound, `f"{t:.3f}"[:4]`, is no set's length) or rid of repeats (`unique`, `set()`, `dict(zip(ids, p))`, or per-rank dicts keyed by sample index
    gathered with `all_gather_object` and merged by key: `for part in parts: for i, p in part.items():
    merged[i] = p`)
    where they are gathered or where the gathering function's result is used, a helper that
    gathers included; gathered rows used whole (`accuracy_score(torch.cat(labels),
    torch.cat(preds))`) and gathered per-rank values that are then averaged
    (`mean(all_gather(loss))`) count the padding like an all-reduce. A gather in a training
    step collects training statistics, not the evaluation's; an evaluation function with its own
    loop counts wherever it is called from. timm's `OrderedDistributedSampler` pads the same way,
    always (it has no `drop_last`). Project samplers written like
    `DistributedSampler` (splitting by `num_replicas`, padding to a `total_size`) count too, and so
    do project subclasses of it: `drop_last` is read from what their constructor hands
    `super().__init__`, and one with its own `__iter__` counts only when that pads to
    `total_size`; one that sets `self.total_size = len(self.dataset)` repeats nothing (its
    uneven shares are DDP034's). A sampler made by a builder that serves both sets counts when a caller uses
    it for evaluation (`val_loader = build_loader(val_set, is_train=False)`, or an evaluation
    switch turned on: `data_loader_fid = get_data_loader(args, is_for_fid=True)`, the FID's
    reference images being an evaluation set), even when the
    builder names its one sampler after training (`train_sampler = DistributedSampler(data_set)`
    in `data_provider(args, flag)`), unless a test around it picks the split (`if flag ==
    "train":`) or the caller also takes a training loader from the same call (the names a call
    is unpacked to count: `val_sampler, val_loader = make_loader(args, ds)`), or the caller's
    arguments rule out every loader of the builder that takes the sampler (`make_loader(100,
    "val")` with `DataLoader(ds, sampler=sampler)` only under `if tag == "train":`). A sampler
    made under a test that picks the training set (`if flag == "train":`, `if is_train:`, the
    else of `if flag != "train":`) is the training loader's, whoever calls the builder. A helper that
    gathers the per-rank values and returns their sum or mean (`torch.cat(parts).sum() / n`)
    reduces them like an all-reduce. An evaluation that reads a fixed number of batches (`for _
    in range(eval_iters): batch = next(it)`, or breaks after one) estimates from a sample, which
    the padding skews no more than the sampling (a bound set to the loader's length when no cap
    is asked for, `limit = len(loader)`, reads the whole padded shard: reported); an all-reduce in a training loop (one that
    calls `backward()`, or steps the optimizer after a project call does; also in a helper that
    only such loops call, `reduce_loss(loss)` after each step) is no metric, unless what it sums
    is only ever bound from calls of project functions that evaluate (a loop training nothing):
    `val_loss, bleu = self._eval_test()` every `eval_steps` inside the training loop, then
    `dist.all_reduce(bleu)`. A
    sampler class handed to the builder (`build(cfg, DistributedSampler)`, then `sampler(
    val_set)`) is torch's own on that path. A builder whose callers pass `drop_last`
    (`DistributedSampler(ds, drop_last=drop_last)` in `prepare_dl(ds, drop_last, bs)`) pads on the
    run of a call that passes a false value, and counts when such a call builds the evaluation
    loader (`test_loader = prepare_dl(test_set, drop_last=False, bs=n)`), whatever the others pass. An all-reduce of a tensor made of constants and never added
    to (`probe = torch.ones(1).cuda(); dist.all_reduce(probe)`, a check of the process group)
    reduces no metric; nor does a meter logger's synchronisation in a training epoch whose loops all
    back-propagate (its loss meters, after the loop), or in an evaluation that makes the logger
    itself and never feeds it (`metric_logger.synchronize_between_processes()` where no
    `update`/`add`/`log` call, nor any call it is handed to, puts a value in: the scores come from
    elsewhere). MONAI's `DistributedSampler` pads like torch's unless it is made with
    `even_divisible=False`. A sampler whose loaders nothing reads (`test_loader = DataLoader(
    test_set, sampler=test_sampler)` in a function that never uses `test_loader`, the sampler
    read nowhere else) feeds no evaluation and is not reported; a loader that is returned,
    stored, handed on or read through `locals()` counts as used. Nor is one that no loader of its
    function takes while a loader there is made over the same set without it (`test_loader =
    DataLoader(test_set, batch_size=n)` beside `test_sampler = DistributedSampler(test_set)`, both
    returned in a dict): that loader reads the whole set on every rank. A torchmetrics metric object's
    `compute()` (`val_loss = MeanMetric().cuda()`, then `val_loss.compute()`) outside a training
    loop sums its states over the ranks like an all-reduce (its default `sync_on_compute=True`;
    one made with `sync_on_compute=False` does not); so does torcheval's
    `sync_and_compute(metric)`. A sampler made inside the loader's call
    goes by the loader's name (`eval_loader = DataLoader(ds, sampler=DistributedSampler(ds))`),
    and a set taken from a dict of splits by the split's key (`splits["test"]`).

    ## How to fix
    Evaluate exactly: gather the per-sample predictions and keep the first `len(dataset)`, or
    use a sampler that does not pad (e.g. shard with `range(rank, len(ds), world_size)` and
    all-reduce sums *and* counts), or evaluate on rank 0 only.

    ## References
    - https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
      (`drop_last=False`: "the sampler will add extra indices to make the data evenly divisible")
    - https://github.com/pytorch/pytorch/issues/25162 ("Incorrect Validation Accuracy Due to
      Distributed Sampler")
    - https://github.com/roboflow/rf-detr/issues/1507 (multi-GPU validation metrics counted the
      padding duplicates)
    """

    code = "DDP018"
    name = "padded-eval-sampler"
    severity = Severity.INFO
    # Off by default: the bias is at most world_size - 1 samples and often nil (a set that
    # divides evenly), so it is worth knowing when chasing a number, not on every commit.
    default_enabled = False

    VALID = [
        """
        import torch.distributed as dist
        from torch.utils.data import DistributedSampler
        train_sampler = DistributedSampler(train_set)
        val_sampler = DistributedSampler(val_set, shuffle=False, drop_last=True)
        dist.all_reduce(correct)
        """,
        """
        # Predictions are gathered and cut to the set's length: the padding is dropped.
        import torch.distributed as dist
        from torch.utils.data.distributed import DistributedSampler
        test_sampler = DistributedSampler(test_set, shuffle=False)
        dist.all_gather_object(outputs, preds)
        preds = sum(outputs, [])[:len(test_set)]
        """,
        """
        # No metric is reduced across ranks.
        from torch.utils.data import DistributedSampler
        val_sampler = DistributedSampler(val_set, shuffle=False)
        """,
    ]
    INVALID = [
        Invalid(
            """
            import torch.distributed as dist
            from torch.utils.data import DistributedSampler, DataLoader
            val_sampler = DistributedSampler(val_dataset, shuffle=False)
            val_loader = DataLoader(val_dataset, sampler=val_sampler)
            dist.all_reduce(correct, op=dist.ReduceOp.SUM)
            """,
            lines=(3,),
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader(ds, sampler=torch.utils.data.distributed.DistributedSampler(dataset_test))
            torch.distributed.all_reduce(total)
            """,
            lines=(3,),
        ),
        Invalid(
            """
            # Per-rank mean losses gathered and averaged: the padding is counted like an all-reduce.
            from statistics import mean
            import torch.distributed as dist
            from torch.utils.data import DataLoader, DistributedSampler
            def dist_gather(value):
                out = [None] * dist.get_world_size()
                dist.all_gather_object(out, value)
                return out
            val_sampler = DistributedSampler(val_set, shuffle=False)
            val_loader = DataLoader(val_set, sampler=val_sampler)
            val_loss = mean(dist_gather(evaluate(model, val_loader)))
            """,
            lines=(9,),
        ),
        Invalid(
            """
            # Every rank's predictions gathered whole and scored: the repeats are scored too.
            import torch
            import torch.distributed as dist
            from sklearn.metrics import accuracy_score
            from torch.utils.data import DataLoader, DistributedSampler
            def evaluate(model, loader):
                preds = torch.cat([model(x).argmax(1) for x, _ in loader])
                labels = torch.cat([y for _, y in loader])
                parts = [torch.zeros_like(preds) for _ in range(dist.get_world_size())]
                dist.all_gather(parts, preds)
                targets = [torch.zeros_like(labels) for _ in range(dist.get_world_size())]
                dist.all_gather(targets, labels)
                return accuracy_score(torch.cat(targets), torch.cat(parts))
            val_sampler = DistributedSampler(val_set, shuffle=False)
            val_loader = DataLoader(val_set, sampler=val_sampler)
            print(evaluate(model, val_loader))
            """,
            lines=(14,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        samplers: list[tuple[CallSite, list[CallSite] | None]] = []
        for site in model.paths.sites():
            if model.paths.never(site) is not None or model.paths.uncalled(site):
                continue  # (also a builder of the script that nothing calls: its sampler is never made)
            if pads(model, site):
                samplers.append((site, None))
            elif model.makes(site, api.DISTRIBUTED_SAMPLER):
                # A builder whose callers choose `drop_last` (`def prepare_dl(ds, drop_last): ...
                # DistributedSampler(ds, drop_last=drop_last)`, called with `drop_last=False`
                # for the test set): the sampler pads on the runs of those calls.
                padding = self._padding_callers(site)
                if padding:
                    samplers.append((site, padding))
        if not samplers:
            return
        # (a reduction in a helper of the script that nothing calls reduces nothing)
        calls = [c for c in model.root.calls if not model.paths.uncalled(c)]
        sites = [c for c in model.paths.sites() if not model.paths.uncalled(c)]
        averaged = {id(a.value) for c in sites if c.dotted in _AVERAGES or (model.api(c) or "") in _AVERAGES
                    for a in c.node.args}
        # (a gather in a training step collects training statistics, not the evaluation's)
        gathers = [c for c in sites if (model.api(c) in api.GATHERS or self._gathering_helper(c))
                   and not self._in_training_loop(c)]
        averaged |= {id(c.node) for c in gathers
                     if self._reducing_helper(c) or _averaged_whole(c) or self._kept_whole(c, 2)}
        reductions = [c for c in sites if model.api(c) in api.SUM_REDUCTIONS]
        checks_only = bool(reductions) and all(self._connectivity_check(c) for c in reductions)
        synced = any(self._synced_metric(c) for c in sites)
        if not synced and (checks_only or not any(self._reduces_outside_backward(c, _DEPTH, set()) for c in calls)):
            # No metric is summed over ranks: gathered per-rank values averaged count the
            # padding the same way; gathered predictions can drop it before the metric.
            if any(id(g.node) not in averaged for g in gathers if model.api(g) not in api.GATHERS or
                   not (_inside_gathering_helper(g, gathers) or self._inside_helper_called(g, gathers))):
                return
            if not any(id(g.node) in averaged for g in gathers):
                return
        for site, padding_calls in samplers:
            if self._for_evaluation(site, padding_calls) and not unread_loader(model, site) \
                    and not bypassed_sampler(model, site):
                fix = "use a sampler that does not pad" if model.api(site) in api.PADDING_SAMPLERS \
                    else "pass `drop_last=True`"
                self.report(
                    site.node,
                    "this evaluation DistributedSampler pads the set with repeated samples and the "
                    "metric is reduced over the ranks (all-reduced, or gathered whole), so some samples "
                    f"count twice; evaluate exactly (gather predictions and trim to len(dataset)) or {fix}",
                    module=site.module, related=model.paths.chain(site),
                )

    def _kept_whole(self, gather: CallSite, depth: int, caller: bool = False) -> bool:
        """What `gather` collects reaches the metric untrimmed: neither its function nor, where
        that function returns a value, the functions that call it (up to `depth` callers up)
        cut the gathered rows to the set's length (`preds[:len(dataset)]`, `.narrow()`) or drop
        repeats (`unique`, `set()`, a dict keyed by sample); and it runs outside a training
        step. Such a gather counts the padding's repeats like an all-reduce."""
        if not caller and self._in_training_loop(gather):
            return False
        if _trims(gather.scope.node) or any(_trims(callee.node) for callee, _ in self.model.graph.targets(gather)):
            return False  # (a gathering helper may trim what it returns: `return merged[:n]`)
        function = self.model.paths.function_of(gather)
        if function is None or depth <= 0 or not function.module.returns.get(function.qualname):
            return True  # (what a function does not return stays where it was gathered)
        # A function with a loop of its own that trains nothing is an evaluation even when a
        # training loop calls it (`if step % eval_every == 0: self.evaluate()`); a loss that
        # gathers features is called from the training step and loops over no data.
        evaluates = _evaluation_loop(function.node)
        for call, _ in self.model.graph.callers(function)[:8]:
            if not evaluates and self._in_training_loop(call) or not self._kept_whole(call, depth - 1, True):
                return False
        return True

    def _reduces_outside_backward(self, site: CallSite, depth: int, seen: set[int]) -> bool:
        """`site` all-reduces something other than a training step's gradients or weights: an
        all-reduce reached from inside a loop that calls `backward()` (a loss balancer averaging
        gradient norms, a synced batch statistic) belongs to training, not to the metric of an
        evaluation; one in a function that stops its evaluation loop after a number of batches
        (`if k >= eval_iters: break`) reduces an estimate from a sample, which padding does not
        skew any more than the sampling. Past `depth` project calls, any all-reduce counts."""
        if "all_reduce" not in self.model.facts.of_call(site):
            return False
        evaluation = self._reduces_an_evaluation(site)
        if self._in_training_loop(site) and not evaluation:
            return False
        if self._called_only_in_training(site):
            return False  # (`reduce_loss(loss)` after each `backward()`: a training loss)
        if not evaluation and _after_training_only(site):
            return False  # (a training epoch's meters synchronised after its loop)
        if _unfed_local(site):
            return False  # (`logger.synchronize_between_processes()` of meters nothing updated)
        if "all_reduce" in self.model.facts.direct(site):
            return not _capped_loop(site.scope.node)
        if depth <= 0:
            return True
        if id(site) in seen:
            return False  # already followed: answered where it was first met
        seen.add(id(site))
        return any(self._reduces_outside_backward(inner, depth - 1, seen)
                   for callee, _ in self.model.graph.targets(site)
                   for inner in callee.module.calls_in(callee.qualname))

    def _reduces_an_evaluation(self, site: CallSite) -> bool:
        """`site` all-reduces what an evaluation returned: its tensor is bound, in its function,
        only from calls of project functions that loop over data training nothing (`val_loss,
        bleu = self._eval_test()` inside the training loop every `eval_steps`, then
        `dist.all_reduce(bleu)`): the evaluation's metric, though the reduce sits in a training
        step."""
        tensor = site.arg("tensor", 0)
        if not isinstance(tensor, cst.Name):
            return False
        bound = site.scope.assignments.get(tensor.value, [])
        if not bound:
            return False
        for value in bound:
            made = value.value if isinstance(value, Item) else value
            call = site.module.call_at(made) if isinstance(made, cst.Call) else None
            targets = self.model.graph.targets(call) if call is not None else []
            if not targets or not all(_evaluation_loop(f.node) for f, _ in targets):
                return False
        return True

    def _called_only_in_training(self, site: CallSite) -> bool:
        """Every call of `site`'s function is made in a training loop itself (not through an
        evaluation that a training loop calls now and then)."""
        function = self.model.paths.function_of(site)
        callers = self.model.graph.callers(function) if function is not None else []
        return bool(callers) and all(self._in_training_loop(call) for call, _ in callers)

    def _synced_metric(self, site: CallSite) -> bool:
        """`metric.compute()` of a torchmetrics metric object (`val_loss = MeanMetric().cuda()`)
        outside a training loop: a `Metric` made with the default `sync_on_compute=True` sums its
        states over the ranks before computing, as an all-reduce would."""
        if self.model.api(site) in _METRIC_SYNCS:
            return not self._in_training_loop(site)
        receiver = site.receiver
        if site.method != "compute" or site.node.args or receiver is None or self._in_training_loop(site):
            return False
        values = self.model.values.at_call(site, receiver)
        if not values:
            return False
        for value in values:
            node = value.node
            made = strip_moves(node) if isinstance(node, cst.BaseExpression) else None
            if not isinstance(made, cst.Call):
                return False
            name = self.model.qualname(value.module, made.func, value.scope) or ""
            if not name.startswith("torchmetrics.") or name.startswith("torchmetrics.functional."):
                return False
            sync = argument(made, "sync_on_compute")
            if sync is not None and not is_true(sync):
                return False
        return True

    def _in_training_loop(self, site: CallSite) -> bool:
        """`site` is in a loop that calls `backward()` at its own level, or that steps an
        optimizer there after a project call does the backward (`loss = self._train_step(batch)`
        then `scaler.step(optimizer)`): a training step. (An epoch loop that calls
        `train_one_epoch()` and `evaluate()` steps no optimizer of its own.)"""
        if _in_backward_loop(site):
            return True
        for loop in site.loops:
            if not _steps_optimizer_at_its_level(loop):
                continue
            for call in site.module.calls:
                if call.scope is site.scope and call.loops and call.loops[-1] is loop \
                        and "backward" in self.model.facts.of_call(call):
                    return True
        return False

    def _connectivity_check(self, site: CallSite) -> bool:
        """An all-reduce of a tensor made of constants only (`t = torch.ones(1).cuda();
        dist.all_reduce(t); assert t[0] == world_size`): it tests the process group, it reduces
        no metric."""
        tensor = site.arg("tensor", 0)
        if not isinstance(tensor, cst.Name) or not _only_read(site.scope.node, tensor.value, site.node):
            return False
        values = self.model.values.at_call(site, tensor)
        return bool(values) and all(self._constant_tensor(v, 3) for v in values)

    def _constant_tensor(self, value: Value, depth: int) -> bool:
        """`torch.ones(1)`, `torch.tensor([1.0], device=dev)`, and moves of one (`.cuda()`)."""
        node = value.node
        if not isinstance(node, cst.Call) or depth <= 0:
            return False
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in _MOVES:
            held = self.model.values.of(value.module, func.value, value.scope, value.frame, at=value.at)
            return bool(held) and all(self._constant_tensor(v, depth - 1) for v in held)
        if self.model.qualname(value.module, func, value.scope) not in _CONSTANT_TENSORS:
            return False
        return all(a.keyword is not None or _literal(a.value) for a in node.args)

    def _gathering_helper(self, call: CallSite) -> bool:
        """A call of a project function that itself gathers (`dist_gather(x)`)."""
        return any(self.model.api(c) in api.GATHERS
                   for callee, _ in self.model.graph.targets(call) for c in callee.module.calls_in(callee.qualname))

    def _inside_helper_called(self, gather: CallSite, gathers: list[CallSite]) -> bool:
        """`dist.all_gather` inside a method (`self.distributed_concat(x)`) whose calls are judged."""
        function = gather.scope.function
        if function is None:
            return False
        return any(g is not gather and any(callee.module is gather.module and callee.qualname == function.qualname
                                           for callee, _ in self.model.graph.targets(g)) for g in gathers)

    def _reducing_helper(self, call: CallSite) -> bool:
        """A call of a project function that gathers and returns the sum or mean of what it
        gathered (`return torch.cat(gathered).sum() / n`): the same as an all-reduce."""
        for callee, _ in self.model.graph.targets(call):
            if not any(self.model.api(c) in api.GATHERS for c in callee.module.calls_in(callee.qualname)):
                continue
            for returned in callee.module.returns.get(callee.qualname, ()):
                for sub in subexpressions(returned):
                    if isinstance(sub, cst.Call) and isinstance(sub.func, cst.Attribute) \
                            and sub.func.attr.value in ("sum", "mean") or \
                            isinstance(sub, cst.Call) and dotted(sub.func) in _AVERAGES:
                        return True
        return False

    def _padding_callers(self, site: CallSite) -> list[CallSite]:
        """The calls of the function that builds the sampler at `site` on whose run it pads
        (`drop_last` false as that call passes it)."""
        function = self.model.paths.function_of(site)
        if function is None:
            return []
        return [caller for caller, bound in self.model.graph.callers(function)[:8]
                if not self.model.paths.dead(caller) and pads(self.model, site, Frame(function, caller, None, bound))]

    def _for_evaluation(self, site: CallSite, callers: list[CallSite] | None = None) -> bool:
        """The sampler at `site` serves an evaluation set; with `callers`, the calls of its
        builder on whose run it pads, on the run of one of those."""
        # A sampler made inside the loader's call goes by the loader's names
        # (`eval_loader = DataLoader(ds, sampler=DistributedSampler(ds))`).
        names = site.module.assigned_names(site.node) or [
            name for call in site.module.calls_in(site.scope.qualname)
            if any(a.value is site.node for a in call.node.args) and self.model.makes(call, api.DATALOADER)
            for name in site.module.assigned_names(call.node)]
        dataset = site.arg("dataset", 0)
        dataset_name = _split_key(dataset) or dotted(dataset) if dataset is not None else None
        if any(is_eval_name(n) for n in names) or is_eval_name(dataset_name):
            return True
        shuffle = site.arg("shuffle", 3)
        named_train = any("train" in n.lower() for n in names) or "train" in (dataset_name or "").lower()
        if is_false(shuffle) and not named_train:
            return True
        if not named_train and any(_selects_training(g.test, g.negated) for g in site.guards):
            return False  # the builder's training arm (`if flag == "train":`), whoever calls it
        function = self.model.paths.function_of(site)
        if callers is not None:
            return not named_train and function is not None \
                and self._built_for_evaluation(function, 2, sampler=site, only=callers)
        if named_train:
            # A builder that serves every set may name its one sampler after training
            # (`train_sampler = DistributedSampler(data_set, shuffle=flag == "train")`): it is
            # an evaluation set's when a caller uses the builder for evaluation alone and no
            # test around the sampler picks the set.
            if "train" in (dataset_name or "").lower() or function is None or self._picks_the_set(site):
                return False
            return self._built_for_evaluation(function, 2, strict=True, sampler=site)
        if function is not None and self._built_for_evaluation(function, 2, sampler=site):
            return True
        return self._feeds_only_evaluation(site)

    def _feeds_only_evaluation(self, site: CallSite) -> bool:
        """The loaders the sampler feeds are read only under `torch.no_grad()`, back-propagating
        nothing (`with torch.no_grad(): for data, target in te_loader:`): whatever their names,
        they serve an evaluation."""
        model = self.model
        loaders = [c for c in model.paths.sites() if model.makes(c, api.DATALOADER)
                   and any(v.node is site.node for v in sampler_values(model, c)[0])]
        return bool(loaders) and all(read_without_grad(model, c.node) for c in loaders)

    def _handed_to_a_loader(self, sampler: CallSite, function: Function, caller: CallSite, bound: str) -> bool:
        """On the run of `caller`'s call of the builder, a loader of the builder takes the
        sampler: a builder that makes one for every set but hands it to the training loader only
        (`if tag == "train": DataLoader(ds, sampler=s)` / `else: DataLoader(ds)`) gives the
        evaluation caller no padded sampler, nor does a sampler made only on the other branch
        (`if is_train:` called with `is_train=False`). True when the loaders taking it cannot be
        found."""
        frame = Frame(function, caller, None, bound)
        if self.model.paths.never(sampler, frame) is not None:
            return False  # (`if is_train: sampler = DistributedSampler(ds, shuffle=True)`, called with False)
        names = set(sampler.module.assigned_names(sampler.node))
        takers = [c for c in sampler.module.calls_in(sampler.scope.qualname)
                  if self.model.makes(c, api.DATALOADER) and (given := c.arg("sampler", 3)) is not None
                  and (given is sampler.node or dotted(given) in names)]
        if not takers:
            return True
        return any(self.model.paths.never(c, frame) is None for c in takers)

    def _picks_the_set(self, site: CallSite) -> bool:
        """A test around `site` in its function is about which set is built (`if split ==
        "train":`, `if is_train:`, `if flag != "test":`)."""
        return any(_SET_WORDS.search(site.module.code(guard.test)) for guard in site.guards)

    def _built_for_evaluation(self, function: Function, depth: int, strict: bool = False,
                              sampler: CallSite | None = None, only: list[CallSite] | None = None) -> bool:
        """A builder (`build_loader(dataset, is_train)`) that some caller (of `only`, when
        given) uses for an evaluation set: the caller names what it gets or what it passes for
        validation or testing (`val_loader = build_loader(val_set, False)`, `split="test"`), or
        passes False for the training switch (`is_train=False`, `shuffle=False`); followed up
        to `depth` callers."""
        for caller, bound in self.model.graph.callers(function)[:8]:
            if self.model.paths.dead(caller) or only is not None and not any(caller is c for c in only):
                continue
            # (`val_sampler, val_loader = make_loader(args, ds)`: the names it unpacks to too.)
            names = list(caller.module.assigned_names(caller.node)) + [
                name for name, values in caller.scope.assignments.items()
                if any(isinstance(v, Item) and v.value is caller.node for v in values)]
            if strict and any("train" in n.lower() for n in names):
                continue  # the builder's training loader (or loaders of both sets at once)
            if sampler is not None and sampler.scope.function is not None \
                    and sampler.scope.function.node is function.node \
                    and not self._handed_to_a_loader(sampler, function, caller, bound):
                continue  # this caller's run never hands the sampler to a loader
            if any(is_eval_name(n) for n in names):
                return True
            if any(is_eval_name(dotted(a.value)) or is_eval_name(string_text(a.value)) for a in caller.node.args):
                return True
            for param in function.params():
                given = self.model.graph.argument_for(caller, function, param, bound)
                if param.name in _TRAINING_SWITCHES and is_false(given):
                    return True
                if not strict and is_eval_name(param.name) and is_true(given):
                    return True  # an evaluation switch turned on: `get_data_loader(args, is_for_fid=True)`
            outer = self.model.paths.function_of(caller)
            if depth > 1 and outer is not None and outer != function \
                    and not any("train" in n.lower() for n in names) \
                    and self._built_for_evaluation(outer, depth - 1, strict):
                return True
        return False
