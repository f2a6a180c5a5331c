from __future__ import annotations

import re
from pathlib import Path

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.conditions import LAUNCH_FLAG, Resolve, is_rank_value, main_rank_literal, selects_main_rank
from ddpcheck.lint.model.ddp import wraps
from ddpcheck.lint.model.module import Augmented, CallSite, ClassInfo, Element, Guard, Item, ModuleModel, Param, Point, Scope, Shared
from ddpcheck.lint.model.options import command_line_switch
from ddpcheck.lint.model.parse import PARSE_ERRORS, parse_module
from ddpcheck.lint.model.paths import handler_calls
from ddpcheck.lint.model.project import resolved_path
from ddpcheck.lint.model.scripts import project_files
from ddpcheck.lint.model.symbols import Function
from ddpcheck.lint.model.values import Frame, Value
from ddpcheck.lint.model.syntax import dotted, last_name, string_text, subexpressions
from ddpcheck.lint.rule import Invalid, Rule
from ddpcheck.lint.rules._crashes import Crashes
from ddpcheck.lint.rules._loops import Loops

_LOG_METHODS = frozenset({"info", "debug", "warning", "log"})
_LOGGERS = re.compile(r"^(logger|log|logging|LOGGER|_logger|_LOGGER)$")
_LOG_SETUP_METHODS = frozenset({"setLevel", "addHandler", "removeHandler", "disable"})
_LOG_SETUP_APIS = frozenset({"logging.basicConfig", "logging.disable"})
# Anything that may give the root logger a handler or a level below WARNING: the standard calls,
# a project or library logger factory (`setup_logger(...)`, `coloredlogs.install()`), or a
# framework that sets logging up for the script it runs (hydra, absl, detectron2, mmcv, fairseq).
_LOG_CONFIG = re.compile(r"basicConfig|addHandler|dictConfig|fileConfig|setLevel|handlers|coloredlogs"
                         r"|(setup|init|create|make|config\w*|build|get_\w*)_?log|hydra|absl|detectron2|mmcv"
                         r"|mmengine|fairseq|loguru|rich\.logging|transformers\.logging|logzero", re.I)
# loguru's logger writes INFO records to stderr from the import on, with no set-up call.
_LOGURU = re.compile(r"^\s*(from|import)\s+loguru\b", re.M)
# What changes where loguru's records go (or whether they are written at all).
_LOGURU_SETUP = frozenset({"remove", "configure", "disable"})
_LOG_FRAMEWORKS = re.compile(r"^\s*(from|import)\s+(hydra|absl|detectron2|mmcv|mmengine|fairseq)\b", re.M)
_TQDM_WRITES = frozenset(f"{bar}.write" for bar in api.TQDM)
# `trange(n)` is `tqdm(range(n))`: a bar over the steps of the loop it drives.
_BARS = api.TQDM | frozenset({"tqdm.trange", "tqdm.auto.trange", "tqdm.notebook.trange", "tqdm.std.trange"})
_PRINT_TARGETS = frozenset({"builtins.print", "__builtin__.print", "__builtins__.print"})
# `pprint(res)`: a print of the value's layout (to `sys.stdout` unless given a stream).
_PPRINTS = frozenset({"pprint.pprint", "pprint.pp"})
# Unindented lines that run nothing of their own when the file is imported.
_NOT_RUN = ("import ", "from ", "#", "def ", "async def ", "class ")
_EXITS = frozenset({"sys.exit", "exit", "quit", "os._exit"})
# What moves a progress bar on by hand, or changes what it shows.
_BAR_STEPS = frozenset({"update", "refresh", "set_description", "set_description_str", "set_postfix",
                        "set_postfix_str"})
_BAR_LABELS = frozenset({"set_description", "set_description_str", "set_postfix", "set_postfix_str"})
_MAX_HOPS = 3
# The levels of the standard logging constants, and of the logger methods that log at them.
_LEVELS = {"logging.NOTSET": 0, "logging.DEBUG": 10, "logging.INFO": 20, "logging.WARNING": 30, "logging.WARN": 30,
           "logging.ERROR": 40, "logging.CRITICAL": 50, "logging.FATAL": 50}
_METHOD_LEVELS = {"debug": 10, "info": 20, "warning": 30, "warn": 30, "error": 40, "exception": 40, "critical": 50}
# Logging handlers by what they write to: a file (`logging.FileHandler`, the rotating ones of
# `logging.handlers`) or the console (`logging.StreamHandler`, `colorlog.StreamHandler`, rich's).
_FILE_HANDLER = re.compile(r"(?:^|\.)\w*FileHandler$")
_CONSOLE_HANDLER = re.compile(r"(?:^|\.)(?:StreamHandler|RichHandler|TqdmLoggingHandler)$")
_CONSOLE = frozenset({"sys.stdout", "sys.stderr"})
_RANK = re.compile(r"rank", re.I)
# The text of a device string (`f"cuda:{rank}"`, `"npu:" + str(local_rank)`).
_DEVICE_TEXT = re.compile(r"\b(cuda|npu|xpu|hpu|mlu)\b")
# Calls that name the process a message comes from, which tells the ranks' lines apart as the rank does.
_PROCESS_IDS = frozenset({"os.getpid", "multiprocessing.current_process", "torch.multiprocessing.current_process"})
# A message that names the process rank: not a retrieval metric's rank (`"CMC curve, Rank-{:<3}"`,
# `"Rank@1"`, `rank-5 accuracy`), which names a position in a result list.
_RANK_NAMED = re.compile(r"rank(?!-?\s*[-@]\s*(?:\d|\{))", re.I)
# Tests on tensor values (a rank's own data), as methods: `loss.isnan()`, `(x < 0).any()`.
_TENSOR_TESTS = frozenset({"isnan", "isinf", "isfinite", "any", "all"})
# torch calls that ask about the job or the machine rather than a tensor's values.
_NOT_DATA = ("torch.distributed.", "torch.cuda.", "torch.accelerator.", "torch.backends.", "torch.__version__")


