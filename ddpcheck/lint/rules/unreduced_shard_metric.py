from __future__ import annotations

import re
from functools import lru_cache
from typing import Sequence

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.ddp import feed, sampler_values
from ddpcheck.lint.model.conditions import is_rank_value, on_single_process_only
from ddpcheck.lint.model.index import code_only
from ddpcheck.lint.model.module import Augmented, CallSite, Element, ForSite, Item, ModuleModel
from ddpcheck.lint.model.symbols import Function
from ddpcheck.lint.model.values import Frame, Value
from ddpcheck.lint.model.syntax import children, dotted, expressions
from ddpcheck.lint.rule import Invalid, Rule
from ddpcheck.lint.rules._crashes import Crashes
from ddpcheck.lint.traverse import NO_STATEMENTS_BELOW

# Parameters that hand a batch source its rank, and the number of ranks.
_RANK_PARAMS = frozenset({"rank", "shard", "shard_id"})
_WORLD_PARAMS = frozenset({"world_size", "num_replicas", "num_shards"})

# Where a metric ends up in front of a person.
_REPORTERS = frozenset({"print", "logging.info", "logging.warning"})
# Methods that give the same rows of an array in another shape, type or place.
_SAME_ROWS = frozenset({"reshape", "view", "astype", "copy", "to", "cuda", "float", "long"})
# Values added to a name that count no sample: a literal step (`+= 1`), text (`msg += "S"`).
_NOT_COUNTED = (cst.Integer, cst.Float, cst.SimpleString, cst.FormattedString, cst.ConcatenatedString)
_REPORT_METHODS = frozenset({"info", "log", "add_scalar", "add_scalars", "log_metric", "log_metrics", "write"})


