"""Who reads back the checkpoints a run writes (DDP019, DDP024): loaders that strip a wrapper's
key prefix, in the run or anywhere in the project, and the project's scripts that load through
the run's own loader into a model no wrapper holds."""

from __future__ import annotations

import re
from functools import lru_cache
from collections.abc import Callable, Sequence
from pathlib import Path

import libcst as cst

from ddpcheck.lint.model import api
from ddpcheck.lint.model.index import code_only
from ddpcheck.lint.model.module import CallSite, ModuleModel, Point, Scope, Target
from ddpcheck.lint.model.project import resolved_path
from ddpcheck.lint.model.scripts import project_files
from ddpcheck.lint.model.semantic import Model
from ddpcheck.lint.model.symbols import Function
from ddpcheck.lint.model.syntax import argument, dotted, subexpressions
from ddpcheck.lint.model.values import Frame

Strips = Callable[[str], bool]  # whether a piece of code removes the prefix from state-dict keys

# Text of a file that may hold a model some wrapper has (whose keys carry the wrapper's prefix
# too: `DataParallel`, `model.module`) or that takes part in a distributed run: such a file is no
# plain-model reader.
_WRAPPING_OR_JOINING = r"DataParallel|\baccelerate\b|deepspeed|lightning|horovod|\.module\b|init_process_group"
_WRAPPING_TEXT = re.compile(r"torch\.distributed|" + _WRAPPING_OR_JOINING)
# The same without `torch.distributed` alone: a script importing it for an `if
# dist.is_initialized():` in a shared helper neither wraps a model nor joins a process group.
_WRAPS_OR_JOINS = re.compile(_WRAPPING_OR_JOINING)


def _is_load(model: Model, site: CallSite) -> bool:
    return site.method == "load_state_dict" or model.api(site) == api.LOAD


def loading_code(module: ModuleModel, site: CallSite) -> str:
    """The code around a load: its function's, or for module-level code the module's own
    statements (a network's constructor that renames a backbone's keys is not the code of a
    self-test at the foot of its module)."""
    function = site.scope.function
    if function is not None:
        return module.code(function.node)
    return "\n".join(module.code(statement) for statement in module.tree.body
                     if not isinstance(statement, (cst.FunctionDef, cst.ClassDef)))


def loaded_through_stripper(model: Model, strips: Strips) -> bool:
    """What a `load_state_dict(...)` of the run loads passes through a project function that
    strips the prefix (`model.load_state_dict(fix_keys(torch.load(path)))`, the renaming done
    in another module)."""
    return any(site.method == "load_state_dict" and _through_stripper(model, site, strips)
               for site in model.paths.sites())


def _through_stripper(model: Model, site: CallSite, strips: Strips) -> bool:
    """The state dict `site` loads is made inside a function that strips the prefix, or returned
    by a call of one (or of a function such a call makes)."""
    loaded = site.arg("state_dict", 0)
    if loaded is None:
        return False
    for value in model.values.at_call(site, loaded):
        if not isinstance(value.node, cst.CSTNode):
            continue
        function = value.scope.function
        if function is not None and function is not site.scope.function \
                and strips(value.module.code(function.node)):
            return True  # the value comes out of the function that renames the keys
        for sub in subexpressions(value.node):
            call = value.module.call_at(sub) if isinstance(sub, cst.Call) else None
            if call is not None and any(_function_strips(model, f, strips, 1) for f, _ in model.graph.targets(call)):
                return True
    return False


def _function_strips(model: Model, function: Function, strips: Strips, depth: int) -> bool:
    if strips(function.module.code(function.node)):
        return True
    if depth <= 0:
        return False
    return any(_function_strips(model, f, strips, depth - 1)
               for site in function.module.calls_in(function.qualname) for f, _ in model.graph.targets(site))


def _readers(model: Model, wanted: Callable[[str], bool]) -> list[ModuleModel]:
    """Models of the project's files whose text passes `wanted` and loads state dicts."""
    found = []
    for path in project_files(model.root.path):
        if not model.project.passes(path, _loads_state_dicts) or not model.project.passes(path, wanted):
            continue
        module = model.project_model(path)
        if module is not None:
            found.append(module)
    return found


