from __future__ import annotations

from typing import TYPE_CHECKING
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

_READS_LOCAL_RANK_ENV = re.compile(r"""['"]LOCAL_RANK['"]""")
_LOCAL_RANK_FLAGS = {"--local_rank", "--local-rank"}
# The parsed namespace turned into a dict or its attributes copied over: any of them may be read.
_WHOLE_NAMESPACE = re.compile(r"\bvars\s*\(|__dict__|\bsetattr\s*\(|\bupdate\s*\(\s*vars")
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
    `--local_rank` / `--local-rank` argument in a file that never reads `LOCAL_RANK` from the
    environment, directly or through a helper of the project (`utils.init_distributed_mode(args)`),
    or imports `deepspeed` (whose launcher does pass the flag). Scripts that keep the
    flag only as a fallback for `LOCAL_RANK`
    (`default=int(os.environ.get("LOCAL_RANK", 0))`) are not reported, nor prose that only
    names the launcher ("formerly started with torch.distributed.launch"), nor a flag nothing
    reads (the ranks come from elsewhere, such as a cluster helper).

    Launch commands in comments and usage text, and the flag, are reported in scripts (files
    run as `__main__`, or that do their work or parse the command line at module level) that
    take part in DDP: a model file's note on how the project is trained, or a library module's
    parser builder, is about another script. A `--local_rank` flag added by a parser builder
    of the project is reported in the builder's module when a script that calls it has no other
    source of the local rank.

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
        if call.method == "add_argument":
            for a in call.node.args:
                if a.keyword is None and string_text(a.value) in _LOCAL_RANK_FLAGS:
                    self._flags.append(a.value)
                    break
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
        for node in self._usage:
            # Usage text in a file that takes no part in DDP (a model file's note on how the
            # project is trained) is about another script.
            if id(node) not in self._ran and model.uses_ddp:
                self.report(node, self.COMMENT_MESSAGE, line_in=_line_in(node))
        if model.uses_ddp:
            self._helper_usage()
        flags = [(model.root, flag, None) for flag in self._flags] + self._helper_flags()
        # DeepSpeed's launcher does pass --local_rank, so its scripts need the flag.
        if (
            flags
            and not _READS_LOCAL_RANK_ENV.search(code_only(model.root.source))
            and not model.root.names.imports_from("deepspeed")
            and not any("reads_launcher_env" in model.facts.of_call(c) for c in model.root.calls
                        if c.target is not None and c.target.external is None and not model.is_root(c.target))
        ):
            for module, flag, site in flags:
                call = next((c.node for c in module.calls if any(a.value is flag for a in c.node.args)), None)
                if call is not None and not self._flag_read(module, call, flag):
                    continue  # a flag nothing reads: the local rank comes from elsewhere
                if call is not None and self._replaced_by_spawn(module, call, flag):
                    continue
                fix = remedies.local_rank_default_from_env(module, call) \
                    if call is not None and module is model.root else None
                self.report(flag, self.FLAG_MESSAGE.format(flag=string_text(flag)), fix=fix, module=module,
                            related=model.paths.chain(site) if site is not None else ())

    def _flag_read(self, module: ModuleModel, call: cst.Call, flag: cst.CSTNode) -> bool:
        """Whether the run may read the flag's value: `args.local_rank` (a base that is not an
        imported module: `idr_torch.local_rank` is another source), the name as a string
        (`getattr(args, "local_rank")`, `opts["local_rank"]`), or the whole namespace handed on as
        a dict (`vars(args)`, `**args.__dict__`), which may read it anywhere."""
        dest = _dest(call, flag)
        if not dest:
            return True
        attribute = re.compile(r"([A-Za-z_][\w.]*)\s*\.\s*" + re.escape(dest) + r"\b")
        quoted = re.compile(r"""['"]""" + re.escape(dest) + r"""['"]""")
        for other in {id(m): m for m in [module, *self.model.paths.modules()]}.values():
            text = code_only(other.source)
            if _WHOLE_NAMESPACE.search(text) or quoted.search(text):
                return True
            for m in attribute.finditer(text):
                if other.names.origin(m.group(1).split(".")[0]) is None:
                    return True
        return False

    def _replaced_by_spawn(self, module: ModuleModel, call: cst.Call, flag: cst.CSTNode) -> bool:
        """The script starts its own processes (`mp.spawn(main, ...)`) and writes the flag's
        entry itself (`args.local_rank = rank`, `args["local_rank"] = index`): each process's
        local rank is the spawn index, and the launcher's flag is never what is read."""
        if not any(self.model.api(c) in api.PROCESS_STARTERS for c in self.model.paths.sites()):
            return False
        dest = _dest(call, flag)
        if not dest:
            return False
        stored = re.compile(r"(?:\.\s*" + re.escape(dest) + r"""|\[\s*['"]""" + re.escape(dest)
                            + r"""['"]\s*\])\s*=(?!=)""")
        return any(stored.search(code_only(m.source)) for m in {id(m): m for m in [module, *self.model.paths.modules()]}.values())

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
            if site.module is model.root or site.method != "add_argument":
                continue
            if _READS_LOCAL_RANK_ENV.search(code_only(site.module.source)) or site.module.names.imports_from("deepspeed"):
                continue
            for a in site.node.args:
                if a.keyword is None and string_text(a.value) in _LOCAL_RANK_FLAGS:
                    out.append((site.module, a.value, site))
                    break
        out += self._imported_parser_flags()
        return out

    def _imported_parser_flags(self) -> list[tuple[ModuleModel, cst.CSTNode, CallSite | None]]:
        """`--local_rank` added at module level of a project module whose parser the script
        imports and parses (`from opts import parser; args = parser.parse_args()`)."""
        model = self.model
        root = model.root
        path = resolved_path(root.path)
        if path is None:
            return []
        out: list[tuple[ModuleModel, cst.CSTNode, CallSite | None]] = []
        seen: set[str] = set()
        for call in root.calls:
            if call.method not in ("parse_args", "parse_known_args") or not isinstance(call.node.func, cst.Attribute):
                continue
            receiver = call.node.func.value
            origin = root.names.origin(receiver.value) if isinstance(receiver, cst.Name) else None
            where = locate(path, origin) if origin else None
            if where is None or str(where[0]) in seen:
                continue
            seen.add(str(where[0]))
            other = model.project_model(where[0])
            if other is None or other is root or _READS_LOCAL_RANK_ENV.search(code_only(other.source)) \
                    or other.names.imports_from("deepspeed"):
                continue
            for site in other.calls:
                if site.method == "add_argument" and site.scope is other.module_scope:
                    for a in site.node.args:
                        if a.keyword is None and string_text(a.value) in _LOCAL_RANK_FLAGS:
                            out.append((other, a.value, None))
                            break
        return out


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
