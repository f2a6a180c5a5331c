"""`ddpcheck run [--nproc N] [torchrun options] [ddpcheck options] SCRIPT [ARGS...]` (or `-m MODULE`).

`main(argv) -> exit code` (the rule: launcher/exit_codes.py; 2 for a usage error). The CLI calls it. The launcher's
pipeline, each step in its own module of this package:

    command_line.parse → job.run_job [plan.prepare → launch.run (torchrun, or the plain interpreter)
      → records.load_records → judging.judge_all → exit_codes → results.report_dict]
      → presentation.present (report files, table, other formats)
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

from ddpcheck.errors import UserError


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    record_dir = tempfile.mkdtemp(prefix="ddpcheck-run-")
    try:
        return _run(argv, record_dir)
    except UserError as exc:
        print(str(exc), file=sys.stderr)
        return exc.exit_code
    except SystemExit as exc:  # argparse's --help
        return exc.code if isinstance(exc.code, int) else 0
    finally:
        if not os.environ.get("DDPCHECK_KEEP_RECORDS"):
            shutil.rmtree(record_dir, ignore_errors=True)
        else:
            print(f"ddpcheck: rank records kept in {record_dir}", file=sys.stderr)


def _run(argv: list[str], record_dir: str) -> int:
    from ddpcheck.run.launcher import command_line

    job_launch = command_line.parse(argv, record_dir)
    if job_launch.options.rehearse:
        from ddpcheck.run.rehearse import rehearsal

        return rehearsal.run(job_launch, argv)
    from ddpcheck.run.launcher import memory

    # The ranks this machine runs: every node's with --nodes, the largest size of --scaling.
    local_ranks = max(job_launch.options.scaling or (job_launch.nproc,)) * job_launch.nodes
    memory.check(local_ranks, job_launch.nodes - 1)
    if job_launch.options.scaling:
        from ddpcheck.run.launcher import scaling_runs

        return scaling_runs.run(argv, job_launch.options)
    from ddpcheck.run.launcher import job, presentation

    outcome = job.run_job(job_launch, argv, record_dir)
    return presentation.present(outcome, job_launch.options)
