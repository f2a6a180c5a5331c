from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING, Sequence
from urllib.parse import urlsplit

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint import remedies
from ddpcheck.lint.model import api
from ddpcheck.lint.model.module import CallSite, ModuleModel, Param, Scope
from ddpcheck.lint.model.ddp import option_values
from ddpcheck.lint.model.index import code_only
from ddpcheck.lint.model.symbols import Function
from ddpcheck.lint.model.syntax import children, dotted, int_value, is_none, string_text
from ddpcheck.lint.model.values import Value
from ddpcheck.lint.rule import Invalid, Pending, Rule

if TYPE_CHECKING:
    from ddpcheck.lint.model.semantic import Model

_LAUNCHER_ENV = api.LAUNCHER_ENV
_RENDEZVOUS_ENV = api.RENDEZVOUS_ENV
# A scheduler's own variables (SLURM, Open MPI, PMI): a script reading them is started by srun or
# mpirun, whose processes get no MASTER_ADDR/MASTER_PORT from the launcher.
_SCHEDULER_ENV = re.compile(r"\b(?:SLURM|OMPI|PMIX?|MV2)_[A-Z]")


def env_key(node: cst.Subscript) -> str | None:
    """`os.environ["RANK"]` → "RANK"."""
    base = dotted(node.value) or ""
    if not base.endswith("environ") or len(node.slice) != 1:
        return None
    elem = node.slice[0].slice
    if isinstance(elem, cst.Index) and isinstance(elem.value, cst.SimpleString):
        value = elem.value.evaluated_value
        return value if isinstance(value, str) else None
    return None


def env_get_key(call: CallSite) -> str | None:
    """`os.environ.get("RANK")`, `os.getenv("RANK")` → "RANK"."""
    d = call.dotted or ""
    if not (d.endswith("environ.get") or d.endswith("getenv") or d.endswith("environ.setdefault")):
        return None
    first = call.arg("key", 0)
    if isinstance(first, cst.SimpleString):
        value = first.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _machine_specific(host: str) -> bool:
    """An IP address literal of one machine: not loopback, not the unspecified address."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False  # a host name: it may resolve to this machine
    return not (address.is_loopback or address.is_unspecified)


# A test that the launcher's variables are there (`if "RANK" in os.environ and "WORLD_SIZE" in
# os.environ:`): its body is the path torchrun's runs take.
_LAUNCHER_PRESENT = re.compile(r"""['"](?:RANK|WORLD_SIZE|LOCAL_RANK)['"]\s+in\s+os\.environ""")


def _launcher_present(code: str) -> bool:
    return bool(_LAUNCHER_PRESENT.search(code)) and not re.search(r"\bnot\b|slurm|mpi|launcher", code, re.I)


def _statements(node: cst.CSTNode) -> list[cst.CSTNode]:
    """Every node under `node`, nested functions and classes left out."""
    out: list[cst.CSTNode] = []
    stack = list(children(node))
    while stack:
        current = stack.pop()
        out.append(current)
        if not isinstance(current, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            stack.extend(children(current))
    return out


def _argv_word(expr: cst.BaseExpression) -> bool:
    """`sys.argv[1]`, also through `int(...)`: a positional word of the command line."""
    while isinstance(expr, cst.Call) and dotted(expr.func) in ("int", "str") and len(expr.args) == 1:
        expr = expr.args[0].value
    return isinstance(expr, cst.Subscript) and (dotted(expr.value) or "") in ("sys.argv", "argv") \
        and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index) \
        and int_value(expr.slice[0].slice.value) not in (None, 0)


def _literal(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, (cst.SimpleString, cst.ConcatenatedString, cst.Integer)):
        return True
    if isinstance(expr, cst.Call) and dotted(expr.func) in ("str", "int") and expr.args:
        return _literal(expr.args[0].value)
    return False


