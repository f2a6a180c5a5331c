"""Rank conditions: code that runs on one rank only (`if rank == 0:` and friends).

A guard that only asks "are we distributed?" (`if ddp:`, `if world_size > 1`) is not a rank
condition: every rank takes the same branch. Each reader works on one test expression; `resolve`
turns a name into its canonical API name (`dist.get_rank` → torch.distributed.get_rank).
"""

from __future__ import annotations

import re

import libcst as cst

from dataclasses import dataclass
from typing import Callable, Protocol

from ddpcheck.lint.model import api
from ddpcheck.lint.model.module import Guard
from ddpcheck.lint.model.syntax import dotted, int_value, is_none, last_name



class Resolve(Protocol):
    """What the readers ask about the names in a test: the canonical API name an expression
    names, and what the value flow knows of a flag (the model's `Names` answers all of it;
    `NamesOnly` answers "unknown" to everything but the API names)."""

    def __call__(self, expr: cst.BaseExpression) -> str | None: ...

    def bound_to_rank(self, expr: cst.BaseExpression) -> bool:
        """A variable or helper call whose value is a rank read (`gpu = get_local_rank()`)."""
        ...

    def progress_flag(self, expr: cst.BaseExpression) -> bool:
        """A local flag the function flips as it goes (`done = False` ... `done = True`)."""
        ...

    def main_rank_set(self, expr: cst.BaseExpression, depth: int) -> bool:
        """A name whose every value is a literal set naming rank 0 only (`ranks=[0]`)."""
        ...

    def set_sides(self, expr: cst.BaseExpression, depth: int) -> bool | None:
        """Whether a name holds something other than None on rank 0 only (True) or off it (False)."""
        ...

    def returned_sides(self, call: cst.Call, depth: int) -> set[bool | None]:
        """`selects_main_rank` of what a project function called here returns."""
        ...

    def held_sides(self, expr: cst.BaseExpression, depth: int) -> set[bool | None]:
        """`selects_main_rank` of the tests a flag variable holds."""
        ...


@dataclass(frozen=True)
class NamesOnly:
    """A `Resolve` over a plain name reader: API names only, every value-flow question unknown."""

    qualname: Callable[[cst.BaseExpression], "str | None"]

    def __call__(self, expr: cst.BaseExpression) -> str | None:
        return self.qualname(expr)

    def bound_to_rank(self, expr: cst.BaseExpression) -> bool:
        return False

    def progress_flag(self, expr: cst.BaseExpression) -> bool:
        return False

    def main_rank_set(self, expr: cst.BaseExpression, depth: int) -> bool:
        return False

    def set_sides(self, expr: cst.BaseExpression, depth: int) -> bool | None:
        return None

    def returned_sides(self, call: cst.Call, depth: int) -> set[bool | None]:
        return set()

    def held_sides(self, expr: cst.BaseExpression, depth: int) -> set[bool | None]:
        return set()

# Names whose value is a rank (global or local).
_RANK_NAME = re.compile(
    r"(^|_)(global_|local_|node_)?rank$|^(rank|local_rank|global_rank|gpu_rank|node_rank)$"
    # The per-process GPU index doubles as the local rank: `self.gpu_id == 0`, `args.gpu == 0`.
    r"|^(gpu|gpu_id|gpu_idx|local_gpu|process_index|local_process_index)$",
    re.I,
)
# Names/calls that are true on the main process only (a private helper's leading underscore and
# an `on_` prefix, `self._on_main_rank()`, name the same test).
_MAIN_PROCESS = re.compile(
    r"^_*((is|on)_)?(main|master)(_process|_proc|_rank)?$|^_*is_rank_?(0|zero)$|^rank_?(0|zero)(_only)?$"
    r"|^is_global_zero$|^is_local_(main|master)(_process)?$|^is_primary$",
    re.I,
)
_RANK_CALLS = api.GLOBAL_RANK_CALLS | api.LOCAL_RANK_CALLS | {"horovod.torch.rank", "horovod.torch.local_rank"}
_RANK_ENV = api.RANK_ENV
_LAUNCH_ENV = api.RANK_ENV | api.WORLD_SIZE_ENV
# A launch-mode flag: `not args.multiprocessing_distributed or rank % ngpus == 0` is true on every
# rank of a job started without it (by torchrun).
LAUNCH_FLAG = re.compile(r"multiprocessing|(^|_)mp(_|$)|spawn", re.I)