def _loads_state_dicts(text: str) -> bool:
    return "load_state_dict" in text


def project_strips(model: Model, strips: Strips) -> bool:
    """A file of the project — the run's or another script, an inference or export tool the run
    never imports — loads checkpoints in code that strips the prefix: the project knows its
    checkpoints carry it and reads them back without it (also through a project function that
    strips it: `model.load_state_dict(strip_state_prefix(state_dict))`, the function in another
    module)."""
    for module in _readers(model, _strips_or_calls(strips, _stripping_functions(model, strips))):
        for site in module.calls:
            if _is_load(model, site) and not _loads_a_part(model, module, site) and (strips(loading_code(module, site)) or (
                    site.method == "load_state_dict" and _through_stripper(model, site, strips))):
                return True
    return _scripts_call_stripping_loader(model, strips)


def _scripts_call_stripping_loader(model: Model, strips: Strips) -> bool:
    """A script beside the run (an inference tool) hands a model to a project loader defined
    anywhere in the project that reads a checkpoint into it and strips the prefix on the way
    (`load_weights(model, cfg.test.model_path)` of `utils/model_utils.py`, whose body drops a
    leading `module.`): the project reads its checkpoints back without the prefix. Asked once
    per folder of scripts (and prefix test) while their texts stay the same."""
    files = project_files(model.root.path)
    return model.project.answer(("scripts_call_stripping_loader", files, strips), files,
                                lambda: _finds_script_calling_stripping_loader(model, files, strips))


def _finds_script_calling_stripping_loader(model: Model, files: Sequence[Path], strips: Strips) -> bool:
    for path in files:
        if not _imports_a_loader(model, path):
            continue
        module = model.project_model(path)
        if module is None:
            continue
        for site in module.calls:
            if site.scope.class_scope is not None or not site.node.args:
                continue  # a network's own code loading pretrained parts
            if not _LOADER_NAME.match((site.dotted or "").rpartition(".")[2]):
                continue
            for function, bound in model.graph.targets(site):
                if bound == "" and function.module is not module and _strips_into_parameter(function, strips):
                    return True
    return False


# A project function named for loading (`load_weights`, `load_checkpoint`), and a call of one
# by its bare name with arguments (`load_weights(net, path)`), as `from utils import *` or `from
# utils.weights import load_weights` brings it.
_LOADER = r"load_?\w*"
_LOADER_NAME = re.compile(_LOADER + "$")
_BARE_LOADER_CALL = re.compile(r"(?<![\w.])(" + _LOADER + r")\s*\((?!\s*\))")


def _imports_a_loader(model: Model, path: Path) -> bool:
    """The script calls a loader by a name it imports rather than defines (read from its text
    and index, before any model of it is built: most scripts beside the run define their own
    or call none)."""
    index = model.project.index(path)
    text = model.project.text(path)
    if index is None or text is None:
        return False
    called = {m.group(1) for m in _BARE_LOADER_CALL.finditer(code_only(text))} - index.functions
    return bool(called) and (bool(index.stars) or any(name in index.aliases for name in called))


def _strips_into_parameter(function: Function, strips: Strips) -> bool:
    """`function` strips the prefix and loads a state dict into one of its own parameters
    (`def load_weights(model, path): ... model.load_state_dict(...)`)."""
    code = function.module.code(function.node)
    if "load_state_dict" not in code or not strips(code):
        return False
    params = {p.name for p in function.params() if not p.star}
    return any(site.method == "load_state_dict" and site.receiver_name in params
               for site in function.module.calls_in(function.qualname))


def _stripping_functions(model: Model, strips: Strips) -> frozenset[str]:
    """Names of the project's functions whose code strips the prefix (`def strip_state_prefix(
    sd): ... k[len("_orig_mod.module."):]`), read from the texts of the files that do."""
    key = f"stripping_functions:{id(strips)}"
    found = model.root.memo.get(key)
    if found is None:
        names: set[str] = set()
        for path in project_files(model.root.path):
            if not model.project.passes(path, strips):
                continue
            text = model.project.text(path) or ""
            starts = [m for m in _DEF.finditer(text)]
            for i, m in enumerate(starts):
                end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
                if strips(text[m.start():end]):
                    names.add(m.group(1))
        found = frozenset(names)
        model.root.memo[key] = found
    return found


