"""What DDP code is made of, as rules ask about it: DDP wraps and the module inside, data loaders
and the samplers that feed them, optimizer steps, uses of CUDA, where a device index comes from.
Each answer is computed from the model (values, calls), once per question."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import libcst as cst

from ddpcheck.lint.model import api
from ddpcheck.lint.model.index import code_only
from ddpcheck.lint.model.module import CallSite, ForSite, ModuleModel, Param, Point, Scope
from ddpcheck.lint.model.paths import is_no_grad
from ddpcheck.lint.model.conditions import Resolve, is_rank_value
from ddpcheck.lint.model.options import default_takes, option_default, option_defaults
from ddpcheck.lint.model.symbols import Function
from ddpcheck.lint.model.syntax import argument, children, dotted, is_false, is_none, is_true, string_text, subexpressions
from ddpcheck.lint.model.values import Frame, Unknown, Value

if TYPE_CHECKING:
    from ddpcheck.lint.model.semantic import Model

# Methods a DDP wrapper and its module share that do not run the forward pass.
MODULE_API = api.MODULE_METHODS | {"no_sync", "module"}
_MOVES = frozenset({"to", "cuda", "cpu", "half", "float", "bfloat16", "double"})


@dataclass(frozen=True, eq=False, repr=False)
class Wrap:
    """`ddp = DDP(module, ...)`: the call, the names it is bound to, the module expression inside
    (moves stripped: `DDP(model.to(dev))` wraps `model`)."""

    site: CallSite
    outer: tuple[str, ...]
    inner: cst.BaseExpression | None

    @property
    def inner_name(self) -> str | None:
        return dotted(self.inner) if self.inner is not None else None


def strip_moves(expr: cst.BaseExpression) -> cst.BaseExpression:
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _MOVES:
        expr = expr.func.value
    return expr


def wraps(model: Model, module: ModuleModel) -> list[Wrap]:
    """The DDP wraps made in `module`, in source order."""
    found = module.memo.get("ddp_wraps")
    if found is None:
        found = []
        for site in module.calls:
            if model.api(site) == api.DDP:
                inner = site.arg("module", 0)
            elif model.makes(site, api.DDP):
                inner = _wrapped_by_subclass(model, site)
            else:
                continue
            names = list(module.assigned_names(site.node))
            if not names:
                # `model = DDP(model).to(device)`: the wrap is the receiver of the assigned call.
                for name, values in site.scope.assignments.items():
                    if any(isinstance(v, cst.BaseExpression) and strip_moves(v) is site.node for v in values):
                        names.append(name)
            found.append(Wrap(site, tuple(names), strip_moves(inner) if inner is not None else None))
        module.memo["ddp_wraps"] = found
    return found


def _wrapped_by_subclass(model: Model, site: CallSite) -> cst.BaseExpression | None:
    """The module a project subclass of DDP wraps, as `site` passes it: its own first argument
    when the subclass keeps DDP's constructor, or the argument of `site` its constructor hands
    on to `super().__init__(module, ...)`."""
    found = model.graph.base_init(site, api.DDP)
    if found is None:
        return None
    if found.init is None:
        return site.arg("module", 0)
    passed = argument(found.call.node, "module", found.shift)
    if not isinstance(passed, cst.Name) or found.frame is None or found.frame.call is not site:
        return None
    bindings = found.init.scope.assignments.get(passed.value, [])
    if len(bindings) != 1 or not isinstance(bindings[0], Param):
        return None
    outer = model.graph.argument_for(site, found.init, bindings[0], "constructor")
    return outer if isinstance(outer, cst.BaseExpression) else None


def is_ddp(model: Model, value: Value) -> bool:
    """A leaf that builds a DDP wrapper: torch's class or a project subclass of it."""
    return model.api_of(value) == api.DDP or (value.call is not None and model.constructs(value, api.DDP))


# What DDP itself answers besides nn.Module's API: a subclass's `__getattr__` never sees these.
_DDP_OWN = frozenset({"join", "join_hook", "register_comm_hook", "device_ids", "process_group",
                      "broadcast_buffers", "find_unused_parameters", "reducer", "logger"})


def forwards_to_module(model: Model, value: Value, attr: str) -> bool:
    """`value` builds a project subclass of DDP whose `__getattr__` hands attributes it lacks on
    to the module it wraps (`except AttributeError: return getattr(self.module, name)`, or
    `self.module.__getattribute__(name)`), and
    `attr` is none of the wrapper's own (nn.Module's API, DDP's): reading `attr` on the wrapper
    reads the inner module's (`ddp.train_loss(x)` runs the inner module's `train_loss`)."""
    if attr in MODULE_API or attr in _DDP_OWN or attr.startswith("_") or value.call is None \
            or model.api_of(value) == api.DDP or not model.constructs(value, api.DDP):
        return False
    instance = model.graph.instance_of(value)
    if instance is None:
        return False
    hook = model.graph.method(*instance, "__getattr__")
    if hook is None:
        return False
    code = code_only(hook.module.code(hook.node))
    # (`getattr(self.module, name)`, or the lookup spelled as a method of the inner module:
    # `self.module.__getattribute__(name)`, `self.module.__getattr__(name)`.)
    return bool(re.search(r"getattr\(\s*self\.module\s*,|self\.module\.__getattr(?:ibute)?__\(", code))