def _is_mpi_rank(expr: cst.BaseExpression, resolve: Resolve) -> bool:
    """`MPI.COMM_WORLD.Get_rank()`, `MPI.COMM_WORLD.rank`."""
    target = expr.func if isinstance(expr, cst.Call) else expr
    q = resolve(target)
    return bool(q and q.startswith(api.MPI_COMM_WORLD + ".") and q.rsplit(".", 1)[1] in api.MPI_RANK_METHODS)


def is_rank_value(expr: cst.BaseExpression, resolve: Resolve) -> bool:
    """`rank`, `args.local_rank`, `dist.get_rank()`, `int(os.environ["RANK"])`, `self.rank`..."""
    if _is_mpi_rank(expr, resolve):
        return True
    if isinstance(expr, cst.Call):
        q = resolve(expr.func)
        if q in _RANK_CALLS:
            return True
        name = last_name(expr.func)
        if name in ("int", "str") and expr.args:
            return is_rank_value(expr.args[0].value, resolve)
        if name in ("get_rank", "get_local_rank", "get_global_rank", "local_rank"):
            return True
        if name in ("get", "getenv") and expr.args:
            first = expr.args[0].value
            if _is_rank_env_key(first):
                return True
            # `config.get("rank", 0)`: the rank kept in an options dict, as `config["rank"]` is.
            text = first.evaluated_value if name == "get" and isinstance(first, cst.SimpleString) else None
            return isinstance(text, str) and bool(_RANK_NAME.search(text))
        # A project helper that returns the rank (`def rank(): ... return dist.get_rank()`).
        return resolve.bound_to_rank(expr)
    if isinstance(expr, cst.Subscript):
        base = dotted(expr.value) or ""
        if base.endswith("environ") and len(expr.slice) == 1:
            elem = expr.slice[0].slice
            return isinstance(elem, cst.Index) and _is_rank_env_key(elem.value)
        key = _key(expr)  # `opt["rank"]`: the rank kept in an options dict
        return bool(key and _RANK_NAME.search(key))
    name = last_name(expr)
    if name and _RANK_NAME.search(name):
        return True
    return resolve.bound_to_rank(expr)


def _is_rank_env_key(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.SimpleString) and expr.evaluated_value in _RANK_ENV


def _is_zero_or_minus_one(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, (cst.Integer, cst.SimpleString)):
        return _is_zero(expr)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        return isinstance(expr.expression, cst.Integer) and expr.expression.evaluated_value == 1
    return False


def _is_zero(expr: cst.BaseExpression) -> bool:
    """`0`, or `"0"`: a rank kept as the string the launcher put in the environment
    (`rank = os.environ.get("RANK", "0")`, then `if rank == "0":`)."""
    if isinstance(expr, cst.SimpleString):
        return expr.evaluated_value == "0"
    return isinstance(expr, cst.Integer) and expr.evaluated_value == 0


def _is_one(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Integer) and expr.evaluated_value == 1


def _bool_literal(expr: cst.BaseExpression) -> bool | None:
    if isinstance(expr, cst.Name) and expr.value in ("True", "False"):
        return expr.value == "True"
    return None


def _as_test(expr: cst.IfExp) -> tuple[cst.BaseExpression, bool] | None:
    """`True if T else False` is T, `False if T else True` is `not T`: the test, and whether it
    is negated. None for any other conditional expression."""
    body, orelse = _bool_literal(expr.body), _bool_literal(expr.orelse)
    if body is None or orelse is None or body == orelse:
        return None
    return expr.test, orelse


def _main_rank_set(expr: cst.Tuple | cst.List | cst.Set) -> bool:
    """`(-1, 0)`, `{0}`, `[0, -1]`: the main process of a distributed run (or the only one)."""
    values = [e.value for e in expr.elements]
    return bool(values) and all(_is_zero_or_minus_one(v) for v in values) and any(_is_zero(v) for v in values)


def main_rank_literal(expr: object) -> bool:
    """A literal set of ranks that names rank 0 and no other: `[0]`, `(0, -1)`."""
    return isinstance(expr, (cst.Tuple, cst.List, cst.Set)) and _main_rank_set(expr)