class HardCodedRendezvous(Rule):
    """The rendezvous is hard-coded where it cannot work: values torchrun provides, or a LAN address in a script that spawns every worker on one machine.

    The script reads `LOCAL_RANK`/`RANK`/`WORLD_SIZE` from the environment, so it is started by
    torchrun (or a scheduler doing the same), which exports `MASTER_ADDR`, `MASTER_PORT`, `RANK`
    and `WORLD_SIZE` for every process. A literal `init_method="tcp://10.0.0.1:23456"` (or an
    f-string of names that each hold a literal: `f"tcp://{MASTER_ADDR}:{MASTER_PORT}"`),
    `os.environ["MASTER_PORT"] = "12355"`, or `rank=0` / `world_size=2` passed to
    `init_process_group` (also a name or attribute every value of which is such a number written
    in code, `args.world_size = 4` in `main`; not a flag's default) overrides that. A script that takes the `--local_rank` flag
    `torch.distributed.launch` passes, and whose process group meets through `env://` (the
    default), is started the same way: the literal `MASTER_ADDR`/`MASTER_PORT` it writes are
    reported too, once, at the first of them (not when it reads a scheduler's variables,
    `SLURM_*`, `OMPI_*`, `PMI_*`: srun and mpirun export no rendezvous, the script must set it);
    so is a process group of such a script, or of a project function it runs, that meets at a
    host written at the call (`init_method="tcp://127.0.0.1:%d" % tcp_port`, whatever the port;
    not a URL read from a flag).
    So is a script whose process groups take their rank and world size from nowhere but the
    environment (`init_process_group("nccl")` with no `rank=`/`world_size=`, no spawn, and no
    write of RANK; a WORLD_SIZE written from the GPU count leaves the rank to the environment
    still): only a launcher can have set it, and it set the rendezvous
    with them. The DDP tutorial's form is reported too: a script that
    starts no workers itself (no `mp.spawn`, no `multiprocessing.Process`) and passes a literal
    `init_method="tcp://localhost:29500"` together with `rank=`/`world_size=`: it is meant to be
    started from outside, and under torchrun every rank waits for a store at that port, which
    exists only if `--master-port` happens to equal it (otherwise the job sits for the 30-minute
    store timeout); `localhost` cannot span nodes. Such a file is a script when it runs as
    `__main__`, or when its own usage text launches it (`# Launch with: torchrun
    --nproc_per_node=2 script.py`, naming this file or no other file of the project).

    A script that starts its own workers with `mp.spawn`, each rank the spawn index, runs the
    whole job on one machine and must meet there: on a loopback address. A LAN address literal
    (`os.environ["MASTER_ADDR"] = "10.57.3.14"`, a `--dist-url` whose default is
    `tcp://192.168.1.20:23456`) is the address of the machine it was written on; anywhere else
    the workers wait for a store that is not there (or dial another machine).

    ## Why it matters
    The job works on the machine it was written on and hangs elsewhere: on a second node every
    process dials the first machine's hard-coded address, two jobs on one host fight over the
    same port ("Address already in use" / EADDRINUSE), and a literal rank or world size makes
    `init_process_group` wait forever for ranks that do not exist, or lets two processes claim
    the same rank.

    The local rank as `rank=` or the GPU count as `world_size=` (this machine's numbers, not
    the job's) is DDP037's.

    Literal writes in consecutive statements (`os.environ["MASTER_ADDR"] = "127.0.0.1"` then
    `os.environ["MASTER_PORT"] = "29500"`) set one rendezvous and are reported once, at the
    first; writes apart (one under an `if`, one after it) are reported each.

    Literal `MASTER_ADDR`/`MASTER_PORT`/... writes in the project functions such a script runs
    (a `setup_ddp()` of another module) are reported too, once per function, at the first —
    also a parameter written there that every call passes a literal or leaves at its literal
    default (`def ddp_setup(rank, master_addr="localhost")`).
    The body of a test that the launcher's variables are set (`if "RANK" in os.environ:`) is
    the path torchrun's runs take: a write there is reported.

    Not reported: `init_method="env://"`, values read from flags or the environment (`int(os.
    environ.get("WORLD_SIZE", torch.cuda.device_count()))`), writes on the single-process path
    (the else of the `if` that sets up the process group), and a one-process group's own
    `init_method="tcp://127.0.0.1:29500"` there (`is_ddp = world_size > 1`, then
    `if is_ddp: init_process_group("nccl")` / `else: init_process_group("gloo", init_method=...)`),
    `os.environ.setdefault(...)` (it keeps what the launcher set), writes in a top-level function
    of the script that nothing calls or names (`def run_local(rank, world_size):` left for an
    `mp.spawn` the `__main__` block no longer makes; not a decorated command of a CLI framework), writes under an `if` that
    tests the environment or the launcher (`if args.launcher == "slurm":`, a fallback for
    another way of starting; but the `else` of `if "SLURM_NODELIST" in os.environ:` is the path
    torchrun's runs take, and a literal there is reported), and scripts that start their own
    workers with `mp.spawn` (they must set the rendezvous themselves; a free-port helper is best)
    on a loopback address or a host name, or with a rank that adds a node's offset
    (`node_rank * gpus + gpu`: the job spans machines and the address is the first node's), nor
    a script whose rank is a positional word of its command line (`rank=int(sys.argv[1])`):
    each process is started by hand with its own number, which no launcher gives (unless the
    file's own usage text launches it with one: then it is meant for that launcher).

    ## How to fix
    In a spawn script, meet on `localhost` (127.0.0.1) with a free port. Otherwise call
    `dist.init_process_group(backend)` with no `init_method`, `rank` or `world_size`: the
    default `env://` reads what torchrun exported. Pick the address and port on the command line
    (`torchrun --rdzv-endpoint=host:port` or `--master-addr/--master-port`). The fix writes
    `init_method="env://"` and drops literal `rank=`/`world_size=` (computed ones are kept: with
    `env://` they still apply). It is unsafe: the same script started by hand, without a
    launcher, then needs MASTER_ADDR and MASTER_PORT in its environment.

    ## References
    - https://pytorch.org/docs/stable/elastic/run.html (environment variables torchrun sets)
    - https://pytorch.org/docs/stable/distributed.html#environment-variable-initialization
    """

    code = "DDP015"
    fixable = True
    name = "hard-coded-rendezvous"
    severity = Severity.WARNING

    VALID = [
        """
        import os
        import torch.distributed as dist
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        """,
        """
        # mp.spawn scripts set their own rendezvous (the official tutorial).
        import os
        import torch.distributed as dist
        import torch.multiprocessing as mp
        def setup(rank, world_size):
            os.environ["MASTER_ADDR"] = "localhost"
            os.environ["MASTER_PORT"] = "12355"
            dist.init_process_group("gloo", rank=rank, world_size=world_size)
        if __name__ == "__main__":
            mp.spawn(main, args=(2,), nprocs=2)
        """,
        """
        # Fallback defaults, and values from flags.
        import os
        import torch.distributed as dist
        rank = int(os.environ.get("RANK", 0))
        os.environ.setdefault("MASTER_PORT", "29500")
        if "MASTER_ADDR" not in os.environ:
            os.environ["MASTER_ADDR"] = "127.0.0.1"
        if args.launcher == "slurm":
            os.environ["MASTER_PORT"] = "29501"
        dist.init_process_group("nccl", init_method=args.dist_url, rank=rank, world_size=args.world_size)
        """,
        """
        # A spawn script whose ranks span nodes: the address is the first node's.
        import torch.distributed as dist
        import torch.multiprocessing as mp
        def worker(gpu, args):
            rank = args.node_rank * args.gpus + gpu
            dist.init_process_group("nccl", init_method="tcp://10.1.0.1:23456", rank=rank,
                                    world_size=args.nodes * args.gpus)
        if __name__ == "__main__":
            mp.spawn(worker, args=(args,), nprocs=args.gpus)
        """,
    ]
    INVALID = [
        Invalid(
            """
            import os
            import torch.distributed as dist
            local_rank = int(os.environ["LOCAL_RANK"])
            dist.init_process_group("nccl", init_method="tcp://10.1.1.20:23456", rank=0, world_size=2)
            """,
            lines=(4,),
            fixed="""
            import os
            import torch.distributed as dist
            local_rank = int(os.environ["LOCAL_RANK"])
            dist.init_process_group("nccl", init_method="env://")
            """,
        ),
        Invalid(
            """
            import os
            import torch.distributed as dist
            os.environ["MASTER_ADDR"] = "localhost"
            os.environ["MASTER_PORT"] = str(12355)
            dist.init_process_group("nccl")
            local_rank = int(os.getenv("LOCAL_RANK"))
            """,
            lines=(3,),
        ),
        Invalid(
            """
            # The tutorial's setup, started by an outside launcher (no mp.spawn here).
            import torch.distributed as dist

            def setup(rank, world_size):
                dist.init_process_group("gloo", init_method="tcp://localhost:29500",
                                        rank=rank, world_size=world_size)

            if __name__ == "__main__":
                setup(args.rank, args.world_size)
                train()
            """,
            lines=(5,),
            fixed="""
            # The tutorial's setup, started by an outside launcher (no mp.spawn here).
            import torch.distributed as dist

            def setup(rank, world_size):
                dist.init_process_group("gloo", init_method="env://",
                                        rank=rank, world_size=world_size)

            if __name__ == "__main__":
                setup(args.rank, args.world_size)
                train()
            """,
        ),
        Invalid(
            """
            import os
            import torch.distributed as dist
            DIST_URL = "tcp://127.0.0.1:29500"
            rank = int(os.environ["RANK"])
            dist.init_process_group(backend="nccl", init_method=DIST_URL)
            """,
            lines=(5,),
        ),
        Invalid(
            """
            # Every worker is spawned here, but the address is the author's machine.
            import os
            import torch.distributed as dist
            import torch.multiprocessing as mp
            def worker(rank, world_size):
                os.environ["MASTER_ADDR"] = "10.57.3.14"
                os.environ["MASTER_PORT"] = "29512"
                dist.init_process_group("nccl", rank=rank, world_size=world_size)
            if __name__ == "__main__":
                mp.spawn(worker, args=(4,), nprocs=4)
            """,
            lines=(6,),
        ),
    ]

    SEED_MESSAGE = (
        "init_process_group gets a hard-coded `init_method={url}` with explicit `rank=`/`world_size=` "
        "in a script that starts no workers itself: under torchrun every rank waits for a store at "
        "that address, which exists only if `--master-port` happens to match (otherwise the job "
        "sits for the 30-minute store timeout), and `localhost` cannot span nodes; drop them and "
        "let the default `env://` read what the launcher exports"
    )

    MACHINE_MESSAGE = (
        "{what}, a LAN address, in a script that starts every worker on this machine (mp.spawn, "
        "each rank the spawn index): the workers rendezvous there only on the machine that has "
        "that address, and wait for the store anywhere else; use \"localhost\" (127.0.0.1) and "
        "a free port"
    )

    def __init__(self, model: Model, reported: list[Pending] | None = None) -> None:
        super().__init__(model, reported)
        self._writes: list[tuple[cst.CSTNode, str, cst.Subscript]] = []
        # Where each statement stands: (its block, its index there); the statement being visited.
        self._place: dict[int, tuple[int, int]] = {}
        self._statement: cst.CSTNode | None = None
        self._write_statement: dict[int, cst.CSTNode] = {}
        self._addr_writes: list[tuple[cst.CSTNode, cst.BaseExpression]] = []
        self._written: set[int] = set()
        self._guard_stack: list[list[cst.BaseExpression | bool]] = []  # [test, in its else]

    def visit_Module(self, node: cst.Module) -> None:
        self._places(node.body)

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._places(node.body)

    def _places(self, body: Sequence[cst.BaseStatement]) -> None:
        for index, statement in enumerate(body):
            self._place[id(statement)] = (id(body), index)

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self._statement = node

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            t = target.target
            if isinstance(t, cst.Subscript):
                key = env_key(t)
                if key is None:
                    continue
                self._written.add(id(t))
                if key == "MASTER_ADDR" and not any(self._excuses(g) for g in self._guard_stack):
                    self._addr_writes.append((node, node.value))
                if key in _RENDEZVOUS_ENV | _LAUNCHER_ENV and _literal(node.value):
                    if not any(self._excuses(g) for g in self._guard_stack):
                        self._writes.append((node, key, t))
                        if self._statement is not None:
                            self._write_statement[id(node)] = self._statement

    def visit_If(self, node: cst.If) -> None:
        self._guard_stack.append([node.test, False])

    def leave_If(self, node: cst.If) -> None:
        self._guard_stack.pop()

    def visit_Else(self, node: cst.Else) -> None:
        if self._guard_stack:
            self._guard_stack[-1][1] = True  # the `if` on top is the one this `else` belongs to

    def _excuses(self, guard: list[cst.BaseExpression | bool]) -> bool:
        """A write under this guard is a fallback for another way of starting: the body of a test
        of the environment or the launcher, but not the `else` of a test that a scheduler runs
        the job (`if "SLURM_NODELIST" in os.environ: ... else: MASTER_ADDR = "localhost"`):
        that branch is the one torchrun's runs take."""
        test, in_else = guard
        assert isinstance(test, cst.BaseExpression)
        if not self._tests_environ(test):
            return False
        if not in_else:
            return not _launcher_present(self.model.root.code(test))
        code = " ".join(self.model.root.code(test).lower().split())
        scheduler = any(word in code for word in ("slurm", "mpi", "launcher"))
        return not scheduler or "not " in code or "!=" in code

    def _single_process_only(self, target: cst.Subscript) -> bool:
        """The write runs only where the run is not distributed (`else:` of the `if` that sets
        up the process group, under `if not args.distributed:`): no launcher's value is there
        to override. Nor does a write in a function of the script that nothing calls or names
        (a `run_local()` left for an `mp.spawn` the `__main__` block no longer makes) override
        anything: it never runs."""
        root = self.model.root
        for access in root.env:
            if access.node is target:
                function = access.scope.function
                if function is not None and self.model.paths.uncalled_function(Function(root, function.qualname)):
                    return True
                return any(self.model.paths.kind(root, g, access.scope) == "single" for g in access.guards)
        return False

    def _tests_environ(self, test: cst.BaseExpression, module: ModuleModel | None = None) -> bool:
        """A test of the environment or of the launcher (`if "RANK" not in os.environ:`,
        `if args.launcher == "slurm":`): the write is a fallback for another way of starting."""
        code = (module or self.model.root).code(test).lower()
        return any(word in code for word in ("environ", "getenv", "slurm", "launcher", "mpi"))

    def finish(self) -> None:
        model = self.model
        root = model.root
        if model.starts_workers():
            # It starts its own workers and must set the rendezvous itself: to this machine.
            self._machine_address()
            return
        torchrun = model.torchrun_path or self._launcher_numbers_only()
        launch = not torchrun and self._launch_flag_with_env_rendezvous()
        reported: set[int] = set()
        if not torchrun and not launch and self._launch_flag():
            reported = self._launch_flag_with_host_url()
        if torchrun:
            for first, run_keys in self._write_runs():
                # (the first key names it, as a helper's writes are named when a script runs
                # that helper: a lint of both files then gives one finding)
                self.report(first, self.WRITE_MESSAGE.format(key=run_keys[0]))
            self._helper_writes()
        elif launch:
            # One finding for the address and port written together: they are one rendezvous.
            writes = [(n, k) for n, k, t in self._writes if k in _RENDEZVOUS_ENV and not self._single_process_only(t)]
            if writes:
                keys = " and ".join(f"`os.environ[{k!r}]`" for k in dict.fromkeys(k for _, k in writes))
                self.report(
                    writes[0][0],
                    f"{keys} hard-coded in a script torch.distributed.launch starts (it takes "
                    "`--local_rank`) override the launcher's rendezvous and break multi-node runs and "
                    "parallel jobs; delete them and pass the rendezvous to the launcher (`--master-port`)",
                )
        entry = None
        for call in root.calls:
            if model.api(call) != api.INIT_PROCESS_GROUP or model.paths.uncalled(call) or id(call.node) in reported:
                continue
            method = call.arg("init_method")
            url = self._literal_url(call, method) if method is not None else None
            if torchrun:
                if any(model.paths.kind(root, g, call.scope) == "single" for g in call.guards):
                    continue  # a one-process group on the path without a launcher: its own rendezvous
                problems = ["init_method"] if url is not None else []
                for keyword in ("rank", "world_size"):
                    value = call.arg(keyword)
                    if value is not None and self._fixed_number(call, value):
                        problems.append(keyword)
                if problems:
                    listed = ", ".join(f"`{p}=`" for p in problems)
                    fix = remedies.env_rendezvous(call.node, method if url is not None else None,
                                                  [p for p in problems if p != "init_method"])
                    self.report(
                        call.node,
                        f"init_process_group gets a hard-coded {listed} in a script torchrun launches; "
                        "it overrides what the launcher provides; drop it and let the default `env://` "
                        "read MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE",
                        fix=fix,
                    )
                continue
            if url is None or not url.startswith("tcp://"):
                continue
            rank, world = call.arg("rank"), call.arg("world_size")
            if rank is None or world is None or (int_value(rank) is not None and int_value(world) is not None):
                continue  # a literal rank and size: a fixed, hand-made job
            if self._rank_from_argv(call, rank) and not model.launched_by_usage():
                continue  # each process started by hand with its own rank, and no launcher named for it
            if entry is None:
                entry = model.is_entry_point()
            if entry:
                self.report(call.node, self.SEED_MESSAGE.format(url=repr(url)),
                            fix=remedies.env_rendezvous(call.node, method, []))

    def _write_runs(self) -> list[tuple[cst.CSTNode, list[str]]]:
        """The literal writes to report, a run of them in consecutive statements of one block
        (`os.environ["MASTER_ADDR"] = ...` then `os.environ["MASTER_PORT"] = ...`) as one: they
        set one rendezvous, and one edit removes them. Writes apart (one under an `if`, one after
        it) are reported each."""
        runs: list[tuple[cst.CSTNode, list[str]]] = []
        last: tuple[int, int] | None = None
        for node, key, target in self._writes:
            if self._single_process_only(target):
                continue
            statement = self._write_statement.get(id(node))
            place = self._place.get(id(statement)) if statement is not None else None
            if runs and place is not None and last is not None and place[0] == last[0] \
                    and place[1] - last[1] in (0, 1):
                if key not in runs[-1][1]:
                    runs[-1][1].append(key)
            else:
                runs.append((node, [key]))
            last = place
        return runs

    WRITE_MESSAGE = (
        "`os.environ[{key!r}]` is hard-coded in a script torchrun launches; it overrides the "
        "launcher's value and breaks multi-node runs and parallel jobs; delete it and pass the "
        "rendezvous to torchrun (`--rdzv-endpoint`/`--master-port`)"
    )

    def _fixed_number(self, call: CallSite, value: cst.BaseExpression) -> bool:
        """`world_size=2`, or a name or attribute every value of which is an integer literal
        written in the script's code (`args.world_size = 4` in `main` before the call); a flag's
        default or anything read from the environment is not."""
        if isinstance(value, cst.Integer):
            return True
        if not isinstance(value, (cst.Name, cst.Attribute)):
            return False
        values = self.model.values.at_call(call, value)
        return bool(values) and all(isinstance(v.node, cst.Integer) for v in values)

    def _rank_from_argv(self, call: CallSite, rank: cst.BaseExpression) -> bool:
        """The rank is a positional word of the command line (`rank=int(sys.argv[1])`, or a name
        every value of which is one): each process is started by hand with its own number. A
        launcher gives every worker the same words (torch.distributed.launch puts
        `--local-rank=N` first), so no launcher starts such a script."""
        leaves = [rank] if isinstance(rank, cst.Call) else \
            [v.node for v in self.model.values.at_call(call, rank) if isinstance(v.node, cst.BaseExpression)]
        return bool(leaves) and all(_argv_word(leaf) for leaf in leaves)

    def _always_literal(self, module: ModuleModel, expr: cst.BaseExpression, scope: Scope) -> bool:
        """A literal, or a parameter (or name) every value of which is one: `os.environ[
        "MASTER_ADDR"] = master_addr` in `def ddp_setup(rank, master_addr="localhost")` that every
        call leaves at its default or passes a literal (also through `str(...)`)."""
        if _literal(expr):
            return True
        inner = expr.args[0].value if isinstance(expr, cst.Call) and dotted(expr.func) in ("str", "int") \
            and len(expr.args) == 1 else expr
        if not isinstance(inner, cst.Name):
            return False
        values = self.model.values.of(module, inner, scope)
        return bool(values) and all(isinstance(v.node, cst.BaseExpression) and _literal(v.node) for v in values)

    def _launcher_numbers_only(self) -> bool:
        """Every process group the file sets up meets through `env://` with neither `rank=` nor
        `world_size=`, and the file neither writes RANK nor reads a scheduler's
        variables: each process's rank can only come from the launcher that
        started it (torchrun, `torch.distributed.launch`), which exports the rendezvous too."""
        model = self.model
        if _SCHEDULER_ENV.search(code_only(model.root.source)):
            return False
        inits = model.init_sites()
        if not inits:
            return False
        for call in inits:
            method = call.arg("init_method", 1)
            if method is not None and not is_none(method) and string_text(method) != "env://":
                return False
            if call.arg("rank", 4) is not None or call.arg("world_size", 3) is not None \
                    or call.arg("store", 5) is not None or call.has_star_kwargs:
                return False
        # (a WORLD_SIZE written from the GPU count leaves each process's RANK to the launcher)
        return not any(access.written and access.key == "RANK"
                       for module in {id(c.module): c.module for c in inits}.values() for access in module.env)

    def _launch_flag(self) -> bool:
        """The file takes the `--local_rank` flag that `torch.distributed.launch` passes each
        process it starts, and reads no scheduler's variables (srun and mpirun export no
        rendezvous: such a script sets its own)."""
        model = self.model
        if _SCHEDULER_ENV.search(code_only(model.root.source)):
            return False
        return any(c.method == "add_argument" and any(
            a.keyword is None and string_text(a.value) in ("--local_rank", "--local-rank") for a in c.node.args)
            for c in model.root.calls)

    HOST_URL_MESSAGE = (
        "init_process_group meets at the hard-coded `{url}` in a script torch.distributed.launch starts "
        "(it takes `--local_rank`): it overrides the launcher's MASTER_ADDR/MASTER_PORT and cannot span "
        "nodes; drop `init_method` and let the default `env://` read the launcher's rendezvous"
    )

    def _launch_flag_with_host_url(self) -> set[int]:
        """In a script the launcher starts (it takes `--local_rank`), a process group that meets
        at a host written in the code (`init_method="tcp://127.0.0.1:%d" % tcp_port`, the port
        from a flag or not) ignores the rendezvous the launcher exported. Only a URL written at
        the call counts: one read from a flag (`--dist-url`) is the user's to set."""
        model = self.model
        reported: set[int] = set()
        for call in model.init_sites():
            method = call.arg("init_method")
            host = _written_host_url(method) if method is not None else None
            if host is None or model.paths.single_only(call) is not None or model.paths.uncalled(call):
                continue
            self.report(call.node, self.HOST_URL_MESSAGE.format(url=host), module=call.module,
                        related=model.paths.chain(call))
            reported.add(id(call.node))
        return reported

    def _launch_flag_with_env_rendezvous(self) -> bool:
        """The file takes the `--local_rank` flag that `torch.distributed.launch` passes each
        process it starts, and every process group its run sets
        up meets through `env://` (the default, or that literal): the MASTER_ADDR/MASTER_PORT it
        reads are the launcher's."""
        model = self.model
        if not self._launch_flag():
            return False
        inits = model.init_sites()
        for call in inits:
            method = call.arg("init_method", 1)
            if method is not None and not is_none(method) and string_text(method) != "env://":
                return False
        return bool(inits)

    def _helper_writes(self) -> None:
        """Literal rendezvous writes in the project functions the script runs (`setup_ddp()` of
        another module writing `os.environ["MASTER_PORT"] = "12355"`), read as the script's own
        are: not under a test of the environment or the launcher, not on the single-process
        path."""
        model = self.model
        done: set[int] = set()
        for function in model.paths.reached():
            module = function.module
            if module is model.root or id(function.node) in done:
                continue
            done.add(id(function.node))
            for access in module.env:
                if not access.written or access.scope is not function.scope \
                        or access.key not in _RENDEZVOUS_ENV | _LAUNCHER_ENV:
                    continue
                if any(self._tests_environ(g.test, module) and (g.negated or not _launcher_present(module.code(g.test)))
                       or model.paths.kind(module, g, access.scope) == "single" for g in access.guards):
                    continue
                assign = next((n for n in _statements(function.node) if isinstance(n, cst.Assign)
                               and any(t.target is access.node for t in n.targets)), None)
                if assign is None or not self._always_literal(module, assign.value, access.scope):
                    continue
                # The writes of one set-up function are one rendezvous: reported at the first.
                # (The message is the one a lint of that module as a script gives: the two are
                # one finding.)
                self.report(assign, self.WRITE_MESSAGE.format(key=access.key), module=module,
                            related=[c for c, _ in model.paths.edges_into(function)][:1])
                break

    # --- scripts that start every worker on this machine ------------------------------------
    def _machine_address(self) -> None:
        """A script whose workers all run here (mp.spawn, each rank the spawn index) can only
        meet on this machine; a LAN address written into it (`MASTER_ADDR = "10.57.3.14"`, a
        `--dist-url` default of `tcp://192.168.1.20:23456`) is the author's machine, and the job
        waits for a store that is not there anywhere else. Scripts that add a node rank
        (`rank = node_rank * gpus + gpu`) span machines: their address is the first node's."""
        model = self.model
        inits = model.init_sites()
        if not inits or not all(self._rank_is_spawn_index(c) for c in inits):
            return
        for write, written in self._addr_writes:
            host = string_text(written)
            if host is not None and _machine_specific(host):
                self.report(write, self.MACHINE_MESSAGE.format(what=f"`MASTER_ADDR` is {host!r}"))
        reported: set[int] = set()
        for call in inits:
            method = call.arg("init_method", 1)
            if method is None:
                continue
            for value in model.values.at_call(call, method):
                for held in option_values(model, value) or [value]:
                    self._report_machine_url(call, held, reported)

    def _report_machine_url(self, call: CallSite, value: Value, reported: set[int]) -> None:
        """A `tcp://` URL literal with a LAN address (reported once where it is written)."""
        node, module = value.node, value.module
        url = string_text(node) if isinstance(node, cst.BaseExpression) else None
        host = urlsplit(url).hostname if url is not None and url.startswith("tcp://") else None
        if host is not None and _machine_specific(host) and id(node) not in reported:
            reported.add(id(node))
            assert isinstance(node, cst.BaseExpression)
            self.report(node, self.MACHINE_MESSAGE.format(what=f"the rendezvous is {url!r}"),
                        module=module, related=[call] if module is not call.module else [])

    def _rank_is_spawn_index(self, call: CallSite) -> bool:
        """The rank given to `init_process_group` is the index `mp.spawn` passes its worker
        (or a literal, on a path that runs the worker by hand): every rank is a process of this
        machine."""
        rank = call.arg("rank", 4)
        if rank is None:
            return False
        values = self.model.values.at_call(call, rank)
        return bool(values) and all(
            int_value(v.node) is not None if isinstance(v.node, cst.BaseExpression) else self._spawn_index(v)
            for v in values)

    def _spawn_index(self, value: Value) -> bool:
        param = value.node
        if not isinstance(param, Param) or param.index != 0:
            return False
        function = Function(value.module, param.function)
        return any(bound == "spawn" for _, bound in self.model.graph.callers(function))

    def _literal_url(self, call: CallSite, method: cst.BaseExpression) -> str | None:
        """The URL when every value `init_method` may take is the same literal, not `env://`."""
        values = self.model.values.at_call(call, method)
        texts = set()
        for value in values:
            text = self._literal_text(value, 2)
            if text is None or text.startswith("env://"):
                return None
            texts.add(text)
        return sorted(texts)[0] if texts else None

    def _literal_text(self, value: Value, depth: int) -> str | None:
        """The text a value always has: a string or integer literal, or an f-string made of
        literals and names that each hold one (`f"tcp://{MASTER_ADDR}:{MASTER_PORT}"` after
        `MASTER_ADDR = "localhost"`); None when any part may vary."""
        node = value.node
        if isinstance(node, cst.SimpleString):
            text = node.evaluated_value
            return text if isinstance(text, str) else None
        if isinstance(node, cst.Integer):
            return node.value
        if not isinstance(node, cst.FormattedString) or depth <= 0:
            return None
        out = []
        for part in node.parts:
            if isinstance(part, cst.FormattedStringText):
                out.append(part.value)
                continue
            assert isinstance(part, cst.FormattedStringExpression)
            if part.format_spec or part.conversion or not isinstance(part.expression, (cst.Name, cst.Attribute)):
                return None
            held = self.model.values.of(value.module, part.expression, value.scope, value.frame, at=value.at)
            texts = {self._literal_text(v, depth - 1) for v in held}
            if len(texts) != 1 or None in texts:
                return None
            out.append(texts.pop() or "")
        return "".join(out)


_HOST_URL = re.compile(r"tcp://([\w.\-]+|\[[0-9a-fA-F:]+\]):")


def _written_host_url(node: cst.BaseExpression) -> str | None:
    """`"tcp://127.0.0.1:23456"`, `"tcp://127.0.0.1:%d" % port`, `f"tcp://localhost:{port}"` or
    `"tcp://127.0.0.1:" + str(port)` written at the call: the URL's literal start up to the port
    (`tcp://127.0.0.1:`), None when the host is not written there."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Modulo, cst.Add)):
        node = node.left
    if isinstance(node, cst.SimpleString):
        text = string_text(node)
    elif isinstance(node, cst.FormattedString) and node.parts and isinstance(node.parts[0], cst.FormattedStringText):
        text = node.parts[0].value
    else:
        return None
    found = _HOST_URL.match(text or "")
    return found.group(0) if found else None