def holds_ddp(model: Model, value: Value, depth: int = 2) -> bool:
    """A leaf that is the DDP wrapper as far as attribute access goes: the wrapper itself, or
    `torch.compile` of it (the compiled module forwards attribute reads to the module it
    compiled, so `compiled.module` is the DDP wrapper's inner module)."""
    if is_ddp(model, value):
        return True
    call = value.call
    if call is None or depth <= 0 or model.api_of(value) != api.COMPILE:
        return False
    compiled = argument(call, "model", 0)
    return compiled is not None and any(
        holds_ddp(model, v, depth - 1)
        for v in model.values.of(value.module, compiled, value.scope, value.frame, at=value.at))


def runs_layers(model: Model, function: Function, depth: int = 3) -> bool:
    """Whether a method of a network runs the network's own layers: it calls `self(...)`,
    `self.forward(...)`, a layer held in an attribute (`self.encoder(x)`), or another method of
    the class that does (`compute_loss` calling `self(x)`). A method that only reads
    configuration or builds an optimizer does not."""
    owner = function.owner
    if owner is None or depth <= 0:
        return False
    module = function.module
    for site in module.calls_in(function.qualname):
        func = site.node.func
        if isinstance(func, cst.Name) and func.value == "self":
            return True
        if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self"):
            continue
        name = func.attr.value
        if name == "forward":
            return True
        own = model.graph.method(module, owner, name)
        if own is None:
            if name not in MODULE_API and _holds_layer(model, module, owner.scope, name):
                return True  # `self.encoder(x)`: a layer of the network
            continue
        if own != function and runs_layers(model, own, depth - 1):
            return True
    return False


def _holds_layer(model: Model, module: ModuleModel, scope: Scope, attr: str) -> bool:
    """`self.<attr>` is set to a layer with parameters: a torch.nn layer other than a loss, a
    container, or a network of the project. A criterion (`nn.CrossEntropyLoss()`) or an
    attribute the model cannot follow is not taken for one."""
    for value in model.values.of(module, cst.Attribute(cst.Name("self"), cst.Name(attr)), scope):
        name = model.api_of(value) or ""
        if name.startswith("torch.nn.") and name.count(".") == 2 and not name.endswith("Loss"):
            return True
        if model.graph.is_network(value):
            return True
    return False


# torch.nn layers that own parameters (by default), and how a parameter is made.
def holds_parameters(model: Model, value: Value, depth: int = 3) -> bool:
    """Whether a leaf builds a module that owns parameters: a torch.nn layer that has weights
    (`nn.Conv2d`, `nn.LayerNorm`), `torch.compile` of one, or a network of the project that sets
    one of those (or an `nn.Parameter`) on `self`, itself or in a project base. A parameter-free
    module (`nn.ReLU()`, a project module that only draws noise) or one the model cannot follow
    does not count."""
    name = model.api_of(value) or ""
    if api.owns_parameters(name):
        return True
    call = value.call
    if call is None or depth <= 0:
        return False
    if name == api.COMPILE:
        compiled = argument(call, "model", 0)
        return compiled is not None and any(
            holds_parameters(model, v, depth - 1) for v in model.values.of(value.module, compiled, value.scope,
                                                                           value.frame, at=value.at))
    instance = model.graph.instance_of(value) if model.graph.is_network(value) else None
    if instance is None:
        return False
    for owner_module, owner in model.graph.mro(*instance):
        for key in owner.scope.assignments:
            if not key.startswith("self.") or key.count(".") != 1:
                continue
            attribute = cst.Attribute(cst.Name("self"), cst.Name(key[len("self."):]))
            for held in model.values.of(owner_module, attribute, owner.scope):
                if held.call is not None and holds_parameters(model, held, depth - 1):
                    return True
    return False


def before(value: Value, site: CallSite) -> bool:
    """Whether a leaf made by a call exists when `site` runs, as far as source order in one
    function tells (a leaf made later in the same function does not)."""
    call = value.call
    if call is None or value.module is not site.module:
        return True
    made = site.module.call_at(call)
    if made is None or made.scope.function is not site.scope.function:
        return True
    return made.index < site.index


# --- data loaders and samplers --------------------------------------------------------------------
@dataclass(frozen=True, eq=False, repr=False)
class Feed:
    """A DataLoader fed by a DistributedSampler (`sampler` is the leaf that builds it)."""

    loader: CallSite
    sampler: Value
    via_batch_sampler: bool


def sampler_values(model: Model, loader: CallSite, frame: Frame | None = None) -> tuple[list[Value], bool]:
    """What a DataLoader gets as `sampler=` — or, failing that, `batch_sampler=` (then True).
    Positions are torch's; a project subclass of DataLoader is read by keyword only. `frame`:
    the call of the loader's function being followed, when known: its arguments decide the
    branches the sampler is chosen in (`if distributed: sampler = DistributedSampler(ds)` in
    `get_loaders(bs, distributed=False)` gives no sampler)."""
    torch_own = model.api(loader) == api.DATALOADER
    if not torch_own and model.graph.base_init(loader, api.DATALOADER) is not None:
        # A project subclass: what its constructor hands DataLoader's (`super().__init__(ds,
        # sampler=DistributedSampler(ds), ...)`); unknown when the model cannot see that.
        for keyword, position, batch in (("sampler", 3, False), ("batch_sampler", 4, True)):
            passed = model.graph.base_argument(loader, api.DATALOADER, keyword, position)
            if passed is None:
                return [Value(loader.module, Unknown(loader.node), loader.scope, None)], batch
            if passed:
                return passed, batch
        return [], False
    given = model.values.keyword(loader, "sampler", 3 if torch_own else None, frame)
    if given:
        return given, False
    return model.values.keyword(loader, "batch_sampler", 4 if torch_own else None, frame), True


