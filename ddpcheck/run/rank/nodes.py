"""Several nodes: each rank's record also reaches the node that holds global rank 0, through the
job's rendezvous store, so that this node judges across every rank of every node. The store is
kept from init_process_group on (the default group is gone by the end)."""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from typing import Any

from ddpcheck.run.records import record_path
from ddpcheck.run.rank.session import Session, env_int

KEY = "ddpcheck/records/"
WAIT_S = 30.0  # how long rank 0 waits at its end for the other nodes' records


class NodeRecords:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.store: Any = None
        self.world = env_int("WORLD_SIZE", 1)
        self.local = env_int("LOCAL_WORLD_SIZE", self.world)

    def keep_store(self) -> None:
        import torch.distributed as dist

        store: Any = dist.distributed_c10d._get_default_store()
        try:
            store = store.clone()
        except Exception:  # noqa: BLE001 - a store that cannot clone is still usable
            pass
        self.store = store

    def share(self) -> None:
        if self.store is None:
            return
        session = self.session
        first_local = session.rank - session.local_rank  # ranks of a node are contiguous
        try:
            if first_local != 0:
                self.store.set(KEY + str(session.rank), json.dumps(session.snapshot(), default=str))
            elif session.rank == 0 and session.options.record_dir:
                keys = [KEY + str(r) for r in range(self.local, self.world)]
                try:
                    self.store.wait(keys, timedelta(seconds=WAIT_S))
                except Exception:  # noqa: BLE001 - a node that never finished: judge without it
                    pass
                for rank, key in zip(range(self.local, self.world), keys):
                    if self.store.check([key]):
                        path = record_path(session.options.record_dir, rank)
                        with open(path + ".tmp", "wb") as fh:
                            fh.write(self.store.get(key))
                        os.replace(path + ".tmp", path)
        except Exception as exc:  # noqa: BLE001 - never fail the rank over the report
            print(f"ddpcheck: could not share the records across nodes: {exc}", file=sys.stderr)


def install(session: Session) -> None:
    """On a job of several nodes, share this rank's final record with the node of rank 0."""
    nodes = NodeRecords(session)
    if session.under_launcher and nodes.world > nodes.local:
        session.after_init.append(nodes.keep_store)
        session.after_finish.append(nodes.share)