# Calls that count the processes (or the GPUs a multi-GPU script starts one process for).
_COUNT_CALLS = frozenset({"get_world_size", "device_count"})
_WORLD_NAME = re.compile(r"world_size$|^(n_?gpus?|num_gpus|nprocs|num_processes)$", re.I)


def _is_not_distributed(test: cst.BaseExpression, resolve: Resolve) -> bool:
    """A test that holds only when the run is not distributed: `not args.distributed`,
    `not dist.is_initialized()`, `world_size == 1`, `local_rank == -1`."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        # `not <is distributed>`: the only reading that makes `... or rank == 0` sensible; not a
        # flag the function flips as it goes (`is_main or not embeddings_computed`: every rank
        # the first time round).
        return not resolve.progress_flag(test.expression)
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
        # `not dist.is_available() or not dist.is_initialized() or rank == 0` groups as
        # `(A or B) or C`: the left part holds off a distributed run when each side does.
        return _is_not_distributed(test.left, resolve) and _is_not_distributed(test.right, resolve)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        comp = test.comparisons[0]
        if isinstance(comp.operator, (cst.Equal, cst.LessThanEqual)) and isinstance(comp.comparator, cst.Integer):
            if comp.comparator.evaluated_value == 1:
                target = test.left.func if isinstance(test.left, cst.Call) else test.left
                name = last_name(target) or ""
                return bool(_WORLD_NAME.search(name) or name in _COUNT_CALLS)
        if isinstance(comp.operator, cst.Equal) and isinstance(comp.comparator, cst.SimpleString) \
                and not _is_zero(comp.comparator) and is_rank_value(test.left, resolve):
            return True  # `rank == "cpu"`: the rank variable holds a device name on a CPU-only run
    # `args.local_rank == -1`, `not args.distributed`, `world_size < 2`...
    return is_distributed_test(test, resolve) is False


def selects_main_rank(test: cst.BaseExpression, resolve: Resolve, _depth: int = 0) -> bool | None:
    """True if `test` holds on rank 0 only; False if it holds on every rank but rank 0;
    None if it is not a rank condition."""
    if isinstance(test, cst.IfExp):
        spelled = _as_test(test)
        if spelled is None:
            return None
        inner = selects_main_rank(spelled[0], resolve, _depth)
        return None if inner is None else inner != spelled[1]
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = selects_main_rank(test.expression, resolve, _depth)
        if inner is None and is_rank_value(test.expression, resolve):
            return True  # `not rank` is rank 0
        if inner is not None and not whole_rank_test(test.expression, resolve):
            return None  # `not (rank == 0 and args.save)` holds on rank 0 too
        return None if inner is None else not inner
    if isinstance(test, cst.BinaryOperation) and isinstance(test.operator, cst.BitAnd) \
            and all(_is_boolean_test(side) for side in (test.left, test.right)):
        # `(evaluator is not None) & (epoch % k == 0)`: `&` of two tests is their `and`.
        test = cst.BooleanOperation(left=test.left, operator=cst.And(), right=test.right)
    if isinstance(test, cst.BooleanOperation):
        left_main = selects_main_rank(test.left, resolve, _depth)
        right_main = selects_main_rank(test.right, resolve, _depth)
        if isinstance(test.operator, cst.And):
            # `if args.save and rank == 0` still runs on rank 0 only; `rank != 0 and x` only
            # on other ranks.
            if left_main is True or right_main is True:
                return True
            return False if (left_main is False or right_main is False) else None
        # `not distributed or rank == 0` (ImageNet example style): in a distributed run only
        # rank 0 passes; any other `x or rank == 0` may hold anywhere.
        if (left_main is True and (right_main is True or _is_not_distributed(test.right, resolve))) or (
            right_main is True and _is_not_distributed(test.left, resolve)
        ):
            return True
        return None
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        comp = test.comparisons[0]
        left, right, op = test.left, comp.comparator, comp.operator
        for value, other in ((left, right), (right, left)):
            if not is_rank_value(value, resolve):
                continue
            # Only 0 names the main rank: `rank != -1` / `rank == -1` ask "launched distributed?"
            # (YOLO style) and every rank takes the same branch (see is_distributed_test).
            if isinstance(op, (cst.Equal, cst.Is)) and _is_zero(other):
                return True
            if isinstance(op, (cst.NotEqual, cst.IsNot)) and _is_zero(other):
                return False
            if isinstance(op, cst.In) and isinstance(other, (cst.Tuple, cst.List, cst.Set)):
                if _main_rank_set(other):
                    return True
            if isinstance(op, cst.NotIn) and isinstance(other, (cst.Tuple, cst.List, cst.Set)):
                if _main_rank_set(other):
                    return False
            if isinstance(op, (cst.In, cst.NotIn)) and isinstance(other, (cst.Name, cst.Attribute)) \
                    and value is left and _depth < 3:
                # `if dist.get_rank() in ranks:` in `def log_dist(msg, ranks)`, every caller
                # passing `[0]`: the ranks named are the main one.
                if resolve.main_rank_set(other, _depth + 1):
                    return isinstance(op, cst.In)
            if isinstance(op, (cst.GreaterThan,)) and _is_zero_or_minus_one(other) and value is left:
                return False  # rank > 0
            if isinstance(op, cst.LessThanEqual) and _is_zero(other) and value is left:
                return True  # `local_rank <= 0`: rank 0, or -1 when not distributed
            if isinstance(op, cst.LessThan) and _is_one(other) and value is left:
                return True  # rank < 1
            # `rank == args.main_rank`: a rank compared to a configured value (an option, not a
            # loop variable that walks the ranks in turn) picks one rank, as `rank == 0` does.
            if _configured_rank(other):
                if isinstance(op, cst.Equal):
                    return True
                if isinstance(op, cst.NotEqual):
                    return False
        if isinstance(op, (cst.Is, cst.IsNot)) and is_none(right) and isinstance(left, (cst.Name, cst.Attribute)) \
                and _depth < 3:
            # `evaluator = KNN(...)` under `if local_rank == 0:` and `evaluator = None` in its
            # `else`: `evaluator is not None` holds on rank 0 only.
            side = resolve.set_sides(left, _depth + 1)
            if side is not None:
                return side if isinstance(op, cst.IsNot) else not side
        # `args.rank % ngpus == 0`
        if isinstance(left, cst.BinaryOperation) and isinstance(left.operator, cst.Modulo):
            if is_rank_value(left.left, resolve) and isinstance(op, cst.Equal) and _is_zero_or_minus_one(right):
                return True
        return None
    if isinstance(test, cst.Call):
        name = last_name(test.func)
        if name and _MAIN_PROCESS.match(name):
            return True
        if _depth < 3:
            # `if primary():` of a project helper that returns `get_rank() == 0` once the run is
            # distributed (and True on a single process).
            answers = resolve.returned_sides(test, _depth + 1)
            if len(answers) == 1:
                return answers.pop()
        return None
    name = last_name(test)
    if name and _MAIN_PROCESS.match(name):
        return True
    if isinstance(test, (cst.Name, cst.Attribute)) and _depth < 3:
        # `save_logs = args.logs and is_master(args)`, then `if save_logs:`; `is_master = rank ==
        # 0` passed to a trainer that tests `if self.is_master:` (or a flag named otherwise).
        sides = resolve.held_sides(test, _depth + 1)
        if len(sides) == 1:
            return sides.pop()
    return None


def _is_boolean_test(expr: cst.BaseExpression) -> bool:
    """An expression that is a test (true or false), which `&` combines as `and` does: a
    comparison, `a and b`, `not x`."""
    return isinstance(expr, (cst.Comparison, cst.BooleanOperation)) \
        or isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not)


def bounded_rank(test: cst.BaseExpression, resolve: Resolve) -> bool | None:
    """A rank compared with an order operator to a configured bound (`local_rank < args.num_gpus`,
    `rank >= N_WORKERS`): True when the test holds on ranks from the bound up (never rank 0),
    False when it holds on the ranks below it (rank 0 among them, perhaps all); None for any
    other test."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    comp = test.comparisons[0]
    op = comp.operator
    if not isinstance(op, (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual)):
        return None
    left, right = test.left, comp.comparator
    if is_rank_value(left, resolve) and _configured_bound(right):
        return isinstance(op, (cst.GreaterThan, cst.GreaterThanEqual))  # `rank >= K`
    if is_rank_value(right, resolve) and _configured_bound(left):
        return isinstance(op, (cst.LessThan, cst.LessThanEqual))  # `K <= rank`
    return None