class UnreducedShardMetric(Rule):
    """An evaluation metric is counted over one rank's DistributedSampler shard and reported without a reduction across ranks.

    With a DistributedSampler each rank evaluates 1/N of the set. Counters summed in the loop
    (`correct += ...`, `total += ...`, `loss_sum += ...`, also entries of a dict of sums:
    `totals[k] += v.item()`, in the loop or in a project function the loop hands the dict to
    that adds to its entries and makes no collective: `self.aggregate_metrics(epoch_metrics,
    outputs, batch)`), and running-average objects it feeds
    (`meter.update(loss.item())`, where `meter` is an instance of a project class whose `update`
    adds to its own attributes; also a meter the object keeps, `self.val_loss.update(...)`), and lists it appends the batch's values to (`losses.append(
    loss.item())`, then `statistics.mean(losses)`, or turned into a tensor after the loop,
    `top1 = torch.Tensor(top1)`, then `top1.mean()`; also the lists of a `defaultdict(list)`,
    one per loss term: `log_losses[k].append(v.item())`), hold that rank's shard only until they are all-reduced (or
    gathered).

    ## Why it matters
    The printed or logged number is the accuracy of one shard, presented as the accuracy of the
    whole set: it differs from rank to rank, from run to run with the world size, and from the
    single-GPU figure; with a rank-0 guard around the print, the report is simply rank 0's shard.
    Model selection and early stopping then follow noise.

    Reported at the print / log call (`print`, `logger.info`, `writer.add_scalar`, `wandb.log`,
    `mlflow.log_metric`, ...) after a loop over a DataLoader fed by a DistributedSampler (in the script or in a project
    module the run reaches; loaders derived from torch's, such as PyG's, count, and so does one
    taken from a dict of loaders filled in a loop: `loaders[split] = DataLoader(...)`, then
    `evaluate(model, loaders["val"])`; also wrapped in a progress bar bound first, `bar =
    tqdm(self.val_loader)` then `for x, y in bar:`), when what it reports is
    computed from counters the loop accumulated (also through an entry of an array of
    per-epoch figures, `losses_valid[epoch] = loss_valid / n`) and no collective after the loop may reduce them
    (nor are they handed to a project function — reading a running-metric object's figures
    back with its own method, `loss, acc = metric.compute()`, is not handing it on when that
    method makes no collective —, unless that function only logs them:
    `writer.test_logging(loss, step)` whose body calls `add_scalar`, or writes what it is handed
    and returns something else: `best = log_and_save(model, writer, epoch, val_loss, best)`, also
    a message made from them first, `outstr = "acc %.3f" % acc; io.cprint(outstr)` with a
    `cprint(self, text)` that prints `text`;
    nor when it computes a value from them that is bound to a name, making no collective:
    `loss_dict = aggregate_loss_dict(per_batch_dicts)`, or `tp, fp, best = roc_figures(embs,
    same)`, or builds a project object from them that is bound to a name or read at once by a
    method whose result is, `metrics = Validator(gt, preds).compute_metrics()`, is followed like
    `acc = correct / total`). A collective after the first report of a figure made from them
    (`print(metrics)`, then `coco_evaluator.synchronize_between_processes()`) comes too late for
    that report (a report naming the rank, `print(f"rank {rank}: {acc}")`, shows the rank's own
    figure as such and does not count). A
    collective reduces what it is handed: `dist.all_reduce(stats)` with `stats` made from the
    counters clears them, an all-reduce of the loss alone leaves the accuracy counted beside it
    unreduced, a method of a meter the function made that makes a collective
    (`acc_meter.all_reduce()`) reduces that meter only, a barrier reduces nothing, and a project function that makes collectives
    without being handed anything (`sync_all()`) is taken to reduce everything. A value added
    to a counter after the loop reduced it (`loss = reduce_mean(loss)` then `test_loss +=
    loss.item()`, in place: `dist.all_reduce(loss)` then `test_loss += loss`, or entry by
    entry: `losses[k] = reduce_tensor(losses[k])` then `totals[k] += losses[k]`; gathered and
    unpacked, `pred, target = gather([pred, target])`, also moved after, `pred = pred.cpu()`,
    then `correct += pred.eq(target).sum()`) is every rank's. Metrics
    returned to the caller are followed into the callers of the same file: a caller that assigns
    the result (`dev = eval_dev(...)`; unpacked, `val_loss, val_acc = evaluate(...)`, only the
    names at the places of the returned tuple made from the unreduced counters) and reports it before any collective that carries data (a
    barrier does not: `dist.barrier()`, then `if rank == 0: print(dev)`) (itself, or by
    handing it to a project function that only reports: `self.print_metrics(val_metrics)`
    printing each entry and returning nothing, or by handing it, also packed in a list beside
    other figures, to project functions that report it or hand it on in turn, with no collective
    on the way: `self.save_and_log(losses=[train_loss, val_loss])` → `self._write_log(
    val_loss=losses[1])` → `log.write(...)`, reported at that write), or loops over it
    (`for name, value in metrics.items(): writer.add_scalar(name, value, epoch)`), or takes a
    figure from it (`val_loss = val_loss_dict["total"]`), is reported
    there — unless the loop trains, or a collective in the loop may reduce the counters: one
    handed them or a value made from them, or a project function handed nothing (gathering the
    predictions in the loop, `preds = gather(preds)`, leaves the loss summed beside them one
    rank's). A
    batch source built for one rank (`get_batch_iterator(path, bs, rank=rank,
    world_size=world_size)`), a loader over a dataset built from this rank's slice of the
    items (`DataLoader(ShotDataset(shots[rank::world_size]))`), or a loader whose sampler or batch sampler is a project one built
    with the rank and the number of ranks (`RankBucketBatchSampler(buckets, bs, world_size,
    rank)`, by keyword or by the parameter names of its class; where a loader builder takes the
    sampler as a parameter, the one this call of the builder hands it: `make_loader(val_set,
    opts, None)` beside `make_loader(train_set, opts, train_sampler)` reads the whole set), is a
    shard as a DistributedSampler's loader is; so is an array a loop over `range(...)` walks by hand in
    batches (`xb = Xi[offset:end]`, `Xi` a parameter of its function) where a caller hands the
    function a rank's slice (`Xi[rank * n:(rank + 1) * n]`, also reshaped or permuted on the
    way): its metrics are reported at that caller, not at one that hands it the whole set. A loop that
    back-propagates is a training loop: the training loss it sums is one rank's, by design, and
    not an evaluation metric. A loop that its function reaches only after a top-level read of
    an attribute its object cannot have (`colors = loader.dataset.palette` where the project's
    dataset class never sets `palette`) never runs. A step helper shared by training and evaluation whose backward
    the call's arguments rule out (`loss, p, y = _step(model, batch, criterion)` with `if optim
    is not None: loss.backward()` and `optim=None` by default) does not make the loop a training one.

    ## How to fix
    All-reduce the sums before dividing: `stats = torch.tensor([correct, total], device=device);
    dist.all_reduce(stats); accuracy = stats[0] / stats[1]`, or gather per-sample results with
    `dist.all_gather_object`, or use a metric object that synchronises (torchmetrics). Mind the
    padding a DistributedSampler adds (DDP018).

    ## References
    - https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
    - https://github.com/pytorch/examples/blob/main/imagenet/main.py (`summary(...)` all-reduces the
      meters before printing)
    """

    code = "DDP036"
    name = "unreduced-shard-metric"
    severity = Severity.WARNING
    MESSAGE = (
        "`{metric}` is computed from counters of this rank's shard of the data only ({counters}) "
        "and reported without a reduction: it is one shard's figure, not the whole set's; all_reduce "
        "the counters before computing it"
    )

    VALID = [
        """
        import torch
        import torch.distributed as dist
        from torch.utils.data import DataLoader, DistributedSampler

        def evaluate(model, val_set, device):
            loader = DataLoader(val_set, batch_size=256, sampler=DistributedSampler(val_set, shuffle=False))
            correct = total = 0
            with torch.no_grad():
                for x, y in loader:
                    pred = model(x.to(device)).argmax(1)
                    correct += (pred == y.to(device)).sum().item()
                    total += y.numel()
            stats = torch.tensor([correct, total], device=device)
            dist.all_reduce(stats)
            if dist.get_rank() == 0:
                print(f"accuracy {stats[0].item() / stats[1].item():.4f}")
        """,
        """
        # Returned to the caller, which decides.
        from torch.utils.data import DataLoader, DistributedSampler

        def evaluate(model, val_set):
            loader = DataLoader(val_set, sampler=DistributedSampler(val_set, shuffle=False))
            correct = 0
            for x, y in loader:
                correct += (model(x).argmax(1) == y).sum().item()
            return correct
        """,
        """
        # A training loop that returns its epoch loss: the loss is all-reduced at every step.
        import torch.distributed as dist
        from torch.utils.data import DataLoader, DistributedSampler

        def train(args, train_loader, model, criterion, optimizer):
            loss_epoch = 0
            for (x_i, x_j), _ in train_loader:
                optimizer.zero_grad()
                loss = criterion(*model(x_i.cuda(), x_j.cuda()))
                loss.backward()
                optimizer.step()
                dist.all_reduce(loss.div_(dist.get_world_size()))
                loss_epoch += loss.item()
            return loss_epoch

        def main(args, dataset, model, criterion, optimizer, writer):
            loader = DataLoader(dataset, batch_size=128, sampler=DistributedSampler(dataset))
            for epoch in range(args.epochs):
                loss_epoch = train(args, loader, model, criterion, optimizer)
                if args.nr == 0:
                    writer.add_scalar("Loss/train", loss_epoch / len(loader), epoch)
        """,
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch.distributed as dist
            from torch.utils.data import DataLoader, DistributedSampler

            def validate(model, val_set, epoch):
                sampler = DistributedSampler(val_set, shuffle=False)
                loader = DataLoader(val_set, batch_size=128, sampler=sampler)
                correct, seen = 0, 0
                model.eval()
                with torch.no_grad():
                    for images, labels in loader:
                        logits = model(images.cuda(non_blocking=True))
                        correct += (logits.argmax(dim=1) == labels.cuda()).sum().item()
                        seen += labels.size(0)
                acc = 100.0 * correct / seen
                if dist.get_rank() == 0:
                    print(f"epoch {epoch}: top-1 {acc:.2f}%")
            """,
            lines=(17,),
        ),
        Invalid(
            """
            from torch.utils.data import DataLoader, DistributedSampler

            def test(model, loader, writer, step):
                total_loss = 0.0
                for batch in loader:
                    total_loss += model(**batch).loss.item()
                writer.add_scalar("val/loss", total_loss / len(loader), step)

            def main():
                val_loader = DataLoader(val_set, batch_size=64, sampler=DistributedSampler(val_set))
                test(model, val_loader, writer, 0)
            """,
            lines=(7,),
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader, DistributedSampler
            from torch.utils.tensorboard import SummaryWriter


            class MetricWriter:
                def __init__(self, logdir):
                    self.tb = SummaryWriter(logdir)

                def test_logging(self, loss, step):
                    self.tb.add_scalar("test/loss", loss, step)


            def test_model(model, loader, criterion, writer, step):
                total = 0.0
                with torch.no_grad():
                    for x, y in loader:
                        total += criterion(model(x), y).item()
                writer.test_logging(total / len(loader), step)


            def main(model, criterion, test_set):
                writer = MetricWriter("runs")
                loader = DataLoader(test_set, batch_size=64, sampler=DistributedSampler(test_set))
                test_model(model, loader, criterion, writer, 0)
            """,
            lines=(19,),
        ),
        Invalid(
            """
            import torch

            from data_loader import get_batch_iterator
            from distributed import ddp_setup, reduce_scalar


            @torch.no_grad()
            def eval_dev(model, cfg, ctx, max_batches=50):
                model.eval()
                it = get_batch_iterator(cfg.dev_path, cfg.batch_size, rank=ctx.rank,
                                        world_size=ctx.world_size, infinite=False)
                total, n = 0.0, 0
                for tokens, targets in it:
                    total += model(tokens, targets).item()
                    n += 1
                    if n >= max_batches:
                        break
                model.train()
                return total / max(1, n)


            def main(cfg, model):
                ctx = ddp_setup()
                for step in range(cfg.max_steps):
                    train_step(model, step)
                    if step % cfg.eval_steps == 0:
                        dev = reduce_scalar(eval_dev(model, cfg, ctx), ctx)
                        if ctx.is_main:
                            print(f"step {step} dev {dev:.4f}")
                if ctx.is_main:
                    dev = eval_dev(model, cfg, ctx)
                    print(f"done: dev loss {dev:.4f}")
            """,
            lines=(32,),
        ),
    ]

    def finish(self) -> None:
        self._in_place: dict[int, dict[int, set[str]]] = {}
        self._crashes = Crashes(self.model)
        for module in self.model.paths.modules():
            self._module(module)

    def _reduced_in_place(self, root: ModuleModel) -> dict[int, set[str]]:
        """id(loop) → the names a sum reduction in that loop reduces in place
        (`dist.all_reduce(loss)`), for every loop of `root` (read once per module)."""
        found = self._in_place.get(id(root))
        if found is None:
            found = {}
            for c in root.calls:
                tensor = c.arg("tensor", 0)
                if c.loops and isinstance(tensor, cst.Name) and self.model.api(c) in api.SUM_REDUCTIONS:
                    for loop in c.loops:
                        found.setdefault(id(loop), set()).add(tensor.value)
            self._in_place[id(root)] = found
        return found

    def _module(self, root: ModuleModel) -> None:
        """The evaluation loops of one module the run reaches (the script, or a project module
        whose `validate(loader, model)` it calls)."""
        model = self.model
        for loop in root.fors:
            if loop.scope.function is None:
                continue
            if self._crashes.stopped_before(root, loop.scope, loop.node):
                continue  # (the function raises before its loop: `colors = loader.dataset.palette` it lacks)
            counters = self._accumulated(root, loop) | self._meters(root, loop) | self._collected(root, loop)
            if not counters or not self._sharded(root, loop):
                continue
            backwards = [c for c in root.calls if loop.node in c.loops and (
                c.method == "backward" or model.facts.does(c, "backward") and not self._no_backward_here(c))]
            if backwards:
                # A training loop: one rank's training loss is not an evaluation metric. (Unless a
                # caller's arguments leave its backward out: `run_one_epoch("val", ...)` under
                # `if phase == "train": loss.backward()`, which needs an `if` around each backward.)
                if all(len(b.guards) > len(loop.guards) for b in backwards):
                    self._returned(root, loop, counters, backwards)
                continue
            function = loop.scope.function
            last = max((c.tick for c in root.calls if loop.node in c.loops), default=loop.tick)
            later = [s for s in root.calls if s.scope.function is function and s.tick > last
                     and loop.node not in s.loops]
            # A collective reduces what it is handed: `dist.all_reduce(loss_t)` says nothing of
            # the accuracy counted beside the loss, and a barrier reduces nothing.
            fed = set(counters)
            # A collective after the first report of a figure made from them comes too late for
            # it (`print(metrics)`, then `evaluator.synchronize_between_processes()` for another
            # result). (A report that names the rank, `print(f"rank {rank}: {acc}")`, shows
            # that rank's figure as such.)
            first = min((s.tick for s in later if self._reports(s)
                         and not any("rank" in n.lower() for n in _names_in(s.node))
                         and _derived(loop, counters, _names_in(s.node))), default=None)
            covering = [s for s in later if first is None or s.tick < first]
            counters = {c for c in counters if not any(self._covers(s, loop, c, fed) for s in covering)}
            if not counters:
                continue
            # (Objects fed them after the loop carry them: `calc.step(preds, gts)`, then `calc.compute()`.)
            counters |= self._fed_after(loop, counters, later)
            # (`metric.compute()` on the running-metric object itself, making no collective,
            # only reads its sums back.)
            handed = [s for s in later if model.graph.targets(s) and _passes(s, counters)
                      and not (s.receiver_name in counters and not model.facts.does(s, "collective"))]
            # (A helper that computes a value from them and reports nothing hands them on in
            # what it returns: that is followed, not the call.)
            handed = [s for s in handed if not self._transforms(root, s) or self._reports_handed(s, loop, counters)]
            # Counters handed to a project function may be reduced or kept there, unless it
            # reports what it is handed (`writer.test_logging(total_loss, step)` → add_scalar;
            # `best = log_and_save(model, writer, epoch, val_loss, best)`, which writes `val_loss`).
            if any(not self._logs_only(s) and not self._reports_handed(s, loop, counters) for s in handed):
                continue
            for site in later:
                # (A message made from them handed to a project printer, `outstr = "acc %.3f" %
                # acc` then `io.cprint(outstr)` whose body prints its `text`, reports them too.)
                if not (self._reports(site) or site in handed
                        or model.graph.targets(site) and self._reports_handed(site, loop, counters)):
                    continue
                used = _derived(loop, counters, _names_in(site.node))
                if used:
                    # (Handed to a helper: name what it is handed, not what it gives back.)
                    metric = (sorted(used & counters, key=_named_first) if site in handed
                              else sorted(used - counters, key=_named_first)) or sorted(used, key=_named_first)
                    self.report(site.node, self.MESSAGE.format(
                        metric=metric[0], counters=", ".join(sorted(counters))), module=root)
                    break
            else:
                self._returned(root, loop, counters)

    def _no_backward_here(self, site: CallSite) -> bool:
        """`site` calls a project function whose backward this call's arguments rule out: every
        backward in it (its own, or through a call it makes) sits under a test the call leaves
        false (`_step(model, batch, criterion)` and `if optim is not None: loss.backward()`, with
        `optim=None` by default): a shared step helper run for evaluation."""
        model = self.model
        targets = model.graph.targets(site)
        if not targets:
            return False
        for function, bound in targets:
            frame = Frame(function, site, None, bound)
            inner = [c for c in function.module.calls_in(function.qualname)
                     if c.method == "backward" or model.facts.does(c, "backward")]
            if not inner or any(model.paths.never(c, frame) is None for c in inner):
                return False
        return True

    def _fed_after(self, loop: ForSite, counters: set[str], later: list[CallSite]) -> set[str]:
        """Project objects handed the shard's values after the loop by a method that keeps them
        and gives nothing back (`calc.step(preds, gts)` for each batch's collected predictions,
        whose body stores them on the object) and makes no collective: what the object later
        computes (`figures = calc.compute_metrics()`) is made from that rank's shard only. Also
        the list such an object is drawn from (`for calc in calcs: calc.step(...)`), so that the
        same objects read in another loop over it are followed."""
        model = self.model
        scope = loop.scope
        out: set[str] = set()
        for site in later:
            receiver = site.receiver_name
            if receiver is None or receiver not in scope.assignments or model.facts.does(site, "collective"):
                continue
            targets = model.graph.targets(site)
            if not targets or any(r.value is not None for f, _ in targets for r in _returns(f.node)):
                continue
            # (A method that writes what it is handed, `writer.test_logging(loss, step)`, reports
            # it there: that call is the report, not a feeding.)
            if any(self._reports(c) for f, _ in targets for c in f.module.calls_in(f.qualname)):
                continue
            if not any(_derived(loop, counters, _names_in(a.value)) for a in site.node.args):
                continue
            out.add(receiver)
            for held in scope.assignments[receiver]:
                source = _element_source(held)
                if isinstance(source, cst.Name):
                    out.add(source.value)
        return out

    def _accumulated(self, root: ModuleModel, loop: ForSite) -> set[str]:
        """Names `+=`-ed in the loop body with something the batch gives (`correct += ...sum()`,
        `total += y.size(0)`; a step counter `+= 1` is the same on every rank), not in nested
        functions. An addition that reduces across ranks as it adds (`n += all_reduce_sum(k)`),
        or that only a single-process run makes (the `else` of `if distributed:`), adds no
        rank's own share on the distributed run."""
        out: set[str] = set()
        scope = loop.scope
        resolve = self.model.resolver_for(root, scope)
        for name, values in scope.assignments.items():
            for value, point in zip(values, scope.points.get(name, ())):
                if not (isinstance(value, Augmented) and point is not None and loop.node in point.loops):
                    continue
                node = value.node
                if not isinstance(node.operator, cst.AddAssign) or isinstance(node.value, _NOT_COUNTED):
                    continue  # (a step `+= 1`, or text: `msg += "S"` marks a line of a log)
                if on_single_process_only(point.guards, resolve) is not None \
                        or self._reduces(root, node.value, loop, before=point.tick):
                    continue
                out.add(name)
        # `totals[k] += v.item()`: a dict (or array) of sums, one entry per loss term.
        # An entry added a reduced value anywhere in the loop (`val_meta[k] += reduce_tensor(v)`
        # when distributed, `val_meta[k] += v` in the `else`) is taken as reduced: the
        # distributed run may take that path.
        plain: set[str] = set()
        reduced: set[str] = set()
        stack: list[cst.CSTNode] = [loop.node.body]
        while stack:
            current = stack.pop()
            if isinstance(current, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                continue
            if isinstance(current, cst.AugAssign) and isinstance(current.operator, cst.AddAssign) \
                    and isinstance(current.target, cst.Subscript) and isinstance(current.target.value, cst.Name) \
                    and not isinstance(current.value, _NOT_COUNTED) \
                    and current.target.value.value in scope.assignments:
                held = reduced if self._reduces(root, current.value, loop) else plain
                held.add(current.target.value.value)
            if type(current) not in NO_STATEMENTS_BELOW:  # (an augmented assignment is a statement)
                stack.extend(children(current))
        return out | (plain - reduced) | self._added_by_helper(root, loop)

    def _added_by_helper(self, root: ModuleModel, loop: ForSite) -> set[str]:
        """Dicts of sums the loop hands to a project function that adds to their entries
        (`minibatch, epoch_metrics = self.aggregate_metrics(epoch_metrics, outputs, batch)`, whose
        body makes `epoch_metrics[name] += value`) and makes no collective: the sums are this
        rank's, as if the loop added them itself."""
        model = self.model
        scope = loop.scope
        out: set[str] = set()
        for site in root.calls:
            if loop.node not in site.loops or site.scope is not scope or model.facts.does(site, "collective"):
                continue
            for function, bound in model.graph.targets(site):
                for param in function.params():
                    passed = model.graph.argument_for(site, function, param, bound)
                    if isinstance(passed, cst.Name) and passed.value in scope.assignments \
                            and _text_adds_to_entries(function.module.source, param.name) \
                            and _adds_to_entries(function.node, param.name):
                        out.add(passed.value)
        return out

    def _collected(self, root: ModuleModel, loop: ForSite) -> set[str]:
        """Lists the loop appends the batch's values to (`losses.append(loss.item())`, then
        `statistics.mean(losses)`): made empty in the loop's function before the loop and only
        there, in a loop that makes no collective call."""
        model = self.model
        out: set[str] = set()
        scope = loop.scope
        sites = [c for c in root.calls if loop.node in c.loops and c.scope is scope]
        if any(model.facts.does(c, "collective") for c in sites):
            return out
        for site in sites:
            receiver = site.receiver
            # (`log_losses[k].append(v.item())`: an entry of a dict of lists, `defaultdict(list)`.)
            entry = isinstance(receiver, cst.Subscript) and isinstance(receiver.value, cst.Name)
            if entry and isinstance(receiver, cst.Subscript):
                receiver = receiver.value
            if site.method not in ("append", "extend") or not isinstance(receiver, cst.Name) \
                    or not site.node.args or isinstance(site.node.args[0].value, (cst.Integer, cst.Float)):
                continue
            name = receiver.value
            bindings = scope.assignments.get(name, [])
            points = scope.points.get(name, [])
            if len(points) != len(bindings):
                continue
            made = [(b, p) for b, p in zip(bindings, points) if p is not None and p.tick < loop.tick]
            if entry:
                if len(made) == len(bindings) == 1 and loop.node not in made[0][1].loops \
                        and _list_table(made[0][0], model.qualname(root, made[0][0].func, scope)
                                        if isinstance(made[0][0], cst.Call) else None):
                    out.add(name)
                continue
            # (After the loop the list may be turned into the value it reports: `top1 =
            # torch.Tensor(top1)`, then `top1.mean()`.)
            kept = [(b, p) for b, p in zip(bindings, points) if p is not None and p.tick > site.tick
                    and loop.node not in p.loops and isinstance(b, cst.BaseExpression) and name in _names_in(b)]
            if made and len(made) + len(kept) == len(bindings) and all(
                    loop.node not in p.loops and _empty_list(b) for b, p in made):
                out.add(name)
        return out

    def _reduces(self, root: ModuleModel, expr: cst.BaseExpression, loop: ForSite | None = None,
                 seen: frozenset[str] = frozenset(), before: int | None = None) -> bool:
        """`expr` holds a value reduced across ranks: a collective in it, or (in `loop`) a name
        it reads that the loop binds from one (`loss = reduce_tensor(loss.clone())` before
        `test_loss += loss.item()`), also by unpacking (`pred, target = gather([pred, target])`)
        or through a name the loop makes from such a name (`pred = pred.cpu()` after the
        gather) — bindings before `before` only, when it is given (`loss = criterion(out,
        labels)` read before `labels = gather(labels)`: the loss is this rank's)."""
        for sub in expressions(expr):  # (calls and names: the tokens are not read)
            site = root.call_at(sub) if isinstance(sub, cst.Call) else None
            if site is not None and self.model.facts.does(site, "data_collective"):
                return True
            if loop is not None and isinstance(sub, cst.Name):
                # Reduced in place in the loop (`dist.all_reduce(loss)`, then `total += loss`).
                if sub.value in self._reduced_in_place(root).get(id(loop.node), ()):
                    return True
                if any(key is not None and loop.node in point.loops and self._reduces(root, value)
                       for key, value, _, point in loop.scope.updates.get(sub.value, ())):
                    return True  # (`losses[k] = reduce_tensor(losses[k])`, then `total[k] += losses[k]`)
                if sub.value in seen:
                    continue
                scope = loop.scope
                for value, point in zip(scope.assignments.get(sub.value, ()), scope.points.get(sub.value, ())):
                    if point is None or loop.node not in point.loops:
                        continue
                    if before is None:
                        if isinstance(value, cst.BaseExpression) and self._reduces(root, value):
                            return True
                        continue
                    if point.tick >= before:
                        continue
                    if isinstance(value, Item):
                        value = value.value
                    if isinstance(value, cst.BaseExpression) \
                            and self._reduces(root, value, loop, seen | {sub.value}, point.tick):
                        return True
        return False

    def _covers(self, site: CallSite, loop: ForSite, counter: str, fed: set[str]) -> bool:
        """A collective after the loop that may reduce `counter`: one handed the counter or a
        value made from it (`stats = torch.tensor([correct, total])`, `dist.all_reduce(stats)`),
        a method of it (`meter.synchronize_between_processes()`), or a project call that may
        reach it without being handed anything (`self.sync_stats()`, `reduce_all()`). A barrier,
        or a torch collective handed other values only, does not."""
        model = self.model
        if not model.facts.does(site, "data_collective"):
            return False
        if _derived(loop, {counter}, _names_in(site.node)):
            return True
        if model.api(site) is not None:
            return False
        func = site.node.func
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value != "self" \
                and func.value.value in loop.scope.assignments and func.value.value in fed:
            # `top1.all_reduce()` on a meter the loop fed: it synchronises that meter, not the
            # loss meter counted beside it. (A logger of meters the loop feeds in a way not
            # followed, `logger.synchronize_between_processes()`, may hold what is read after it.)
            return False
        # A project function: what it reaches without arguments is unknown.
        return not site.node.args or counter.startswith("self.")


    def _meters(self, root: ModuleModel, loop: ForSite) -> set[str]:
        """Names of running-average objects the loop feeds (`meter.update(loss.item())`): an
        instance of a project class, made in the loop's function, whose `update` adds to its own
        attributes (`self.sum += val * n`) and makes no collective call, in a loop that makes none."""
        model = self.model
        out: set[str] = set()
        if any(loop.node in c.loops and model.facts.does(c, "collective") for c in root.calls):
            return out  # the loop reduces as it goes (`dist.all_reduce(correct)` before `meter.update(correct)`)
        sites = [site for site in root.calls
                 if site.method == "update" and loop.node in site.loops and site.scope is loop.scope]
        if not sites:
            return out  # (before the text test below: generating a loop's code costs more than the rest)
        if "backward(" in root.source and "backward(" in code_only(root.code(loop.node)) \
                and not any(loop.node in c.loops and c.method == "backward" for c in root.calls):
            # A training loop, its step perhaps in a closure defined in it: the loss is one rank's
            # by design. (A backward the loop makes itself is judged per caller: `_returned`.)
            return out
        for site in sites:
            func = site.node.func
            # (A meter the object keeps, `self.valid_cost.update(loss.item(), n)`, as well.)
            if not isinstance(func, cst.Attribute) or not (isinstance(func.value, cst.Name) or _self_member(func.value)) \
                    or model.facts.does(site, "collective"):
                continue
            name = dotted(func.value)
            if name is None:
                continue
            for value in model.values.of(root, func.value, loop.scope, at=site.point):
                found = model.graph.instance_of(value)
                update = model.graph.method(*found, "update") if found is not None else None
                if update is not None and _adds_to_self(update.node):
                    out.add(name)
        return out

    def _sharded(self, root: ModuleModel, loop: ForSite) -> bool:
        """The loop iterates a DataLoader fed by a DistributedSampler (the loader may be a
        parameter whose callers pass one)."""
        model = self.model
        if self._hand_batched_share(root, loop):
            return True
        loader = _iterated(loop.node.iter)
        if loader is None:
            return False
        values = list(model.values.of(root, loader, loop.scope, at=loop.point))  # (a copy: added to below)
        for value in list(values):
            # A progress bar bound first (`bar = tqdm(self.valid_loader)`, then `for x, y in
            # bar:`) iterates the loader it wraps.
            call = value.call
            wrapper = model.api_of(value)
            if call is not None and (wrapper in api.TQDM or wrapper == "enumerate") and call.args \
                    and call.args[0].keyword is None and not call.args[0].star:
                values += model.values.of(value.module, call.args[0].value, value.scope, value.frame, at=value.at)
        for value in values:
            call = value.call
            if call is None:
                continue
            site = value.module.call_at(call)
            if site is not None and model.makes(site, api.DATALOADER) and feed(model, site, value.frame) is not None:
                return True
            if site is not None and self._hand_sharded(site):
                return True
            if site is not None and model.makes(site, api.DATALOADER) and self._sampler_for_rank(site, value.frame):
                return True
            if site is not None and model.makes(site, api.DATALOADER) and self._dataset_of_share(site):
                return True
        return False

    def _dataset_of_share(self, loader: CallSite) -> bool:
        """The loader's dataset is built from this rank's slice of the items (`ds =
        ShotDataset(shots[rank::world_size], ...)`): each rank evaluates its own items, as with
        a DistributedSampler."""
        dataset = loader.arg("dataset", 0)
        if dataset is None:
            return False
        for value in self.model.values.at_call(loader, dataset):
            call = value.call
            if call is None:
                continue
            for arg in call.args:
                if arg.star:
                    continue
                if isinstance(arg.value, cst.Name):
                    shares = self.model.values.of(value.module, arg.value, value.scope, value.frame, at=value.at)
                else:
                    shares = [Value(value.module, arg.value, value.scope, value.frame, value.at)]
                if any(self._rank_share(v) for v in shares):
                    return True
        return False

    def _hand_batched_share(self, root: ModuleModel, loop: ForSite) -> bool:
        """The loop walks a parameter of its function in batches by hand (`for i in
        range(n_batches): xb = Xi[offset:end]`) and some caller hands it a rank's share of the
        data (`Xi[rank * n:(rank + 1) * n]`, also reshaped or permuted on the way)."""
        model = self.model
        for name in _hand_batched(loop):
            if any(self._rank_share(v) for v in model.values.of(root, cst.Name(name), loop.scope, at=loop.point)):
                return True
        return False

    def _rank_share(self, value: Value, depth: int = 3) -> bool:
        """`value` is this rank's slice of an array: `x[rank * n:(rank + 1) * n]`,
        `x[rank::world_size]`, or such a slice reshaped (`x.reshape(...)`) or permuted
        (`x[perm]`) on the way."""
        node = value.node
        if not isinstance(node, cst.BaseExpression):
            return False
        resolve = self.model.resolver_for(value.module, value.scope)
        if isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Slice):
            piece = node.slice[0].slice
            bounds = [b for b in (piece.lower, piece.upper) if b is not None]
            if bounds and any(is_rank_value(sub, resolve) for b in bounds for sub in expressions(b)
                              if isinstance(sub, cst.BaseExpression)):
                return True
        if depth == 0:
            return False
        # (`Xi_train.reshape(...)`, `Xi_train[permute_idx]`: the same rows, in another shape or order.)
        inner = node.func.value if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
            and node.func.attr.value in _SAME_ROWS else node.value if isinstance(node, cst.Subscript) \
            and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index) else None
        if not isinstance(inner, cst.Name):
            return False
        return any(self._rank_share(v, depth - 1)
                   for v in self.model.values.of(value.module, inner, value.scope, at=value.at))

    def _sampler_for_rank(self, loader: CallSite, frame: Frame | None = None) -> bool:
        """The loader's sampler (or batch sampler) is a project one built for one rank
        (`DistributedBucketBatchSampler(buckets, bs, world_size, rank)`): a shard, as a
        DistributedSampler's."""
        values, _ = sampler_values(self.model, loader, frame)
        for value in values:
            site = value.module.call_at(value.call) if value.call is not None else None
            if site is not None and self.model.graph.targets(site) and self._hand_sharded(site):
                return True
        return False

    def _hand_sharded(self, site: CallSite) -> bool:
        """A batch source built for one rank: `get_batch_iterator(path, bs, rank=ctx.rank,
        world_size=ctx.world_size)` (the rank and the world size both passed)."""
        resolve = self.model.resolver_for(site.module, site.scope)
        rank = world = False
        for arg in site.node.args:
            keyword = arg.keyword.value if arg.keyword is not None else ""
            rank = rank or keyword in _RANK_PARAMS or is_rank_value(arg.value, resolve)
            text = dotted(arg.value) if isinstance(arg.value, (cst.Name, cst.Attribute)) else None
            world = world or keyword in _WORLD_PARAMS or (
                text is not None and text.rsplit(".", 1)[-1] in ("world_size", "num_replicas"))
        if rank and not world:
            # Passed by position to a project function or class that names the parameter
            # (`Sampler(chunks, bs, wrld_size, rank)` for `__init__(self, chunks, bs, world_size, rank)`).
            for function, bound in self.model.graph.targets(site):
                for param in function.params():
                    if param.name in _WORLD_PARAMS and isinstance(
                            self.model.graph.argument_for(site, function, param, bound), cst.BaseExpression):
                        world = True
        return rank and world

    def _returned(self, root: ModuleModel, loop: ForSite, counters: set[str],
                  backwards: Sequence[CallSite] = ()) -> None:
        """A metric the function returns from the counters, reported by a caller of this file that
        assigns it (`dev = eval_dev(...)`) and reports it before any collective. With `backwards`
        (the loop trains), only callers whose arguments make every backward dead."""
        model = self.model
        scope = loop.scope.function
        if scope is None:
            return
        inside = [c for c in root.calls if loop.node in c.loops]
        # A collective in the loop reduces what it is handed as it goes: gathering the
        # predictions (`preds = gather(preds)`) says nothing of the loss summed beside them.
        collectives = [c for c in inside if model.facts.does(c, "collective")]
        counters = {c for c in counters if not any(self._reduces_in_loop(s, loop, c) for s in collectives)}
        if not counters:
            return
        function = Function(root, scope.qualname)
        if not any(r.value is not None and _derived(loop, counters, _names_in(r.value))
                   for r in _returns(function.node)):
            return
        for call, bound in model.graph.callers(function):
            if call.module is not root or not self._sharded_by(loop, function, call, bound):
                continue
            if any(model.paths.never(b, Frame(function, call, None, bound)) is None for b in backwards):
                continue  # this call trains
            # `acc, marg = f()`: the names it unpacks to, only those whose place holds a figure of
            # the counters where every return is a tuple of the same length (`return
            # loss_meter.avg, acc_meter.avg` with the accuracy meter reduced: the loss only).
            places = _tuple_places(loop, counters, _returns(function.node))
            names = set(root.assigned_names(call.node)) | {
                name for name, values in call.scope.assignments.items()
                if any(isinstance(v, Item) and v.value is call.node and (places is None or v.index in places)
                       for v in values)}
            if not names:
                continue  # passed straight on (`reduce_scalar(eval_dev(...))`)
            # `for k, v in metrics.items(): writer.add_scalar(k, v, epoch)`: the loop's
            # variables hold the returned figures.
            names |= {n for f in root.fors if f.scope is call.scope and f.tick > call.tick
                      and _names_in(f.node.iter) & names for n in _names_in(_values_target(f.node))}
            # `val_loss = val_loss_dict["total"]`: a figure taken from what it returned (a
            # collective on the way ends the search below, in the order of the code).
            for _ in range(3):
                more = {name for name, values in call.scope.assignments.items() if name not in names
                        for value, point in zip(values, call.scope.points.get(name, ()))
                        if point is not None and point.tick > call.tick and isinstance(value, cst.BaseExpression)
                        and names & _names_in(value)}
                if not more:
                    break
                names |= more
            for site in sorted((s for s in root.calls if s.scope is call.scope and s.tick > call.tick),
                               key=lambda s: s.tick):
                if model.facts.does(site, "data_collective"):
                    break  # (a barrier, `dist.barrier()` before rank 0 reports, reduces nothing)
                # (Or handed to a project function that only reports: `self.print_metrics(
                # val_metrics, loader)` printing each entry.)
                if (self._reports(site) or model.graph.targets(site) and self._logs_only(site)) \
                        and names & _names_in(site.node):
                    self.report(site.node, self.MESSAGE.format(
                        metric=sorted(names & _names_in(site.node))[0], counters=", ".join(sorted(counters))),
                        module=root)
                    break
                # (Or handed on, maybe packed in a list, to a project function that reports
                # the figure itself or hands it further: `self.save_and_log(losses=[train_loss,
                # val_loss])` → `self._write_log(val_loss=losses[1])` → `log.write(...)`.)
                handed_on = self._reported_inside(site, {name: _WHOLE for name in names & _names_in(site.node)})
                if handed_on is not None:
                    reporter, metric = handed_on
                    self.report(reporter.node, self.MESSAGE.format(
                        metric=metric, counters=", ".join(sorted(counters))), module=reporter.module)
                    break

    def _reported_inside(self, site: CallSite, held: dict[str, frozenset[int | None]],
                         depth: int = 3) -> tuple[CallSite, str] | None:
        """The report, in a project function `site` runs, of what `site` hands it from `held`
        (a name → the entries of it that hold the metric: `_WHOLE`, or the indices of a list
        it was packed in), followed through further project calls that hand it on; with the
        metric's parameter name. None where a collective comes first on the way (it may
        reduce it), where a function `site` may run does not report it, or where it is not
        handed at all."""
        model = self.model
        targets = model.graph.targets(site)
        if depth <= 0 or not targets or model.facts.does(site, "collective"):
            return None
        found: tuple[CallSite, str] | None = None
        for function, bound in targets:
            fed: dict[str, frozenset[int | None]] = {}
            for param in function.params():
                passed = model.graph.argument_for(site, function, param, bound)
                if isinstance(passed, cst.BaseExpression):
                    entries = _entries_fed(passed, held)
                    if entries:
                        fed[param.name] = entries
            if not fed:
                return None
            here: tuple[CallSite, str] | None = None
            for call in sorted(function.module.calls_in(function.qualname), key=lambda c: c.tick):
                if model.facts.does(call, "collective"):
                    return None
                if self._reports(call):
                    read = [name for name in fed if _reads(call.node, name, fed[name])]
                    if read:
                        here = (call, sorted(read)[0])
                        break
                    continue
                passed_on = {name: fed[name] for name in fed if _reads(call.node, name, fed[name])}
                if passed_on:
                    here = self._reported_inside(call, passed_on, depth - 1)
                    if here is not None:
                        break
            if here is None:
                return None
            found = found or here
        return found

    def _reduces_in_loop(self, site: CallSite, loop: ForSite, counter: str) -> bool:
        """A collective inside the loop that may reduce `counter`: handed it or a value made from
        it, a torch collective with no argument known, or a project function handed nothing
        (what it reaches is unknown)."""
        if _derived(loop, {counter}, _names_in(site.node)):
            return True
        if self.model.api(site) is not None:
            return not site.node.args
        return not site.node.args or counter.startswith("self.")

    def _sharded_by(self, loop: ForSite, function: Function, call: CallSite, bound: str) -> bool:
        """Whether `call` hands the function a sharded loader when the loop iterates one of its
        parameters (`evaluate(model, val_loader)` where this caller's `val_loader` has no
        DistributedSampler: the whole set). True when the loop does not read a parameter."""
        batched = _hand_batched(loop)
        if batched:
            # Walked by hand in batches: this caller's share decides (`eval_by_batch(Xi_train, ...)`
            # with the rank's slice, not `eval_by_batch(Xi_valid, ...)` with the whole set).
            for param in function.params():
                passed = self.model.graph.argument_for(call, function, param, bound)
                if param.name in batched and isinstance(passed, cst.BaseExpression) \
                        and any(self._rank_share(v) for v in self.model.values.at_call(call, passed)):
                    return True
            return False
        loader = _iterated(loop.node.iter)
        if not isinstance(loader, cst.Name):
            return True
        params = [p for p in function.params() if p.name == loader.value]
        if not params:
            return True
        passed = self.model.graph.argument_for(call, function, params[0], bound)
        if not isinstance(passed, cst.BaseExpression):
            return True
        for value in self.model.values.at_call(call, passed):
            site = value.module.call_at(value.call) if value.call is not None else None
            if site is None:
                return True  # not known: as before
            if self.model.makes(site, api.DATALOADER) and feed(self.model, site, value.frame) is not None \
                    or self._hand_sharded(site):
                return True
        return False

    def _transforms(self, root: ModuleModel, site: CallSite) -> bool:
        """`site` computes a value from what it is handed and binds it to a name (`loss_dict =
        aggregate_loss_dict(agg_loss_dict)`, averaging a list of per-batch dicts; or unpacks it
        into names, `tp, fp, thresholds = roc_counts(embeddings, labels)`): every project
        function it may run returns a value and makes no collective, so the result is as much
        one rank's as the counters it was made from (and is followed like `acc = correct /
        total`)."""
        targets = self.model.graph.targets(site)
        if not targets or self.model.facts.does(site, "collective"):
            return False
        if self._builds_from(root, site):
            return True
        if not _bound(root, site):
            return False
        return all(_returns(function.node) and all(r.value is not None for r in _returns(function.node))
                   for function, _ in targets)

    def _builds_from(self, root: ModuleModel, site: CallSite) -> bool:
        """`site` builds an object of a project class from what it is handed, and the object is
        bound to a name or read at once by one of its methods whose result is bound to a name
        (`metrics = Validator(gt, preds).compute_metrics()`), neither making a collective: what
        the object gives back is made from that rank's values only (and followed like `acc =
        correct / total`)."""
        target = site.target
        if target is None or target.kind != "class" or target.external is not None:
            return False
        if _bound(root, site):
            return True
        outer = next((c for c in root.calls if c.scope is site.scope and isinstance(c.node.func, cst.Attribute)
                      and c.node.func.value is site.node), None)
        return outer is not None and _bound(root, outer) and not self.model.facts.does(outer, "collective")

    def _logs_only(self, site: CallSite) -> bool:
        """Every project function `site` may run reports something and returns nothing."""
        targets = self.model.graph.targets(site)
        for function, _ in targets:
            node = function.node
            if any(r.value is not None for r in _returns(node)):
                return False
            if not any(self._reports(c) for c in function.module.calls_in(function.qualname)):
                return False
        return bool(targets)

    def _reports_handed(self, site: CallSite, loop: ForSite, counters: set[str]) -> bool:
        """Every project function `site` may run reports a parameter that receives a counter (or
        a value made from one) and makes no collective: `log_and_save(model, writer, epoch,
        val_loss, best)` whose body writes `val_loss` with `add_scalar` and returns the best
        loss so far."""
        targets = self.model.graph.targets(site)
        if not targets or self.model.facts.does(site, "collective"):
            return False
        for function, bound in targets:
            fed = set()
            for param in function.params():
                passed = self.model.graph.argument_for(site, function, param, bound)
                if isinstance(passed, cst.BaseExpression) and _derived(loop, counters, _names_in(passed)):
                    fed.add(param.name)
            if not fed or not any(self._reports(c) and fed & _names_in(c.node)
                                  for c in function.module.calls_in(function.qualname)):
                return False
        return True

    def _reports(self, site: CallSite) -> bool:
        name = self.model.api(site) or dotted(site.node.func) or ""
        return name in _REPORTERS or (site.method in _REPORT_METHODS and name != "print") \
            or name.startswith("wandb.log") or name == "wandb.log"