class PrintOnEveryRank(Rule):
    """`print`, `tqdm` or logging in the training loop runs on every rank, with no rank guard.

    ## Why it matters
    Each of the N processes prints its own copy: the console shows every line N times,
    interleaved, and N progress bars fight over the terminal. Logs grow N-fold and the line that
    matters (an error on one rank) is hard to find. Harmless for correctness, hence off by
    default and informational.

    Reported (`print`, `pprint`, `tqdm.write`, progress bars — `tqdm`, `trange` —, logger calls, also on
    a logger known by its value rather than its name, `print_logger = logger(path)` of a project
    factory that returns `logging.getLogger(...)`): output inside a training or evaluation loop — a loop over a DataLoader, or one
    whose body back-propagates, steps an optimizer, makes a collective call or runs such a loop
    (the epoch loop), and a progress bar over a loop that runs a model on its items (also `for i, _ in enumerate(bar):`), or one advanced or relabelled by hand at each step of such a loop through the name or `self` attribute it is bound to (`self.bar.set_description(...)`, `bar.update(1)`) — and the per-epoch messages of a function that trains or evaluates when
    it is called from such a loop. A function that only prints (a progress printer's
    `display()`, a logger wrapper) is reported where the loop calls it: the guard goes there; a
    progress bar in a function such a loop calls (`for batch in tqdm(testloader):` in the test
    helper an epoch-end `self.test()` runs) is reported on the bar, where `disable=` goes. One
    that does more — sets the rate in the optimizer's parameter groups and prints it, saves a
    checkpoint and says so, runs the evaluation it was handed and prints the score (an
    epoch-end validation callback), returns what it computes to a caller that keeps it (`res =
    validate_classification(loaders, model)`, also in a dict entry, `data["train"] =
    get_dataset(args, epoch)`) — is reported at its output: a guard around its call would
    change what the other ranks do. Unguarded prints in the `forward` of a project network that every
    rank wraps in DDP, or of a project layer it runs there (`self.attention(x)`), repeat at each
    training step of every rank (a print under any test, `if self.debug:`, is left alone, but
    for the arm a flag parameter's default takes, `if not sample:` of `forward(self, x, y=None,
    mask=None, sample=False)`, where nothing on the run passes `sample=`).
    `wandb.log` counts as output where every rank starts its own run (each `wandb.init` reached
    on every rank, with no `mode=` or `settings=` and no `WANDB_MODE` / `WANDB_DISABLED` in the
    code), also as `run.log(...)` on the run object `wandb.init(...)` returned: the dashboard then
    holds N copies of the run.

    Not reported: calls in a top-level function of the script that nothing calls or names (a
    set-up left beside the one the run uses), calls under a rank guard (`if rank == 0:`, `if rank == "0":` with the rank
    kept as the environment's string, `if is_main_process():`,
    `cond and opt["rank"] == 0`, `if args.local_rank == -1 or dist.get_rank() == 0:`, a flag
    assigned or passed from one — `Trainer(..., verbose=rank == 0)` then `if self.verbose:` —,
    `is_main = True if local_rank == 0 else False` passed to a project logger that prints `if
    self.enable:`, `MAIN = rank is None or rank == 0`,
    `if writer is not None:` where only rank 0 makes the writer, a function under a rank-0
    decorator such as `@rank_zero_only`; a branch that only a part of the ranks takes, not
    named: the ranks from a configured bound up — the `else:` of `if local_rank <
    args.num_gpus:` in a job with one host process past the GPU workers —, or a test on the
    value a rank received from a scatter, `if my_state[0] == 2:`), calls of a logger only rank 0 has (the other ranks
    get None or a do-nothing stand-in: `else: self.logger = NoOp()`, a class whose
    `__getattr__` hands back a function that does nothing),
    `tqdm(..., disable=...)` (unless the flag is the same on every rank: `False`, or a
    command-line switch such as `disable=args.no_progress`, also one declared by a parser in a
    project module the script reaches, `args = get_args()`, unless the script assigns the field) and `tqdm(...) if is_main else loader`, `print` replaced by
    `builtins.print` on the run (DeiT's `setup_for_distributed`, also in a helper module, or by the
    top-level code of a project module the script imports, `builtins.print = rank0_print`) unless the replacement is made only for `mp.spawn` workers or a job scheduler's
    start (`or (args.is_slurm_job and args.rank != 0)`) while torchrun
    can start the script (one that also lets every rank print on jobs past a size, `force = force
    or get_world_size() > 8`, still silences: the size a job is launched at is not in the code);
    logging configured by rank on the run (a level, handler or
    `basicConfig` set under a rank guard or from a rank test — also through a variable,
    `level = WARNING` under `if rank != 0:` —, or from a test that reads the rank among other
    things, `CRITICAL if local_rank != 0 or args.silent else INFO` —, a logger factory that gives the other ranks no
    handler, a project function (not a method) that sets logging up and is called on some ranks
    only, or with other arguments on the other ranks (`logger = create_logger(dir)` under `if
    rank == 0:`, `else: logger = dummy_logger()` or `get_logger(dir, verbose=False)`), a logger whose methods are swapped for a project wrapper with
    `setattr`/`__setattr__`; records at or below a level that `logging.disable(level)` on every
    rank drops; not where the only set-up by rank is a file handler's, `if rank ==
    0: root.addHandler(logging.FileHandler(path))`, beside a console handler — `StreamHandler`,
    colorlog's, rich's, the one `logging.basicConfig(...)` with no file gives — added on every rank: the console still shows each rank's records); logging whose format carries the rank (`basicConfig(format=f"[rank {rank}] ...")`,
    a `Formatter` built with it) or a logger named with the rank (`getLogger(f"rank{rank}")`), or a logger passed in that every caller made with the rank (`setup_logger(rank, world_size)`); loggers imported from installed packages (their configuration is
    out of sight) — but loguru's `logger`, which writes every record to stderr from the import
    on, is reported unless the run takes that sink away (`logger.remove()`, `logger.configure(...)`,
    `logger.disable(...)`; a file sink `logger.add(path)` on rank 0 leaves it); `print(..., file=f)`; a `print` the module rebinds by importing a project
    function under that name (`from utils.distributed import master_only_print as print`: the
    function's own output is judged where it writes); messages that name the rank (in the call or in the
    variable holding the message — also a line kept in parts, `head, tail = f"[GPU {rank}] ", ""`
    then `print(head + tail, end="\\r")` —, or through a project helper that returns it tagged,
    `logger.info(format_msg(text))` with `return f"[R:{rank}] {msg}"` — a retrieval metric's `"Rank-{}"`/`"Rank@1"` names a place in a
    result list, not the process —, the process id, `f"[MEM-{os.getpid()}] ..."`, the rank's own
    device, `print("GPU", device, ...)` with `device = torch.device(f"cuda:{rank}")` (also
    passed in by the caller), or a value
    that is the rank under another name:
    `template.format(self.gpu_id, loss)`; for output in a function called from the loop, the
    rank the caller passes counts only where it fills a parameter the output names, directly or
    through the value it prints: `evaluate(rank=rank, ...)` that prints `f"Evaluating {name}"`
    repeats it on every rank) and progress bars labelled with it (`desc=f"rank
    {rank}"`, or `bar.set_postfix({f"{rank}_loss": loss})` on the name the bar is bound to); start-up loops (over arguments, files, state_dict keys); a print of spaces only
    (`print(" " * 80, end="\\r")`, which wipes a line and shows nothing);
    output that a function reaches only after a top-level read of an attribute its object cannot
    have (`colors = loader.dataset.palette` where the project's dataset class never sets
    `palette`: AttributeError there on every run);
    messages of a loop that repeats whole runs, each pass building a model and wrapping it in DDP
    (`for ii in range(args.itr): exp = Exp(args); exp.train(setting); exp.test(setting)`, the
    wrap in the constructor): they come once per run, not per epoch (the epoch loop inside
    each run is still one; a pass that wraps a network handed in from outside it, `Trainer(net,
    gpu).fit(...)` at each pruning level, trains one network in stages and is a training loop);
    messages on the way out of a loop (`print("Done"); break`, `print("zero loss"); return`, an
    error before `sys.exit`; a `break` out of a loop that sits in an epoch loop still repeats
    each epoch, and so does a `break` or `return` in a `train_epoch()` that a caller's epoch
    loop runs) or
    at one value of the loop variable of a training or evaluation loop (`if epoch == start_epoch:`, or an `and` that fixes every such loop around the call:
    `if epoch == start_epoch and i == 0:`; not of a loop over metric names, `if n == "Acc":`, which prints at every epoch, nor `if itr == 0:` in the batch loop of a `train_epoch()` that a caller's epoch loop runs, nor a progress bar made there, `if epoch == start: bar = tqdm(range(n - done))`, which draws at each step of that epoch) or of a step counter no loop resets (`if self.step == 0:`
    with `self.step += 1`); messages printed while a missing file is made (`if not
    os.path.exists(path): print("Downloading ...")`: the file is there the next time; not a
    loop after an early exit on a finished file, `if os.path.exists(done): ...; return`); `info` records where no file
    sets logging up (a logger factory's `def` line sets nothing up until it is called); warnings printed when a test
    on tensor values holds (`if torch.min(y) < -1.0:`, `if loss.isnan():`, also around the call
    of a project function that prints: `if torch.isnan(loss): self.alert(msg)`), which each rank
    gives about its own data (a test on the norm `clip_grad_norm_` returns is not one: DDP
    averaged those gradients, so every rank prints the same warning); output in an `except` handler for an error (a rank reporting its
    own failure; `except StopIteration:` at the end of a pass is still reported, and so is the
    handler of a `try` that clips the gradients with `error_if_nonfinite=True`: DDP averaged
    them, so every rank raises and reports the same error); output under a
    project check that returns a rank-0 test when an option asks for it (`if self.only_main:
    return is_main_process()`); `print` in a script that a launcher of the project starts with
    stdout sent to the null device on all processes but one (`stdout=None if i == 0 else
    open(os.devnull, "w")`), when torchrun cannot start it; prints (and, with `sys.stderr`,
    progress bars) of a script that points `sys.stdout` elsewhere on the ranks but rank 0 (`if
    local_rank != 0: sys.stdout = open(os.devnull, "w")`); output in the function that calls
    `mp.spawn` (the one process that starts the workers) when torchrun cannot start the script.

    ## How to fix
    Guard output with `if rank == 0:` (or a helper such as `is_main_process()`), pass
    `disable=rank != 0` to `tqdm`, or set the logging level to WARNING on non-zero ranks.

    ## References
    - https://pytorch.org/tutorials/intermediate/ddp_tutorial.html
    - https://github.com/facebookresearch/deit/blob/main/utils.py (`setup_for_distributed`)
    """

    code = "DDP020"
    name = "print-on-every-rank"
    severity = Severity.INFO
    default_enabled = False

    VALID = [
        """
        # The replacement print lets every rank through on jobs larger than one node: the size a
        # job is launched at is not in the code, so the override counts as silencing.
        import builtins
        import torch.distributed as dist

        def setup_for_distributed(is_master):
            builtin_print = builtins.print
            def print(*args, **kwargs):
                force = kwargs.pop("force", False)
                force = force or dist.get_world_size() > 8
                if is_master or force:
                    builtin_print(*args, **kwargs)
            builtins.print = print

        def main():
            dist.init_process_group("nccl")
            setup_for_distributed(dist.get_rank() == 0)
            for epoch in range(args.epochs):
                for x, y in loader:
                    model(x, y).backward()
                    optimizer.step()
                print(f"epoch {epoch} done")

        if __name__ == "__main__":
            main()
        """,
        """
        import torch.distributed as dist
        from torch.utils.data import DataLoader, DistributedSampler
        from tqdm import tqdm
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        loader = DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset))
        for epoch in range(10):
            for x, y in tqdm(loader, disable=rank != 0):
                model(x, y).backward()
            if rank == 0:
                print(f"epoch {epoch} done")
        """,
        """
        import torch.distributed as dist
        import builtins
        def setup_for_distributed(is_master):
            builtin_print = builtins.print
            def print(*args, **kwargs):
                if is_master:
                    builtin_print(*args, **kwargs)
            builtins.print = print
        dist.init_process_group("nccl")
        setup_for_distributed(dist.get_rank() == 0)
        for epoch in range(3):
            for x, y in loader:
                model(x, y).backward()
            print("epoch", epoch)
        """,
        """
        import tqdm
        import torch.distributed as dist
        from torch.utils.data import DataLoader, DistributedSampler
        dist.init_process_group("nccl")
        loader = DataLoader(dataset, sampler=DistributedSampler(dataset))
        for epoch in range(3):
            bar = tqdm.tqdm(loader) if dist.get_rank() == 0 else loader
            for batch in bar:
                loss = model(batch)
                loss.backward()
                if is_main_process():
                    print(loss.item())
        """,
        """
        # Start-up loops (arguments, weights) and the way out of the loop are not per-step output.
        import torch
        import torch.distributed as dist
        dist.init_process_group("nccl")
        for key, value in sorted(vars(args).items()):
            print(f"{key}: {value}")
        state = torch.load(args.weights, map_location="cpu")
        for name in model.state_dict():
            if name not in state:
                print(f"missing key {name}")
        for step, (x, y) in enumerate(loader):
            if step >= args.max_steps:
                print("reached max_steps")
                break
            model(x, y).backward()
            optimizer.step()
        """,
        """
        # A logger factory that gives the other ranks a logger without handlers.
        import logging
        import torch.distributed as dist

        def create_logger(log_dir):
            logger = logging.getLogger("train")
            if dist.get_rank() == 0:
                logger.setLevel(logging.INFO)
                logger.addHandler(logging.FileHandler(f"{log_dir}/log.txt"))
            else:
                logger.addHandler(logging.NullHandler())
            return logger

        def main():
            dist.init_process_group("nccl")
            logger = create_logger(args.out)
            for epoch in range(args.epochs):
                for x, y in loader:
                    model(x, y).backward()
                    optimizer.step()
                logger.info("finished epoch %d", epoch)

        if __name__ == "__main__":
            main()
        """,
        """
        # The rank kept in an options dict; the level chosen from a rank test.
        import logging
        import torch.distributed as dist
        dist.init_process_group("nccl")
        opt = {"rank": dist.get_rank()}
        logging.basicConfig(level=logging.INFO if opt["rank"] == 0 else logging.WARNING)
        logger = logging.getLogger(__name__)
        for step, batch in enumerate(loader):
            model(batch).backward()
            logger.info("step %d", step)
            if step % 100 == 0 and opt["rank"] == 0:
                print(f"step {step}")
        """,
        """
        # Output that is not the console's, or that names the rank, or that only rank 0 can reach.
        import torch.distributed as dist
        from torch.utils.tensorboard import SummaryWriter
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        if rank == 0:
            writer = SummaryWriter(args.log_dir)
        else:
            writer = None
        with open(f"log_r{rank}.csv", "a") as f:
            for epoch in range(args.epochs):
                for step, (x, y) in enumerate(loader):
                    loss = model(x, y)
                    loss.backward()
                    print(step, loss.item(), sep=",", file=f)
                    msg = f"step {step} loss {loss.item():.4f}"
                    msg += f" rank {rank}"
                    print(msg)
                if writer is not None:
                    print(f"epoch {epoch} logged to {writer.log_dir}")
                if epoch == args.start_epoch:
                    print("first epoch done: checking the weights")
        """,
        """
        # A branch no run takes: `warmup > 0` with every caller leaving warmup at 0.
        import torch.distributed as dist

        def augment(images, warmup=0.0):
            if warmup > 0:
                print(f"warmup blur {warmup}")
            return images.flip(-1)

        def main():
            dist.init_process_group("nccl")
            for images, labels in loader:
                model(augment(images), labels).backward()
                optimizer.step()

        if __name__ == "__main__":
            main()
        """,
        """
        # A warning about this rank's own batch, printed only when its data is out of range.
        import torch
        import torch.distributed as dist
        dist.init_process_group("nccl")
        for x, y in loader:
            if torch.isnan(x).any():
                print(f"NaN in the input batch; skipping")
                continue
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
        """,
    ]
    INVALID = [
        Invalid(
            """
            # `RANK != -1` asks "launched distributed?": every rank takes that branch.
            import os
            import torch.distributed as dist
            from torch.utils.data import DataLoader, DistributedSampler
            RANK = int(os.getenv("RANK", -1))
            if RANK != -1:
                dist.init_process_group("nccl")
            loader = DataLoader(dataset, sampler=DistributedSampler(dataset))
            for epoch in range(3):
                for x, y in loader:
                    model(x, y).backward()
                if RANK != -1:
                    print("synced epoch", epoch)
            """,
            lines=(13,),
        ),
        Invalid(
            """
            import torch.distributed as dist

            def train_one_epoch(model, loader, optimizer):
                for x, y in loader:
                    loss = model(x, y)
                    loss.backward()
                    optimizer.step()
                return loss

            def main():
                dist.init_process_group("nccl")
                for epoch in range(10):
                    loss = train_one_epoch(model, loader, optimizer)
                    print(f"epoch {epoch}: loss {loss:.3f}")

            if __name__ == "__main__":
                main()
            """,
            lines=(14,),
        ),
        Invalid(
            """
            import logging
            from tqdm import tqdm
            import torch.distributed as dist
            from torch.utils.data import DataLoader, DistributedSampler
            logger = logging.getLogger(__name__)
            dist.init_process_group("nccl")
            loader = DataLoader(dataset, sampler=DistributedSampler(dataset))
            for epoch in range(3):
                for x in tqdm(loader):
                    logger.info("step")
            """,
            lines=(9, 10),
        ),
        Invalid(
            """
            # A printer called in the loop is reported where it is called: the guard goes there.
            import torch.distributed as dist

            class ProgressMeter:
                def __init__(self, num_batches):
                    self.num_batches = num_batches

                def display(self, batch):
                    print(f"[{batch}/{self.num_batches}]")

            def train(loader, model, optimizer):
                progress = ProgressMeter(len(loader))
                for i, (x, y) in enumerate(loader):
                    model(x, y).backward()
                    optimizer.step()
                    if i % 10 == 0:
                        progress.display(i)

            def validate(loader, model):
                progress = ProgressMeter(len(loader))
                for i, (x, y) in enumerate(loader):
                    model(x, y)
                    dist.barrier()
                    progress.display(i)

            def main():
                dist.init_process_group("nccl")
                for epoch in range(10):
                    train(train_loader, model, optimizer)
                    validate(val_loader, model)

            if __name__ == "__main__":
                main()
            """,
            lines=(17, 24),
        ),
        Invalid(
            """
            # print is silenced only for mp.spawn workers; torchrun starts the script without the flag.
            import builtins
            import os
            import torch.distributed as dist
            import torch.multiprocessing as mp

            def main_worker(gpu, args):
                if args.multiprocessing_distributed and gpu != 0:
                    builtins.print = lambda *a, **k: None
                dist.init_process_group("nccl", rank=args.rank)
                for epoch in range(args.epochs):
                    for x, y in loader:
                        model(x, y).backward()
                        optimizer.step()
                    print(f"epoch {epoch} done")

            def main():
                args = parser.parse_args()
                if args.multiprocessing_distributed:
                    mp.spawn(main_worker, nprocs=args.ngpus, args=(args,))
                else:
                    main_worker(int(os.environ.get("LOCAL_RANK", 0)), args)

            if __name__ == "__main__":
                main()
            """,
            lines=(15,),
        ),
    ]


    def finish(self) -> None:
        model = self.model
        if not model.uses_ddp:
            return
        self.loops = Loops(model)
        self.crashes = Crashes(model)
        self._silenced_logging: bool | None = None
        self._configured_logging: bool | None = None
        self._tagged_logging: bool | None = None
        self._loguru_configured: bool | None = None
        self._wandb_everywhere: bool | None = None
        self._disabled: int | None = None
        self._moved: dict[str, bool] = {}
        print_silenced = self._print_silenced()
        reported: set[int] = set()
        for site in model.paths.sites():
            kind = self._kind(site)
            if kind is None:
                continue
            if kind == "tqdm" and site.has_keyword("disable") and not self._shown_everywhere(site):
                continue
            if self._guarded(site):
                continue
            if self.crashes.site_stopped(site):
                continue  # (an attribute its object lacks is read above it: the function raises first)
            if not model.torchrun_path and model.paths.launcher_only(site):
                continue  # the one process that starts the workers (`mp.spawn(...)` beside it)
            if self._rank_tagged(site, kind):
                continue  # `print(f"[rank {rank}] ...")`: output meant to come from every rank
            if kind != "tqdm" and self._data_check(site):
                continue  # `if torch.min(y) < -1: print(...)`: about this rank's own batch
            if kind != "tqdm" and id(site.node) in handler_calls(site.module, errors_only=True) \
                    and not self._synced_gradient_error(site):
                continue  # `except Exception as e: print(e)`: a rank reporting its own failure
            if kind == "print" and (print_silenced or self._console_moved("sys.stdout")):
                continue
            if kind == "tqdm" and self._console_moved("sys.stderr"):
                continue  # (a progress bar writes to `sys.stderr`)
            if kind == "logging" and site.method in ("info", "debug") and not self._logging_configured():
                continue  # no handler nor level is ever set: Python drops records below WARNING
            if kind == "logging" and _METHOD_LEVELS.get(site.method or "", 100) <= self._disabled_level():
                continue  # `logging.disable(logging.WARNING)` on every rank: the record is dropped
            if kind == "logging" and (self._logging_silenced() or self._logging_tagged()
                                      or not self._logger_visible(site) or self._logger_tagged(site)):
                continue
            if self._once(site, kind):
                continue
            called: set[tuple[int, str | None]] = set()
            for place in self._places(site, kind, 0):
                if id(place.node) in reported:
                    continue
                if place is not site and kind != "tqdm" and self._data_check(place):
                    continue  # `if torch.isnan(loss): self.alert(...)`: the caller tests this rank's data
                reported.add(id(place.node))
                if place is not site:
                    # `evaluate(..., cfg=1.0)` and again `evaluate(..., cfg=args.cfg)` in one loop:
                    # the same output, fixed once (in the callee or around both calls).
                    key = (id(place.scope), place.dotted)
                    if key in called:
                        continue
                    called.add(key)
                self._report(site, place, kind)
        if not print_silenced and not self._console_moved("sys.stdout"):
            for site in self._forward_prints():
                if id(site.node) not in reported:
                    reported.add(id(site.node))
                    self._report(site, site, "print")

    # --- the network's forward ---------------------------------------------------------------
    def _forward_prints(self) -> list[CallSite]:
        """Unguarded prints in the `forward` of a project network that every rank wraps in DDP,
        or of a layer of the project it holds and runs there (`self.attention(x)`): the forward
        runs at each step of training, on every rank. A print under any test (`if self.debug:`,
        `if not self.training:`) is left alone, but for the arm a flag parameter's default takes
        (`_default_arm`)."""
        model = self.model
        graph = model.graph
        classes: list[tuple[ModuleModel, ClassInfo]] = []
        for module in model.paths.modules():
            for wrap in wraps(model, module):
                if wrap.inner is None or model.paths.every_rank(wrap.site) is None:
                    continue
                for value in model.values.at_call(wrap.site, wrap.inner):
                    if graph.is_network(value):
                        classes += graph.instances_of(value)
        out: list[CallSite] = []
        seen: set[tuple[int, str]] = set()
        depth = 0
        while classes and depth <= _MAX_HOPS:
            layers: list[tuple[ModuleModel, ClassInfo]] = []
            for module, info in classes:
                forward = graph.method(module, info, "forward")
                if forward is None or (id(forward.module), forward.qualname) in seen:
                    continue
                seen.add((id(forward.module), forward.qualname))
                owner = forward.owner
                for site in forward.module.calls_in(forward.qualname):
                    if self._kind(site) == "print" and all(self._default_arm(forward, g) for g in site.guards) \
                            and not self._rank_tagged(site, "print") and id(site.node) not in handler_calls(site.module):
                        out.append(site)
                    func = site.node.func
                    if owner is not None and isinstance(func, cst.Attribute) and dotted(func.value) == "self":
                        held = cst.Attribute(cst.Name("self"), cst.Name(func.attr.value))
                        for value in model.values.of(forward.module, held, owner.scope):
                            if graph.is_network(value):
                                layers += graph.instances_of(value)
            classes = layers
            depth += 1
        return out

    def _default_arm(self, forward: Function, guard: Guard) -> bool:
        """The arm a forward takes with a flag parameter left to its default (`if not
        generate:` of `def forward(self, x, ..., generate=False)`): past the first three
        positional parameters or keyword-only, never reassigned, and passed by name nowhere on
        the run, so the training step's call leaves it so."""
        test, negated = guard.test, guard.negated
        while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, negated = test.expression, not negated
        if not isinstance(test, cst.Name):
            return False
        bindings = forward.scope.assignments.get(test.value, ())
        params = [b for b in bindings if isinstance(b, Param)]
        if len(params) != 1 or len(bindings) != 1:
            return False
        param = params[0]
        default = param.default
        if param.star or (param.index is not None and param.index <= 3) \
                or not isinstance(default, cst.Name) or default.value not in ("True", "False", "None"):
            return False
        if (default.value == "True") == negated:
            return False  # the default takes the other arm
        memo: set[str] | None = self.model.root.memo.get("keywords_passed")
        if memo is None:
            memo = {a.keyword.value for c in self.model.paths.sites() for a in c.node.args if a.keyword is not None}
            self.model.root.memo["keywords_passed"] = memo
        return test.value not in memo

    def _report(self, site: CallSite, place: CallSite, kind: str) -> None:
        chain = self.model.paths.chain(place)
        if place is site:
            what = {"print": "`print`", "write": "`tqdm.write`", "tqdm": "this progress bar",
                    "logging": "this log call",
                    "wandb": f"`{site.dotted or 'wandb.log'}` (each rank started its own run)"}[kind]
            how = "pass `disable=rank != 0`" if kind == "tqdm" else "guard it with `if rank == 0:`"
            self.report(site.node, f"{what} runs on every rank, so the output is repeated once per process; {how}",
                        module=site.module, related=chain)
            return
        # (a call on an expression, `unwrap(model).sample()`, has no dotted name to show)
        name = f"`{place.dotted}(...)`" if place.dotted else "this call"
        self.report(place.node, f"{name} writes to the console on every rank at each step or epoch, so the "
                                f"output is repeated once per process; guard the call with `if rank == 0:`",
                    module=place.module, related=[*chain, site])

    # --- where the output repeats ------------------------------------------------------------
    def _places(self, site: CallSite, kind: str | None, depth: int) -> list[CallSite]:
        """Where `site`'s output is repeated at each step or epoch of a training or evaluation
        loop: `site` itself when it sits in such a loop, or in a function that trains or
        evaluates and is called from one (its per-epoch message); for a function that only
        prints (a progress printer's `display()`), the calls of it made inside such loops,
        where the guard goes."""
        loops = self.loops
        if loops.work_loops(site) or (kind == "tqdm" and self._bar_over_work(site)):
            return [site] if self._runs_on_every_rank(site) else []
        function = self.model.paths.function_of(site)
        if function is None or depth > _MAX_HOPS:
            return []
        if loops.does_work(function):
            return [site] if self._called_per_iteration(function, depth) else []
        out: list[CallSite] = []
        kept = False
        for caller, bound in self.model.graph.callers(function):
            frame = Frame(function, caller, None, bound)
            if self._unreached_from(site, frame):
                continue  # `else: logging.info(value)` of `if isinstance(msg, str):`, called with text
            if self._main_ranks_named(site, frame):
                continue  # `log_dist(msg, [0])` of a helper that prints `if dist.get_rank() in ranks:`
            if self.crashes.site_stopped(caller):
                continue  # (the caller raises before it gets there)
            if not self._guarded(caller) and not self._once(caller) \
                    and not self._tags_through(caller, function, bound, site):
                found = self._places(caller, None, depth + 1)
                kept = kept or bool(found) and _result_kept(caller, function)
                out += found
        if out and kind == "tqdm":
            # A progress bar in a function the loop runs at each step or epoch (`for batch in
            # tqdm(testloader):` in the `test_*()` helper an epoch-end `self.test()` calls): the
            # fix is on the bar itself (`disable=rank != 0`), not around the call.
            return [site]
        if out and (kept or self._changes_state(function)):
            # `half_learning_rate(optimizer, ...)` sets the rate and prints it, `res =
            # validate(...)` computes what the caller goes on with: a guard around the call
            # would leave the other ranks without it, so the guard goes on the output.
            return [site]
        return out

    def _main_ranks_named(self, site: CallSite, frame: Frame) -> bool:
        """A guard `if rank in ranks:` of `site` whose `ranks`, in the call of `frame`, is a
        literal naming rank 0 only (`log_dist(msg, [0])`, where other calls pass every rank)."""
        resolve = self.model.resolver_for(site.module, site.scope)
        for guard in site.guards:
            test = guard.test
            if guard.negated or not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
                continue
            comp = test.comparisons[0]
            if not isinstance(comp.operator, cst.In) or not is_rank_value(test.left, resolve):
                continue
            values = self.model.values.of(site.module, comp.comparator, site.scope, frame)
            if values and all(main_rank_literal(v.node) for v in values):
                return True
        return False

    def _changes_state(self, function: Function) -> bool:
        """The function does more than write to the console: it saves a file with `torch.save`
        (itself or through a call), writes entries of an object it did not make (`for group
        in optimizer.param_groups: group["lr"] = lr`), or runs a project function that trains or
        evaluates (an epoch-end validation callback that calls the evaluation it was given, then
        prints the score), or sets an attribute of its instance (`self.scheduler = ...`). Not a
        printer (`display()`), which only formats and prints."""
        module, scope = function.module, function.scope
        facts = self.model.facts
        calls = module.calls_in(function.qualname)
        if any("save" in facts.of_call(call) for call in calls):
            return True
        if any(bound not in ("spawn", "process") and self.loops.does_work(callee)
               for call in calls for callee, bound in self.model.graph.targets(call)):
            return True
        for name in scope.updates:
            if "." in name:
                continue
            made = scope.assignments.get(name, [])
            if not made or not all(_fresh_container(b) for b in made):
                return True
        # A method that sets what its instance holds for its other methods (`self.scheduler =
        # ...` in a harness's `_setup_scheduler()`, stepped in the training loop of its class or
        # a base class): the other ranks need it set too. (Not a callback's own record,
        # `self.best`, that only it reads.)
        owner = function.owner
        set_here = [name[len("self."):] for name in scope.assignments
                    if name.startswith("self.") and name.count(".") == 1]
        if owner is None or not set_here:
            return False
        others = [where.code(where.functions[q]) for where, info in self.model.graph.mro(module, owner)
                  for q in info.methods.values()
                  if q in where.functions and not (where is module and q == function.qualname)
                  and not q.endswith(".__init__")]
        return any(re.search(rf"\bself\.{re.escape(attr)}\b", text) for attr in set_here for text in others)

    def _unreached_from(self, site: CallSite, frame: Frame) -> bool:
        """A guard of `site` that the arguments of this call make false."""
        values = self.model.values
        return any(values.outcome(site.module, g.test, site.scope, frame) == g.negated for g in site.guards)

    def _called_per_iteration(self, function: Function, depth: int) -> bool:
        """Whether every rank calls `function` at each step or epoch of a training or evaluation
        loop (directly or through other calls)."""
        if depth > _MAX_HOPS:
            return False
        chain: list[CallSite] | None = None
        for caller, _ in self.model.graph.callers(function):
            arm = False
            if self._guarded(caller):
                # `if rank == 0: train_epoch(..., writer)` / `else: train_epoch(..., None)`: each
                # call is kept to some ranks, the two together reach every rank.
                if chain is None:
                    chain = self.model.paths.function_every_rank(function) or []
                if not any(c is caller for c in chain):
                    continue
                arm = True
            if self.loops.work_loops(caller):
                if arm or self._runs_on_every_rank(caller):
                    return True
                continue
            outer = self.model.paths.function_of(caller)
            if outer is not None and self._called_per_iteration(outer, depth + 1):
                return True
        return False

    def _bar_over_work(self, site: CallSite) -> bool:
        """A progress bar over a DataLoader, or over the steps of a training loop it drives
        (`for step in tqdm(range(n)):` around a backward), or over a loop that runs a model's
        forward on its items (an evaluation over loaders the model cannot follow)."""
        first = site.arg("iterable", 0)
        if first is not None and self.loops.iterates_batches(site.module, first, site.scope, site.point):
            return True
        if self._advanced_in_work(site):
            return True
        for loop in site.module.fors:
            if loop.scope is site.scope and self._iterates(loop.node.iter, site) and (
                    self.loops.is_work(site.module, loop.node, site.scope)
                    or self.loops.forwards_items(site.module, loop.node, site.scope)):
                return True
        return False

    def _advanced_in_work(self, site: CallSite) -> bool:
        """The bar is advanced or relabelled at each step of a training or evaluation loop
        through the name or attribute it is bound to (`self.bar = trange(n)` in `train()`, then
        `self.bar.set_description(...)` in the loop over batches of `train_epoch()`; `bar =
        tqdm(total=n)`, then `bar.update(1)` in the step loop)."""
        return any(c.method in _BAR_STEPS and self.loops.work_loops(c) for c in self._bar_calls(site))

    def _bar_calls(self, site: CallSite) -> list[CallSite]:
        """The method calls made on the bar `site` builds through the name it is bound to in its
        function, or the `self.<name>` attribute, in any method of the same class."""
        scope = site.scope
        names = {n for n, bound in scope.assignments.items() if n.count(".") <= 1
                 and any(_binds_bar(b, site.node) for b in bound)}
        if not names:
            return []
        function = self.model.paths.function_of(site)
        owner = function.owner if function is not None else None
        out = []
        for call in site.module.calls:
            name = call.receiver_name
            if call.method is None or name not in names:
                continue
            if "." in name:
                other = self.model.paths.function_of(call)
                if not name.startswith("self.") or owner is None or other is None or other.owner is not owner:
                    continue
            elif call.scope is not scope:
                continue
            out.append(call)
        return out

    @staticmethod
    def _iterates(iterable: cst.BaseExpression, site: CallSite) -> bool:
        """The loop iterates the bar: it is built in the loop header, or bound to the name the
        header iterates, with no other binding of that name (`bar = tqdm(range(epochs))`, then
        `for epoch in bar:`)."""
        if _holds(iterable, site.node):
            return True
        if isinstance(iterable, cst.Call) and dotted(iterable.func) == "enumerate" and iterable.args:
            iterable = iterable.args[0].value  # `for i, _ in enumerate(pbar):` iterates the bar
        if not isinstance(iterable, cst.Name):
            return False
        bindings = site.scope.assignments.get(iterable.value, [])
        return len(bindings) == 1 and _binds_bar(bindings[0], site.node)

    def _shown_everywhere(self, site: CallSite) -> bool:
        """`tqdm(..., disable=X)` where X is known to be the same on every rank: `False`, or an
        on/off option of the command line (`disable=args.no_progress_bar`). A rank test, or a
        value not known, may hide the bar on the other ranks."""
        flag = site.arg("disable")
        if flag is None:
            return True
        if isinstance(flag, cst.Name) and flag.value == "False":
            return True
        if any(command_line_switch(m, flag) for m in (site.module, self.model.root)):
            return True
        # The parser lives in a project module the script reaches (`args = get_args()` of
        # `configs/__init__.py`): the same switch, unless the script itself changes the field.
        if isinstance(flag, cst.UnaryOperation) and isinstance(flag.operator, cst.Not):
            flag = flag.expression
        if not isinstance(flag, cst.Attribute):
            return False
        field = re.escape(flag.attr.value)
        if any(re.search(rf"\.{field}\s*(=[^=]|[-+*/|&]=)", m.source) or "setattr(" in m.source
               for m in (site.module, self.model.root)):
            return False
        return any(command_line_switch(m, flag) for m in self.model.paths.modules()
                   if m is not site.module and m is not self.model.root)

    def _guarded(self, site: CallSite) -> bool:
        """Kept off some ranks (on the torchrun path too), to runs without a process group (the
        `else` of `if dist.is_initialized():`), or under a condition no run takes; or a printer
        chosen by rank (`bar = tqdm if is_main else iter`; `bar(loader)`)."""
        paths = self.model.paths
        return paths.restricted(site) in ("never", "single", "main", "node", "other", "some") or paths.callee_only_on_main(site) \
            or self._checked_by_rank_helper(site)

    def _checked_by_rank_helper(self, site: CallSite) -> bool:
        """Under `if self._can_log():` (or `if not self._can_log(): return` before it), where the
        project function returns a rank-0 test on some path (`return is_main_process()` when an
        option asks for main-process output, `return True` otherwise): the option is read at run
        time, so whether every rank prints is not known, and unknown is not a finding."""
        facts = self.model.facts
        for guard in site.guards:
            test, holds = guard.test, not guard.negated
            while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
                test, holds = test.expression, not holds
            if not holds or not isinstance(test, cst.Call):
                continue
            for call in site.module.calls:
                if call.node is test and "is_rank_check" in facts.of_call(call):
                    return True
        return False

    def _runs_on_every_rank(self, site: CallSite) -> bool:
        """Every rank runs `site`: its function is an entry or called on every rank. A function
        nobody known calls, in a module that is only imported, is not known to run."""
        paths = self.model.paths
        function = paths.function_of(site)
        if function is None:
            return True
        if not self.model.graph.callers(function):
            # (Not a top-level function of the script that nothing calls or names: a set-up
            # left beside the one the run uses never runs.)
            return site.module is self.model.root and self.model.is_entry_point() \
                and not paths.uncalled(site) and paths.every_rank(site) is not None
        return paths.every_rank(site) is not None

    def _once(self, site: CallSite, kind: str | None = None) -> bool:
        """The message is printed once, not at each step: on the way out (`print("Done!");
        break`, an error message before `sys.exit(1)` or `raise`), or at one value of the loop
        variable (`if epoch == args.start_epoch:`), or while making a file that is missing (`if
        not os.path.exists(path): print("Downloading ..."); download(path)`): the file is there
        the next time. A progress bar made at one value of the loop variable (`if epoch ==
        start: bar = tqdm(range(n - done))`) still redraws at each step of that pass."""
        if not site.guards:
            return False
        # Only the arm itself: after an early exit (`if os.path.exists(done): ...; return`) a
        # loop runs at each step of the run all the same.
        if any(_makes_missing_file(g) and (not site.loops or _holds(g.node, site.node)) for g in site.guards):
            return True
        # Only the variables of training or evaluation loops count: one value of a loop over
        # metric names (`for n, v in zip(names, values): if n == "Acc": print(...)`) is printed
        # at every epoch all the same.
        work = self.loops.work_loops(site)
        counters = {n for loop in work if isinstance(loop, cst.For) for n in _names(loop.target)} \
            if kind != "tqdm" else set()
        if counters and any(_pins(g, counters) for g in site.guards) and not self._outer_loop_repeats(site):
            return True
        if any(_pins_counter(site, g) for g in site.guards):
            return True
        # `if epoch == start_epoch and i == 0:` pins every loop around the call: one step in all.
        # (`if verbose and i == 0:` pins the step loop only: once per epoch, still repeated.)
        pinned = {n for g in site.guards if not g.negated for n in _pinned_in_and(g.test, counters)}
        if pinned and work and all(isinstance(loop, cst.For) and _names(loop.target) & pinned
                                   for loop in work) and not self._outer_loop_repeats(site):
            return True
        guard = site.guards[-1]
        node = guard.node
        if not isinstance(node, cst.If):
            return False
        if not guard.negated:
            block: cst.BaseSuite = node.body
        elif isinstance(node.orelse, cst.Else):
            block = node.orelse.body
        else:
            return False  # an early exit (`if ...: return`) guards what follows it
        if not _leaves(block):
            return False
        inner = site.loops[-1] if site.loops else None
        if inner is not None and _holds(block, inner):
            return False
        if _breaks(block) and any(self.loops.is_work(site.module, loop, site.scope) for loop in site.loops[:-1]):
            return False  # `break` out of the evaluation loop inside the epoch loop: once per epoch
        if _breaks(block, (cst.Break, cst.Return)):
            # `break` out of the batch loop of a `train_epoch()`, or `return` from it, where a
            # caller's epoch loop runs the function: the message comes again at the next epoch.
            function = self.model.paths.function_of(site)
            if function is not None and self._called_per_iteration(function, 0):
                return False
        return True

    def _outer_loop_repeats(self, site: CallSite) -> bool:
        """The function `site` is in runs the loop it pins (`if itr == 0:` in the loop over
        batches of `train_epoch()`) and is itself called at each pass of a training loop of a
        caller (the epoch loop of `train()`): the message is printed once per epoch."""
        function = self.model.paths.function_of(site)
        return function is not None and self.loops.does_work(function) \
            and self._called_per_iteration(function, 0)

    # --- silenced output -----------------------------------------------------------------------
    def _print_silenced(self) -> bool:
        """`builtins.print` is replaced on the run (DeiT's `setup_for_distributed`), in this file
        or by a project function it calls — unless the replacement is made only under a launch
        flag (`if args.multiprocessing_distributed and args.gpu != 0:`) that a torchrun start
        does not set. A replacement that lets every rank print past a world size (`force = force
        or get_world_size() > 8`) silences: the launch size is not in the code."""
        model = self.model
        root = model.root
        conditions: list[tuple[Guard, ...]] = []
        for scope in (root.module_scope, *root.function_scopes.values()):
            points = _print_bindings(root, scope)
            if points:
                conditions += [p.guards if p is not None else () for p in points]
        # A project module the file imports that replaces `builtins.print` in its own top-level
        # code (`builtins.print = rank0_print` after the function): the import itself silences.
        for module in self._loaded_modules():
            points = _print_bindings(module, module.module_scope)
            if points:
                conditions += [p.guards if p is not None else () for p in points]
        for call in root.calls:
            target = call.target
            if target is not None and not model.is_root(target) and "silences_print" in model.facts.of_call(call):
                conditions.append(call.guards)
            elif self._hides_stdout_by_rank(call):
                conditions.append(call.guards)
        if not conditions:
            # A launcher of the project that starts each rank with its stdout sent to the null
            # device on all but one: the script's prints reach the console once. A script
            # torchrun can also start is not covered: that start leaves stdout alone.
            return not model.torchrun_path and self._launcher_hides_stdout()
        if not model.torchrun_path:
            return True
        return not all(any(_needs_launch_flag(g) for g in guards) for guards in conditions)

    def _loaded_modules(self) -> list[ModuleModel]:
        """The project modules whose top-level code runs when the file starts: those it imports
        at its top level, and those these import in turn (two steps: a package's `__init__`
        importing its helpers)."""
        model = self.model
        found: dict[int, ModuleModel] = {}
        for module in model.imported_modules(model.root):
            found.setdefault(id(module), module)
            for inner in model.imported_modules(module):
                found.setdefault(id(inner), inner)
        return list(found.values())

    def _console_moved(self, stream: str) -> bool:
        """The script points `stream` elsewhere on the ranks but rank 0 (`if local_rank != 0:
        sys.stdout = open(os.devnull, "w")`, also in a function the run reaches): what those
        ranks write to it never reaches the console."""
        if stream not in self._moved:
            paths = self.model.paths
            root = self.model.root
            scopes = [(root, root.module_scope), *((root, s) for s in root.function_scopes.values()),
                      *((f.module, f.scope) for f in paths.reached())]
            self._moved[stream] = any(
                (module.names.origin(name) or name) == stream and point is not None
                and any(paths.kind(module, g, scope) == "other" for g in point.guards)
                for module, scope in scopes
                for name, points in scope.points.items()
                for point in points)
        return self._moved[stream]

    def _launcher_hides_stdout(self) -> bool:
        """Another file of the project starts processes (`subprocess.Popen([...], stdout=out)`)
        with `out = None if i == 0 else open(os.devnull, "w")` — stdout silenced on all but
        the first process it starts — and it starts this script: it names the script's file, or
        sits beside it and builds the command from its own folder (`Path(__file__).parent`) with
        the script's name taken from its command line."""
        script = resolved_path(self.model.root.path)
        if script is None:
            return False
        project = self.model.project
        for path in project_files(self.model.root.path):
            if path == script:
                continue
            text = project.text(path)
            if text is None or "devnull" not in text.lower() or "stdout" not in text:
                continue
            if script.name not in text and not (path.parent == script.parent and "__file__" in text):
                continue
            try:
                tree = parse_module(text)
            except PARSE_ERRORS:
                continue
            if _starts_with_stdout_by_index(tree):
                return True
        return False

    def _hides_stdout_by_rank(self, call: CallSite) -> bool:
        """`with HiddenPrints(local_rank):` around the run, where the project class's `__enter__`
        sends `sys.stdout` elsewhere (`open(os.devnull, "w")`) on the ranks a rank test picks
        (`if self.rank == 0: return` before it): prints inside reach the console once."""
        model = self.model
        if not any(item.item is call.node for statement in call.module.withs for item in statement.items):
            return False
        for function, bound in model.graph.targets(call):
            owner = function.owner
            if bound != "constructor" or owner is None:
                continue
            enter = model.graph.method(function.module, owner, "__enter__")
            if enter is None:
                continue
            resolve = model.resolver_for(enter.module, enter.scope)
            for name, points in enter.scope.points.items():
                if (enter.module.names.origin(name) or name) != "sys.stdout":
                    continue
                if any(p is not None and any(selects_main_rank(g.test, resolve) is not None for g in p.guards)
                       for p in points):
                    return True
        return False

    def _logging_configured(self) -> bool:
        """Some file of the project may set logging up (a handler, a level, `basicConfig`, a
        logger factory or a framework that configures it). Where none does, the root logger
        keeps its default: only WARNING and above reach the console (through `lastResort`),
        so an `info` or `debug` record is printed by no rank. Unknown counts as configured:
        a file we cannot read, or a linted source without a path."""
        if self._configured_logging is None:
            configured = self.model.root.path is None or any(
                _LOG_CONFIG.search(site.dotted or site.method or "") for site in self.model.paths.sites())
            files = set(project_files(self.model.root.path))
            for module in self.model.paths.modules():
                where = resolved_path(module.path)
                if where is not None:
                    files.add(where)
            texts: list[str | None] = [self.model.root.source]
            texts += [self.model.project.text(path) for path in sorted(files)]
            # What runs when a file is imported or run: its unindented statements (imports of a
            # framework aside, the calls of functions we reach are judged above; a `def
            # create_logger(...)` line defines a factory, which configures nothing until called).
            configured = configured or not files or any(
                text is None or any(_LOG_CONFIG.search(line) for line in text.splitlines()
                                    if line[:1].strip() and not line.startswith(_NOT_RUN))
                for text in texts) or bool(_LOG_FRAMEWORKS.search(self.model.root.source)) \
                or any(text is not None and _LOGURU.search(text) for text in texts)
            self._configured_logging = configured
        return self._configured_logging

    def _disabled_level(self) -> int:
        """The level up to which `logging.disable(level)` drops every record on every rank of
        the run (`logging.disable(logging.WARNING)` at the top of the script); -1 when no call
        does, or one is kept to some ranks, or its level is not a known constant (a later
        `logging.disable(logging.NOTSET)` turns it back on: the lowest level counts)."""
        if self._disabled is None:
            paths = self.model.paths
            calls = [s for s in paths.sites() if self.model.api(s) == "logging.disable"]
            levels = []
            for call in calls:
                level = call.arg("level", 0)
                name = (self.model.qualname(call.module, level, call.scope) or "") if level is not None else \
                    "logging.CRITICAL"
                levels.append(_LEVELS.get(name, -1) if paths.ranks(call) == "every" else -1)
            self._disabled = min(levels) if levels else -1
        return self._disabled

    def _logging_silenced(self) -> bool:
        """Logging is configured by rank on the run: a level, handler or `basicConfig` set under
        a rank guard (`if rank != 0: logger.setLevel("ERROR")`, a logger factory that adds
        handlers on rank 0 only) or from a rank test (`setLevel(INFO if is_master else WARN)`)."""
        if self._silenced_logging is None:
            sites = self.model.paths.sites()
            ranked = [c for c in sites if self._ranked_log_setup(c)]
            # A file handler added on rank 0 only (`if rank == 0: set_file_logger(dir)`) leaves the
            # console as it was: where a console handler is added on every rank, each rank still
            # prints every record.
            self._silenced_logging = bool(ranked) and not (
                all(self._file_handler_setup(c) for c in ranked)
                and any(self._console_handler_added(c) for c in sites if c not in ranked))
        return self._silenced_logging

    def _handler_made(self, site: CallSite, expr: cst.BaseExpression | None, pattern: re.Pattern[str]) -> bool:
        """Every value `expr` may hold at `site` is a handler made by a call whose name matches
        `pattern` (`fh = logging.FileHandler(path)`, `colorlog.StreamHandler()`)."""
        made = self.model.made_by(site, expr) if expr is not None else None
        return made is not None and all(pattern.search(name or dotted(call.func) or "") for call, name in made)

    def _file_handler_setup(self, site: CallSite) -> bool:
        """A set-up call about a handler that writes to a file: `logger.addHandler(fh)`,
        `fh.setLevel(...)` with `fh = logging.FileHandler(...)`."""
        if site.method == "setLevel":
            return self._handler_made(site, site.receiver, _FILE_HANDLER)
        if site.method in ("addHandler", "removeHandler"):
            return self._handler_made(site, site.arg("hdlr", 0), _FILE_HANDLER)
        return False

    def _console_handler_added(self, site: CallSite) -> bool:
        """A handler that writes to the console is added (`logging.root.addHandler(sh)` with `sh =
        colorlog.StreamHandler()`), under no condition on the rank; also by `logging.basicConfig(...)`
        with no file nor handler list, which gives the root logger a `sys.stderr` handler (or
        one on the stream it is given, `stream=sys.stdout`)."""
        if site.method != "addHandler" and self.model.api(site) != "logging.basicConfig":
            return False
        if self._ranked_log_setup(site):
            return False
        if site.method == "addHandler":
            return self._handler_made(site, site.arg("hdlr", 0), _CONSOLE_HANDLER)
        if site.has_keyword("filename") or site.has_keyword("handlers") \
                or any(arg.star for arg in site.node.args):
            return False
        stream = site.arg("stream")
        return stream is None or dotted(stream) in _CONSOLE

    def _rank_tagged(self, site: CallSite, kind: str | None = None) -> bool:
        """The message names the rank, in the call or in the variable it is built in
        (`msg += f" rank {rank}"; logging.debug(msg)`), or formats a value that is the rank
        under another name (`template.format(self.gpu_id, loss)`); for a progress bar, its
        label (`tqdm(total=n, desc=f"rank {rank}")`, or set on the name it is bound to:
        `bar.set_postfix({f"{rank}_loss": loss})`)."""
        module = site.module
        resolve = self.model.resolver_for(module, site.scope)
        args = site.node.args
        if kind == "tqdm":
            args = tuple(a for a in args if a.keyword is not None and a.keyword.value == "desc")
            # Labelled after it is built: `bar = tqdm(loader)`, then `bar.set_postfix({f"{rank}_loss": ...})`.
            args += tuple(a for c in self._bar_calls(site) if c.method in _BAR_LABELS for a in c.node.args)
        for arg in args:
            if _RANK_NAMED.search(module.code(arg.value)):
                return True
            if any(isinstance(sub, (cst.Name, cst.Attribute)) and is_rank_value(sub, resolve)
                   or isinstance(sub, cst.Call) and resolve(sub.func) in _PROCESS_IDS
                   for sub in subexpressions(arg.value)):
                return True  # (`f"[MEM-{os.getpid()}] ..."`: tagged with the process, as good as the rank)
            for name in _joined_names(arg.value):
                for bound in site.scope.lookup(name.value):
                    node = _bound_text(bound)
                    if node is not None and (_RANK_NAMED.search(module.code(node)) or _text_built(node) and any(
                            isinstance(sub, (cst.Name, cst.Attribute)) and is_rank_value(sub, resolve)
                            for sub in subexpressions(node))):
                        return True  # (`head = f"[GPU {gpu}] "` in an `mp.spawn` worker `def worker(gpu, ...)`)
            if any(isinstance(sub, (cst.Name, cst.Attribute)) and self._rank_device(site, sub)
                   for sub in subexpressions(arg.value)):
                return True  # `print("GPU", device, ...)` with `device = torch.device(f"cuda:{rank}")`
            if any(isinstance(sub, cst.Call) and self._tagging_helper(site, sub) for sub in subexpressions(arg.value)):
                return True  # `logger.info(format_msg("..."))` with `return f"[R:{rank}] {msg}"`
        return False

    def _tagging_helper(self, site: CallSite, call: cst.Call) -> bool:
        """`call` runs a project function that returns the message with the rank in it
        (`def format_msg(msg): return f"[R:{get_rank()}] {msg}"`)."""
        inner = site.module.call_at(call)
        if inner is None:
            return False
        for callee, _ in self.model.graph.targets(inner):
            returned = callee.module.returns.get(callee.qualname, [])
            if any(_RANK_NAMED.search(callee.module.code(value)) for value in returned):
                return True
        return False

    def _rank_device(self, site: CallSite, expr: cst.BaseExpression) -> bool:
        """`expr` holds the rank's own device, built from the rank (`torch.device(f"cuda:{rank}")`,
        `f"cuda:{local_rank}"`, also passed in by a caller): one GPU per process, so a message
        that names it tells the ranks' lines apart as the rank does."""
        for value in self.model.values.at_call(site, expr):
            node = value.node
            if not isinstance(node, cst.BaseExpression):
                continue
            if isinstance(node, cst.Call):
                if self.model.api_of(value) != api.TORCH_DEVICE:
                    continue
            elif not isinstance(node, (cst.FormattedString, cst.BinaryOperation, cst.ConcatenatedString)) \
                    or not _DEVICE_TEXT.search(value.module.code(node)):
                continue
            resolve = self.model.resolver_for(value.module, value.scope)
            if any(isinstance(sub, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) and is_rank_value(sub, resolve)
                   for sub in subexpressions(node) if sub is not node):
                return True
        return False

    def _tags_through(self, caller: CallSite, function: Function, bound: str, site: CallSite) -> bool:
        """The rank `caller` passes reaches the output of `site` in `function`: the parameter
        it fills is named in the call that writes (`log(f"[{rank}] {msg}")` in `report(msg,
        rank)`, or in the value a name it writes was built from). A worker handed the rank for
        other uses (`evaluate(rank=rank, model=model)` that prints "Evaluating ..." with no
        rank in it) prints the same line on every rank."""
        if not self._rank_tagged(caller):
            return False
        if function.node is not getattr(self.model.paths.function_of(site), "node", None):
            return True  # not the function that writes: judged as before
        module = site.module
        words = set(re.findall(r"\w+", module.code(site.node)))
        for arg in site.node.args:
            if isinstance(arg.value, cst.Name):
                for held in site.scope.lookup(arg.value.value):
                    node = held.node.value if isinstance(held, Augmented) else held
                    if isinstance(node, cst.CSTNode):
                        words |= set(re.findall(r"\w+", module.code(node)))
        resolve = self.model.resolver_for(caller.module, caller.scope)
        for param in function.params():
            if param.name not in words:
                continue
            passed = self.model.graph.argument_for(caller, function, param, bound)
            if not isinstance(passed, cst.BaseExpression):
                return True  # not known what it passes: as before
            if _RANK_NAMED.search(caller.module.code(passed)) or any(
                    isinstance(sub, (cst.Name, cst.Attribute)) and is_rank_value(sub, resolve)
                    for sub in subexpressions(passed)):
                return True
        return any(a.star for a in caller.node.args) or caller.has_star_kwargs

    def _synced_gradient_test(self, site: CallSite, test: cst.BaseExpression) -> bool:
        """The test reads only the norm `clip_grad_norm_` returns (`grad_norm =
        clip_grad_norm_(model.parameters(), max_norm)`, then `if math.isnan(grad_norm):`): the
        gradients it measures were averaged across ranks by DDP's backward, so every rank sees
        the same norm and prints the same warning."""
        names = [sub for sub in subexpressions(test) if isinstance(sub, cst.Name)
                 and sub.value in site.scope.assignments]
        if not names:
            return False
        for name in names:
            values = site.scope.assignments[name.value]
            if not values or not all(isinstance(v, cst.Call) and (dotted(v.func) or "").endswith("clip_grad_norm_")
                                     for v in values):
                return False
        return True

    def _synced_gradient_error(self, site: CallSite) -> bool:
        """`site` is in the handler of a `try` whose body clips the gradients with
        `error_if_nonfinite=True` (`try: clip_grad_norm_(params, max_norm, error_if_nonfinite=True);
        scaler.step(optimizer)` / `except RuntimeError: log.warning("NaN in gradients")`): DDP
        averaged those gradients, so every rank raises, and reports, the same error."""
        for node in subexpressions(site.scope.node):
            if not isinstance(node, cst.Try) or not any(_holds(h, site.node) for h in node.handlers):
                continue
            for call in subexpressions(node.body):
                if isinstance(call, cst.Call) and (dotted(call.func) or "").endswith("clip_grad_norm_"):
                    flag = next((a.value for a in call.args if a.keyword is not None
                                 and a.keyword.value == "error_if_nonfinite"), None)
                    if flag is not None and isinstance(flag, cst.Name) and flag.value == "True":
                        return True
        return False

    def _data_check(self, site: CallSite) -> bool:
        """Printed when a test on tensor values holds (`if torch.min(y) < -1.0:`, `if
        loss.isnan():`): each rank reports an anomaly of its own data, once, not a copy of the
        same line."""
        for guard in site.guards:
            if self._synced_gradient_test(site, guard.test):
                continue  # `if math.isnan(grad_norm):` after DDP averaged the gradients: the same on every rank
            if _normal_path(guard):
                continue  # `if not math.isfinite(loss): sys.exit(1)` above it: printed while the data is sound
            for sub in subexpressions(guard.test):
                if not isinstance(sub, cst.Call):
                    continue
                if isinstance(sub.func, cst.Attribute) and sub.func.attr.value in _TENSOR_TESTS:
                    return True
                name = self.model.qualname(site.module, sub.func, site.scope) or ""
                if name.startswith("torch.") and not name.startswith(_NOT_DATA):
                    return True
        return False

    def _ranked_log_setup(self, site: CallSite) -> bool:
        if self._log_method_replaced(site):
            return True
        if site.method not in _LOG_SETUP_METHODS and self.model.api(site) not in _LOG_SETUP_APIS:
            return False
        paths = self.model.paths
        if paths.rank_guard(site) or paths.main_only(site) or self._set_up_by_rank(site, 2):
            return True
        resolve = self.model.resolver_for(site.module, site.scope)
        for arg in site.node.args:
            for sub in subexpressions(arg.value):
                if isinstance(sub, cst.IfExp) and _reads_rank(sub.test, resolve):
                    return True
                if isinstance(sub, cst.Name) and self._bound_by_rank(site, sub.value):
                    return True
        return False

    def _set_up_by_rank(self, site: CallSite, depth: int) -> bool:
        """Every call of the function (not a method) that configures logging is made on some
        ranks only, or differently on rank 0 and the others (`logger = create_logger(dir)` under
        `if rank == 0:`, `else: logger = dummy_logger()` or `get_logger(dir, verbose=False)`):
        the ranks configure logging differently."""
        function = self.model.paths.function_of(site)
        if function is None or function.owner is not None:
            return False  # (a method: its object may be a stand-in on the other ranks, read as such)
        calls = self._setting_up_calls(site, depth)
        if calls is None:
            return False
        sides = {side: {text for s, text in calls if s == side} for side, _ in calls}
        return len(sides) == 1 or sides.get("main") != sides.get("other")

    def _setting_up_calls(self, site: CallSite, depth: int) -> list[tuple[str, str]] | None:
        """(side, the call's arguments as written) of the calls made on some ranks only
        ("main" or "other") that reach `site`; None when a call is made on every rank or is
        not known."""
        function = self.model.paths.function_of(site)
        callers = self.model.graph.callers(function) if function is not None and depth > 0 else []
        found: list[tuple[str, str]] = []
        for call, _ in callers:
            own = self.model.paths.restricted(call)
            if own in ("main", "node", "other"):
                text = " ".join(call.module.code(a) for a in call.node.args)
                found.append(("other" if own == "other" else "main", text))
            else:
                above = self._setting_up_calls(call, depth - 1)
                if above is None:
                    return None
                found += above
        return found if callers else None

    @staticmethod
    def _log_method_replaced(site: CallSite) -> bool:
        """`logger.__setattr__(level, quiet)` / `setattr(logger, "info", quiet)` with a function
        of the project: the logger's methods are swapped for a wrapper (the logging twin of
        DeiT's `setup_for_distributed`, which lets rank 0 through)."""
        args = [a.value for a in site.node.args]
        func = site.node.func
        if site.method == "__setattr__" and isinstance(func, cst.Attribute) and len(args) == 2:
            receiver, value = func.value, args[1]
        elif isinstance(func, cst.Name) and func.value == "setattr" and len(args) == 3:
            receiver, value = args[0], args[2]
        else:
            return False
        if not _LOGGERS.match(last_name(receiver) or "") or not isinstance(value, cst.Name):
            return False
        functions = site.module.functions
        return f"{site.scope.qualname}.{value.value}" in functions or value.value in functions

    def _bound_by_rank(self, site: CallSite, name: str) -> bool:
        """`name` is given a value under a rank guard (`level = INFO` then `if rank != 0: level =
        WARNING`), or from a rank test (`level = INFO if rank == 0 else WARNING`)."""
        owner = site.scope.owner_of(name)
        if owner is None:
            return False
        paths = self.model.paths
        resolve = self.model.resolver_for(site.module, owner)
        for bound, point in zip(owner.assignments.get(name, []), owner.points.get(name, [])):
            if point is not None and any(paths.kind(site.module, g, owner) in ("main", "other")
                                         for g in point.guards):
                return True
            if isinstance(bound, cst.IfExp) and selects_main_rank(bound.test, resolve) is not None:
                return True
        return False

    def _logging_tagged(self) -> bool:
        """The log format carries the rank (`basicConfig(format=f"[rank {rank}] %(message)s")`,
        a `Formatter` built with it): every record says which rank wrote it, so a line from each
        rank is meant."""
        if self._tagged_logging is None:
            self._tagged_logging = False
            for site in self.model.paths.sites():
                q = self.model.api(site)
                if q == "logging.basicConfig":
                    fmt = site.arg("format")
                elif q == "logging.Formatter":
                    fmt = site.arg("fmt", 0)
                else:
                    continue
                if fmt is not None and _names_rank(site, fmt):
                    self._tagged_logging = True
                    break
        return self._tagged_logging

    def _logger_tagged(self, site: CallSite) -> bool:
        """The logger is made with the rank in its name or prefix (`getLogger(f"rank{rank}")`,
        a `LoggerAdapter` that adds it), also where a caller made it and passed it in
        (`train(model, loader, logger)` after `logger = setup_logger(rank, world_size)`)."""
        receiver = site.receiver_name
        if not receiver:
            return False
        if any(isinstance(bound, cst.Call) and _names_rank(site, bound)
               for bound in site.scope.lookup(receiver)):
            return True
        node = site.receiver
        if isinstance(node, cst.Attribute):
            # `self.log = logger` set from a trainer's argument: every logger it may hold is made
            # named with the rank (`logging.getLogger(f"GPU{local_rank}")`, also inside a
            # project factory the caller used).
            made = [value for value in self.model.values.at_call(site, node) if value.call is not None]
            return bool(made) and all(self._named_for_rank(value) for value in made)
        if not isinstance(node, cst.Name):
            return False
        bindings = site.scope.lookup(node.value)
        if not bindings or not all(isinstance(b, Param) for b in bindings):
            return False  # only a logger passed in as a parameter is followed to its callers
        values = self.model.values.at_call(site, node)
        return bool(values) and all(
            isinstance(v.node, cst.Call) and _RANK.search(v.module.code(v.node)) for v in values)

    def _named_for_rank(self, value: Value) -> bool:
        """A leaf `logging.getLogger(name)` whose name, or the local value of a name in it,
        mentions the rank."""
        call = value.call
        made = value.module.call_at(call) if call is not None else None
        if made is None or self.model.api(made) != "logging.getLogger":
            return False
        name = made.arg("name", 0)
        return name is not None and _mentions_rank(value.module, value.scope, name)

    def _kind(self, site: CallSite) -> str | None:
        if site.dotted == "print" and "print" not in site.module.functions and not self._print_rebound(site):
            out = site.arg("file")
            if out is not None and dotted(out) not in _CONSOLE:
                return None  # `print(row, file=f)` writes a file, not the console
            if _blank_only(site.node):
                return None  # `print(" " * 80, end="\r")`: clears the line, shows nothing
            return "print"
        q = self.model.api(site) or ""
        if q in _PPRINTS:
            out = site.arg("stream", 1)
            return "print" if out is None or dotted(out) in _CONSOLE else None
        if q in _BARS:
            return "tqdm"
        if q in _TQDM_WRITES:
            return "write"  # `tqdm.write(...)`: a print that keeps the bars intact, not `builtins.print`
        if (q == "wandb.log" or self._wandb_run_log(site)) and self._wandb_on_every_rank():
            return "wandb"
        if site.method in _LOG_METHODS:
            if any(bound == "method" for _, bound in self.model.graph.targets(site)):
                # `log.info(msg)` on an instance of a project class (even one passed in under the
                # name `logging`): the output its method makes is judged where it is made.
                return None
            receiver = site.receiver_name or ""
            if q.startswith("logging.") or _LOGGERS.match(receiver.rsplit(".", 1)[-1]):
                return "logging"
            if self._made_by_get_logger(site):
                return "logging"
        return None

    def _wandb_on_every_rank(self) -> bool:
        """Every rank starts its own wandb run: each `wandb.init(...)` of the run is reached on
        every rank, with no `mode=` (`mode="disabled"` off rank 0 turns the other runs off) and
        no `WANDB_MODE` / `WANDB_DISABLED` set in the code. Then `wandb.log` on every rank
        records the same figures once per process, in as many runs. (Where only rank 0 starts a
        run, the question is another one: a rank that logs without a run of its own.)"""
        if self._wandb_everywhere is None:
            paths = self.model.paths
            inits = [s for s in paths.sites() if self.model.api(s) == "wandb.init"]
            self._wandb_everywhere = bool(inits) and all(
                not s.has_keyword("mode") and not s.has_keyword("settings") and paths.ranks(s) == "every"
                for s in inits) and not any(
                re.search(r"WANDB_(MODE|DISABLED|SILENT)", m.source) for m in paths.modules())
        return self._wandb_everywhere

    def _wandb_run_log(self, site: CallSite) -> bool:
        """`run.log(...)` on the run object `wandb.init(...)` returned (`run = wandb.init(...)`,
        also kept on the instance or passed in): the same call as `wandb.log` on that run."""
        receiver = site.receiver
        if site.method != "log" or receiver is None:
            return False
        values = self.model.values.at_call(site, receiver)
        return bool(values) and all(self.model.api_of(value) == "wandb.init" for value in values)

    def _made_by_get_logger(self, site: CallSite) -> bool:
        """The receiver, under any name (`print_logger = logger(path)`), holds only loggers that
        `logging.getLogger` made, also inside a project factory that returns one: a name alone
        cannot tell a logger from a metrics logger's `.log(...)`, the value can."""
        receiver = site.receiver
        if receiver is None:
            return False
        values = self.model.values.at_call(site, receiver)
        return bool(values) and all(self.model.api_of(value) == "logging.getLogger" for value in values)

    @staticmethod
    def _print_rebound(site: CallSite) -> bool:
        """`from utils.dist import master_only_print as print`: the calls run the project function,
        whose own output is judged where it writes (a name we cannot resolve is not known to
        print). An installed package's print (`from rich import print`) writes to the console."""
        origin = site.module.names.origin("print")
        if origin is None or origin in _PRINT_TARGETS:
            return False
        target = site.target
        return target is None or target.external is None

    def _logger_visible(self, site: CallSite) -> bool:
        """Whether we can see how the logger is configured: `logging` itself or a logger made in
        this file, or one from a project module that does not mention ranks. A logger from an
        installed package may well be silenced on other ranks: not reported."""
        q = self.model.api(site) or ""
        if q.startswith("logging."):
            return True
        if self._made_by_rank_aware_factory(site):
            return False
        root = (site.receiver_name or "").split(".", 1)[0]
        target = self.model.resolver.name(site.module, root, site.scope) if root else None
        if target is None:
            return True  # created here
        if target.external is not None:
            if target.external == "loguru.logger":
                return not self._loguru_set_up()
            return target.external.startswith("logging")
        if target.path is None:
            return False
        if str(target.path) == str(site.module.path) or target.kind == "value" and target.path == _path(site):
            return True  # made in this module
        text = self.model.project.text(target.path)
        return text is not None and not _RANK.search(text)


    def _loguru_set_up(self) -> bool:
        """loguru's `logger` is one object that writes every record (DEBUG up) to `sys.stderr`
        from the import on: unless the run takes that sink away or silences it (`logger.remove()`,
        `logger.configure(handlers=...)`, `logger.disable(...)`, maybe on some ranks only), every
        rank prints each record (`logger.add(path)` on rank 0 only adds a file beside it)."""
        if self._loguru_configured is None:
            self._loguru_configured = any(
                site.method in _LOGURU_SETUP and (self.model.api(site) or "").startswith("loguru.")
                for site in self.model.paths.sites())
        return self._loguru_configured

    def _made_by_rank_aware_factory(self, site: CallSite) -> bool:
        """The logger comes from a project function the value flow does not enter and that
        mentions ranks (`self.log = logger` in a trainer given `create_logger(local_rank, ...)`):
        such a factory may set each rank's level or name, and the records may be quiet or
        tagged off rank 0."""
        receiver = site.receiver
        if receiver is None or isinstance(receiver, cst.Name):
            return False  # a name: judged by `_logger_visible`'s import and `_logger_tagged`
        for value in self.model.values.at_call(site, receiver):
            call = value.call
            made = value.module.call_at(call) if call is not None else None
            target = made.target if made is not None else None
            if target is None or target.external is not None or target.path is None or target.kind != "function":
                continue
            text = self.model.project.text(target.path)
            if text is None or _RANK.search(text):
                return True
        return False


