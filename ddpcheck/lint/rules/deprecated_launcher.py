from __future__ import annotations

from typing import TYPE_CHECKING, Sequence
import re

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint import remedies
from ddpcheck.lint.model import api
from ddpcheck.lint.model.index import code_only
from ddpcheck.lint.model.module import CallSite, ModuleModel
from ddpcheck.lint.model.project import locate, resolved_path
from ddpcheck.lint.model.syntax import children, dotted, string_text
from ddpcheck.lint.rule import Invalid, Pending, Rule

if TYPE_CHECKING:
    from ddpcheck.lint.model.semantic import Model

# What a script writes into the flag's entry off the launcher's path: a number, or a SLURM variable.
_NOT_A_LAUNCH_SOURCE = re.compile(
    r"""\s*(?:-?\d+|int\(\s*os\.environ\s*\[\s*['"]SLURM_\w+['"]\s*\]\s*\))\s*(?:#.*)?$""")
# Where a rank comes from once the process group is up, or from the launcher's environment.
_RANK_SOURCE = re.compile(r"\bget_rank\s*\(|\bget_local_rank\s*\(|\benviron\b")
# What follows an attribute that is assigned, not read: `=` that is no comparison.
_ASSIGNED = re.compile(r"[ \t]*=(?!=)")
_READS_LOCAL_RANK_ENV = re.compile(r"""['"]LOCAL_RANK['"]""")
_LOCAL_RANK_FLAGS = {"--local_rank", "--local-rank"}
_ABSL_LOCAL_RANK = {"local_rank", "local-rank"}
_HANDED_TO_ENV = re.compile(r"""environ\s*\[\s*['"]LOCAL_RANK['"]\s*\]\s*=(?!=)[^\n]*""")
# The parsed namespace turned into a dict or its attributes copied over: any of them may be read.
_WHOLE_NAMESPACE = re.compile(r"\bvars\s*\(|__dict__|\bsetattr\s*\(|\bupdate\s*\(\s*vars")
# The namespace kept whole as a record, not read by entry: a dict's value (`{"args": vars(args)}`
# saved with a checkpoint), printed, dumped to a file, or walked to list the options
# (`for arg, value in sorted(vars(args).items()): logger.info(...)`).
_RECORDED_NAMESPACE = re.compile(
    r"""['"]\w+['"]\s*:\s*vars\s*\(\s*\w+\s*\)|\b(?:print|pprint|json\.dumps?|yaml\.(?:safe_)?dump)\s*\(\s*vars\s*\(\s*\w+\s*\)"""
    r"""|\bfor\s+\w+\s*,\s*\w+\s+in\s+(?:sorted\s*\(\s*)?vars\s*\(\s*\w+\s*\)\s*\.\s*items\s*\(\s*\)""")
# The namespace copied into another namespace (`args_test = argparse.Namespace(**vars(args))`):
# the copy's entries are read by attribute like the original's, and those reads are looked for.
_COPIED_NAMESPACE = re.compile(r"\b(?:argparse\s*\.\s*)?Namespace\s*\(\s*\*\*\s*vars\s*\(\s*[\w.]+\s*\)\s*\)")
# A statement that only shows values (`print("Local Rank: {}".format(args.local_rank))`, a log
# line): what it mentions is displayed, not used.
_SHOWN = re.compile(r"^[ \t]*(?:print|(?:self\.)?(?:logger|logging|log)\.(?:info|debug|warning))\s*\(.*\)[ \t]*$",
                    re.MULTILINE)
# A command that starts the deprecated launcher (in code, a comment or a docstring), not prose
# that names it: `-m torch.distributed.launch`, or the module followed by its options or a script.
_COMMAND = re.compile(
    r"-m\s+torch\.distributed\.launch\b|torch\.distributed\.launch\s+(?:--[\w-]+|\S+\.py\b)"
)