def _configured_bound(expr: cst.BaseExpression) -> bool:
    """A bound that is an option or an upper-case constant (not a literal: `rank > 0`, `rank <
    1` are rank tests of their own, read by `selects_main_rank`)."""
    return not isinstance(expr, cst.Integer) and _configured_rank(expr)


def _configured_rank(expr: cst.BaseExpression) -> bool:
    """A value a rank is compared to that names one configured rank: an option (`args.main_rank`),
    a constant (`LOGGING_RANK`, `OFFSET + HOST_RANK`: upper-case names by convention), a positive
    literal, or arithmetic of those. Not a lower-case name (a loop variable walking the ranks)
    and not -1 (`rank == -1` asks whether the run is distributed)."""
    if isinstance(expr, cst.Attribute):
        return True
    if isinstance(expr, cst.Name):
        return expr.value.isupper()
    if isinstance(expr, cst.Integer):
        return (int_value(expr) or 0) > 0
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Add, cst.Subtract, cst.Multiply)):
        leaves = (expr.left, expr.right)
        return all(_configured_rank(e) or _is_zero(e) for e in leaves) and not all(_is_zero(e) for e in leaves)
    return False


def whole_rank_test(test: cst.BaseExpression, resolve: Resolve) -> bool:
    """Whether a rank test holds on all of the ranks it names, so that its negation holds on
    exactly the others: `rank != 0`, `not is_main`, such a test `and` a launch-mode test
    (`args.distributed and rank != 0`), `not distributed or rank == 0`. Not `rank == 0 and
    args.save`: its negation holds on rank 0 too where the option is off."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return whole_rank_test(test.expression, resolve)
    if isinstance(test, cst.IfExp):
        spelled = _as_test(test)
        return spelled is not None and whole_rank_test(spelled[0], resolve)
    if isinstance(test, cst.BooleanOperation):
        if isinstance(test.operator, cst.And):
            return all(is_distributed_test(t, resolve) is True
                       or selects_main_rank(t, resolve) is not None and whole_rank_test(t, resolve)
                       for t in (test.left, test.right))
        return all(_is_not_distributed(t, resolve)
                   or selects_main_rank(t, resolve) is not None and whole_rank_test(t, resolve)
                   for t in (test.left, test.right))
    return True


def widened(test: cst.BaseExpression, negated: bool, resolve: Resolve) -> bool:
    """Whether the ranks a guard admits may be more than `selects_main_rank` says. `rank == 0 and
    x` holds on rank 0 at most, so its body is rank-0 code; but its else (or the code after `if
    rank == 0 and x: raise`) runs on every rank whenever x is false: not a rank condition."""
    return _may_grow(test, resolve, not negated)


def _may_grow(test: cst.BaseExpression, resolve: Resolve, as_is: bool) -> bool:
    """Whether `test` (as_is) or its negation may hold on ranks beyond its rank operands' say:
    a conjunction with a free operand (neither a rank nor a distributed test) narrows the test,
    so it widens the negation; a disjunction the other way round."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _may_grow(test.expression, resolve, not as_is)
    if not isinstance(test, cst.BooleanOperation):
        return False
    conjunction = isinstance(test.operator, cst.And)
    if conjunction != as_is:  # `a and x` negated, `a or x` as is: a free x lets it hold anywhere
        if conjunction and _two_modes(test, resolve):
            return True
        for side in (test.left, test.right):
            if selects_main_rank(side, resolve) is None and is_distributed_test(side, resolve) is None \
                    and not _is_not_distributed(side, resolve) and not _rank_given(side, resolve):
                return True
    # Only the rank-bearing operands say which ranks pass (`rank == 0 and (last or x % n == 0)`:
    # the other operand only narrows it further).
    return any(_may_grow(side, resolve, as_is) for side in (test.left, test.right)
               if selects_main_rank(side, resolve) is not None)