def distributed_sampler(model: Model, values: list[Value], via_batch: bool) -> Value | None:
    """The leaf among `values` that builds a DistributedSampler (or a project subclass), looking
    inside `BatchSampler(sampler, ...)` when the loader takes a batch sampler."""
    for value in values:
        if model.constructs(value, api.DISTRIBUTED_SAMPLER):
            return value
        if via_batch and value.call is not None and model.api_of(value) == api.BATCH_SAMPLER:
            inner = argument(value.call, "sampler", 0)
            if inner is not None:
                found = distributed_sampler(model, model.values.of(value.module, inner, value.scope, value.frame, at=value.at), False)
                if found is not None:
                    return found
    return None


def feed(model: Model, loader: CallSite, frame: Frame | None = None) -> Feed | None:
    values, via_batch = sampler_values(model, loader, frame)
    sampler = distributed_sampler(model, values, via_batch)
    return Feed(loader, sampler, via_batch) if sampler is not None else None


def sampler_option(model: Model, site: CallSite, keyword: str, position: int,
                   frame: Frame | None = None) -> list[Value] | None:
    """What a DistributedSampler built at `site` gets as `keyword` (torch's `position`): from
    the call itself, or, for a project subclass, from the `super().__init__(...)` its
    constructor makes. [] when nothing is passed (torch's default), None when unknown."""
    return model.graph.base_argument(site, api.DISTRIBUTED_SAMPLER, keyword, position, frame)


def pads(model: Model, site: CallSite, frame: Frame | None = None) -> bool:
    """A sampler built at `site` pads its shards to equal length by repeating samples: torch's
    DistributedSampler, a library sampler that always pads (api.PADDING_SAMPLERS), or a project subclass with `drop_last` false (or left at its default)
    — a subclass with its own `__iter__` only when that code pads to a `total_size` — or a
    project sampler written like it (see Model.shards_like_distributed_sampler); not one whose
    total is the dataset's own length (see evens_nothing), nor one that cuts it to a multiple of
    the world size (see drops_remainder). With `frame` (a call of the builder that makes the
    sampler), `drop_last` is read as that call passes it."""
    if evens_nothing(model, site) or drops_remainder(model, site):
        return False
    if model.api(site) in api.PADDING_SAMPLERS:
        return True
    if model.makes(site, api.DISTRIBUTED_SAMPLER):
        drop = sampler_option(model, site, "drop_last", 5, frame)
        if drop is None or not all(isinstance(v.node, cst.BaseExpression) and is_false(v.node)
                                   or off_by_default(model, v) for v in drop):
            return False
        switch = api.UNPADDED_WHEN_FALSE.get(model.api(site) or "")
        if switch is not None:
            passed = site.arg(*switch)
            if passed is not None and not all(isinstance(v.node, cst.BaseExpression) and is_true(v.node)
                                              for v in model.values.at_call(site, passed)):
                return False  # `even_divisible=False`, or a value the model cannot read
        target = site.target
        found = model.graph.class_at(target) if target is not None and model.api(site) != api.DISTRIBUTED_SAMPLER \
            else None
        if found is not None:
            for module, info in model.graph.mro(*found):
                if "__iter__" in info.methods:
                    return "total_size" in module.code(module.functions[info.methods["__iter__"]])
        return True
    if _chosen_distributed_sampler(model, site):
        # `sampler(val_set)` with the class handed in (`DistributedSampler` on the DDP path,
        # `RandomSampler` otherwise): torch's own, padding unless told not to.
        dropping = site.arg("drop_last", 5)
        return not site.has_star_kwargs and (dropping is None or is_false(dropping))
    return model.shards_like_distributed_sampler(site) and not site.has_keyword("drop_last") \
        and not site.has_star_kwargs


# `self.total_size = len(self.dataset)`: the shards add up to the dataset itself. The length
# alone ends the statement: `len(dataset) - len(dataset) % self.num_replicas` cuts it to a
# multiple of the world size, which every rank shares alike.
_WHOLE_TOTAL = re.compile(r"self\.total_size[ \t]*=[ \t]*len\([ \t]*(self\.)?dataset[ \t]*\)[ \t]*(?:#[^\n]*)?$",
                          re.MULTILINE)


def evens_nothing(model: Model, site: CallSite) -> bool:
    """The sampler built at `site` is a project sampler written like DistributedSampler (a
    subclass of it, or a `Sampler` that splits by `num_replicas`) that sets its `total_size` to
    the dataset's own length (`self.total_size = len(self.dataset)`, the "DistributedEvalSampler"
    copied between projects): no padding and no dropping, so the first `len % world_size` ranks
    get one sample more than the others."""
    target = site.target
    if target is None or target.kind != "class" or model.api(site) == api.DISTRIBUTED_SAMPLER:
        return False
    found = model.graph.class_at(target)
    if found is None or not (model.graph.is_subclass(target, api.DISTRIBUTED_SAMPLER)
                             or model.shards_like_distributed_sampler(site)):
        return False
    return any(_WHOLE_TOTAL.search(code_only(module.code(info.node))) for module, info in model.graph.mro(*found))


# `self.total_size = len(dataset) - len(dataset) % self.num_replicas`, or `len(self.dataset) //
# self.num_replicas * self.num_replicas`: the total cut down to a multiple of the world size.
_LENGTH = r"len\([ \t]*(?:self\.)?dataset[ \t]*\)"
_CUT_TOTAL = re.compile(
    rf"self\.total_size[ \t]*=[ \t]*(?:{_LENGTH}[ \t]*-[ \t]*\(?[ \t]*{_LENGTH}[ \t]*%[ \t]*self\.num_replicas"
    rf"|\(?[ \t]*{_LENGTH}[ \t]*//[ \t]*self\.num_replicas[ \t]*\)?[ \t]*\*[ \t]*self\.num_replicas)")