_DEF = re.compile(r"^[ \t]*def[ \t]+(\w+)[ \t]*\(", re.M)


@lru_cache(maxsize=64)
def _strips_or_calls(strips: Strips, names: frozenset[str]) -> Strips:
    """A text test: the code strips the prefix, or loads state dicts and calls one of `names`
    (one function per pair, so the project's per-file cache of text tests keeps its answers)."""
    calls = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(names))) + r")\s*\(") if names else None

    def test(text: str) -> bool:
        return strips(text) or (calls is not None and "load_state_dict(" in text and calls.search(text) is not None)
    return test


def _loads_a_part(model: Model, module: ModuleModel, site: CallSite) -> bool:
    """`site` is in the constructor of a network class that loads state dicts only into its
    parts (`backbone.load_state_dict(...)`, `self.encoder.load_state_dict(...)`): pretrained
    weights of a sub-network, whose keys cannot be a whole model's checkpoint, so renaming them
    says nothing about how the run's checkpoints are read."""
    function = site.scope.function
    owner = site.scope.class_scope
    path = resolved_path(module.path)
    if function is None or owner is None or path is None or not function.qualname.endswith(".__init__"):
        return False
    if not model.graph.is_subclass(Target(None, path, owner.qualname, "class"), api.MODULE_BASE):
        return False
    loads = [c for c in module.calls if c.method == "load_state_dict" and c.scope.function is function]
    receivers = [dotted(c.receiver) if c.receiver is not None else None for c in loads]
    return bool(loads) and all(r is not None and r != "self" for r in receivers)


def project_loads_wrapped(model: Model, files: frozenset[str] = frozenset()) -> bool:
    """A script of the project that only reads checkpoints (an analysis or inference tool: it
    saves none and runs no distributed job of its own) loads them into a model a `DataParallel`
    wrapper holds (`net = nn.DataParallel(net); net.load_state_dict(torch.load(path))`): that
    model's keys carry the same `module.` prefix, so the project reads the run's checkpoints
    back with it. A script that saves too, or runs DDP itself, round-trips its own — unless the
    code around its load names one of `files`, the file names the run saves to (a single-GPU
    `DataParallel` twin that resumes from the `best.pth` the DDP run writes, or reads the
    numbered snapshots `str(i) + '.pt'` the run writes as `str(step) + '.pt'`: both `{}.pt`)."""
    for module in _readers(model, _wrapped_reader_text):
        saves = "torch.save" in module.source
        if saves and not files:
            continue
        for site in module.calls:
            if site.method != "load_state_dict" or site.receiver is None:
                continue
            if saves and not files & _loaded_file_names(model, site):
                continue
            if any(model.constructs(v, api.DATA_PARALLEL) for v in model.values.at_call(site, site.receiver)):
                return True
    return False


def project_reads_into_ddp(model: Model, saves: Sequence[CallSite] = ()) -> bool:
    """A script of the project that saves no checkpoint (a distributed inference or evaluation
    script) loads one into a model the DDP wrapper holds (`model = DDP(model);
    model.load_state_dict(torch.load(path)["state_dict"])`): the project reads the run's
    checkpoints back with the `module.` prefix they carry — not where every file of `saves`
    (the run's saves) and every file that load reads are spelled, and none of them is the
    same (an evaluation script beside it that reads `final_model.pth`, another example's
    checkpoint, while the run writes `best_metric_model.pth`)."""
    written = _spelled_saves(model, saves)
    for module in _readers(model, _ddp_reader_text):
        if module is model.root:
            continue
        for site in module.calls:
            if site.method != "load_state_dict" or site.receiver is None:
                continue
            if any(model.constructs(v, api.DDP) for v in model.values.at_call(site, site.receiver)):
                if written is not None:
                    reads = _spelled_reads(model, site)
                    if reads is not None and not any(same_file(a, b) for a in written for b in reads):
                        continue
                return True
    return False