def _bound(root: ModuleModel, site: CallSite) -> bool:
    """What `site` returns is bound to a name, or unpacked into names (`a, b = f(x)`)."""
    if root.assigned_names(site.node):
        return True
    return any(isinstance(value, Item) and value.value is site.node
               for values in site.scope.assignments.values() for value in values)


def _tuple_places(loop: ForSite, counters: set[str], returns: list[cst.Return]) -> set[int] | None:
    """The positions of the returned tuple that hold a value made from `counters`, where every
    return of the function is a tuple of the same length; None otherwise."""
    places: set[int] = set()
    length: int | None = None
    for r in returns:
        value = r.value
        if not isinstance(value, cst.Tuple) or any(isinstance(e, cst.StarredElement) for e in value.elements):
            return None
        if length is not None and len(value.elements) != length:
            return None
        length = len(value.elements)
        places |= {i for i, e in enumerate(value.elements) if _derived(loop, counters, _names_in(e.value))}
    return places if length is not None else None


def _named_first(name: str) -> tuple[bool, str]:
    """Names a metric before a timing kept beside it (`top1` before `batch_time`)."""
    return bool(re.search(r"time|speed|elapsed", name, re.I)), name


def _derived(loop: ForSite, counters: set[str], names: set[str], depth: int = 3) -> set[str]:
    """Those of `names` that are counters or are assigned from them in the loop's function (up
    to `depth` assignments away: `acc = correct / total`, `pct = 100 * acc`)."""
    out = names & counters
    if depth > 0:
        assignments = loop.scope.assignments
        for name in names - counters:
            # (`loss, acc = meter.compute()`: each name unpacked from a value made from counters.)
            values: list[cst.BaseExpression] = []
            for held in assignments.get(name, ()):
                # (`for preds, gts in zip(all_preds, all_gts)`: an element of a list of counters;
                # the index `enumerate` adds is not.)
                value = _element_source(held, plain=False) if isinstance(held, Element) else \
                    held.value if isinstance(held, Item) else held
                if isinstance(value, cst.BaseExpression):
                    values.append(value)
            # (`losses_valid[epoch] = loss_valid / n`: an entry of an array of per-epoch figures.)
            values += _entries_written(loop.scope.node).get(name, [])
            if any(_derived(loop, counters, _names_in(v), depth - 1) for v in values):
                out.add(name)
    return out