def drops_remainder(model: Model, site: CallSite) -> bool:
    """The sampler built at `site` is a project subclass of DistributedSampler that cuts its
    `total_size` to a multiple of the world size (`len(dataset) - len(dataset) %
    self.num_replicas`): every rank gets `total_size // num_replicas` samples, none repeated."""
    target = site.target
    if target is None or target.kind != "class" or model.api(site) == api.DISTRIBUTED_SAMPLER:
        return False
    found = model.graph.class_at(target)
    if found is None or not model.graph.is_subclass(target, api.DISTRIBUTED_SAMPLER):
        return False
    return any(_CUT_TOTAL.search(code_only(module.code(info.node))) for module, info in model.graph.mro(*found))


def _chosen_distributed_sampler(model: Model, site: CallSite) -> bool:
    """A call of a name (a parameter, a variable) whose values are sampler classes, torch's
    DistributedSampler among them and the others torch's non-distributed samplers."""
    func = site.node.func
    if not isinstance(func, cst.Name) or site.target is not None and site.target.kind == "class":
        return False
    values = model.values.at_call(site, func)
    names = set()
    for value in values:
        if not isinstance(value.node, (cst.Name, cst.Attribute)):
            return False
        names.add(model.qualname(value.module, value.node, value.scope))
    return api.DISTRIBUTED_SAMPLER in names and names <= {api.DISTRIBUTED_SAMPLER} | api.LOCAL_SAMPLERS


def plainly_local(model: Model, values: list[Value]) -> bool:
    """Every value is None or a torch sampler that draws from the whole dataset."""
    return all(is_none(v.node) or model.api_of(v) in api.LOCAL_SAMPLERS for v in values)


# --- command-line options ---------------------------------------------------------------------------
def option_values(model: Model, value: Value) -> list[Value]:
    """The default of the command-line option a leaf reads (`args.model`), evaluated where the
    option is declared: in the leaf's own module, or in the module whose parser made the
    namespace (`args = common.parse_args("resnet50")` with `--model` defaulting to that
    parameter). [] when the leaf reads no option the model can find."""
    node = value.node
    if not isinstance(node, cst.Attribute) or not isinstance(node.value, cst.Name):
        return []
    found = _declared_default(model, value.module, node)
    if found:
        return found
    for base in model.values.of(value.module, node.value, value.scope, value.frame, at=value.at):
        if base.call is not None and base.module is not value.module:
            found = _declared_default(model, base.module, node)
            if found:
                return found
        if base.call is not None:
            found = _helper_declared_default(model, base, node)
            if found:
                return found
    return []


def _helper_declared_default(model: Model, made: Value, node: cst.Attribute) -> list[Value]:
    """The default of an option that a project function adds to the parser the namespace comes
    from: `parser = cli.add_computing_args(parser=parser)`, then `args = parser.parse_args()`."""
    call = made.call
    assert call is not None
    func = call.func
    if not (isinstance(func, cst.Attribute) and func.attr.value in ("parse_args", "parse_known_args")
            and isinstance(func.value, cst.Name)):
        return []
    for binding in made.scope.lookup(func.value.value):
        bound = getattr(binding, "value", binding)
        site = made.module.call_at(bound) if isinstance(bound, cst.Call) else None
        target = site.target if site is not None else None
        if target is None or target.kind != "function" or target.path is None:
            continue
        helper = model.project_model(Path(target.path))
        found = _declared_default(model, helper, node) if helper is not None else []
        if found:
            return found
    return []


def documented_values(model: Model, value: Value) -> list[str]:
    """The values the usage examples of the linted script's docstring pass to the option a leaf
    reads (`args.arch` and `python train.py --arch resnet50`, `torchrun ... train.py --arch
    resnet50`), for an option no module the model reads declares (a parser built by a library,
    `init_config(parser=parser)`). [] unless every documented command of the script passes it:
    a command without it runs with a default nobody knows."""
    node = value.node
    if not isinstance(node, cst.Attribute) or not isinstance(node.value, cst.Name):
        return []
    dest = node.attr.value
    root = model.root
    if dest in option_defaults(root) or (value.module is not root and dest in option_defaults(value.module)):
        return []
    doc = root.tree.get_docstring(clean=False)
    script = Path(str(root.path)).name
    if not doc or not script.endswith(".py"):
        return []
    text = re.sub(r"\\[ \t]*\n", " ", doc)
    runs = re.compile(rf"(?:\bpython[\d.]*|\btorchrun\b|torch\.distributed\.(?:launch|run))[^\n]*?"
                      rf"(?<![\w.-]){re.escape(script)}\b([^\n]*)")
    flags = {f"--{dest}", f"--{dest.replace('_', '-')}"}
    found: list[str] = []
    for command in runs.finditer(text):
        words = command.group(1).split()
        given = None
        for i, word in enumerate(words):
            flag, eq, rest = word.partition("=")
            if flag in flags:
                given = rest if eq else (words[i + 1] if i + 1 < len(words) else None)
        if given is None or not re.fullmatch(r"[\w.-]+", given):
            return []
        found.append(given)
    return sorted(set(found))