def _two_modes(test: cst.BooleanOperation, resolve: Resolve) -> bool:
    """`ddp_enabled and not use_ddp_train and rank != 0`: one operand asks for a distributed run
    and another for the opposite of a second switch. They cannot both be the run's mode (the
    test would never hold), so the second is a setting of its own, free of the rank."""
    operands: list[cst.BaseExpression] = []
    pending: list[cst.BaseExpression] = [test]
    while pending:
        node = pending.pop()
        if isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.And):
            pending += [node.left, node.right]
        elif selects_main_rank(node, resolve) is None:
            operands.append(node)
    modes: set[bool] = set()
    for node in operands:
        if is_distributed_test(node, resolve) is True:
            modes.add(True)
        elif _is_not_distributed(node, resolve):
            modes.add(False)
    return modes == {True, False}


def _rank_given(test: cst.BaseExpression, resolve: Resolve) -> bool:
    """`device is not None` (or `is None`) where the name holds a rank: whether a rank was
    handed in at all, which every rank of a distributed run answers alike."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return False
    comp = test.comparisons[0]
    return isinstance(comp.operator, (cst.Is, cst.IsNot)) and isinstance(comp.comparator, cst.Name) \
        and comp.comparator.value == "None" and is_rank_value(test.left, resolve)


def vacuous_without_flag(test: cst.BaseExpression) -> str | None:
    """The launch-mode flag X of `not X or <rank test>`: a test that holds on every rank of a
    job launched without X (torchrun), so it is a rank guard on one launch path only."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
        for side in (test.left, test.right):
            if isinstance(side, cst.UnaryOperation) and isinstance(side.operator, cst.Not):
                name = last_name(side.expression)
                if name and LAUNCH_FLAG.search(name):
                    return name
    return None