class DeprecatedLauncher(Rule):
    """The script relies on `torch.distributed.launch` (deprecated) or its `--local_rank` argument.

    ## Why it matters
    `torch.distributed.launch` is deprecated in favour of `torchrun` and prints a `FutureWarning`
    ("The module torch.distributed.launch is deprecated and will be removed in future. Use
    torchrun.") on every start. The bigger trap is the `--local_rank` command-line argument it
    passes to each process: `torchrun` does not pass it, it sets the `LOCAL_RANK` environment
    variable instead. A script that takes its GPU from `args.local_rank` then sees the default
    (`-1` or `0`) on every rank under torchrun: users see all processes crowd onto GPU 0, or
    `error: unrecognized arguments: --local-rank=0` when the old launcher (PyTorch ≥ 2.0 spells it
    with a hyphen) meets a parser that only knows `--local_rank`.

    Reported: importing or running `torch.distributed.launch` (import, `runpy.run_module`, a
    `-m torch.distributed.launch` command handed to `subprocess`/`os.system`), a launch command
    for it written in a comment or docstring (the script is meant to be started that way) or in
    a string of a project function the script's run goes through (a set-up helper's error
    message: "did you launch with `python -m torch.distributed.launch`?"), and an argparse
    `--local_rank` / `--local-rank` argument (or absl's `flags.DEFINE_integer("local_rank",
    ...)`) in a file that never reads `LOCAL_RANK` from the environment, directly or through a
    helper of the project (`utils.init_distributed_mode(args)`; a helper that reads only RANK
    for its own `set_device` leaves `args.local_rank` at its default; one that writes the flag's
    entry only with a number or SLURM's own variable, `params.local_rank = int(os.environ
    ["SLURM_LOCALID"])` on the cluster path and `0` on the single-GPU one, leaves the flag the
    launcher path's source, and an object keeping a parameter as `self.local_rank` writes no
    entry of the namespace; where the script itself hands the flag to
    `torch.cuda.set_device(args.local_rank)`, or a field the run copies the flag into
    (`config.LOCAL_RANK = args.local_rank` in a config builder, then
    `torch.cuda.set_device(config.LOCAL_RANK)`), and no module of the run sets that entry from the
    environment or the process group, a helper reading LOCAL_RANK for something else, such as
    downloading weights on local rank 0 only, does not change where the device comes from), or imports `deepspeed`
    (whose launcher does pass the flag). Writing the variable from the flag (`os.environ
    ["LOCAL_RANK"] = str(args.local_rank)` where it is unset) is no read of it, and no read of
    the flag either. A file's launch commands are one reliance on the launcher: reported once,
    at the first, and not at all where the flag is reported. Scripts that keep the
    flag only as a fallback for `LOCAL_RANK`
    (`default=int(os.environ.get("LOCAL_RANK", 0))`) are not reported, nor prose that only
    names the launcher ("formerly started with torch.distributed.launch"), nor a flag nothing
    reads (the ranks come from elsewhere, such as a cluster helper; the namespace kept whole as a
    record, `{"args": vars(args)}` in a checkpoint or `json.dump(vars(args), f)`, or walked to
    list the options, `for k, v in sorted(vars(args).items()): print(k, v)`, reads no
    entry; nor does a print or log line that only shows it, `print("Local Rank:",
    args.local_rank)`, nor a write to it, `args.local_rank = -1` before the namespace is handed
    to the test run, nor a copy of the namespace, `argparse.Namespace(**vars(args))`, whose
    entries are read by attribute like the original's), nor one whose entry is set from the process group or the environment
    right after the parse, before anything reads it (`opt.local_rank = dist.get_rank()`), or in
    the function the top level hands the parsed namespace to (`main(args)`), right after its
    `init_process_group` and before that function or the top level reads it. The
    two spellings the launcher has passed, `--local-rank` beside `--local_rank` for one entry,
    are one finding, at the first.

    Launch commands in comments and usage text, and the flag, are reported in scripts (files
    run as `__main__`, or that do their work or parse the command line at module level) that
    take part in DDP: a model file's note on how the project is trained, or a library module's
    parser builder, is about another script. A `--local_rank` flag added by a parser builder
    of the project is reported in the builder's module when a script that calls it has no other
    source of the local rank; so is one added at the top level of a config module whose parser
    the script parses, directly (`from opts import parser; parser.parse_args()`) or through a
    function of that module (`args = config.get_args()` that calls the module's
    `parser.parse_known_args()`), or imports the namespace that module parses at its top level
    (`from opts import args` beside `args = parser.parse_args()` there).

    ## How to fix
    Launch with `torchrun --nproc_per_node=N script.py` and read the local rank with
    `int(os.environ["LOCAL_RANK"])`. To keep old launch commands working, give the flag
    `default=int(os.environ.get("LOCAL_RANK", -1))` and accept both spellings. The fix does
    exactly that for a flag with an integer default, `default=int(os.environ.get("LOCAL_RANK",
    <the old default>))`, adding `import os` when needed. It is safe: torchrun sets LOCAL_RANK
    and passes no flag, while `torch.distributed.launch` (which passes the flag) and a run
    without a launcher (which gets the old default) behave as before.

    ## References
    - https://pytorch.org/docs/stable/elastic/run.html#transitioning-from-torch-distributed-launch-to-torchrun
    - https://pytorch.org/docs/stable/distributed.html#launch-utility
    - https://github.com/huggingface/pytorch-image-models/issues/1728 (unrecognized arguments: --local-rank=0)
    """

    code = "DDP008"
    fixable = True
    name = "deprecated-launcher"
    severity = Severity.WARNING
    MESSAGE = (
        "`torch.distributed.launch` is deprecated: launch with `torchrun` and read the local rank "
        "from `os.environ[\"LOCAL_RANK\"]`"
    )
    FLAG_MESSAGE = (
        "`{flag}` is only passed by the deprecated torch.distributed.launch; torchrun sets the "
        "LOCAL_RANK environment variable instead: read `int(os.environ[\"LOCAL_RANK\"])` "
        "(keep the flag only as a fallback)"
    )

    VALID = [
        """
        import os
        import torch.distributed as dist
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        """,
        """
        # The flag is a fallback; LOCAL_RANK comes first.
        import argparse, os
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", "--local-rank", type=int,
                            default=int(os.environ.get("LOCAL_RANK", -1)))
        """,
        """
        # The launcher named in prose only (no command that starts it).
        import subprocess
        HELP = "formerly started with torch.distributed.launch; use torchrun"
        subprocess.run(["torchrun", "--nproc_per_node=2", "train.py"])
        """,
        """
        \"\"\"A model file's note on how the project is trained is about another script.

            python -m torch.distributed.launch --nproc_per_node=8 train.py
        \"\"\"
        import torch
        class Net(torch.nn.Module):
            pass
        if __name__ == "__main__":
            print(Net())
        """,
        """
        # A parser builder in a library module: reported in the scripts that rely on the flag.
        import argparse
        def build_parser():
            parser = argparse.ArgumentParser()
            parser.add_argument("--local_rank", type=int, default=0)
            return parser
        """,
        """
        # A leftover flag nothing reads: the ranks come from the cluster's environment helper.
        import argparse
        import torch
        import torch.distributed as dist
        import cluster_env
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=None)
        args = parser.parse_args()
        dist.init_process_group("nccl", rank=cluster_env.rank, world_size=cluster_env.size)
        torch.cuda.set_device(cluster_env.local_rank)
        """,
        """
        # DeepSpeed's launcher passes --local_rank itself.
        import argparse
        import deepspeed
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=-1)
        parser = deepspeed.add_config_arguments(parser)
        """,
    ]
    INVALID = [
        Invalid(
            """
            # A launch command in a comment: the script is meant for the old launcher.
            # Launch with: torch.distributed.launch --nproc_per_node=2 train.py
            import torch.distributed as dist
            dist.init_process_group("nccl")
            """,
            lines=(2,),
        ),
        Invalid(
            """
            \"\"\"Train on several GPUs.

            Usage:
                python -m torch.distributed.launch --nproc_per_node=8 main.py --epochs 90
            \"\"\"
            import torch.distributed as dist
            dist.init_process_group("nccl")
            """,
            lines=(4,),  # the command's line inside the docstring
        ),
        Invalid(
            """
            import argparse
            import torch
            parser = argparse.ArgumentParser()
            parser.add_argument("--local_rank", type=int, default=0)
            args = parser.parse_args()
            torch.cuda.set_device(args.local_rank)
            """,
            lines=(4,),
            fixed="""
            import argparse
            import torch
            import os
            parser = argparse.ArgumentParser()
            parser.add_argument("--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
            args = parser.parse_args()
            torch.cuda.set_device(args.local_rank)
            """,
        ),
        Invalid(
            """
            import subprocess, sys
            cmd = [sys.executable, "-m", "torch.distributed.launch", "--nproc_per_node=2", "train.py"]
            subprocess.run(cmd, check=True)
            """,
            lines=(2,),
        ),
        Invalid(
            """
            import runpy
            from torch.distributed import launch
            runpy.run_module("torch.distributed.launch", run_name="__main__")
            """,
            lines=(2, 3),
        ),
        Invalid(
            """
            import os
            os.system("python -m torch.distributed.launch --nproc_per_node=4 train.py")
            """,
            lines=(2,),
        ),
    ]

    COMMENT_MESSAGE = (
        "this launch command uses the deprecated `torch.distributed.launch`: launch with `torchrun` "
        "(`torchrun --nproc_per_node=N script.py`) and read the local rank from `os.environ[\"LOCAL_RANK\"]`"
    )

    def __init__(self, model: Model, reported: list[Pending] | None = None) -> None:
        super().__init__(model, reported)
        self._mentions_launch = api.LAUNCH_MODULE in model.root.source
        self._flags: list[cst.CSTNode] = []
        self._usage: list[cst.CSTNode] = []
        self._ran: set[int] = set()  # command strings handed to subprocess/os.system

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            if dotted(alias.name) == api.LAUNCH_MODULE:
                self.report(alias)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        module = dotted(node.module) if node.module is not None and not node.relative else None
        if module == api.LAUNCH_MODULE or (module and module.startswith(api.LAUNCH_MODULE + ".")):
            self.report(node)
        elif module == "torch.distributed" and not isinstance(node.names, cst.ImportStar):
            for alias in node.names:
                if dotted(alias.name) == "launch":
                    self.report(alias)

    def visit_Comment(self, node: cst.Comment) -> None:
        if self._mentions_launch and _COMMAND.search(node.value):
            self._usage.append(node)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if self._mentions_launch and _COMMAND.search(node.value):
            self._usage.append(node)

    def on_call(self, call: CallSite) -> None:
        flag = _local_rank_flag(call)
        if flag is not None:
            self._flags.append(flag)
        if not self._mentions_launch:
            return
        q = call.qualname or ""
        if q == api.RUN_MODULE:
            module = call.arg("mod_name", 0)
            if module is not None and string_text(module) == api.LAUNCH_MODULE:
                self.report(module)
            return
        if not q.startswith(api.RUNS_COMMANDS):
            return
        command = call.arg("args", 0)
        if command is None:
            return
        for value in self.model.values.at_call(call, command):
            node = value.node
            if isinstance(node, cst.SimpleString) and _COMMAND.search(node.value):
                self._ran.add(id(node))
                self.report(node, self.COMMENT_MESSAGE, module=value.module)
            elif isinstance(node, (cst.List, cst.Tuple)):
                texts = [string_text(e.value) for e in node.elements]
                for i in range(1, len(texts)):
                    if texts[i] == api.LAUNCH_MODULE and texts[i - 1] == "-m":
                        self.report(node.elements[i].value, module=value.module)

    def finish(self) -> None:
        model = self.model
        if not self._script():
            # A model file or library module that mentions the launcher in a usage note, or a
            # parser builder that scripts call: what counts is how the script that runs is
            # launched and where it reads the local rank, so it is reported there.
            return
        flagged = len(self.reported)
        flags = [(model.root, flag, None) for flag in self._flags] + self._helper_flags()
        # DeepSpeed's launcher does pass --local_rank, so its scripts need the flag.
        if (
            flags
            and not _reads_local_rank_env(code_only(model.root.source))
            and not model.root.names.imports_from("deepspeed")
        ):
            # A set-up helper that reads the launcher's variables may be where the local rank
            # comes from: it is, unless no module the run reaches reads LOCAL_RANK, nothing
            # writes the flag's entry, and the run reads the flag by its name (a helper that
            # takes only RANK for its own `set_device` leaves `args.local_rank` at the flag's
            # default under torchrun).
            helper_env = any("reads_launcher_env" in model.facts.of_call(c) for c in model.root.calls
                             if c.target is not None and c.target.external is None and not model.is_root(c.target))
            helper_local = helper_env and any(_reads_local_rank_env(code_only(m.source)) for m in self._reached())
            said: set[tuple[int, str]] = set()  # (module, dest): `--local-rank` beside `--local_rank` is one flag
            for module, flag, site in flags:
                call = next((c.node for c in module.calls if any(a.value is flag for a in c.node.args)), None)
                key = (id(module), _dest(call, flag) if call is not None else _flag_text(flag))
                if key in said:
                    continue
                # The script hands the flag's value itself to `torch.cuda.set_device(args.local_rank)`:
                # that is the device, whatever a helper reads LOCAL_RANK for (a download on local
                # rank 0), unless it writes the entry from the environment or the group first.
                device = call is not None and module is model.root and self._flag_sets_device(module, call, flag)
                if not device and (helper_local or helper_env and (
                        call is None or self._dest_written(module, call, flag)
                        or not self._flag_read(module, call, flag, named=True))):
                    continue
                if call is not None and not self._flag_read(module, call, flag):
                    continue  # a flag nothing reads: the local rank comes from elsewhere
                if call is not None and (self._overwritten_first(module, call, flag)
                                         or _overwritten_on_entry(module, _dest(call, flag))):
                    continue
                if call is not None and self._replaced_by_spawn(module, call, flag):
                    continue
                fix = remedies.local_rank_default_from_env(module, call) \
                    if call is not None and module is model.root else None
                said.add(key)
                self.report(flag, self.FLAG_MESSAGE.format(flag=_flag_text(flag)), fix=fix, module=module,
                            related=model.paths.chain(site) if site is not None else ())
        if len(self.reported) > flagged or not model.uses_ddp:
            # Usage text in a file that takes no part in DDP (a model file's note on how the
            # project is trained) is about another script; where the flag is reported, the
            # commands that pass it are the same reliance on the old launcher.
            return
        # A list of launch commands, one per task or setting, is one reliance on the launcher:
        # reported once, at the first.
        usage = [node for node in self._usage if id(node) not in self._ran]
        if usage:
            self.report(usage[0], self.COMMENT_MESSAGE, line_in=_line_in(usage[0]))
        else:
            self._helper_usage()

    def _flag_sets_device(self, module: ModuleModel, call: cst.Call, flag: cst.CSTNode) -> bool:
        """`module` passes the flag's entry of the parsed namespace straight to a set-device call
        (`torch.cuda.set_device(args.local_rank)`), and no module of the run sets that entry from
        the environment or the process group (`args.local_rank = int(os.environ["LOCAL_RANK"])`)."""
        dest = _dest(call, flag)
        if not dest:
            return False
        reached = [code_only(other.source) for other in self._reached(module)]
        # The entry copied into a field of a configuration object (`config.LOCAL_RANK =
        # args.local_rank` in the project's `update_config(config, args)`): the script that sets
        # the device from that field (`torch.cuda.set_device(config.LOCAL_RANK)`) takes it from the flag.
        copy = re.compile(r"^[ \t]*[A-Za-z_]\w*\s*\.\s*([A-Za-z_]\w*)\s*=(?!=)\s*[A-Za-z_]\w*\s*\.\s*"
                          + re.escape(dest) + r"[ \t]*(?:#.*)?$", re.MULTILINE)
        fields = {dest} | {m.group(1) for text in reached for m in copy.finditer(text)}
        for field in fields:
            from_env = re.compile(r"(?:\.\s*" + re.escape(field) + r"""|\[\s*['"]""" + re.escape(field)
                                  + r"""['"]\s*\])\s*=(?!=)[^\n]*(?:environ|get_rank|get_local_rank)""")
            if any(from_env.search(text) for text in reached):
                return False
        # A set-device of the run that takes LOCAL_RANK itself (a helper's
        # `torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))`) may be the one that counts.
        # (The variable's name as text: a field that copied the flag, `config.LOCAL_RANK`, is no read of it.)
        if any(self.model.api(c) in api.SET_DEVICE and _READS_LOCAL_RANK_ENV.search(c.module.code(c.node))
               for c in self.model.paths.sites()):
            return False
        for site in module.calls:
            if self.model.api(site) not in api.SET_DEVICE:
                continue
            device = site.arg("device", 0)
            name = dotted(device) if device is not None else None
            if name is None or name.count(".") != 1 or name.rsplit(".", 1)[1] not in fields:
                continue
            origin = module.names.origin(name.split(".")[0])
            if origin is None or self._parsed_namespace(module, origin) is not None:
                return True
        return False

    def _flag_read(self, module: ModuleModel, call: cst.Call, flag: cst.CSTNode, named: bool = False) -> bool:
        """Whether the run may read the flag's value: `args.local_rank` (a base that is not an
        imported module: `idr_torch.local_rank` is another source), the name as a string
        (`getattr(args, "local_rank")`, `opts["local_rank"]`), or the whole namespace handed on as
        a dict (`vars(args)`, `**args.__dict__`), which may read it anywhere. `named`: only a
        read that names the flag counts."""
        dest = _dest(call, flag)
        if not dest:
            return not named
        attribute = re.compile(r"([A-Za-z_][\w.]*)\s*\.\s*" + re.escape(dest) + r"\b")
        quoted = re.compile(r"""['"]""" + re.escape(dest) + r"""['"]""")
        for other in {id(m): m for m in [module, *self.model.paths.modules()]}.values():
            # Handing the flag on to the variable (`os.environ["LOCAL_RANK"] =
            # str(args.local_rank)`, where it is not set yet) is the fallback torchrun skips.
            text = _RECORDED_NAMESPACE.sub("", _HANDED_TO_ENV.sub("", code_only(other.source)))
            text = _COPIED_NAMESPACE.sub("", text)
            text = _SHOWN.sub("", text)
            if _WHOLE_NAMESPACE.search(text) and not named or quoted.search(text):
                return True
            for m in attribute.finditer(text):
                if _ASSIGNED.match(text, m.end()):
                    continue  # `args.local_rank = -1` before the namespace is handed on: a write
                base = m.group(1).split(".")[0]
                origin = other.names.origin(base)
                if origin is None or self._parsed_namespace(other, origin) is not None:
                    return True
        return False

    def _parsed_namespace(self, importer: ModuleModel, origin: str) -> ModuleModel | None:
        """The project module whose module-level parse the imported name `origin` is (`from
        options import args` with `args = parser.parse_args()` at the top level of options.py):
        the script reads the command line through it."""
        path = resolved_path(importer.path)
        where = locate(path, origin) if path is not None else None
        if where is None or not where[1] or "." in where[1]:
            return None
        other = self.model.project_model(where[0])
        if other is None:
            return None
        bound = re.compile(r"^" + re.escape(where[1]) + r"\s*(?:,\s*\w+\s*)?=\s*\w+\.parse(?:_known)?_args\(", re.M)
        return other if bound.search(code_only(other.source)) else None

    def _overwritten_first(self, module: ModuleModel, call: cst.Call, flag: cst.CSTNode) -> bool:
        """The flag's entry is set from the process group or the environment right after the
        parse, on every path and before anything reads it (`opt.local_rank =
        dist.get_rank()` after `init_process_group`): its value is never used."""
        dest = _dest(call, flag)
        if not dest:
            return False
        text = code_only(module.source)
        parse = re.search(r"^([ \t]*)\w+\s*=\s*\w+\.parse(?:_known)?_args\(", text, re.M)
        if parse is None:
            return False
        written = re.compile(r"^" + re.escape(parse.group(1)) + r"\w+\." + re.escape(dest)
                             + r"\s*=(?!=)([^\n]*)$", re.M)
        found = written.search(text, parse.end())
        if found is None or dest in found.group(1) or not _RANK_SOURCE.search(found.group(1)):
            return False
        read = re.compile(r"\." + re.escape(dest) + r"\b")
        return not any(m.start() > parse.end() for m in read.finditer(text, 0, found.start()))

    def _replaced_by_spawn(self, module: ModuleModel, call: cst.Call, flag: cst.CSTNode) -> bool:
        """The script starts its own processes (`mp.spawn(main, ...)`) and writes the flag's
        entry itself (`args.local_rank = rank`, `args["local_rank"] = index`): each process's
        local rank is the spawn index, and the launcher's flag is never what is read."""
        if not any(self.model.api(c) in api.PROCESS_STARTERS for c in self.model.paths.sites()):
            return False
        return self._dest_written(module, call, flag)

    def _dest_written(self, module: ModuleModel, call: cst.Call, flag: cst.CSTNode) -> bool:
        """Some module of the run writes the flag's entry (`args.local_rank = ...`,
        `args["local_rank"] = ...`)."""
        dest = _dest(call, flag)
        if not dest:
            return False
        # (`self.local_rank = local_rank` in a class the run builds keeps a parameter of the same
        # name, not the namespace's entry.)
        stored = re.compile(r"(?:(?<!\bself)\.\s*" + re.escape(dest) + r"""|\[\s*['"]""" + re.escape(dest)
                            + r"""['"]\s*\])\s*=(?!=)([^\n]*)""")
        # A number (`params.local_rank = 0` on the single-GPU path) or SLURM's own variable
        # (`int(os.environ["SLURM_LOCALID"])` on the cluster path) takes the flag's place only
        # off the launcher's path: under torchrun the flag stays the source.
        return any(_NOT_A_LAUNCH_SOURCE.match(m.group(1)) is None
                   for other in self._reached(module) for m in stored.finditer(code_only(other.source)))

    def _reached(self, module: ModuleModel | None = None) -> list[ModuleModel]:
        found = [module or self.model.root, self.model.root, *self.model.paths.modules()]
        return list({id(m): m for m in found}.values())

    def _helper_usage(self) -> None:
        """A launch command in a string of a project function the script's run goes through
        (`raise ValueError("... Did you launch with python -m torch.distributed.launch?")` in the
        set-up helper): the project tells its users to start the script that way."""
        model = self.model
        seen: set[int] = set()
        for function in model.paths.reached():
            if function.module is model.root:
                continue
            text = function.module.code(function.node)
            if api.LAUNCH_MODULE not in text or not _COMMAND.search(text):
                continue
            stack: list[cst.CSTNode] = [function.node]
            while stack:
                node = stack.pop()
                if isinstance(node, cst.SimpleString):
                    if id(node) not in seen and _COMMAND.search(node.value):
                        seen.add(id(node))
                        self.report(node, self.COMMENT_MESSAGE, module=function.module, line_in=_line_in(node))
                    continue
                stack.extend(children(node))

    def _script(self) -> bool:
        """The linted file is a script a launcher starts: it runs as `__main__`, does its work at
        module level, or parses the command line there."""
        model = self.model
        root = model.root
        return model.is_entry_point() or any(
            c.scope is root.module_scope and c.method in ("parse_args", "parse_known_args") for c in root.calls)

    def _helper_flags(self) -> list[tuple[ModuleModel, cst.CSTNode, CallSite | None]]:
        """`--local_rank` added by a parser builder of the project that the script calls; the
        flag is counted only where that module itself never reads LOCAL_RANK."""
        model = self.model
        out: list[tuple[ModuleModel, cst.CSTNode, CallSite | None]] = []
        for site in model.paths.sites():
            flag = _local_rank_flag(site) if site.module is not model.root else None
            if flag is None:
                continue
            if _reads_local_rank_env(code_only(site.module.source)) or site.module.names.imports_from("deepspeed"):
                continue
            out.append((site.module, flag, site))
        out += self._imported_parser_flags()
        return out

    def _imported_parser_flags(self) -> list[tuple[ModuleModel, cst.CSTNode, CallSite | None]]:
        """`--local_rank` added at module level of a project module whose parser the script
        imports and parses (`from opts import parser; args = parser.parse_args()`), or whose
        parsed namespace it imports (`from opts import args`)."""
        model = self.model
        root = model.root
        path = resolved_path(root.path)
        if path is None:
            return []
        out: list[tuple[ModuleModel, cst.CSTNode, CallSite | None]] = []
        seen: set[str] = set()
        parsers: list[ModuleModel] = []
        for call in root.calls:
            if call.method not in ("parse_args", "parse_known_args") or not isinstance(call.node.func, cst.Attribute):
                # `args = config.get_args()`, whose function parses its module's parser.
                parsers += [callee.module for callee, _ in model.graph.targets(call)
                            if callee.module is not root and _parses_module_parser(callee.module, callee.qualname)]
                continue
            receiver = call.node.func.value
            origin = root.names.origin(receiver.value) if isinstance(receiver, cst.Name) else None
            where = locate(path, origin) if origin else None
            other = model.project_model(where[0]) if where is not None else None
            if other is not None:
                parsers.append(other)
        # `from options import args`, the namespace options.py parses at its top level.
        for origin in set(root.names.aliases.values()):
            other = self._parsed_namespace(root, origin)
            if other is not None:
                parsers.append(other)
        for other in parsers:
            if str(other.path) in seen:
                continue
            seen.add(str(other.path))
            if other is root or _reads_local_rank_env(code_only(other.source)) \
                    or other.names.imports_from("deepspeed"):
                continue
            for site in other.calls:
                flag = _local_rank_flag(site) if site.scope is other.module_scope else None
                if flag is not None:
                    out.append((other, flag, None))
        return out