def _spelled_saves(model: Model, saves: Sequence[CallSite]) -> frozenset[str] | None:
    """The file names `saves` write, where each spells them; None where one does not."""
    names: set[str] = set()
    for save in saves:
        files = spelled_files(model, save.module, save.arg("f", 1), save.scope, at=save.point)
        if files is None:
            return None
        names |= files
    return frozenset(names) if names else None


def _spelled_reads(model: Model, site: CallSite) -> frozenset[str] | None:
    """The file names the `torch.load` calls behind what `site` (a `load_state_dict(...)`)
    loads read, where each spells them (`torch.load("final_model.pth")`); None otherwise."""
    loaded = site.arg("state_dict", 0)
    if loaded is None:
        return None
    names: set[str] = set()
    for value in model.values.at_call(site, loaded):
        if not isinstance(value.node, cst.CSTNode):
            return None
        for sub in subexpressions(value.node):
            if isinstance(sub, cst.Call) and model.qualname(value.module, sub.func, value.scope) == api.LOAD:
                files = spelled_files(model, value.module, argument(sub, "f", 0), value.scope, value.frame, value.at)
                if files is None:
                    return None
                names |= files
    return frozenset(names) if names else None


def _ddp_reader_text(text: str) -> bool:
    return "torch.save" not in text and ("DistributedDataParallel" in text or "DDP" in text)


def _wrapped_reader_text(text: str) -> bool:
    return "DataParallel" in text and _OWN_RUN_TEXT.search(text) is None


# A quoted file name with an extension at the end of a path literal (`'/weights/best.pth'`).
_FILE_NAME = re.compile(r"""['"](?:[^'"\n]*/)?([\w\-{}]+\.\w+)['"]""")


# Only the extension spelled, after a name built at run time (`str(step) + '.pt'`).
_BUILT_NAME = re.compile(r"""\+\s*['"](\.\w+)['"]""")


def _file_names(code: str, built: bool = False) -> set[str]:
    """The file names literals in `code` spell; `built`: also a name whose stem is built at run
    time and whose extension is added as a literal (`str(i) + '.pt'`), as `{}.pt` (a numbered
    snapshot: any stem)."""
    found = set(_FILE_NAME.findall(code))
    if built:
        found |= {"{}" + ext for ext in _BUILT_NAME.findall(code)}
    return found


def _loaded_file_names(model: Model, site: CallSite) -> set[str]:
    """The file names a `load_state_dict(...)` reads, where a literal spells them: in what it is
    handed (`torch.load(WORKDIR + "/best.pth")`) and in the path a `torch.load` there reads."""
    loaded = site.arg("state_dict", 0)
    if loaded is None:
        return set()
    found = _file_names(site.module.code(loaded), built=True)
    for value in model.values.at_call(site, loaded):
        if not isinstance(value.node, cst.CSTNode):
            continue
        found |= _file_names(value.module.code(value.node), built=True)
        for sub in subexpressions(value.node):
            if not isinstance(sub, cst.Call) or model.qualname(value.module, sub.func, value.scope) != api.LOAD:
                continue
            path = argument(sub, "f", 0)
            if path is None:
                continue
            for held in model.values.of(value.module, path, value.scope, value.frame, at=value.at):
                if isinstance(held.node, cst.CSTNode):
                    found |= _file_names(held.module.code(held.node), built=True)
    return found


def saved_file_names(model: Model, saves: list[CallSite]) -> frozenset[str]:
    """The file names (`best.pth`) the path arguments of `saves` end with, where a literal
    spells them (`cfg.workdir + '/weights/best.pth'`, `os.path.join(out, "last.pt")`)."""
    found: set[str] = set()
    for save in saves:
        path = save.arg("f", 1)
        if path is None:
            continue
        found |= _file_names(save.module.code(path), built=True)
        for value in model.values.at_call(save, path):
            if isinstance(value.node, cst.CSTNode):
                found |= _file_names(value.module.code(value.node), built=True)
    return frozenset(found)