def off_by_default(model: Model, value: Value) -> bool:
    """A leaf that reads an on/off option the command line leaves off unless asked
    (`drop_last=args.drop_last` of `add_argument("--drop-last", action="store_true")`), declared
    in the leaf's module or in the one whose parser made the namespace."""
    node = value.node
    if not isinstance(node, cst.Attribute) or not isinstance(node.value, cst.Name):
        return False
    if default_takes(value.module, node, False) is False:
        return True
    return any(base.call is not None and base.module is not value.module
               and default_takes(base.module, node, False) is False
               for base in model.values.of(value.module, node.value, value.scope, value.frame, at=value.at))


def _declared_default(model: Model, module: ModuleModel, node: cst.Attribute) -> list[Value]:
    default = option_default(module, node)
    if default is None:
        return []
    site = next((c for c in module.calls if c.method == "add_argument" and c.arg("default") is default), None)
    if site is None:
        return []
    return model.values.at_call(site, default)


# --- optimizers -------------------------------------------------------------------------------------
def is_optimizer_step(model: Model, site: CallSite) -> bool:
    """`optimizer.step()`, `self.opt.step()`, `scaler.step(optimizer)`; not `scheduler.step()`."""
    if site.method != "step":
        return False
    receiver = site.receiver
    assert receiver is not None
    values = model.values.at_call(site, receiver)
    for value in values:
        name = model.api_of(value)
        if name is not None:
            if api.is_optimizer(name) or name in api.GRAD_SCALERS:
                return True
            if name.startswith("torch.optim.lr_scheduler."):
                return False
    last = (site.receiver_name or "").rsplit(".", 1)[-1].lower()
    if "sched" in last:
        return False
    return "opt" in last or "scaler" in last or last == "solver"


# --- devices ----------------------------------------------------------------------------------------
def is_cuda_value(model: Model, site: CallSite, expr: cst.BaseExpression) -> bool:
    """A device expression that is (or may be) CUDA: `"cuda:0"`, `f"cuda:{rank}"`, a variable
    holding one on some path (`device = "cuda" if ... else "cpu"`), `torch.device("cuda", i)`."""
    for value in model.values.at_call(site, expr):
        if any(model.paths.kind(value.module, g, value.scope) == "single" for g in value.conditions):
            continue  # (`device = "cuda"` under `if args.local_rank == -1:`: not the DDP run's device)
        node = value.node
        text = string_text(node) if isinstance(node, cst.BaseExpression) else None
        if text is not None and text.startswith("cuda"):
            return True
        if value.call is not None and model.api_of(value) == api.TORCH_DEVICE:
            first = argument(value.call, "type", 0)
            kind = string_text(first) if first is not None else None
            if kind is not None and kind.startswith("cuda"):
                return True
    return False


def uses_cuda(model: Model, site: CallSite) -> bool:
    """Whether the call puts the distributed run on CUDA: a call (or a device value) only on the
    path that runs without a process group does not."""
    if any(model.paths.kind(site.module, g, site.scope) == "single" for g in site.guards):
        return False
    name = model.api(site)
    if name == api.INIT_PROCESS_GROUP:
        backend = site.arg("backend", 0)
        if backend is None:
            return False
        for value in model.values.at_call(site, backend):
            text = string_text(value.node) if isinstance(value.node, cst.BaseExpression) else None
            if text is not None and "nccl" in text.lower():
                return True
            if isinstance(value.node, cst.Attribute) and value.node.attr.value == "NCCL":
                return True
        return False
    if site.method == "cuda":
        return True
    if name == api.DDP and site.has_keyword("device_ids") and not _no_devices(model, site):
        return True
    if name == api.TORCH_DEVICE or site.method == "to":
        first = site.arg("device", 0)
        if first is not None and is_cuda_value(model, site, first):
            return True
    device = site.arg("device")
    return device is not None and is_cuda_value(model, site, device)


def _no_devices(model: Model, site: CallSite) -> bool:
    """`device_ids=None` (itself, or a name every value of which is `None`): the wrap of a model
    on the CPU, as a gloo run writes it, names no GPU."""
    ids = site.arg("device_ids")
    if ids is None:
        return False
    values = model.values.at_call(site, ids)
    return bool(values) and all(isinstance(v.node, cst.Name) and v.node.value == "None" for v in values)


_RANK_WRAPPERS = frozenset({"int", "str"})


def is_local_rank(model: Model, value: Value, depth: int = 3) -> bool:
    """A leaf that is a process's index on its own machine, not in the job: LOCAL_RANK (or a
    scheduler's local id) read from the environment, `rank % torch.cuda.device_count()`, a
    `local_rank` option or field the model follows no further (`args.local_rank`), or a
    parameter named `local_rank` (the index `mp.spawn` passes a worker that adds the node's
    offset for its global rank)."""
    node = value.node
    if isinstance(node, Param):
        return node.name == "local_rank"
    if isinstance(node, cst.Call):
        name = model.api_of(value)
        if name in api.ENV_GETTERS:
            return string_text(argument(node, "key", 0)) in api.LOCAL_RANK_ENV
        if dotted(node.func) in _RANK_WRAPPERS and node.args and depth > 0:
            inner = model.values.of(value.module, node.args[0].value, value.scope, value.frame, at=value.at)
            return bool(inner) and all(is_local_rank(model, v, depth - 1) for v in inner)
        return False
    if isinstance(node, cst.Subscript):
        base = node.value
        named = base.attr.value if isinstance(base, cst.Attribute) else base.value if isinstance(base, cst.Name) else ""
        if named == "environ" and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
            return string_text(node.slice[0].slice.value) in api.LOCAL_RANK_ENV
        return False
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
        right = node.right
        return isinstance(right, cst.Call) and (dotted(right.func) or "").endswith("cuda.device_count")
    if isinstance(node, cst.Attribute):
        return node.attr.value == "local_rank"
    return False