def on_main_rank_only(guards: tuple[Guard, ...], resolve: Resolve) -> Guard | None:
    """The innermost guard that restricts the code to rank 0, if any."""
    for guard in reversed(guards):
        selects = selects_main_rank(guard.test, resolve)
        if selects is None or widened(guard.test, guard.negated, resolve):
            continue
        if selects != guard.negated:
            return guard
    return None


def under_rank_condition(guards: tuple[Guard, ...], resolve: Resolve) -> Guard | None:
    """The innermost guard that makes the code run on some ranks and not others."""
    for guard in reversed(guards):
        if selects_main_rank(guard.test, resolve) is not None and not widened(guard.test, guard.negated, resolve):
            return guard
    return None


# Names/calls that are true exactly when the run is distributed (`args.distributed`, `ddp`,
# `dist.is_initialized()`, `is_dist_avail_and_initialized()`, `distributed_run = world_size > 1`).
_DISTRIBUTED_FLAG = re.compile(
    r"^(is_|use_|using_|is_use_|is_using_|if_use_|enable_)?(distributed|ddp|dist|dist_avail_and_initialized"
    r"|initialized|dist_enabled|distributed_mode|(distributed|ddp)_(run|training|enabled))$",
    re.I,
)


# On/off words a flag may be kept as, with the truth each says.
_SWITCH_WORDS = {"on": True, "true": True, "yes": True, "off": False, "false": False, "no": False}