@lru_cache(maxsize=256)
def _entries_written(function: cst.CSTNode) -> dict[str, list[cst.BaseExpression]]:
    """What the function's own statements assign to entries of its names: `name[key] = value`
    (not in nested functions)."""
    out: dict[str, list[cst.BaseExpression]] = {}
    stack: list[cst.CSTNode] = list(children(function))
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            continue
        if isinstance(node, cst.Assign):
            for target in node.targets:
                if isinstance(target.target, cst.Subscript) and isinstance(target.target.value, cst.Name):
                    out.setdefault(target.target.value.value, []).append(node.value)
        if type(node) not in NO_STATEMENTS_BELOW:
            stack.extend(children(node))
    return out


def _hand_batched(loop: ForSite) -> set[str]:
    """Parameters of the loop's function that a loop over `range(...)` slices in its body
    (`Xi[offset:end]`): a batch source walked by hand."""
    function = loop.scope.function
    iterable = loop.node.iter
    if function is None or not isinstance(function.node, cst.FunctionDef) \
            or not (isinstance(iterable, cst.Call) and dotted(iterable.func) == "range"):
        return set()
    params = {p.name.value for p in function.node.params.params}
    out: set[str] = set()
    stack: list[cst.CSTNode] = [loop.node.body]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name) and node.value.value in params \
                and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Slice):
            out.add(node.value.value)
        if not isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            stack.extend(children(node))
    return out