def _normal_path(guard: Guard) -> bool:
    """The code runs when a one-call value test finds nothing wrong: after `if not
    math.isfinite(loss): sys.exit(1)`, or in the `else:` of `if torch.isnan(loss).any():`. A
    finite test (`isfinite`, `all`) holds on sound data; the others (`isnan`, `isinf`, `any`)
    on an anomaly."""
    test = guard.test
    flipped = guard.negated
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, flipped = test.expression, not flipped
    if not isinstance(test, cst.Call) or not isinstance(test.func, cst.Attribute):
        return False
    sound = test.func.attr.value in ("isfinite", "all")
    if not sound and test.func.attr.value not in ("isnan", "isinf", "any"):
        return False
    return sound != flipped


def _mentions_rank(module: ModuleModel, scope: Scope, node: cst.CSTNode) -> bool:
    """The expression's text, or the value of a name in it (as bound in `scope`), mentions the rank."""
    if _RANK.search(module.code(node)):
        return True
    for sub in subexpressions(node):
        if isinstance(sub, cst.Name):
            for bound in scope.lookup(sub.value):
                value = bound.node.value if isinstance(bound, Augmented) else bound
                if isinstance(value, cst.CSTNode) and value is not node and _RANK.search(module.code(value)):
                    return True
    return False


