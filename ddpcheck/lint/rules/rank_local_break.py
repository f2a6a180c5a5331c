from __future__ import annotations

import re
from typing import Iterator, Sequence

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.ddp import is_ddp
from ddpcheck.lint.model.module import Augmented, CallSite, Item, LoopSite, Guard, ModuleModel, Point, Scope
from ddpcheck.lint.model.syntax import children, dotted, is_false, is_none, is_true, subexpressions
from ddpcheck.lint.rule import Invalid, Rule
from ddpcheck.lint.traverse import NO_STATEMENTS_BELOW

# Values each rank computes on its own: the wall clock, a tensor read back to Python.
_LOCAL_CALLS = frozenset({
    "time.time", "time.perf_counter", "time.monotonic", "time.process_time", "datetime.datetime.now",
    "math.isnan", "math.isinf", "math.isfinite", "torch.isnan", "torch.isinf", "torch.isfinite",
    "numpy.isnan", "numpy.isinf", "numpy.isfinite", "os.path.exists",
})
# What a rank sees on disk when it looks (`_answers_from_disk`).
_DISK_LOOKS = frozenset({
    "glob.glob", "glob.iglob", "os.listdir", "os.scandir", "os.walk", "os.path.exists", "os.path.isfile",
    "os.path.isdir", "os.path.getmtime",
})
_LOCAL_METHODS = frozenset({"item", "tolist", "isnan", "isinf", "isfinite"})