def _iterated(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """The loader in `loader`, `enumerate(loader)`, `tqdm(loader, ...)`."""
    if isinstance(expr, (cst.Name, cst.Attribute)):
        return expr
    if isinstance(expr, cst.Call) and expr.args:
        return _iterated(expr.args[0].value)
    return None


def _empty_list(binding: object) -> bool:
    """`x = []`, `x = list()`, or one element of `a, b = [], []`."""
    if isinstance(binding, Item) and isinstance(binding.value, (cst.Tuple, cst.List)) \
            and binding.index < len(binding.value.elements):
        binding = binding.value.elements[binding.index].value
    if isinstance(binding, cst.List):
        return not binding.elements
    return isinstance(binding, cst.Call) and dotted(binding.func) == "list" and not binding.args


def _element_source(binding: object, plain: bool = True) -> cst.BaseExpression | None:
    """What a loop variable is an element of: `calcs` for `calc` of `for calc in calcs` or of
    `for i, calc in enumerate(calcs)`, `preds` for `p` of `for p, g in zip(preds, gts)`; None for
    the index `enumerate` counts, a `with` target, or a place deeper in the target. Not `plain`:
    only through `zip` and `enumerate` (`for key in figures` walks a dict's keys, not figures)."""
    if not isinstance(binding, Element) or binding.via_with or binding.index == -1:
        return None
    iterable, index = binding.iterable, binding.index
    if isinstance(iterable, cst.Call) and dotted(iterable.func) in ("enumerate", "zip") and iterable.args \
            and not any(a.star or a.keyword is not None for a in iterable.args):
        if dotted(iterable.func) == "enumerate":
            if index == 0 or len(iterable.args) != 1:
                return None
            return iterable.args[0].value
        if index is None or index >= len(iterable.args):
            return None
        return iterable.args[index].value
    return iterable if plain else None


def _list_table(binding: object, qualname: str | None) -> bool:
    """`x = defaultdict(list)`: a table of lists, one per key; or `{k: [] for k in keys}`, or
    `{"pred": [], "gt": []}`."""
    if isinstance(binding, cst.DictComp):
        return isinstance(binding.value, cst.List) and not binding.value.elements
    if isinstance(binding, cst.Dict):
        return bool(binding.elements) and all(
            isinstance(e, cst.DictElement) and isinstance(e.value, cst.List) and not e.value.elements
            for e in binding.elements)
    return isinstance(binding, cst.Call) and qualname == "collections.defaultdict" and len(binding.args) == 1 \
        and isinstance(binding.args[0].value, cst.Name) and binding.args[0].value.value == "list"


def _adds_to_self(function: cst.FunctionDef) -> bool:
    """The method adds to an attribute of its object (`self.sum += val`, `self.count += n`)."""
    stack: list[cst.CSTNode] = [function.body]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.AddAssign) \
                and (dotted(node.target) or "").startswith("self."):
            return True
        if not isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            stack.extend(children(node))
    return False