def is_distributed_test(test: cst.BaseExpression, resolve: Resolve) -> bool | None:
    """True if `test` holds exactly when the run is distributed, False if exactly when it is not
    (`not args.distributed`, `world_size == 1`, `local_rank == -1`, `local_rank is None`); None
    if it says neither."""
    if isinstance(test, cst.IfExp):
        spelled = _as_test(test)
        if spelled is None:
            return None
        inner = is_distributed_test(spelled[0], resolve)
        return None if inner is None else inner != spelled[1]
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        if isinstance(test.expression, cst.BooleanOperation) and isinstance(test.expression.operator, cst.And) \
                and is_distributed_test(test.expression.left, resolve) != is_distributed_test(test.expression.right, resolve):
            # `distributed and x` holds only in distributed runs, not in every one: its negation
            # (`not distributed or not x`) holds in some distributed runs too, and says neither.
            return None
        inner = is_distributed_test(test.expression, resolve)
        return None if inner is None else not inner
    if isinstance(test, cst.BooleanOperation):
        left_says = is_distributed_test(test.left, resolve)
        right_says = is_distributed_test(test.right, resolve)
        if isinstance(test.operator, cst.And):
            # `distributed and x` holds only in distributed runs; `not distributed and x` only outside.
            return left_says if left_says is not None else right_says
        return left_says if left_says is not None and left_says == right_says else None
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        comp = test.comparisons[0]
        op, right = comp.operator, comp.comparator
        left = test.left
        if isinstance(right, cst.Name) and right.value in ("True", "False") \
                and isinstance(op, (cst.Equal, cst.Is, cst.NotEqual, cst.IsNot)):
            inner = is_distributed_test(left, resolve)  # `if ddp == True:` reads as `if ddp:`
            if inner is None:
                return None
            holds = (right.value == "True") == isinstance(op, (cst.Equal, cst.Is))
            return inner if holds else not inner
        if isinstance(right, cst.SimpleString) and isinstance(op, (cst.Equal, cst.NotEqual)) \
                and isinstance(right.evaluated_value, str) and right.evaluated_value.lower() in _SWITCH_WORDS:
            # `args.dist == "OFF"`: a distributed flag kept as an on/off word.
            inner = is_distributed_test(left, resolve)
            if inner is None:
                return None
            holds = _SWITCH_WORDS[right.evaluated_value.lower()] == isinstance(op, cst.Equal)
            return inner if holds else not inner
        if isinstance(op, (cst.In, cst.NotIn)) and isinstance(left, cst.SimpleString) \
                and left.evaluated_value in _LAUNCH_ENV and last_name(right) == "environ":
            return isinstance(op, cst.In)  # `"RANK" in os.environ`: launched distributed
        if isinstance(right, cst.Name) and right.value == "None" and is_rank_value(left, resolve) and (
            "rank" in (last_name(left) or "").lower() or _read_as_rank(left, resolve)
        ):
            # `local_rank is None`: the option a launcher fills in was left unset; `gpu_id is
            # None` after `gpu_id = get_local_rank()`, a helper that reads LOCAL_RANK and gives
            # None without it. (Not `args.gpu is None`, which in the ImageNet example's style is
            # the torchrun path.)
            if isinstance(op, (cst.Equal, cst.Is)):
                return False
            if isinstance(op, (cst.NotEqual, cst.IsNot)):
                return True
            return None
        if isinstance(right, cst.UnaryOperation) and _is_zero_or_minus_one(right) and is_rank_value(left, resolve):
            if isinstance(op, (cst.Equal, cst.Is)):
                return False  # local_rank == -1: launched without a launcher
            if isinstance(op, (cst.NotEqual, cst.IsNot)):
                return True
            return None
        target = left.func if isinstance(left, cst.Call) else left
        name = last_name(target) or ""
        if (_WORLD_NAME.search(name) or name in _COUNT_CALLS) and isinstance(right, cst.Integer):
            bound = right.evaluated_value
            if (isinstance(op, cst.GreaterThan) and bound == 1) or (isinstance(op, cst.NotEqual) and bound == 1) or (
                isinstance(op, cst.GreaterThanEqual) and bound == 2
            ):
                return True
            if (isinstance(op, cst.Equal) and bound == 1) or (isinstance(op, cst.LessThan) and bound == 2) or (
                isinstance(op, cst.LessThanEqual) and bound == 1
            ):
                return False
        return None
    target = test.func if isinstance(test, cst.Call) else test
    flag = last_name(target) or _key(target)
    if flag and _DISTRIBUTED_FLAG.match(flag):
        return True
    return None


def _read_as_rank(expr: cst.BaseExpression, resolve: Resolve) -> bool:
    """A local variable the value flow binds to a rank read (`gpu_id = get_local_rank()`), not
    an option or an attribute that may be set elsewhere."""
    return isinstance(expr, cst.Name) and resolve.bound_to_rank(expr)


def _key(expr: cst.BaseExpression) -> str | None:
    """`opt["dist"]` → "dist": a flag kept in a dict."""
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
        key = expr.slice[0].slice.value
        if isinstance(key, cst.SimpleString):
            text = key.evaluated_value
            return text if isinstance(text, str) else None
    return None


def on_single_process_only(guards: tuple[Guard, ...], resolve: Resolve) -> Guard | None:
    """The innermost guard that keeps the code to non-distributed runs (`if not args.distributed:`,
    the `else` of `if ddp:`, after `if world_size > 1: return`), if any."""
    for guard in reversed(guards):
        distributed = is_distributed_test(guard.test, resolve)
        if distributed is not None and distributed == guard.negated:
            return guard
    return None