def _parses_module_parser(module: ModuleModel, function: str) -> bool:
    """`function` of `module` parses a parser bound at the module's top level (`parser =
    argparse.ArgumentParser()` beside `def get_args(): return parser.parse_known_args()`): the
    flags added there at module level are the ones it parses."""
    for call in module.calls_in(function):
        if call.method not in ("parse_args", "parse_known_args") or not isinstance(call.node.func, cst.Attribute):
            continue
        receiver = call.node.func.value
        if isinstance(receiver, cst.Name) and receiver.value not in call.scope.assignments \
                and receiver.value in module.module_scope.assignments:
            return True
    return False


def _overwritten_on_entry(module: ModuleModel, dest: str) -> bool:
    """The function the script's top level runs with the parsed namespace (`main(args)`, the
    parse in a `parse_args()` builder) sets the flag's entry from the process group right after
    `init_process_group`, in the same block and before the function reads it (`dist.
    init_process_group(...)`, then `args.local_rank = dist.get_rank()`), and the top level reads
    it only after that call: where there is a process group the flag's value is never used (off
    it, the default only picks the single process's GPU)."""
    if not dest:
        return False
    for statement in module.tree.body:
        if not isinstance(statement, cst.FunctionDef):
            continue
        written = _written_after_init(module, statement, dest)
        if written is None or _reads_entry(_in_order(statement, until=written), dest):
            continue
        entry = _entry_call(module.tree, statement.name.value)
        if entry is not None and not _reads_entry(_in_order(module.tree, until=entry, top_level=True), dest):
            return True
    return False