class RankLocalBreak(Rule):
    """The training loop `break`s (or returns) on a condition each rank evaluates on its own: one rank leaves, the others wait in the next all-reduce forever.

    Every DDP backward all-reduces gradients, so every rank must run the same number of
    iterations. A time budget (`if time.time() - start > limit: break`), a loss threshold on the
    rank's own loss (`if loss.item() < target: break`) or a NaN check on it can be true on one
    rank and false on another at the same step.

    ## Why it matters
    The rank that left goes on to evaluation, saving or `destroy_process_group`; the others sit in
    the gradient all-reduce of their next backward until the process-group timeout (in torch
    2.13, 10 minutes by default with NCCL and 30 with gloo) and then crash with a timeout that points nowhere near the cause.
    With a DistributedSampler that pads (`drop_last=False`) every rank has the same number of
    batches, so this is the remaining way for the ranks to disagree.

    Reported at the `break` / `return` inside a loop (`for` or `while`) that runs a DDP model's
    forward or a `backward()` (itself or in a project function it calls), or makes a collective on
    every rank at each pass (a barrier included: a polling evaluation loop whose evaluation waits
    in barriers), when its `if` reads the clock, a
    tensor's `.item()`, `isnan`/`isinf` or a file's existence (directly or through a variable
    assigned from one in the function, or the answer of a project function, making no
    collective, that lists a folder, globs or tests a file and returns from a loop or an `if` of
    its own: what this rank found on disk when it looked), or a variable the function updates only under a rank
    condition (an early-stopping counter kept by rank 0) or under a test of the rank's own values
    (`if not improved: stale += 1` with `improved` set under `if val_loss < best:`, also where
    `val_loss = self.validate(loader)` is the answer of a project function that makes no
    collective and returns a sum it adds the rank's own values to in a loop, `total_loss +=
    loss.item()`, or a figure of a list it appends them to, `rmse.append(loss.item() ** 0.5)`
    then `return sum(rmse) / len(rmse)`), or the
    answer of a project method that returns an attribute of its object it updates only under a
    rank condition (`stop = trainer.save_models(dir)`, whose `self.stale += 1` sits under `if
    self.rank == 0:`), or a `threading.Event` that only the module's signal handlers set
    (`EXIT.is_set()`, `EXIT.set()` in the function `signal.signal(signal.SIGTERM, ...)` registers:
    each process meets its signal at its own step), and the loop makes no collective call that could agree on the decision (a
    barrier, or a project function whose only collectives are barriers, carries no decision).
    A member of an object whose methods set it on some ranks only and make no collective
    (`early_stopping(val_f1)` returning first `if self.device != 0:`, then `if
    early_stopping.early_stop: break`) is each rank's own even after a collective in the loop
    (a metric gathered in the evaluation), unless the loop writes the member itself or a
    method of the object sets it on every rank from something other than a constant (after a
    broadcast). A clean exit on such a member (`if solver.stop: sys.exit()`) is reported too.
    Loops are read in the script and in the project modules it reaches, with what the script
    knows: a base trainer's epoch loop whose `self._train_epoch()` is defined by the subclass the
    script imports is a training loop. Also reported: a variable a
    `while` loop's condition reads, set inside the loop under a rank guard only (`if rank == 0:
    ... epoch = swa.start` under `while epoch < max_epochs:`), unless a collective in the loop
    carries it (`dist.broadcast(t, src=0)` with the counter read back from `t`); and the flag of
    `while not done:` (or `while running:`) set to end the loop under a test of the rank's own
    values (a retry loop around a mixed-precision step, `if not torch.isfinite(loss): done =
    True`; the loop's forward may run in a project function handed the DDP model, `loss =
    dsm_loss(score, x, sigmas)` calling `scorenet(...)`), in a loop that makes no collective: that rank leaves as a `break` would. And a `return`
    (or a loop's `continue`) in an `except` handler for an error one rank can meet on its own
    (`RuntimeError`, torch's `OutOfMemoryError`; `except Exception:` or a bare `except:` that
    mentions out-of-memory) that comes before
    the function's backward: a step helper that catches a CUDA out-of-memory on its batch and
    returns skips the backward the other ranks make; also a loop's `continue` in such a handler
    whose `try` holds the backward (`try: self.run_micro_batch(mb)` / `except
    torch.cuda.OutOfMemoryError: continue`): the rank that met the error never finished it. Also reported: a `continue` that comes before the loop's
    `backward()` on a test of the rank's own values — a local call in the test or in what a plain
    name in it holds (`if torch.isnan(loss): continue`, `value = loss.item()`), or `if loss is
    None: continue` (or `== None`) where `loss` was computed from the loop's own batch or from
    what the loop body builds from it (a micro-batch sliced by the inner loop's index): that rank skips a
    backward the others make, and their gradient all-reduces no longer pair up. A skip on
    counters read from a dict or an object (`if step < state["epoch_step"]: continue` on resume)
    is not reported. A `continue` on such a test before a collective every rank makes later in
    the loop (an evaluation's periodic all-reduce, or its barrier) is reported too: that rank skips its share.
    Also reported: a `break` out of the training loop, or a `continue` past a `try` that holds
    the loop's backward, in a handler that catches every error (`except Exception:`, a bare
    `except:`): the rank that meets the error leaves or skips alone (also where the loop's forward
    and backward run in a project step function handed the DDP model, `loss = train_step(model,
    optimizer, batch)`). And a clean exit
    (`quit()`, `exit()`, `sys.exit()`, `sys.exit(0)`) in a handler for an error one rank can meet
    on its own, inside a loop that back-propagates: torchrun stops the other workers when one
    fails, not when one exits with status 0, so they wait in their next all-reduce. The same clean
    exit under an `if` on the rank's own values in such a loop (`if torch.isnan(loss): quit()`)
    is reported, unless a collective earlier in the loop may have agreed on the test (one that
    leaves agreed values in what the test reads: not `reduce_dict(loss_dict)` reducing a stacked
    copy of the losses before `if torch.isnan(losses): continue`), and so is
    one under a rank test (`if rank == 0: ... if epoch >= max_epoch: quit()`): only those
    ranks end, and the others go round again into a backward nobody pairs. So is a
    loop whose every backward sits under an `if` on the rank's own values, with none in the
    `else:` (`valid, err = check_loss(loss, loss.item())`, then `if valid: loss.backward()`: a
    project function handed such a value, making no collective, answers on it alone). A non-zero
    status or a re-raise is not reported, nor is a `break` out of a loop only one rank runs
    (`if rank == 0:` around an evaluation loop that stops on a NaN output): no peer
    is waiting in it.

    ## How to fix
    Decide on every rank together: put the flag in a tensor and `dist.all_reduce(flag,
    op=dist.ReduceOp.MAX)` (or broadcast rank 0's decision) before testing it; or stop on a step
    or epoch count, which is the same everywhere; or wrap the loop in `model.join()` for inputs
    that are uneven by design.

    ## References
    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html#torch.nn.parallel.DistributedDataParallel.join
    - https://pytorch.org/tutorials/advanced/generic_join.html
    """

    code = "DDP035"
    name = "rank-local-break"
    severity = Severity.ERROR
    SKIP_MESSAGE = (
        "`continue` on a condition each rank evaluates on its own (`{test}`) skips this rank's "
        "backward, while the other ranks all-reduce theirs: the ranks fall out of step and hang (or "
        "average mismatched buckets); agree on it across ranks (all_reduce the flag) so every rank "
        "skips together, or zero the loss instead of skipping"
    )
    SKIP_COLLECTIVE_MESSAGE = (
        "`continue` on a condition each rank evaluates on its own (`{test}`) skips the collective "
        "this loop makes later in the iteration on this rank only, while the other ranks make "
        "theirs: the collectives pair up wrongly or hang; agree on the skip across ranks (all_reduce "
        "the flag) or keep the collective out of the skipped part"
    )
    ERROR_MESSAGE = (
        "`{exit}` in this `except` ({caught}) skips this rank's backward when only this rank meets "
        "the error (a CUDA out-of-memory on its own batch), while the other ranks all-reduce theirs "
        "and wait: agree on the skip across ranks (all_reduce a flag) or let the error stop the job"
    )
    EXIT_MESSAGE = (
        "`{call}` in this `except` ({caught}) ends this rank cleanly (exit status 0) when only this "
        "rank meets the error, so the launcher does not stop the others: they wait in their next "
        "all-reduce until the timeout; re-raise the error (or exit non-zero) so the whole job stops"
    )
    BROAD_MESSAGE = (
        "`{exit}` in this {caught} lets a rank that meets an error on its own (in its batch, its "
        "step) {what}, while the other ranks go on to their next all-reduce and wait there until "
        "the timeout; let the error stop the job, or agree on the skip across ranks"
    )
    WHILE_MESSAGE = (
        "`{name}` is set here under `{guard}` only, and `while {test}` reads it: that rank leaves the "
        "loop at a different iteration and the others wait in their next all-reduce until the timeout; "
        "set it on every rank (broadcast the decision first)"
    )
    LOCAL_EXIT_MESSAGE = (
        "`{call}` on a condition each rank evaluates on its own (`{test}`) ends this rank cleanly "
        "(exit status 0), so the launcher does not stop the others: they wait in their next "
        "all-reduce until the timeout; agree on it across ranks (all_reduce the flag), or raise "
        "(or exit non-zero) so the whole job stops"
    )
    FLAG_MESSAGE = (
        "`{flag}` on a condition each rank evaluates on its own (`{test}`) ends `while {loop}` on "
        "this rank only: the other ranks go round again and wait in their next all-reduce until "
        "the timeout; agree on it across ranks (all_reduce the flag) before setting it"
    )
    GUARDED_MESSAGE = (
        "the backward in this loop runs only when `{test}` holds, a test of this rank's own values: "
        "a rank that fails it skips a backward the other ranks make, and their gradient all-reduces "
        "no longer pair up (a hang, or mismatched buckets averaged); agree on it across ranks "
        "(all_reduce the flag) or zero the loss instead of skipping"
    )
    RANK_MESSAGE = (
        "`{exit}` under the rank test `{test}`: only those ranks leave the loop, and the others wait "
        "in their next all-reduce until the timeout; decide on one rank, broadcast the decision, "
        "and leave the loop on every rank"
    )
    MESSAGE = (
        "`{exit}` on a condition each rank evaluates on its own (`{test}`): if one rank leaves the "
        "loop, the others wait in their next all-reduce until the timeout; agree on it across ranks "
        "(all_reduce the flag) or stop on a step count"
    )

    VALID = [
        """
        import time
        import torch
        import torch.distributed as dist

        for step, (x, y) in enumerate(loader):
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            out_of_time = torch.tensor(float(time.time() - start > budget), device=device)
            dist.all_reduce(out_of_time, op=dist.ReduceOp.MAX)
            if out_of_time.item():
                break
        """,
        """
        for step, (x, y) in enumerate(loader):
            criterion(model(x), y).backward()
            optimizer.step()
            if step >= args.max_steps:
                break
        """,
    ]
    INVALID = [
        Invalid(
            """
            import time
            from torch.nn.parallel import DistributedDataParallel as DDP

            def train(net, loader, optimizer, budget_s, rank):
                model = DDP(net, device_ids=[rank])
                start = time.time()
                for epoch in range(100):
                    for x, y in loader:
                        loss = criterion(model(x), y)
                        optimizer.zero_grad()
                        loss.backward()
                        optimizer.step()
                    if time.time() - start > budget_s:
                        break
            """,
            lines=(14,),
        ),
        Invalid(
            """
            import math

            def fit(model, loader, optimizer):
                for batch in loader:
                    loss = model(**batch).loss
                    if math.isnan(loss.item()):
                        return False
                    loss.backward()
                    optimizer.step()
                return True
            """,
            lines=(7,),
        ),
        Invalid(
            """
            import torch.distributed as dist

            def fit(rank, model, train_loader, valid_loader, optimizer, epochs, patience):
                best, stale = float("inf"), 0
                for epoch in range(epochs):
                    if stale > patience:
                        break
                    train_one_epoch(model, train_loader, optimizer)
                    if rank == 0:
                        val_loss = evaluate(model, valid_loader)
                        if val_loss < best:
                            best, stale = val_loss, 0
                        else:
                            stale += 1
                    dist.barrier()

            def train_one_epoch(model, loader, optimizer):
                for x, y in loader:
                    optimizer.zero_grad()
                    model(x, y).backward()
                    optimizer.step()
            """,
            lines=(7,),
        ),
    ]

    def finish(self) -> None:
        self._training_loop: cst.CSTNode | None = None
        # The training loop often sits in a project module (a base trainer's `train()` whose
        # `self._train_epoch()` a subclass the script imports defines): the modules the run
        # reaches are read from the script, which knows that subclass.
        for module in self.model.paths.modules():
            self._module(module)

    def _module(self, root: ModuleModel) -> None:
        model = self.model
        self._while_conditions(root)
        self._skips_on_error(root)
        every: list[LoopSite] = [*root.fors, *root.whiles]
        for each in every:
            inner = [c for c in root.calls if each.node in c.loops]
            self._local_clean_exits(root, each, inner)
            self._ranked_clean_exits(root, each, inner)
            self._guarded_backward(root, each, inner)
        if not root.exits:
            return
        said: set[tuple[int, str]] = set()  # (scope, test) of the breaks reported, for loops first
        loops: list[LoopSite] = [*root.fors, *root.whiles]
        for loop in loops:
            exits = [(node, test) for node, test in _exits(root, loop) if not self._single(root, loop, node)]
            if not exits:
                continue
            body_calls = [c for c in root.calls if loop.node in c.loops]
            if not self._pairs_each_pass(body_calls):
                continue
            if any(model.paths.kind(root, g, loop.scope) in ("main", "other") for g in loop.guards):
                continue  # a loop one rank runs alone (rank 0's evaluation): leaving it early strands no peer
            ranked = self._ranked_exits(root, loop)
            for left, guard in ranked:
                keyword = "break" if isinstance(left, cst.Break) else "return"
                self.report(left, self.RANK_MESSAGE.format(exit=keyword, test=model.text_of(root, guard.test)),
                            module=root)
            # A collective every rank makes could carry the decision; a barrier carries nothing, and
            # one made on some ranks only agrees on nothing.
            # (A project function whose only collectives are barriers carries nothing either.)
            agreeing = [c for c in body_calls if model.facts.does(c, "data_collective")
                        and model.paths.rank_guard(c) is None]
            if agreeing:
                # A collective later in the step cannot agree on a skip tested on a value this
                # step computes (`if torch.isnan(loss): continue` before the all_reduce of the
                # logged loss): only those skips are still read.
                places = _order(loop.node)
                for exit_node, guard_test in exits:
                    here = places.get(id(exit_node), -1)
                    if isinstance(exit_node, cst.Continue) \
                            and (self._local_value(root, loop.scope, guard_test) or _none_from_batch(loop, guard_test)) \
                            and all(places.get(id(c.node), -1) > here or not self._agrees_on(c, loop.scope, guard_test)
                                    for c in agreeing):
                        self._skip(root, loop, exit_node, guard_test, body_calls, places, agreeing)
                    elif not isinstance(exit_node, cst.Continue) and self._kept_by_one(root, loop, guard_test):
                        self.report(exit_node, self.MESSAGE.format(
                            exit="break" if isinstance(exit_node, cst.Break) else "return",
                            test=model.text_of(root, guard_test)), module=root)
                continue
            # Counts kept inside the loop are followed only for a loop that backpropagates.
            self._training_loop = loop.node if any(
                self._backward(c) for c in body_calls) else None
            order: dict[int, int] | None = None
            for exit_node, guard_test in exits:
                if isinstance(exit_node, cst.Continue):
                    if not self._local_value(root, loop.scope, guard_test) \
                            and not _none_from_batch(loop, guard_test):
                        continue
                    order = order if order is not None else _order(loop.node)
                    self._skip(root, loop, exit_node, guard_test, body_calls, order)
                    continue
                if any(exit_node is node for node, _ in ranked) or not self._local(root, loop.scope, guard_test):
                    continue
                keyword = "break" if isinstance(exit_node, cst.Break) else "return"
                text = model.text_of(root, guard_test)
                if isinstance(loop.node, cst.While) and (id(loop.scope), text) in said:
                    continue  # `while True:` leaving on the test the inner loop's reported break left on
                said.add((id(loop.scope), text))
                self.report(exit_node, self.MESSAGE.format(exit=keyword, test=text), module=root)

    def _local_clean_exits(self, root: ModuleModel, loop: LoopSite, body_calls: list[CallSite]) -> None:
        """`if torch.isnan(loss): quit()` in a loop that back-propagates: a clean exit (status 0)
        on a test of the rank's own values ends that rank alone, and torchrun does not stop the
        others for it. A collective the loop makes before the exit may have agreed on the test
        (`dist.all_reduce(is_nan)` first): then it is not judged."""
        model = self.model
        if not model.uses_ddp or not any(self._backward(c) for c in body_calls):
            return
        order: dict[int, int] | None = None
        outer = len(loop.guards)
        for site in body_calls:
            if site.loops[-1] is not loop.node or site.dotted not in _CLEAN_EXITS or not _status_zero(site.node):
                continue
            inside = [g for g in site.guards[outer:] if not _early_exit(g)]
            if not inside or inside[-1].negated or not self._local_value(root, loop.scope, inside[-1].test):
                continue
            order = order if order is not None else _order(loop.node)
            here = order.get(id(site.node), -1)
            if any(model.facts.does(c, "data_collective") and order.get(id(c.node), -1) < here for c in body_calls) \
                    and not self._kept_by_one(root, loop, inside[-1].test):
                continue
            self.report(site.node, self.LOCAL_EXIT_MESSAGE.format(
                call=model.text_of(root, site.node), test=model.text_of(root, inside[-1].test)), module=root)

    def _ranked_clean_exits(self, root: ModuleModel, loop: LoopSite, body_calls: list[CallSite]) -> None:
        """`if rank == 0: ... if epoch >= max_epoch: destroy_process_group(); quit()` in a loop
        that back-propagates: only those ranks end (cleanly, so the launcher waits on), and the
        others go round again into a backward nobody pairs."""
        model = self.model
        if not model.uses_ddp or not any(self._backward(c) for c in body_calls):
            return
        outer = len(loop.guards)
        for site in body_calls:
            if site.loops[-1] is not loop.node or site.dotted not in _CLEAN_EXITS or not _status_zero(site.node):
                continue
            guard = next((g for g in site.guards[outer:] if model.paths.kind(root, g, loop.scope) in ("main", "other")),
                         None)
            if guard is not None:
                self.report(site.node, self.RANK_MESSAGE.format(
                    exit=model.text_of(root, site.node), test=model.text_of(root, guard.test)), module=root)

    def _guarded_backward(self, root: ModuleModel, loop: LoopSite, body_calls: list[CallSite]) -> None:
        """`valid, err = check_loss(loss, loss.item())`, then `if valid: loss.backward(); step()`
        with nothing in the `else:` that back-propagates: the backward of the loop runs on the
        ranks whose own values pass the test only. Not judged when a collective earlier in the
        loop may have agreed on the test."""
        model = self.model
        if not model.uses_ddp:
            return
        backwards = [c for c in body_calls if c.loops[-1] is loop.node
                     and (self._backward(c))]
        if not backwards:
            return
        outer = len(loop.guards)
        first = backwards[0]
        for guard in first.guards[outer:]:
            if guard.negated or _early_exit(guard) or not isinstance(guard.node, cst.If):
                continue
            # Every backward of the loop sits in this branch: a rank that fails the test makes none.
            if not all(any(g.node is guard.node and not g.negated for g in c.guards) for c in backwards):
                continue
            if not self._local_value(root, loop.scope, guard.test):
                continue
            order = _order(loop.node)
            here = order.get(id(guard.node), -1)
            if any(model.facts.does(c, "data_collective") and -1 < order.get(id(c.node), -1) < here
                   and self._agrees_on(c, loop.scope, guard.test) for c in body_calls):
                continue
            self.report(guard.test, self.GUARDED_MESSAGE.format(test=model.text_of(root, guard.test)),
                        module=root)
            return

    def _skip(self, root: ModuleModel, loop: LoopSite, exit_node: cst.Continue, test: cst.BaseExpression, body_calls: list[CallSite],
              order: dict[int, int], agreeing: Sequence[CallSite] = ()) -> None:
        """Report a `continue` that comes before the backward it skips, or before a collective
        every rank makes in the loop (an evaluation's periodic all-reduce)."""
        model = self.model
        here = order.get(id(exit_node), -1)
        text = model.text_of(root, test)
        if any(order.get(id(c.node), -1) > here and c.loops[-1] is loop.node
               and (self._backward(c)) for c in body_calls):
            self.report(exit_node, self.SKIP_MESSAGE.format(test=text), module=root)
        elif any(order.get(id(c.node), -1) > here for c in agreeing) \
                or any(order.get(id(c.node), -1) > here for c in self._collectives(body_calls)):
            self.report(exit_node, self.SKIP_COLLECTIVE_MESSAGE.format(test=text), module=root)

    def _agrees_on(self, site: CallSite, scope: Scope, test: cst.BaseExpression) -> bool:
        """Whether the collective `site`, made before a skip, may have agreed on what its test
        reads: it leaves agreed values in names the test reads (torch's own in place on what
        they are given; a project function in what it returns, and in what it is given where
        one of its collectives works on a parameter in place, or where it is not known).
        `loss_dict_reduced = reduce_dict(loss_dict)` reducing a stacked copy agrees on nothing
        that `if torch.isnan(losses): continue` reads."""
        name = self.model.api(site)
        carried = _carries(name, site, scope)
        # What an expression around the call takes from its answer (`agreed = reduce(logs)["loss"]`).
        carried |= {t for t, values in scope.assignments.items()
                    if any(isinstance(v, cst.CSTNode) and any(sub is site.node for sub in subexpressions(v))
                           for v in values)}
        if not (name or "").startswith("torch.distributed") and self._in_place(site):
            carried |= {n.value for a in site.node.args for n in subexpressions(a.value) if isinstance(n, cst.Name)}
        return bool(carried & _reads(scope, test))

    def _in_place(self, site: CallSite) -> bool:
        """A project function one of whose torch collectives works on one of its parameters
        (`dist.all_reduce(tensor)` on `def reduce_tensor(tensor)`), or one that is not known."""
        model = self.model
        targets = model.graph.targets(site)
        if not targets:
            return True
        for function, _ in targets:
            params = {p.name for p in function.params()}
            for call in function.module.calls_in(function.qualname):
                if not (model.api(call) or "").startswith("torch.distributed") and not model.facts.does(call, "data_collective"):
                    continue
                if any(isinstance(n, cst.Name) and n.value in params
                       for a in call.node.args for n in subexpressions(a.value)):
                    return True
        return False

    def _single(self, root: ModuleModel, loop: LoopSite, node: cst.CSTNode) -> bool:
        """The exit sits under a test that holds only in a run that is not distributed."""
        exit = next((e for e in root.exits if e.node is node), None)
        return exit is not None and any(self.model.paths.kind(root, g, loop.scope) == "single" for g in exit.guards)

    def _ranked_exits(self, root: ModuleModel, loop: LoopSite) -> list[tuple[cst.Break | cst.Return, Guard]]:
        """The `break`s (and `return`s) of `loop` made inside it under a rank test (`if rank ==
        0: ... if early_stopping.early_stop: break`): only the ranks the test picks leave, whatever
        the loop's collectives carry."""
        paths = self.model.paths
        outer = len(loop.guards)
        found: list[tuple[cst.Break | cst.Return, Guard]] = []
        for exit in root.exits:
            if exit.scope is not loop.scope or loop.node not in exit.loops or isinstance(exit.node, cst.Continue):
                continue
            if isinstance(exit.node, cst.Break) and exit.loops[-1] is not loop.node:
                continue
            kinds = [(g, paths.kind(root, g, loop.scope)) for g in exit.guards]
            if any(k == "single" for _, k in kinds):
                continue  # a debug exit of a run that is never distributed (`if cfg.debug: break`)
            guard = next((g for g, k in kinds[outer:] if k in ("main", "other")), None)
            if guard is not None:
                found.append((exit.node, guard))
        return found

    def _while_conditions(self, root: ModuleModel) -> None:
        """`while epoch < max_epochs:` where one rank sets `epoch` on its own (`if rank == 0: ...
        epoch = swa.start`): that rank leaves the loop at a different iteration from the others."""
        model = self.model
        loops: dict[int, tuple[cst.While, Scope]] = {}
        for site in root.calls:
            for node in site.loops:
                if isinstance(node, cst.While):
                    loops.setdefault(id(node), (node, site.scope))
        for loop, scope in loops.values():
            body_calls = [c for c in root.calls if loop in c.loops]
            if not self._pairs_each_pass(body_calls):
                continue
            read = {n.value for n in subexpressions(loop.test) if isinstance(n, cst.Name)}
            collectives = [c for c in body_calls if model.facts.does(c, "data_collective")
                           and model.paths.rank_guard(c) is None]
            # A collective that could carry the loop's counter (or whose reach is unknown) may
            # make the ranks agree.
            if any(_carries(model.api(c), c, scope) & _reads(scope, loop.test) for c in collectives):
                continue
            if not collectives:
                self._flag_cleared_locally(root, loop, scope)
            for name in sorted(read):
                ranked = model.paths.set_by_rank(root, scope, name, flags=False)
                if ranked is None:
                    continue
                guard = ranked[0]
                for binding, point in zip(scope.assignments.get(name, []), scope.points.get(name, [])):
                    if point is not None and loop in point.loops and guard in point.guards \
                            and isinstance(binding, cst.BaseExpression):
                        self.report(binding, self.WHILE_MESSAGE.format(
                            name=name, test=model.text_of(root, loop.test), guard=model.text_of(root, guard.test)),
                            module=root)
                        break

    def _flag_cleared_locally(self, root: ModuleModel, loop: cst.While, scope: Scope) -> None:
        """`while not done:` (or `while running:`) whose flag is set to end the loop under a test
        of the rank's own values (`if not torch.isfinite(loss): done = True`, a retry loop around
        a step): that rank leaves as a `break` would, and the others go round again into a
        backward nobody pairs."""
        test, ending = loop.test, False
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, ending = test.expression, True
        if not isinstance(test, cst.Name):
            return
        name = test.value
        inside = {id(n) for n in subexpressions(loop.body)}
        for binding, point in zip(scope.assignments.get(name, []), scope.points.get(name, [])):
            if point is None or loop not in point.loops or not isinstance(binding, cst.BaseExpression) \
                    or not (is_true(binding) if ending else is_false(binding)):
                continue
            guards = [g for g in point.guards if id(g.node) in inside and not _early_exit(g)]
            if not guards or guards[-1].negated or not isinstance(guards[-1].node, cst.If):
                continue
            guard = guards[-1]
            if not self._local_value(root, scope, guard.test):
                continue
            if self._breaks_a_training_loop_too(root, guard.node, point.loops[-1], loop):
                continue  # (`stop = True; break`: one test to agree on, reported at the `break`)
            self.report(binding, self.FLAG_MESSAGE.format(
                flag=f"{name} = {'True' if ending else 'False'}", test=self.model.text_of(root, guard.test),
                loop=self.model.text_of(root, loop.test)), module=root)

    def _breaks_a_training_loop_too(self, root: ModuleModel, guard: cst.CSTNode, innermost: cst.CSTNode,
                                    loop: cst.While) -> bool:
        """The `if` that sets the flag also `break`s out of an inner loop that trains (`for
        batch in loader: ... if step > max_steps: stop = True; break` inside `while not stop:`):
        that `break` is reported with the same test, the one place to fix."""
        if innermost is loop or not isinstance(guard, cst.If) or not isinstance(guard.body, cst.IndentedBlock):
            return False
        if not any(isinstance(stmt, cst.SimpleStatementLine) and any(isinstance(p, cst.Break) for p in stmt.body)
                   for stmt in guard.body.body):
            return False
        calls = [c for c in root.calls if innermost in c.loops]
        return any(self._backward(c) for c in calls) or self._forwards(calls)

    def _skips_on_error(self, root: ModuleModel) -> None:
        """`except RuntimeError as e: if "out of memory" in str(e): return False` before the
        backward of a training step (or `continue` before the loop's backward): the error is
        this rank's own (a CUDA out-of-memory on its batch), so it skips a backward the other
        ranks make."""
        model = self.model
        if not model.uses_ddp or "except" not in root.source:
            return  # (every exit looked for below is in an `except` handler)
        # A script's training loop may sit at module level, outside any function.
        scopes = [("<module>", root.module_scope), *root.function_scopes.items()]
        for qualname, scope in scopes:
            backwards = [c for c in root.calls_in(qualname)
                         if self._backward(c)]
            if not backwards:
                continue
            order: dict[int, int] | None = None
            for handler, trying, exit_node, loop in _error_exits(scope.node):
                order = order if order is not None else _order(scope.node)
                here = order.get(id(exit_node), -1)
                later = [c for c in backwards if order.get(id(c.node), -1) > here
                         and (loop is None or loop in c.loops)]
                if not later and loop is not None:
                    # The backward sits in the `try` itself (`try: self.run_micro_batch(mb)`
                    # / `except torch.cuda.OutOfMemoryError: continue`): the rank that met the
                    # error never finishes it, and the `continue` takes it on as if it had.
                    start, end = order.get(id(trying.body), -1), order.get(id(handler), -1)
                    later = [c for c in backwards if loop in c.loops
                             and start < order.get(id(c.node), -1) < end]
                if not later:
                    continue
                keyword = "return" if isinstance(exit_node, cst.Return) else "continue"
                self.report(exit_node, self.ERROR_MESSAGE.format(
                    exit=keyword, caught=model.text_of(root, handler.type) if handler.type else "every error"),
                    module=root)
            for handler, call, loop in _clean_exits(scope.node):
                # The next pass of the loop makes a backward this rank no longer joins.
                if loop is not None and any(loop in c.loops for c in backwards):
                    self.report(call, self.EXIT_MESSAGE.format(
                        call=model.text_of(root, call),
                        caught=model.text_of(root, handler.type) if handler.type else "every error"), module=root)
            for handler, trying, left, loop in _broad_exits(scope.node):
                order = order if order is not None else _order(scope.node)
                in_loop = [c for c in backwards if loop in c.loops]
                in_loop_calls = [c for c in root.calls_in(qualname) if loop in c.loops]
                if not self._pairs_across_ranks(in_loop_calls) and not self._forwards(in_loop_calls):
                    continue  # (a probe of a plain model, `except Exception: break` at its memory limit)
                if isinstance(left, cst.Break):
                    what = "leave the training loop alone"
                    hit = bool(in_loop)
                else:
                    # The `try` holds the step itself (its backward): whatever fails there (an
                    # out-of-memory, a NaN check, a bad sample) fails on this rank alone. A narrow
                    # `try` around data handling may fail on every rank alike (the short last batch
                    # each rank gets) and is not judged.
                    what = "skip a backward the others make"
                    start, end = order.get(id(trying.body), -1), order.get(id(handler), -1)
                    hit = any(start < order.get(id(c.node), -1) < end for c in in_loop)
                if hit:
                    keyword = "break" if isinstance(left, cst.Break) else "continue"
                    caught = f"`except {model.text_of(root, handler.type)}:`" if handler.type else "bare `except:`"
                    self.report(left, self.BROAD_MESSAGE.format(exit=keyword, caught=caught, what=what), module=root)

    def _answers_from_disk(self, site: CallSite) -> bool:
        """A project function, making no collective, that looks at the file system (lists a
        folder, globs, tests a file's existence) and returns from inside a loop or an `if` of its
        own (`for ckpt in glob(...): if ckpt not in done: return ckpt` / `return None`): its
        answer is what this rank found on disk when it looked, which another rank, looking a
        moment earlier or later (or after a peer wrote a record file), need not find."""
        if site.target is None or site.target.kind != "function" or self.model.facts.does(site, "collective"):
            return False
        for callee, _ in self.model.graph.targets(site):
            calls = callee.module.calls_in(callee.qualname)
            if not any(self.model.api(c) in _DISK_LOOKS for c in calls):
                continue
            if any(exit.scope.kind == "function" and exit.scope.qualname == callee.qualname
                   and isinstance(exit.node, cst.Return) and (exit.loops or exit.guards)
                   for exit in callee.module.exits):
                return True
        return False

    def _returns_ranked(self, site: CallSite) -> bool:
        """A project method that returns an attribute of its object it updates only under a rank
        condition (`if self.rank == 0: ... self.stale += 1` then `return self.stale >= patience`,
        an early-stopping check kept by rank 0): each rank gets its own answer."""
        paths = self.model.paths
        for callee, _ in self.model.graph.targets(site):
            scope = callee.module.function_scopes.get(callee.qualname)
            if scope is None:
                continue
            for value in callee.module.returns.get(callee.qualname, ()):
                if any(paths.set_by_rank(callee.module, scope, name, flags=False) is not None
                       for name in _self_reads(value)):
                    return True
        return False

    def _set_by_signal(self, root: ModuleModel, scope: Scope, event: cst.BaseExpression) -> bool:
        """`event` is a `threading.Event()` of a project module set (`EXIT.set()`) only in
        functions that module registers as signal handlers (`signal.signal(signal.SIGTERM,
        handler)`): each process receives its signals on its own (a SLURM preemption, a Ctrl-C
        that reaches ranks at different steps), so `EXIT.is_set()` is that rank's own."""
        model = self.model
        for value in model.values.of(root, event, scope):
            call = value.call
            if call is None or model.api_of(value) != "threading.Event":
                continue
            module = value.module
            names = [n for n, bindings in module.module_scope.assignments.items()
                     if any(b is call for b in bindings)]
            if len(names) != 1:
                continue
            handlers = {dotted(c.node.args[1].value) for c in module.calls
                        if model.api(c) == "signal.signal" and len(c.node.args) >= 2}
            setters = [c for c in module.calls if c.method == "set" and c.receiver is not None
                       and dotted(c.receiver) == names[0]]
            if setters and all(c.scope.kind == "function" and c.scope.qualname in handlers for c in setters):
                return True
        return False

    def _returns_own_sum(self, site: CallSite) -> bool:
        """A project function, making no collective, that returns a sum it adds the rank's own
        values to in a loop of its own (`total_loss += loss.item()` over its loader, then `return
        total_loss / num_batches`), or a figure of a list it appends them to there
        (`losses.append(loss.item() ** 0.5)`, then `return sum(losses) / len(losses)`): each rank
        gets its own answer (`val_loss = self.validate(val_loader)`)."""
        if self.model.facts.does(site, "collective"):
            return False
        for callee, _ in self.model.graph.targets(site):
            module = callee.module
            scope = module.function_scopes.get(callee.qualname)
            if scope is None:
                continue
            appended: dict[str, list[CallSite]] = {}
            for call in module.calls_in(callee.qualname):
                receiver = call.receiver
                if call.method == "append" and call.loops and receiver is not None and isinstance(receiver, cst.Name):
                    appended.setdefault(receiver.value, []).append(call)
            for value in module.returns.get(callee.qualname, ()):
                for node in subexpressions(value):
                    if not isinstance(node, cst.Name):
                        continue
                    for call in appended.get(node.value, ()):
                        item = call.arg("object", 0)
                        if item is not None and self._local(module, scope, item, 0):
                            return True
                    points = scope.points.get(node.value, [])
                    for binding, point in zip(scope.assignments.get(node.value, []), points):
                        if isinstance(binding, Augmented) and point is not None and point.loops \
                                and self._local(module, scope, binding.node.value, 0):
                            return True
        return False

    def _kept_by_one(self, root: ModuleModel, loop: LoopSite, test: cst.BaseExpression) -> bool:
        """The test reads a member of an object whose methods set it on some ranks only (and
        never on every rank from a collective's answer), and the loop never writes that member:
        a collective elsewhere in the loop cannot have carried the decision into it."""
        written = {name for name in loop.scope.assignments if "." in name}
        return any(isinstance(node, cst.Attribute) and dotted(node) not in written
                   and self._member_ranked(root, loop.scope, node) for node in subexpressions(test))

    def _member_ranked(self, root: ModuleModel, scope: Scope, node: cst.Attribute) -> bool:
        """`stopper.early_stop` read from an instance of a project class whose methods set that
        attribute only under a rank condition (`if self.rank != 0: return` before `self.early_stop
        = True`, an early-stopping object kept by rank 0) and, where they make a collective, never
        set it on every rank from anything but a constant: each rank reads its own value."""
        if not isinstance(node.value, cst.Name) or node.value.value == "self":
            return False
        name = f"self.{node.attr.value}"
        graph, paths = self.model.graph, self.model.paths
        for value in self.model.values.of(root, node.value, scope):
            for cls_module, info in graph.instances_of(value):
                classes = graph.mro(cls_module, info)
                scopes = [(m, m.function_scopes[q]) for m, c in classes for q in c.methods.values()
                          if q in m.function_scopes]
                # (A method that makes a collective and sets the member on every rank may hand
                # rank 0's answer to the others: `self.early_stop = bool(flag.item())` after a
                # broadcast.)
                if any(self.model.facts.does(c, "collective") for m, method_scope in scopes
                       for c in m.calls if c.scope is method_scope) and any(
                        not _literal(binding) and not any(paths.kind(m, g, method_scope) in ("main", "other")
                                                          for g in (point.guards if point else ()))
                        for m, method_scope in scopes
                        for binding, point in zip(method_scope.assignments.get(name, []),
                                                  method_scope.points.get(name, []))):
                    continue
                if any(name in method_scope.assignments
                       and paths.set_by_rank(m, method_scope, name, flags=False) is not None
                       for m, method_scope in scopes):
                    return True
        return False

    def _collectives(self, calls: list[CallSite]) -> list[CallSite]:
        """The calls that make a collective on every rank, a barrier included (itself, or in a
        project function: an evaluation that gathers its results through files between
        barriers): a rank that leaves or skips the pass leaves the others waiting in it."""
        model = self.model
        return [c for c in calls if (model.facts.does(c, "collective") or model.api(c) in api.BARRIERS)
                and model.paths.rank_guard(c) is None]

    def _backward(self, call: CallSite) -> bool:
        """`call` is a `backward()`, or a project function that makes one."""
        return call.method == "backward" or self.model.facts.does(call, "backward")

    def _pairs_each_pass(self, calls: list[CallSite]) -> bool:
        """A loop with these calls makes, at each pass, something every rank must take part in:
        a backward (itself or in a project function it calls, `train_one_epoch(...)`), a forward
        of a DDP model, or a collective."""
        return any(self._backward(c) for c in calls) or self._forwards(calls) or bool(self._collectives(calls))

    def _pairs_across_ranks(self, calls: list[CallSite]) -> bool:
        """The loop makes something the ranks must do together: a collective, or a forward of a
        DDP model (`model(x)`, `self.model(x)`)."""
        model = self.model
        for site in calls:
            if model.facts.does(site, "collective") or model.api(site) in api.BARRIERS:
                return True
            if isinstance(site.node.func, (cst.Name, cst.Attribute)) and site.method not in ("backward", "step") \
                    and any(is_ddp(model, v) for v in model.values.at_call(site, site.node.func)):
                return True
        return False

    def _forwards(self, calls: list[CallSite]) -> bool:
        """One of `calls` runs a DDP model's forward: calls the wrapper itself, or hands it to a
        project function that calls the parameter it receives it as (`loss = dsm_loss(score,
        batch, sigmas)` whose body makes `scores = scorenet(x)`)."""
        model = self.model
        for site in calls:
            if isinstance(site.node.func, cst.Name):
                if any(is_ddp(model, v) for v in model.values.at_call(site, site.node.func)):
                    return True
            for function, bound in model.graph.targets(site):
                called = {c.node.func.value for c in function.module.calls_in(function.qualname)
                          if isinstance(c.node.func, cst.Name) and c.scope.function is not None
                          and c.scope.qualname == function.qualname}
                for param in function.params():
                    if param.name not in called:
                        continue
                    passed = model.graph.argument_for(site, function, param, bound)
                    if isinstance(passed, cst.BaseExpression) \
                            and any(is_ddp(model, v) for v in model.values.at_call(site, passed)):
                        return True
        return False

    def _local_value(self, root: ModuleModel, scope: Scope, test: cst.BaseExpression) -> bool:
        """A rank's own value tested for a skip: a local call in the test (`torch.isnan(loss)`,
        `loss.item() > limit`) or in what a plain name in it was assigned (`value = loss.item()`).
        Names read through a subscript or attribute (`state["epoch_step"]`, a resumed counter)
        are not followed: a skip on them is usually a step count every rank shares."""
        if self._local(root, scope, test, 0):
            return True
        if any(isinstance(node, cst.Attribute) and self._member_ranked(root, scope, node)
               for node in subexpressions(test)):
            return True  # `if solver.stop:` where the solver sets `stop` on rank 0 only
        # (A method called on the name, `mask.sum()`, computes from its value: that name is followed.)
        called = {id(sub.func) for sub in subexpressions(test) if isinstance(sub, cst.Call)}
        inner = {id(sub.value) for sub in subexpressions(test)
                 if isinstance(sub, cst.Subscript) or isinstance(sub, cst.Attribute) and id(sub) not in called}
        for node in subexpressions(test):
            if isinstance(node, cst.Name) and id(node) not in inner:
                values = [v.value if isinstance(v, Item) else v for v in scope.assignments.get(node.value, [])]
                if any(isinstance(v, cst.BaseExpression) and (self._local(root, scope, v, 0)
                                                              or self._judged_locally(root, scope, v))
                       for v in values):
                    return True
        return False

    def _judged_locally(self, root: ModuleModel, scope: Scope, value: cst.BaseExpression) -> bool:
        """`check_loss(loss, loss_value)` with `loss_value = loss.item()`: a project function
        handed a value each rank reads on its own, which makes no collective, answers on that
        rank's value alone."""
        if not isinstance(value, cst.Call):
            return False
        site = root.call_at(value)
        if site is None or site.target is None or site.target.kind != "function" \
                or self.model.facts.does(site, "collective"):
            return False
        for arg in value.args:
            if self._local(root, scope, arg.value, 0):
                return True
            if isinstance(arg.value, cst.Name) and any(
                    isinstance(v, cst.BaseExpression) and self._local(root, scope, v, 0)
                    for v in scope.assignments.get(arg.value.value, [])):
                return True
        return False

    def _local(self, root: ModuleModel, scope: Scope, test: cst.BaseExpression, depth: int = 2,
               seen: set[str] | None = None, at: Point | None = None) -> bool:
        """Whether `test` reads a value each rank computes on its own. `at`: where `test` is
        evaluated, when it is a binding's value (the bindings of its names that reach there)."""
        seen = set() if seen is None else seen
        for node in subexpressions(test):
            if isinstance(node, cst.Call):
                site = root.call_at(node)
                name = self.model.api(site) if site is not None else None
                if name in _LOCAL_CALLS:
                    return True
                if site is not None and self._answers_from_disk(site):
                    return True
                if isinstance(node.func, cst.Attribute) and node.func.attr.value in _LOCAL_METHODS:
                    return True
                if site is not None and depth > 0 and (self._returns_ranked(site) or self._returns_own_sum(site)):
                    return True
                if isinstance(node.func, cst.Attribute) and node.func.attr.value == "is_set" and not node.args \
                        and self._set_by_signal(root, scope, node.func.value):
                    return True
            elif isinstance(node, cst.Attribute) and depth > 0 and self._member_ranked(root, scope, node):
                return True
            elif isinstance(node, cst.Name) and depth > 0:
                # Updated under a rank condition (`if rank == 0: stale_epochs += 1`): each rank
                # holds its own value.
                # (Set again to the value every rank has is not a rank's own value.)
                if self.model.paths.set_by_rank(root, scope, node.value, at=at, flags=False) is not None:
                    return True  # (`iter_num = checkpoint["iter_num"]` on resume: not rank 0's later `checkpoint`)
                # (Followed once per depth: a name met first deeper down, `best = val_loss`
                # read before `val_loss < best`'s own `val_loss`, is followed again higher up.)
                if any(f"{node.value}:{d}" in seen for d in range(depth, depth + 3)):
                    continue
                seen.add(f"{node.value}:{depth}")
                pairs = self.model.values.reaching(scope, node.value, at) if at is not None else []
                if not pairs or any(isinstance(value, Augmented) for value, _ in pairs):
                    # (An augmented binding adds to the ones before it: all of them count.)
                    points = scope.points.get(node.value, [])
                    pairs = [(value, points[i] if i < len(points) else None)
                             for i, value in enumerate(scope.assignments.get(node.value, []))]
                for value, point in pairs:
                    # Inside the training loop itself (not resume code before it), a sum of the
                    # rank's own values (`val_loss += loss.item()`) and a count updated under a
                    # test of them (`if not improved: stale += 1`, `improved` set under `if
                    # val_loss < best:`) are each rank's own.
                    inside = self._training_loop is not None and point is not None \
                        and self._training_loop in point.loops
                    if isinstance(value, Augmented):
                        if not inside:
                            continue
                        value = value.node.value
                    if isinstance(value, cst.BaseExpression) and self._local(root, scope, value, depth - 1, seen,
                                                                             point):
                        return True
                    # (Not through an early exit, `if loss is None: continue`: that skip is the
                    # finding, reported at the `continue`.)
                    if inside and point is not None and any(
                            not _early_exit(g) and self._local(root, scope, g.test, depth, seen)
                            for g in point.guards):
                        return True
        return False