def global_rank_source(model: Model, value: Value, depth: int = 3) -> str | None:
    """`dist.get_rank()` or the RANK environment variable, as the user wrote it, when a leaf is
    (or converts) one."""
    found = global_rank_origin(model, value, depth)
    return found[0] if found else None


def global_rank_origin(model: Model, value: Value, depth: int = 3) -> tuple[str, Value] | None:
    """As `global_rank_source`, with the leaf that reads the rank: uses of one read share it, so
    a rule can report the read once rather than every place its value goes."""
    node = value.node
    if isinstance(node, cst.Call):
        name = model.api_of(value)
        if name in api.GLOBAL_RANK_CALLS:
            if argument(node, "group", 0) is not None:
                return None  # the rank within a group (a node-local group gives the local rank)
            return "dist.get_rank()", value
        if name is not None and name.startswith(api.MPI_COMM_WORLD + ".") \
                and name.rsplit(".", 1)[1] in api.MPI_RANK_METHODS:
            return "MPI.COMM_WORLD.Get_rank()", value  # the rank among every process of the job
        if name in api.ENV_GETTERS:
            key = _env_key(model, value, argument(node, "key", 0))
            if key in api.GLOBAL_RANK_ENV:
                return f'os.environ["{key}"]', value
            return None
        if dotted(node.func) in _RANK_WRAPPERS and node.args and depth > 0:
            for inner in model.values.of(value.module, node.args[0].value, value.scope, value.frame, at=value.at):
                found = global_rank_origin(model, inner, depth - 1)
                if found:
                    return found
        return None
    if isinstance(node, cst.Subscript):
        base = node.value
        named = base.attr.value if isinstance(base, cst.Attribute) else base.value if isinstance(base, cst.Name) else ""
        if named == "environ" and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
            key = _env_key(model, value, node.slice[0].slice.value)
            if key in api.GLOBAL_RANK_ENV:
                return f'os.environ["{key}"]', value
    return None


def _env_key(model: Model, value: Value, key: cst.BaseExpression | None) -> str | None:
    """The variable an environment read asks for: a literal, or a helper's parameter
    (`def read_environment(variable): return int(os.environ.get(variable))`) when the call the
    value was followed through passes one literal (`read_environment("SLURM_PROCID")`). Without
    that call (`value.frame`), the helper's every caller would count, whatever it reads."""
    if key is None:
        return None
    text = string_text(key)
    if text is not None or not isinstance(key, cst.Name) or value.frame is None:
        return text
    found = {string_text(v.node) if isinstance(v.node, cst.BaseExpression) else None
             for v in model.values.of(value.module, key, value.scope, value.frame, at=value.at)}
    return found.pop() if len(found) == 1 else None


# `dev` as a word of its own (`dev_loader`, `self.dev_set`), not the start of `device`; `fid`
# (the FID's reference images: `data_loader_fid`, `is_for_fid`) likewise, not inside `confidence`.
_EVAL_WORDS = re.compile(r"val|test|eval|(?:^|[._])dev(?:_|set|$)|(?:^|[._])va(?:_|$)|(?:^|[._])fid(?:_|$)", re.I)


def training_scopes(model: Model, module: ModuleModel) -> set[int]:
    """The scopes of `module` that back-propagate, themselves or through what they call (ids)."""
    found: set[int] | None = module.memo.get("training_scopes")
    if found is None:
        found = module.memo["training_scopes"] = {
            id(c.scope) for c in module.calls if c.method == "backward" or model.facts.does(c, "backward")}
    return found


def loops_over(model: Model, loader: cst.Call) -> list[tuple[ModuleModel, ForSite]]:
    """The `for` loops of the run that iterate what the DataLoader call `loader` makes: `for b
    in loader`, through `enumerate(...)`, `tqdm(...)`, and a name that holds such a call (`t =
    tqdm(enumerate(loader))`), in the script or the project functions it hands the loader to."""
    return [(module, loop) for module in model.paths.modules() for loop in module.fors
            if iterates(model, module, loop.node.iter, loop.scope, loader, loop.point)]


def read_without_grad(model: Model, loader: cst.Call) -> bool:
    """Every loop the run iterates the loader in runs under `torch.no_grad()` (or in a function
    decorated so) and back-propagates nothing: an evaluation's loader. False when no loop over
    it is seen."""
    loops = loops_over(model, loader)
    if not loops:
        return False
    for module, loop in loops:
        function = loop.scope.function
        if not is_no_grad(model, module, loop.withs, function.qualname if function is not None else None):
            return False
        if any(c.method == "backward" or model.facts.does(c, "backward")
               for c in module.calls if loop.node in c.loops):
            return False
    return True


def iterates(model: Model, module: ModuleModel, expr: cst.BaseExpression, scope: Scope, loader: cst.Call,
              at: Point | None, depth: int = 3) -> bool:
    """`expr` holds the loader, or a call handed it (`enumerate(loader)`, `t = tqdm(enumerate(
    loader))`)."""
    values = model.values.of(module, expr, scope, at=at)
    if any(v.node is loader for v in values):
        return True
    if depth <= 0:
        return False
    calls = [(module, expr, scope, at)] if isinstance(expr, cst.Call) else [
        (v.module, v.node, v.scope, v.at) for v in values if isinstance(v.node, cst.Call)]
    return any(iterates(model, m, a.value, sc, loader, point, depth - 1)
               for m, call, sc, point in calls for a in call.args)


def is_eval_name(name: str | None) -> bool:
    if not name:
        return False
    return "train" not in name.lower() and bool(_EVAL_WORDS.search(name))