def _written_after_init(module: ModuleModel, function: cst.FunctionDef, dest: str) -> cst.CSTNode | None:
    """The statement `ns.<dest> = <value from get_rank>` in `function` whose block runs
    `init_process_group(...)` in an earlier statement."""
    blocks: list[Sequence[cst.BaseStatement]] = [function.body.body] if isinstance(function.body, cst.IndentedBlock) else []
    while blocks:
        block = blocks.pop()
        for at, statement in enumerate(block):
            if not isinstance(statement, cst.SimpleStatementLine):
                blocks.extend(_blocks_of(statement))
                continue
            small = statement.body[0]
            if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
                continue
            target = small.targets[0].target
            if not (isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and target.attr.value == dest):
                continue
            value = module.code(small.value)
            if dest in value or "get_rank" not in value:
                continue
            if any(isinstance(earlier, cst.SimpleStatementLine) and "init_process_group(" in module.code(earlier)
                   for earlier in block[:at]):
                return statement
    return None


def _blocks_of(statement: cst.BaseStatement) -> list[Sequence[cst.BaseStatement]]:
    """The statement lists a compound statement holds (its body, `else`/`elif` arms, handlers)."""
    found: list[Sequence[cst.BaseStatement]] = []
    stack: list[cst.CSTNode] = [statement]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.IndentedBlock):
            found.append(node.body)
        elif not isinstance(node, (cst.BaseExpression, cst.FunctionDef, cst.ClassDef)) or node is statement:
            stack.extend(children(node))
    return found