def _self_reads(value: cst.BaseExpression) -> set[str]:
    """The `self.x` attributes an expression reads (`self.early_stop >= self.patience`)."""
    return {text for n in subexpressions(value) if isinstance(n, cst.Attribute)
            for text in [dotted(n)] if text is not None and text.startswith("self.") and text.count(".") == 1}


def _none_from_batch(loop: LoopSite, test: cst.BaseExpression) -> bool:
    """`if loss is None:` where `loss` was computed from the batch this loop drew
    (`loss = compute_loss(batch, model)`): a helper that returns None for a batch with nothing
    usable in it answers on the rank's own data, so one rank can skip while the others do not."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    target = test.comparisons[0]
    if not isinstance(target.operator, (cst.Is, cst.Equal)) or not isinstance(test.left, cst.Name) \
            or not (isinstance(target.comparator, cst.Name) and target.comparator.value == "None"):
        return False
    if not isinstance(loop.node, cst.For):
        return False
    drawn = {n.value for n in subexpressions(loop.node.target) if isinstance(n, cst.Name)}
    # What the loop body builds from them (`part = {k: batch[k][idx] for k in batch}` for a
    # micro-batch of the drawn index) is the rank's own data too.
    grew = True
    while grew:
        grew = False
        for name, values in loop.scope.assignments.items():
            points = loop.scope.points.get(name, [])
            places = [points[i] if i < len(points) else None for i in range(len(values))]
            if name in drawn or not any(
                    isinstance(v, cst.BaseExpression) and point is not None and loop.node in point.loops
                    and any(isinstance(n, cst.Name) and n.value in drawn for n in subexpressions(v))
                    for v, point in zip(values, places)):
                continue
            drawn.add(name)
            grew = True
    for value in loop.scope.assignments.get(test.left.value, []):
        if isinstance(value, cst.Call) and any(
                isinstance(n, cst.Name) and n.value in drawn
                for arg in value.args for n in subexpressions(arg.value)):
            return True
    return False


# Errors one rank meets on its own batch while the others do not: a CUDA out-of-memory (raised
# as a RuntimeError by older torch; torch.OutOfMemoryError subclasses RuntimeError). A broader
# handler (`except Exception:`, a bare `except:`) counts when it says it is about memory.
_OOM_ERRORS = frozenset({"RuntimeError", "torch.cuda.OutOfMemoryError", "torch.OutOfMemoryError",
                         "OutOfMemoryError", "th.cuda.OutOfMemoryError", "cuda.OutOfMemoryError"})
_BROAD_ERRORS = frozenset({"Exception", "BaseException"})
_ABOUT_MEMORY = re.compile(r"out of memory|\bOOM\b|OutOfMemory|OOM_", re.IGNORECASE)


def _error_exits(function: cst.CSTNode) -> Iterator[tuple[cst.ExceptHandler, cst.Try, cst.Return | cst.Continue,
                                                          cst.CSTNode | None]]:
    """(handler, its `try`, exit, the loop a `continue` belongs to) for each `return` or
    `continue` in an `except` handler of `function` that catches an error a rank meets on its
    own (nested functions and classes left out; a `continue` only when the `try` sits in a loop
    of the function)."""
    found: list[tuple[cst.ExceptHandler, cst.Try, cst.Return | cst.Continue, cst.CSTNode | None]] = []

    def walk(node: cst.CSTNode, loop: cst.CSTNode | None, caught: tuple[cst.ExceptHandler, cst.Try] | None,
             handler_loop: cst.CSTNode | None) -> None:
        for child in children(node):
            if isinstance(child, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                continue
            if isinstance(child, cst.ExceptHandler) and isinstance(node, cst.Try) and _catches_rank_error(child):
                walk(child, loop, (child, node), loop)
                continue
            if caught is not None and isinstance(child, cst.Return):
                found.append((*caught, child, None))
            elif caught is not None and isinstance(child, cst.Continue) and loop is handler_loop \
                    and loop is not None:
                found.append((*caught, child, loop))
            inner = child if isinstance(child, (cst.For, cst.While)) else loop
            if type(child) not in NO_STATEMENTS_BELOW:  # (no handler, return or continue below)
                walk(child, inner, caught, handler_loop)

    walk(function, None, None, None)  # (a module's statements are its children: its loops too)
    return iter(found)


_CLEAN_EXITS = frozenset({"quit", "exit", "sys.exit", "os._exit"})


def _clean_exits(function: cst.CSTNode) -> Iterator[tuple[cst.ExceptHandler, cst.Call, cst.CSTNode | None]]:
    """(handler, call, the loop around the `try`) for each `quit()` / `sys.exit()` / `sys.exit(0)`
    statement in a handler of `function` that catches an error one rank meets on its own: a
    clean exit, which torchrun does not take for a failure. A non-zero status (`sys.exit(1)`)
    makes the launcher stop every rank and is not collected."""
    found: list[tuple[cst.ExceptHandler, cst.Call, cst.CSTNode | None]] = []

    def walk(node: cst.CSTNode, loop: cst.CSTNode | None, handler: cst.ExceptHandler | None) -> None:
        for child in children(node):
            if isinstance(child, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                continue
            if isinstance(child, cst.ExceptHandler) and _catches_rank_error(child):
                walk(child, loop, child)
                continue
            if handler is not None and isinstance(child, cst.Expr) and isinstance(child.value, cst.Call) \
                    and dotted(child.value.func) in _CLEAN_EXITS and _status_zero(child.value):
                found.append((handler, child.value, loop))
            inner = child if isinstance(child, (cst.For, cst.While)) else loop
            if type(child) not in NO_STATEMENTS_BELOW:
                walk(child, inner, handler)

    walk(function, None, None)
    return iter(found)


def _status_zero(call: cst.Call) -> bool:
    if not call.args:
        return True
    value = call.args[0].value
    return len(call.args) == 1 and isinstance(value, (cst.Integer, cst.Name)) and (
        value.value in ("0", "None"))


def _broad_exits(function: cst.CSTNode) -> Iterator[tuple[cst.ExceptHandler, cst.Try, cst.Break | cst.Continue,
                                                          cst.CSTNode]]:
    """(handler, its `try`, exit, loop) for each `break` or `continue` of a loop made directly in
    a handler that catches every error (`except Exception:`, a bare `except:`) and is not about
    memory (those are `_error_exits`'): the `try` sits in that loop of `function`."""
    found: list[tuple[cst.ExceptHandler, cst.Try, cst.Break | cst.Continue, cst.CSTNode]] = []

    def exits(node: cst.CSTNode) -> Iterator[cst.Break | cst.Continue]:
        for child in children(node):
            if isinstance(child, (cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.For, cst.While)):
                continue
            if isinstance(child, (cst.Break, cst.Continue)):
                yield child
            elif type(child) not in NO_STATEMENTS_BELOW:
                yield from exits(child)

    def walk(node: cst.CSTNode, loop: cst.CSTNode | None) -> None:
        for child in children(node):
            if isinstance(child, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                continue
            if isinstance(child, cst.Try) and loop is not None:
                for handler in child.handlers:
                    if _catches_everything(handler) and not _catches_rank_error(handler):
                        found.extend((handler, child, e, loop) for e in exits(handler.body))
            inner = child if isinstance(child, (cst.For, cst.While)) else loop
            if type(child) not in NO_STATEMENTS_BELOW:
                walk(child, inner)

    walk(function, None)
    return iter(found)


def _catches_everything(handler: cst.ExceptHandler) -> bool:
    kind = handler.type
    if kind is None:
        return True
    names = [dotted(e.value) for e in kind.elements] if isinstance(kind, cst.Tuple) else [dotted(kind)]
    return any(n in _BROAD_ERRORS for n in names if n is not None)


def _catches_rank_error(handler: cst.ExceptHandler) -> bool:
    kind = handler.type
    names = [] if kind is None else (
        [dotted(e.value) for e in kind.elements] if isinstance(kind, cst.Tuple) else [dotted(kind)])
    if any(n in _OOM_ERRORS for n in names if n is not None):
        return True
    broad = kind is None or any(n in _BROAD_ERRORS for n in names if n is not None)
    return broad and _ABOUT_MEMORY.search(cst.Module([]).code_for_node(handler)) is not None


def _reads(scope: Scope, test: cst.BaseExpression) -> set[str]:
    """The names `test` reads, and those read by what they are assigned (`epoch =
    int(shared.item())` reads `shared`)."""
    names = {n.value for n in subexpressions(test) if isinstance(n, cst.Name)}
    for name in list(names):
        for value in scope.assignments.get(name, []):
            if isinstance(value, cst.BaseExpression):
                names |= {n.value for n in subexpressions(value) if isinstance(n, cst.Name)}
    return names


def _carries(name: str | None, site: CallSite, scope: Scope) -> set[str]:
    """The names a collective leaves agreed values in: torch's own work in place on the tensors
    they are given; a project function that makes collectives (a training step's gradient
    all-reduce) agrees on what it returns, and cannot rebind the caller's names."""
    if (name or "").startswith("torch.distributed"):
        return {n.value for a in site.node.args for n in subexpressions(a.value) if isinstance(n, cst.Name)}
    return {t for t, values in scope.assignments.items() if any(v is site.node for v in values)}


def _order(node: cst.CSTNode) -> dict[int, int]:
    """Each node under `node` (by id) -> its place in source order."""
    found: dict[int, int] = {}
    stack = [node]
    while stack:
        current = stack.pop()
        found[id(current)] = len(found)
        stack.extend(reversed(children(current)))
    return found


def _exits(root: ModuleModel, loop: LoopSite) -> Iterator[tuple[cst.Break | cst.Continue | cst.Return, cst.BaseExpression]]:
    """(`break` or `return`, the test of the innermost `if` around it inside the loop) for the
    exits of the loop: a break inside a nested loop belongs to that loop and is skipped, one in
    an `else:` branch (or after an early exit) has no test of its own and is skipped too."""
    node = loop.node
    outer = len(loop.guards)
    for exit in root.exits:
        if exit.scope is not loop.scope or node not in exit.loops:
            continue
        if isinstance(exit.node, (cst.Break, cst.Continue)) and exit.loops[-1] is not node:
            continue
        # The loop's own guards come first; early exits (`if c: continue`) guard what follows
        # them without holding it in a branch.
        inside = [g for g in exit.guards[outer:] if not _early_exit(g)]
        if inside and not inside[-1].negated:
            yield exit.node, inside[-1].test


def _early_exit(guard: Guard) -> bool:
    return guard.negated and isinstance(guard.node, cst.If) and guard.node.orelse is None


def _literal(binding: object) -> bool:
    """A constant set (`self.stop = False` when the object is set up): it resets the member, it
    carries no answer."""
    return isinstance(binding, (cst.Integer, cst.Float, cst.SimpleString)) \
        or is_true(binding) or is_false(binding) or is_none(binding)