@lru_cache(maxsize=4096)
def _text_adds_to_entries(source: str, param: str) -> bool:
    """The module's text holds `param[...] +=` somewhere: a cheap test before the walk."""
    return re.search(rf"\b{re.escape(param)}\[[^\n]*\]\s*\+=", source) is not None


def _adds_to_entries(function: cst.FunctionDef, param: str) -> bool:
    """The function adds something other than a number to an entry of its parameter `param`
    (`epoch_metrics[name] += value`), not in a function nested in it."""
    stack: list[cst.CSTNode] = [function.body]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.AddAssign) \
                and isinstance(node.target, cst.Subscript) and isinstance(node.target.value, cst.Name) \
                and node.target.value.value == param and not isinstance(node.value, (cst.Integer, cst.Float)):
            return True
        if not isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            stack.extend(children(node))
    return False


def _self_member(expr: cst.BaseExpression) -> bool:
    """`self.x`: an attribute of the object a method runs on."""
    return isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self"


def _names_in(node: cst.CSTNode) -> set[str]:
    out: set[str] = set()
    for current in expressions(node):
        name = dotted(current) if isinstance(current, (cst.Name, cst.Attribute)) else None
        if name is not None:
            out.add(name)
    return out


# Every entry of a value holds the metric (it is the metric, or made from it).
_WHOLE: frozenset[int | None] = frozenset({None})