def _in_order(root: cst.CSTNode, until: cst.CSTNode | None, top_level: bool = False) -> list[cst.CSTNode]:
    """The nodes of `root` in source order up to `until` (left out; None: all); `top_level` leaves out the
    bodies of functions and classes (module-level code only)."""
    seen: list[cst.CSTNode] = []
    stack: list[cst.CSTNode] = [root]
    while stack:
        node = stack.pop()
        if node is until:
            break
        if top_level and node is not root and isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            continue
        seen.append(node)
        stack.extend(reversed(list(children(node))))
    return seen


def _reads_entry(nodes: list[cst.CSTNode], dest: str) -> bool:
    """Whether `ns.<dest>` is read among `nodes` (written as an assignment's target is no read)."""
    targets = {id(t.target) for n in nodes if isinstance(n, cst.Assign) for t in n.targets}
    return any(isinstance(n, cst.Attribute) and n.attr.value == dest and id(n) not in targets for n in nodes)


def _entry_call(tree: cst.Module, function: str) -> cst.CSTNode | None:
    """The first module-level statement (under `if __name__ == "__main__":` too) that calls
    `function(...)`, alone or bound to names."""
    for node in _module_statements(tree):
        small = node.body[0]
        value = small.value if isinstance(small, (cst.Expr, cst.Assign)) else None
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == function:
            return node
    return None