def _blank_only(call: cst.Call) -> bool:
    """A print of spaces only that ends without a new line (`print(" " * width, end="\\r")`,
    wiping a progress line before it is redrawn): nothing shows, however many ranks write it.
    (`print("")` writes an empty line on each rank.)"""
    values = [a.value for a in call.args if a.keyword is None]
    end = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "end"), None)
    end_text = string_text(end) if isinstance(end, cst.SimpleString) else None
    if not values or any(a.star for a in call.args) or end_text is None or "\n" in end_text:
        return False
    for value in values:
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply):
            value = value.left if isinstance(value.left, cst.SimpleString) else value.right
        text = string_text(value) if isinstance(value, cst.SimpleString) else None
        if not text or text.strip(" ") != "":
            return False
    return True


def _joined_names(expr: cst.BaseExpression) -> list[cst.Name]:
    """The variables a message is joined from: `msg` itself, or each name of `head + tail`
    (a progress line kept in parts, `print(prefix + stats, end="\\r")`)."""
    if isinstance(expr, cst.Name):
        return [expr]
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        return _joined_names(expr.left) + _joined_names(expr.right)
    return []


def _text_built(node: cst.CSTNode) -> bool:
    """Text put together with values in it (an f-string, `"..." % x`, `a + b`, `"...".format(x)`),
    not a value itself (`shard = data[rank]`)."""
    if isinstance(node, cst.Call):
        return isinstance(node.func, cst.Attribute) and node.func.attr.value == "format"
    return isinstance(node, (cst.FormattedString, cst.ConcatenatedString, cst.BinaryOperation))


