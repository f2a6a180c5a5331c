"""Run one rank of a script with the Flight Recorder on, as a cluster job would be, and write the
rank's dump where NCCL's watchdog would (TORCH_FR_DUMP_TEMP_FILE + rank) when the script ends,
well or badly. gloo writes no dump by itself; this stands in for NCCL's dump on timeout.
Usage (under torchrun): fr_rank.py TIMEOUT_S SCRIPT"""

import datetime
import os
import runpy
import signal
import sys

import torch
import torch.distributed as dist

timeout = datetime.timedelta(seconds=float(sys.argv[1]))
script = sys.argv[2]
_init = dist.init_process_group


def _init_with_timeout(*args, **kwargs):  # a short timeout so a hang ends in seconds
    kwargs.setdefault("timeout", timeout)
    return _init(*args, **kwargs)


def write_dump() -> None:
    rank = os.environ["RANK"]
    trace = torch._C._distributed_c10d._dump_fr_trace(
        includeCollectives=True, includeStackTraces=True, onlyActive=False)
    with open(os.environ["TORCH_FR_DUMP_TEMP_FILE"] + rank, "wb") as out:
        out.write(trace)
    if os.environ.get("FR_ALSO_JSON"):
        with open(os.environ["TORCH_FR_DUMP_TEMP_FILE"] + rank + ".json", "wb") as out:
            out.write(torch._C._distributed_c10d._dump_fr_trace_json(includeCollectives=True, onlyActive=False))


def stopped(signum, frame):  # torchrun stops the other ranks when one fails: they dump too
    write_dump()
    os._exit(128 + signum)


dist.init_process_group = _init_with_timeout
signal.signal(signal.SIGTERM, stopped)
sys.argv = [script]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
try:
    runpy.run_path(script, run_name="__main__")
finally:
    write_dump()