def _module_statements(tree: cst.Module) -> list[cst.SimpleStatementLine]:
    """The module's simple statements outside functions and classes, in source order."""
    return [n for n in _in_order(tree, until=None, top_level=True)
            if isinstance(n, cst.SimpleStatementLine)]


def _reads_local_rank_env(text: str) -> bool:
    """Whether code reads LOCAL_RANK from the environment. Writing it (`os.environ["LOCAL_RANK"]
    = str(args.local_rank)`, the flag handed on to code that reads the variable) or asking
    whether it is set (`if "LOCAL_RANK" not in os.environ:`) takes no rank from it, nor does
    comparing it with a number (`int(os.environ["LOCAL_RANK"]) == 0` to print on one process)."""
    for m in _READS_LOCAL_RANK_ENV.finditer(text):
        after = text[m.end():m.end() + 40]
        if re.match(r"\s*\]\s*=(?!=)", after) or re.match(r"\s*(?:not\s+)?in\b", after):
            continue
        if re.match(r"""\s*(?:\]|,[^()\n]*\))\s*\)?\s*[=!]=\s*['"]?\d""", after):
            continue
        return True
    return False


def _local_rank_flag(call: CallSite) -> cst.BaseExpression | None:
    """The name of a local-rank command-line flag the call defines: argparse's
    `add_argument("--local_rank", ...)`, or absl's `flags.DEFINE_integer("local_rank", ...)`
    (absl parses the `--local_rank=N` the old launcher passes just the same)."""
    method = call.method or ""
    if method == "add_argument":
        for a in call.node.args:
            if a.keyword is None and string_text(a.value) in _LOCAL_RANK_FLAGS:
                return a.value
        return None
    if method.startswith("DEFINE_") and call.node.args:
        first = call.node.args[0]
        name = first.value if first.keyword is None or first.keyword.value == "name" else None
        if name is not None and string_text(name) in _ABSL_LOCAL_RANK:
            return name
    return None


def _flag_text(flag: cst.CSTNode) -> str:
    text = string_text(flag) or ""
    return text if text.startswith("-") else "--" + text


def _dest(call: cst.Call, flag: cst.CSTNode) -> str:
    """The attribute an argparse flag is stored in."""
    return next((string_text(a.value) or "" for a in call.args
                 if a.keyword is not None and a.keyword.value == "dest"), None) \
        or (string_text(flag) or "").lstrip("-").replace("-", "_")


def _line_in(node: cst.CSTNode) -> int:
    """The line of a string's launch command, counted from the string's first line (a usage
    docstring's `python -m torch.distributed.launch ...` line)."""
    if not isinstance(node, cst.SimpleString):
        return 0
    found = _COMMAND.search(node.value)
    return node.value.count("\n", 0, found.start()) if found is not None else 0