def _bound_text(bound: object) -> cst.CSTNode | None:
    """The expression a binding gives the name: the right side of `x += ...`, or the matching
    element of a tuple assigned at once (`head, tail = f"[GPU {rank}] ", ""`)."""
    if isinstance(bound, Augmented):
        return bound.node.value
    if isinstance(bound, Item):
        value = bound.value
        if isinstance(value, (cst.Tuple, cst.List)) and 0 <= bound.index < len(value.elements) \
                and not any(isinstance(e, cst.StarredElement) for e in value.elements):
            return value.elements[bound.index].value
        return None
    return bound if isinstance(bound, cst.CSTNode) else None


def _fresh_container(binding: object) -> bool:
    """A dict or list the function makes itself (`row = {}`, `stats = dict()`): what it writes
    into it stays in the function unless it is returned."""
    if isinstance(binding, (cst.Dict, cst.List, cst.DictComp, cst.ListComp)):
        return True
    return isinstance(binding, cst.Call) and dotted(binding.func) in ("dict", "list", "OrderedDict",
                                                                      "collections.OrderedDict", "defaultdict")


def _names_rank(site: CallSite, node: cst.CSTNode) -> bool:
    """The expression's text, or the value of a name in it, mentions the rank."""
    return _mentions_rank(site.module, site.scope, node)


