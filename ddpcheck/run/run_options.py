"""The options of one `ddpcheck run`: parsed in the launcher (launcher/command_line.py), read by
every rank from the environment. Torch-free."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Mapping

CONFIG_ENV = "DDPCHECK_RUN_CONFIG"  # JSON of RunOptions, read by every rank
# Set by the launcher for the length of the job; documented to users, so scripts may read them.
ENV_EMULATE = "DDPCHECK_EMULATE_CUDA"  # "1": CUDA is emulated on the CPU in every rank
ENV_EMULATED_DEVICES = "DDPCHECK_EMULATED_DEVICES"  # what torch.cuda.device_count() says there
ENV_LAUNCHER_PID = "DDPCHECK_LAUNCHER_PID"  # the `ddpcheck run` process: its ranks must not outlive it
ENV_REHEARSE = "DDPCHECK_REHEARSE"  # JSON of a rehearsed rank's limits (--rehearse): that rank runs alone
ENV_SPAWN_FALLBACK = "DDPCHECK_SPAWN_FALLBACK"  # "1": a rank that calls mp.spawn before init leaves for a plain run


@dataclass(frozen=True)
class RunOptions:
    """What the ranks and the report need to know. Travels to the ranks as JSON in CONFIG_ENV."""

    codes: tuple[str, ...] | None = None  # the runtime codes selected; None: every one
    check_first: int = 20  # check every optimizer step for the first K steps ...
    check_every: int = 50  # ... then every N-th step
    report: str | None = None
    output_format: str = "full"
    record_dir: str = ""
    quiet: bool = False
    verbose: bool = False  # torchrun's own log lines on the terminal too (always in the run's log)
    cpu: bool = False  # emulate CUDA on the CPU even where CUDA is available
    spawn: bool = False  # the script starts its own workers (said by --spawn)
    hang_timeout: float = 30.0  # seconds without progress before a hang is diagnosed; 0: never
    collective_timeout: float = 0.0  # init_process_group(timeout=) when the script gives none; 0: none
    nproc_given: bool = False  # --nproc was on the command line
    html: str | None = None  # --html PATH: the report as one self-contained HTML file
    scaling: tuple[int, ...] = ()  # --scaling 1,2,4: the launcher runs the job at each world size
    show_skipped: bool = False  # --show-skipped: one table row per skipped or unselected check
    rehearse: tuple[int, ...] = ()  # --rehearse 8,64,512: representative ranks of each world size, alone

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> "RunOptions | None":
        raw = environ.get(CONFIG_ENV)
        if not raw:
            return None
        data = json.loads(raw)
        if data.get("codes") is not None:
            data["codes"] = tuple(data["codes"])
        data["scaling"] = tuple(data.get("scaling", ()))
        data["rehearse"] = tuple(data.get("rehearse", ()))
        return cls(**data)

    def selects(self, code: str) -> bool:
        return self.codes is None or code in self.codes

    def is_checked(self, step: int) -> bool:
        """Is optimizer step `step` (1-based) one we check? Every step for the first K, then every N-th."""
        if step <= self.check_first:
            return True
        return self.check_every > 0 and step % self.check_every == 0

    def next_checked(self, step: int) -> int:
        """The first checked optimizer step after `step` (a step never reached when none is)."""
        following = step + 1
        if following <= self.check_first:
            return following
        if self.check_every <= 0:
            return -1
        return -(-following // self.check_every) * self.check_every