def is_wrapped_test(test: cst.BaseExpression, resolve: Resolve) -> bool | None:
    """True for a test that holds when a model is wrapped (`isinstance(m, DDP)`,
    `hasattr(m, "module")`), False for its negation, None otherwise."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = is_wrapped_test(test.expression, resolve)
        return None if inner is None else not inner
    if isinstance(test, cst.Call) and len(test.args) == 2:
        name = dotted(test.func)
        second = test.args[1].value
        if name == "hasattr" and isinstance(second, cst.SimpleString) and second.evaluated_value == "module":
            return True
        if name == "isinstance":
            classes = [e.value for e in second.elements] if isinstance(second, cst.Tuple) else [second]
            if any(resolve(c) == api.DDP for c in classes):
                return True  # (`isinstance(m, DataParallel)` alone says nothing about DDP)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and _is_type_call(test.left):
        # `type(m) in (DataParallel, DistributedDataParallel)`, `type(m) is DDP`
        target = test.comparisons[0]
        classes = [e.value for e in target.comparator.elements] \
            if isinstance(target.comparator, (cst.Tuple, cst.List, cst.Set)) else [target.comparator]
        if any(resolve(c) == api.DDP for c in classes):
            if isinstance(target.operator, (cst.In, cst.Is, cst.Equal)):
                return True
            if isinstance(target.operator, (cst.NotIn, cst.IsNot, cst.NotEqual)):
                return False
    return None


def _is_type_call(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Call) and dotted(expr.func) == "type" and len(expr.args) == 1


def exclusive_arms(a: tuple[Guard, ...], b: tuple[Guard, ...]) -> bool:
    """Whether code under guards `a` and code under guards `b` sit in different arms of the same
    `if` (at most one of the two runs)."""
    arms = {id(g.node): g.negated for g in a}
    return any(id(g.node) in arms and arms[id(g.node)] != g.negated for g in b)


def contradictory(a: tuple[Guard, ...], b: tuple[Guard, ...]) -> bool:
    """Whether code under guards `a` and code under guards `b` can never both run: different
    arms of the same `if`, or tests of the same setting that cannot both hold. `if backend ==
    "deepspeed" and ds is not None:` (taken) against the `else` of a later `if backend ==
    "deepspeed":`, or against `elif backend == "ddp":`: the first requires a term the second
    denies. Only terms written alike are compared; a test the reader cannot split says nothing."""
    if exclusive_arms(a, b):
        return True
    held_a, denied_a = _terms(a)
    held_b, denied_b = _terms(b)
    return any(t.deep_equals(u) for t in held_a for u in denied_b) \
        or any(t.deep_equals(u) for t in held_b for u in denied_a) \
        or any(_other_value(t, u) for t in held_a for u in held_b)


def _terms(guards: tuple[Guard, ...]) -> tuple[list[cst.BaseExpression], list[cst.BaseExpression]]:
    """The terms the guards require true (the `and`-terms of a taken test) and those they require
    false (a not-taken test that is one term)."""
    held: list[cst.BaseExpression] = []
    denied: list[cst.BaseExpression] = []
    for guard in guards:
        if guard.negated:
            if not isinstance(guard.test, cst.BooleanOperation):
                denied.append(guard.test)
            continue
        stack = [guard.test]
        while stack:
            test = stack.pop()
            if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
                stack += [test.left, test.right]
            elif isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
                # `not opt.fp16` holds: `opt.fp16` does not (`not (step % k == 0)`: the test
                # inside its parentheses, as `if step % k == 0:` writes it).
                denied.append(_bare(test.expression))
            else:
                held.append(test)
    return held, denied


def _bare(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`expr` without the parentheses around it."""
    return expr.with_changes(lpar=[], rpar=[]) if getattr(expr, "lpar", None) else expr


def _other_value(a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
    """`x == "ddp"` and `x == "deepspeed"`: one name equal to two different literals."""
    def split(test: cst.BaseExpression) -> tuple[str, str] | None:
        if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
                and isinstance(test.comparisons[0].operator, cst.Equal)):
            return None
        name, value = dotted(test.left), test.comparisons[0].comparator
        if name is None:
            return None
        if isinstance(value, cst.SimpleString):
            text = value.evaluated_value
            return (name, repr(text)) if isinstance(text, str) else None
        number = int_value(value)
        return None if number is None else (name, str(number))
    left, right = split(a), split(b)
    return left is not None and right is not None and left[0] == right[0] and left[1] != right[1]