_STARTERS = frozenset({"Popen", "run", "call", "check_call", "check_output"})


def _starts_with_stdout_by_index(tree: cst.Module) -> bool:
    """A process started with `stdout=` the null device for all but one value of an index
    (`None if i == 0 else open(os.devnull, "w")`, also through a name assigned that way)."""
    chosen: dict[str, list[cst.BaseExpression]] = {}
    calls: list[cst.Call] = []
    for node in subexpressions(tree):
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            chosen.setdefault(node.targets[0].target.value, []).append(node.value)
        elif isinstance(node, cst.Call) and last_name(node.func) in _STARTERS:
            calls.append(node)
    for call in calls:
        for arg in call.args:
            if arg.keyword is None or arg.keyword.value != "stdout":
                continue
            values = chosen.get(arg.value.value, []) if isinstance(arg.value, cst.Name) else [arg.value]
            if values and all(_null_but_one(v) for v in values):
                return True
    return False


def _null_but_one(value: cst.BaseExpression) -> bool:
    """`None if i == 0 else open(os.devnull, "w")` (either way round): the console for one
    index, the null device for the others."""
    if not isinstance(value, cst.IfExp):
        return False
    test = value.test
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, (cst.Equal, cst.NotEqual))):
        return False
    sides = (test.left, test.comparisons[0].comparator)
    if not any(isinstance(side, cst.Integer) and side.value == "0" for side in sides):
        return False
    equal = isinstance(test.comparisons[0].operator, cst.Equal)
    console, null = (value.body, value.orelse) if equal else (value.orelse, value.body)
    return isinstance(console, cst.Name) and console.value == "None" and any(
        "devnull" in (dotted(sub) or "").lower() for sub in subexpressions(null))