def _entries_fed(passed: cst.BaseExpression, held: dict[str, frozenset[int | None]]) -> frozenset[int | None]:
    """Which entries of the argument `passed` hold a metric of `held`: `_WHOLE` where it reads
    one, the positions of a list or tuple literal whose elements read one (`[train_loss,
    val_loss]` → {1}), nothing otherwise."""
    if isinstance(passed, (cst.List, cst.Tuple)):
        if any(isinstance(e, cst.StarredElement) for e in passed.elements):
            return _WHOLE if any(_reads(passed, name, entries) for name, entries in held.items()) else frozenset()
        return frozenset(i for i, element in enumerate(passed.elements)
                         if any(_reads(element.value, name, entries) for name, entries in held.items()))
    return _WHOLE if any(_reads(passed, name, entries) for name, entries in held.items()) else frozenset()


def _reads(node: cst.CSTNode, name: str, entries: frozenset[int | None]) -> bool:
    """`node` reads the metric `name` holds: the name itself where it holds it whole, or an entry
    of it (`losses[1]`) at a position that holds it; the whole list (`print(losses)`) reads every
    entry."""
    stack: list[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Subscript) and dotted(current.value) == name and len(current.slice) == 1:
            index = current.slice[0].slice
            if isinstance(index, cst.Index) and isinstance(index.value, cst.Integer):
                if None in entries or int(index.value.value) in entries:
                    return True
                continue  # another entry, one that does not hold the metric
        if isinstance(current, (cst.Name, cst.Attribute)) and dotted(current) == name:
            return True
        if isinstance(current, (cst.Lambda, cst.FunctionDef)):
            continue
        stack.extend(children(current))
    return False


def _passes(site: CallSite, counters: set[str]) -> bool:
    return bool(_names_in(site.node) & counters)


def _returns(function: cst.FunctionDef) -> list[cst.Return]:
    out: list[cst.Return] = []
    stack: list[cst.CSTNode] = [function.body]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Return):
            out.append(node)
        elif not isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            stack.extend(children(node))
    return out


def _values_target(loop: cst.For) -> cst.BaseExpression:
    """What a loop binds the values to: `v` of `for k, v in metrics.items()`, else its target."""
    target, iterable = loop.target, loop.iter
    if isinstance(target, cst.Tuple) and len(target.elements) == 2 and isinstance(iterable, cst.Call) \
            and isinstance(iterable.func, cst.Attribute) and iterable.func.attr.value == "items":
        return target.elements[1].value
    return target