# Where torch.save writes to memory, not to a file every rank shares.
IN_MEMORY = frozenset({"io.BytesIO", "io.StringIO", "tempfile.SpooledTemporaryFile"})


def per_rank_or_memory(model: Model, site: CallSite, target: cst.BaseExpression | None,
                       memory: bool = True) -> bool:
    """A file argument whose path contains the rank (one file per rank, on purpose), or (when
    `memory`) that is an in-memory buffer."""
    if target is None:
        return False
    from ddpcheck.lint.model.conditions import is_rank_value

    for value in model.values.at_call(site, target):
        if value.call is not None and model.api_of(value) in IN_MEMORY:
            if memory:
                return True
            continue
        node = value.node
        if not isinstance(node, cst.CSTNode):
            continue
        resolve = model.resolver_for(value.module, value.scope)
        for sub in subexpressions(node):
            if isinstance(sub, (cst.Name, cst.Attribute, cst.Call)) and is_rank_value(sub, resolve):
                return True
    return False


def splits_by_rank(model: Model, value: Value, builder: bool = False, depth: int = 3) -> bool:
    """`value` is made by a project class or function that keeps its own rank's part of the data
    (`[x for i, x in enumerate(rows) if i % world_size == rank]`, `np.array_split(files, n)[rank]`,
    `rows[rank::world_size]`), in its own body or in a project function it calls: a dataset that
    shards itself needs no DistributedSampler. `builder`: `value` was made in another function
    than the one that uses it, whose own body counts as well."""
    if value.call is None:
        return False
    # The call and the calls in its arguments (`TensorDataset(read_my_part(folder))`).
    sites = [value.module.call_at(node) for node in subexpressions(value.call) if isinstance(node, cst.Call)]
    # And the calls that made what a name passed to it holds (`rows = load_rows(path, rank, world)`
    # then `QADataset(rows)`).
    for a in value.call.args:
        if isinstance(a.value, cst.Name):
            sites.extend(value.module.call_at(bound) for bound in value.scope.assignments.get(a.value.value, ())
                         if isinstance(bound, cst.Call))
    todo = [(callee, depth) for site in sites if site is not None for callee, _ in model.graph.targets(site)]
    if builder and value.scope.kind == "function" and value.scope.qualname in value.module.functions \
            and value.scope.qualname in value.module.returns:
        # The dataset comes out of a builder (`load_data(opt)` returns it): what the builder
        # reads on the way counts too (`load_shard(path)` keeping the rank's files).
        todo.append((Function(value.module, value.scope.qualname), depth))
    seen: set[tuple[int, str]] = set()
    while todo:
        function, left = todo.pop()
        key = (id(function.module), function.qualname)
        if key in seen:
            continue
        seen.add(key)
        resolve = model.resolver_for(function.module, function.scope)
        if any(_rank_selection(node, resolve) for node in subexpressions(function.node)):
            return True
        if left > 1:
            for inner in function.module.calls_in(function.qualname):
                todo.extend((callee, left - 1) for callee, _ in model.graph.targets(inner))
    return False


def _rank_selection(node: cst.CSTNode, resolve: Resolve) -> bool:
    """`parts[rank]`, `rows[rank::world]`, `i % world == rank`: a selection by the rank."""
    if isinstance(node, cst.Subscript) and len(node.slice) == 1:
        part = node.slice[0].slice
        if isinstance(part, cst.Index):
            return not isinstance(part.value, cst.SimpleString) and is_rank_value(part.value, resolve)
        if isinstance(part, cst.Slice):
            return part.lower is not None and part.step is not None and is_rank_value(part.lower, resolve)
        return False
    if isinstance(node, cst.Comparison) and len(node.comparisons) == 1 \
            and isinstance(node.comparisons[0].operator, cst.Equal):
        sides = (node.left, node.comparisons[0].comparator)
        for one, other in (sides, sides[::-1]):
            if isinstance(one, cst.BinaryOperation) and isinstance(one.operator, cst.Modulo) \
                    and is_rank_value(other, resolve):
                return True
    return False


# Calls that read a function's locals without naming them.
_READS_LOCALS = frozenset({"locals", "vars", "eval", "exec"})


def bypassed_sampler(model: Model, site: CallSite) -> bool:
    """The DistributedSampler made at `site` (bound to a local name) is handed to no loader of
    its function, and a loader there is made over the same dataset without it (`test_sampler =
    DistributedSampler(test_set)`, then `test_loader = DataLoader(test_set, batch_size=n)` and
    both returned in a dict): that loader reads the whole set on every rank, unpadded."""
    scope = site.scope
    names = site.module.assigned_names(site.node)
    dataset = argument(site.node, "dataset", 0)
    if scope.kind != "function" or len(names) != 1 or "." in names[0] or not isinstance(dataset, cst.Name):
        return False
    reads = _reads_of(scope.node, names[0])
    if reads is None:
        return False
    for _, parents in reads:
        for parent in parents:
            if isinstance(parent, cst.Call):
                call = site.module.call_at(parent)
                if call is None or model.makes(call, api.DATALOADER) or call.target is not None:
                    return False  # handed to a loader, or to a project function that may build one
    loaders = [c for c in site.module.calls if c.scope is scope and model.makes(c, api.DATALOADER)]
    return any(isinstance(d := argument(c.node, "dataset", 0), cst.Name) and d.value == dataset.value
               and argument(c.node, "sampler") is None and argument(c.node, "batch_sampler") is None
               and not any(a.star for a in c.node.args) for c in loaders)