def _path(site: CallSite) -> Path | None:
    return resolved_path(site.module.path)


def _binds_bar(binding: object, bar: cst.CSTNode) -> bool:
    """The binding holds the bar `bar` builds: `bar = tqdm(...)`, or `with tqdm(...) as bar:`
    (a bar's `__enter__` returns the bar itself)."""
    return binding is bar or isinstance(binding, Element) and binding.via_with and binding.iterable is bar


def _holds(outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
    """Whether `inner` is `outer` or lies inside it."""
    return any(node is inner for node in subexpressions(outer))


def _leaves(block: cst.BaseSuite) -> bool:
    """The block ends by leaving the loop, the function or the program: `break`, `return`,
    `raise`, `sys.exit(...)`."""
    statements = block.body
    if not statements:
        return False
    last = statements[-1]
    if isinstance(last, cst.SimpleStatementLine) and last.body:
        small: cst.CSTNode = last.body[-1]
    elif isinstance(block, cst.SimpleStatementSuite):
        small = last
    else:
        return False
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        return dotted(small.value.func) in _EXITS
    return isinstance(small, (cst.Break, cst.Return, cst.Raise))


def _breaks(block: cst.BaseSuite, kinds: tuple[type[cst.BaseSmallStatement], ...] = (cst.Break,)) -> bool:
    """The block ends with `break` (it leaves its loop, not the program), or with one of `kinds`."""
    last = block.body[-1] if block.body else None
    if isinstance(block, cst.SimpleStatementSuite):
        return isinstance(last, kinds)
    return isinstance(last, cst.SimpleStatementLine) and bool(last.body) and isinstance(last.body[-1], kinds)


def _print_bindings(module: ModuleModel, scope: Scope) -> list[Point | None]:
    """Where `scope` assigns `builtins.print` (the points of those bindings)."""
    found: list[Point | None] = []
    for name, points in scope.points.items():
        if name.endswith(".print") and (module.names.origin(name) or name) in _PRINT_TARGETS:
            found += points
    return found


def _result_kept(caller: CallSite, function: Function) -> bool:
    """`res = validate(...)`, `psnr, ssim = test(...)`, `data["train"] = get_dataset(...)` (or
    `return validate(...)`) of a function that returns a value: the caller goes on with what the
    call computes."""
    returned = function.module.returns.get(function.qualname, [])
    if not any(not (isinstance(v, cst.Name) and v.value == "None") for v in returned):
        return False
    scope = caller.scope
    # (unpacked into several names, each is an `Item` of the call)
    if any(b is caller.node or isinstance(b, Item) and b.value is caller.node
           for bound in scope.assignments.values() for b in bound):
        return True
    # (also an entry of a dict, `data["train"] = get_dataset(args, epoch)`)
    if any(entry[1] is caller.node for entries in scope.updates.values() for entry in entries):
        return True
    outer = scope.function
    return outer is not None and any(v is caller.node for v in caller.module.returns.get(outer.qualname, []))


def _names(target: cst.BaseExpression) -> set[str]:
    """The names a for-loop target binds (`i, (x, y)` → i, x, y)."""
    return {n.value for n in subexpressions(target) if isinstance(n, cst.Name)}


def _pinned_in_and(test: cst.BaseExpression, counters: set[str]) -> set[str]:
    """The loop variables an `and` of tests fixes to one value (`epoch == start and i == 0`)."""
    if not (isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And)):
        return set()
    found: set[str] = set()
    for side in (test.left, test.right):
        found |= _pinned_in_and(side, counters)
        if isinstance(side, cst.Comparison) and len(side.comparisons) == 1 \
                and isinstance(side.comparisons[0].operator, cst.Equal):
            found |= {e.value for e in (side.left, side.comparisons[0].comparator)
                      if isinstance(e, cst.Name) and e.value in counters}
    return found