def spelled_files(model: Model, module: ModuleModel, path: cst.BaseExpression | None, scope: Scope,
                  frame: Frame | None = None, at: Point | None = None) -> frozenset[str] | None:
    """The file names the path `path` ends with (`os.path.join(out, "best.pth")`, `"ckpt_{}.pt"
    .format(epoch)`), when every value it may hold spells one as a literal; None when one does
    not (`args.resume`: any file)."""
    if path is None:
        return None
    values = model.values.of(module, path, scope, frame, at=at)
    found: set[str] = set()
    for held in values:
        if not isinstance(held.node, cst.CSTNode):
            return None
        names = _file_names(held.module.code(held.node))
        if not names:
            return None
        found |= names
    return frozenset(found) if values else None


def same_file(a: str, b: str) -> bool:
    """Whether two spelled file names may name one file: a replacement field (`{}`, `{epoch}`)
    stands for any text."""
    return _name_pattern(a).fullmatch(b) is not None or _name_pattern(b).fullmatch(a) is not None


def _name_pattern(name: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in re.split(r"\{[^{}]*\}", name)))


# A file that starts a distributed run of its own (its checkpoints are its own business).
_OWN_RUN_TEXT = re.compile(r"init_process_group|DistributedDataParallel|\bDDP\b|accelerate|deepspeed|lightning")


def _wrapping_text(text: str) -> bool:
    return _WRAPPING_TEXT.search(text) is not None


def wraps_or_joins(text: str) -> bool:
    """The text wraps a model or joins a process group (see `_WRAPS_OR_JOINS`)."""
    return _WRAPS_OR_JOINS.search(text) is not None


def plain_readers(model: Model, loaders: list[Function]) -> bool:
    """Another script of the project, one with no wrapper or distributed run in it (a single-GPU
    twin of the training script, an evaluation script), calls one of the run's own checkpoint
    `loaders`: it loads the run's checkpoints into a plain model."""
    if not loaders:
        return False
    names = {f.name for f in loaders}
    where = {(resolved_path(f.module.path), f.qualname) for f in loaders}
    run = {resolved_path(m.path) for m in model.paths.modules()}
    for path in project_files(model.root.path):
        if path in run:
            continue
        # The pattern's answer is kept per text: every linted file asks about every file here.
        if model.project.passes(path, _wrapping_text):
            continue
        text = model.project.text(path)
        if text is None or not any(f"{n}(" in text for n in names):
            continue
        module = model.project_model(path)
        if module is None:
            continue
        for site in module.calls:
            target = site.target
            if target is not None and target.path is not None and target.kind == "function" \
                    and (Path(target.path), target.name) in where:
                return True
    return False


def strips_module_prefix(source: str) -> bool:
    """The code names the wrapper's key prefix (`"module."`, `'module.backbone.'`) or torch's
    helper that removes it, or rebuilds a state dict with its keys cut at a fixed position
    (`for k, v in ckpt.items(): new_sd[k[7:]] = v`, also through `name = k[7:]`): the project
    knows its keys carry a prefix and drops it by its length."""
    # The pattern needs a quote right before `module.`: most texts hold neither spelling, and
    # `in` rules them out faster than the pattern's scan with its look-behind at every character.
    if "'module." in source or '"module.' in source or "_orig_mod.module." in source:
        # (Not in a comment: `# k = "module." + k`, a rename the code no longer does.)
        if _PREFIX.search(source) and _PREFIX.search(code_only(source)):
            return True
    if "consume_prefix_in_state_dict" in source:
        return True
    if ".items()" not in source or ":]" not in source:
        return False
    for loop in _KEY_LOOP.finditer(source):
        key = re.escape(loop.group(1))
        if re.search(rf"(?:\[\s*{key}\[\s*[1-9]\d*\s*:\s*\]\s*\]\s*=|\b\w+\s*=\s*{key}\[\s*[1-9]\d*\s*:\s*\]\s*(?:#.*)?$)",
                     source[loop.end():], re.MULTILINE):
            return True
    return False


_PREFIX = re.compile(r"""(?<![\w.])['"](?:_orig_mod\.)?module\.""")
# `for k, v in state_dict.items():` — the key's name.
_KEY_LOOP = re.compile(r"\bfor\s+(\w+)\s*,\s*\w+\s+in\s+[^\n]*\.items\(\)\s*:")