def _reads_of(function: cst.CSTNode, name: str) -> list[tuple[cst.Name, tuple[cst.CSTNode, ...]]] | None:
    """Every place `name` is read in `function` (nested functions and lambdas included: they may
    close over it), with the nodes above it; None when the function may read it unseen
    (`locals()`, `eval`, a `global`/`nonlocal` declaration of it)."""
    found: list[tuple[cst.Name, tuple[cst.CSTNode, ...]]] = []
    stack: list[tuple[cst.CSTNode, tuple[cst.CSTNode, ...]]] = [(function, ())]
    while stack:
        node, parents = stack.pop()
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in _READS_LOCALS:
            return None
        if isinstance(node, (cst.Global, cst.Nonlocal)) and any(n.name.value == name for n in node.names):
            return None
        if isinstance(node, cst.Name) and node.value == name and not _bound_here(node, parents):
            found.append((node, parents))
        stack.extend((child, parents + (node,)) for child in children(node))
    return found


def _bound_here(node: cst.Name, parents: tuple[cst.CSTNode, ...]) -> bool:
    """`node` is only bound where it stands: an assignment's target (alone or unpacked), a
    loop's target, a `with ... as` name."""
    child: cst.CSTNode = node
    for parent in reversed(parents):
        if isinstance(parent, (cst.Tuple, cst.List, cst.Element, cst.StarredElement)):
            child = parent
            continue
        if isinstance(parent, cst.AssignTarget):
            return parent.target is child
        if isinstance(parent, (cst.AnnAssign, cst.For, cst.CompFor)):
            return parent.target is child
        if isinstance(parent, cst.AsName):
            return parent.name is child
        return False
    return False


def unread_result(site: CallSite) -> bool:
    """What the call at `site` returns is bound to one local name of its function that nothing
    reads (`optimizer = SGD(...)` in a benchmark that only times `backward()`): the object is
    built and never used. False whenever a use cannot be ruled out (module level, an attribute
    or container target, `locals()`, a `global` declaration)."""
    reads = _local_reads(site)
    return reads is not None and not reads


def _local_reads(site: CallSite) -> list[tuple[cst.Name, tuple[cst.CSTNode, ...]]] | None:
    """The reads of the one local name of its function that the call at `site` is bound to; None
    when there is no such name or its reads cannot be told (see `_reads_of`)."""
    if site.scope.kind != "function":
        return None
    names = site.module.assigned_names(site.node)
    if len(names) != 1 or "." in names[0]:
        return None
    # Asked by several rules of the same optimizers and loaders: walk each function once per name.
    key = f"local_reads:{id(site.scope.node)}:{names[0]}"
    if key not in site.module.memo:
        site.module.memo[key] = _reads_of(site.scope.node, names[0])
    found: list[tuple[cst.Name, tuple[cst.CSTNode, ...]]] | None = site.module.memo[key]
    return found


def unread_loader(model: Model, site: CallSite) -> bool:
    """The DistributedSampler made at `site` feeds no loader that is used: it is bound to a
    local name of its function, and every read of that name hands it to a DataLoader whose
    result is bound to a local name read nowhere (`test_loader = DataLoader(test_set,
    sampler=test_sampler)` for a test the script never runs). Such a sampler shards and pads
    nothing that is iterated. False whenever a use cannot be followed (attributes, containers,
    returns, `locals()`)."""
    scope = site.scope
    reads = _local_reads(site)
    if reads is None:
        return False
    for _, parents in reads:
        if len(parents) < 2 or not isinstance(parents[-1], cst.Arg) or not isinstance(parents[-2], cst.Call):
            return False
        loader = site.module.call_at(parents[-2])
        if loader is None or loader.scope is not scope or model.api(loader) != api.DATALOADER:
            return False
        if not unread_result(loader):
            return False
    return True


def wrapped_iterables(model: Model, value: Value) -> list[tuple[str, Value]]:
    """What an instance of a project wrapper yields from, when `value` constructs one: a class
    whose `__iter__` loops over `self.x` (also through `iter`/`enumerate`), which its constructor
    sets straight from one of its parameters (`self.dl = dl`); the values the construction
    passes there (`WrappedDataLoader(train_loader, preprocess)`: `train_loader`'s). Iterating
    the wrapper iterates them), each with the attribute that holds it (`dl`). Empty for anything
    else."""
    call = value.call
    found = model.graph.instance_of(value) if call is not None else None
    site = value.module.call_at(call) if call is not None else None
    if found is None or site is None:
        return []
    iterate = model.graph.method(*found, "__iter__")
    init = model.graph.method(*found, "__init__")
    node = iterate.module.functions.get(iterate.qualname) if iterate is not None else None
    if node is None or init is None:
        return []
    out: list[tuple[str, Value]] = []
    for loop in subexpressions(node.body):
        if not isinstance(loop, cst.For):
            continue
        source: cst.BaseExpression = loop.iter
        while isinstance(source, cst.Call) and dotted(source.func) in ("iter", "enumerate") and source.args:
            source = source.args[0].value
        attribute = dotted(source) or ""
        if not attribute.startswith("self.") or attribute.count(".") != 1:
            continue
        for _, info in model.graph.mro(*found):
            for bound in info.scope.assignments.get(attribute, ()):
                held = getattr(bound, "value", None)
                if not isinstance(held, cst.Name):
                    continue
                param = next((p for p in init.params() if p.name == held.value), None)
                passed = model.graph.argument_for(site, init, param, "constructor") if param is not None else None
                if isinstance(passed, cst.BaseExpression):
                    out += [(attribute[5:], v) for v in
                            model.values.of(value.module, passed, value.scope, value.frame, at=value.at)]
    return out