def _equality_sides(guard: Guard) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """The two sides of a guard written `if a == b:` (not negated), else None."""
    test = guard.test
    if guard.negated or not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    comp = test.comparisons[0]
    if not isinstance(comp.operator, cst.Equal):
        return None
    return test.left, comp.comparator


def _pins(guard: Guard, counters: set[str]) -> bool:
    """`if epoch == start:` — true for one value of a loop variable."""
    sides = _equality_sides(guard)
    return sides is not None and any(isinstance(side, cst.Name) and side.value in counters for side in sides)


def _pins_counter(site: CallSite, guard: Guard) -> bool:
    """`if self.step == 0:` / `if global_step == 1:` where the name is a step counter (`+= 1`
    somewhere) that no loop sets back to a constant: it equals that value once in the run."""
    sides = _equality_sides(guard)
    if sides is None:
        return False
    name = next((dotted(e) for e in sides if isinstance(e, (cst.Name, cst.Attribute))), None)
    if name is None or not any(isinstance(e, cst.Integer) for e in sides):
        return False
    owner = site.scope.owner_of(name)
    if owner is None:
        return False
    counted = False
    for bound, point in zip(owner.assignments[name], owner.points.get(name, [])):
        value, where = (bound.value, bound.point) if isinstance(bound, Shared) else (bound, point)
        if isinstance(value, Augmented):
            counted = counted or isinstance(value.node.operator, cst.AddAssign)
        elif isinstance(value, cst.Integer) and (where is None or where.loops):
            return False  # reset in a loop (`step = 0` at each epoch): once per pass of that loop
    return counted


def _needs_launch_flag(guard: Guard) -> bool:
    """The guard's branch is taken only when a launch-mode flag is set
    (`if args.multiprocessing_distributed and args.gpu != 0:`), also when each side of an `or`
    needs one, a scheduler's flag included (`args.multiprocessing_distributed and args.gpu != 0
    or (args.is_slurm_job and args.rank != 0)`): a torchrun start sets neither."""
    return not guard.negated and _flag_required(guard.test)


# A flag that records a start by a job scheduler (`args.is_slurm_job = "SLURM_JOB_ID" in
# os.environ`): a torchrun start does not set it either.
_SCHEDULER_FLAG = re.compile(r"slurm", re.I)


def _flag_required(test: cst.BaseExpression) -> bool:
    if isinstance(test, cst.BooleanOperation):
        if isinstance(test.operator, cst.Or):
            return _flag_required(test.left) and _flag_required(test.right)
        return _flag_required(test.left) or _flag_required(test.right)
    if isinstance(test, (cst.Name, cst.Attribute)):
        name = last_name(test) or ""
        return bool(LAUNCH_FLAG.search(name) or _SCHEDULER_FLAG.search(name))
    return False


# Tests of whether a file or folder is there (`os.path.exists(p)`, `Path(p).is_file()`).
_EXISTS_TESTS = frozenset({"exists", "isfile", "isdir", "lexists", "is_file", "is_dir"})


def _makes_missing_file(guard: Guard) -> bool:
    """The arm of `if not os.path.exists(path):` (or the `else` of `if os.path.exists(path):`)
    that runs while the file is missing: what it does makes the file, once."""
    test = guard.test
    negated = guard.negated
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, negated = test.expression, not negated
    if not negated or not isinstance(test, cst.Call):
        return False
    func = test.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    return name in _EXISTS_TESTS


def _reads_rank(test: cst.BaseExpression, resolve: Resolve) -> bool:
    """A level chosen by a test with a rank in it (`CRITICAL if local_rank != 0 or args.silent
    else INFO`): whatever else it asks, the rank's side of it sets some ranks' level apart."""
    if selects_main_rank(test, resolve) is not None:
        return True
    if isinstance(test, cst.BooleanOperation):
        return _reads_rank(test.left, resolve) or _reads_rank(test.right, resolve)
    return False
