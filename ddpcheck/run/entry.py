"""`ddpcheck run [--nproc N] [torchrun options] [ddpcheck options] SCRIPT [ARGS...]` (or `-m MODULE`).

`main(argv) -> exit code`: the script's own non-zero exit code if it failed; otherwise 1 if a
check failed; otherwise 0; 2 for a usage error. The CLI calls this; `python -m ddpcheck.run.entry`
works too.
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
    from ddpcheck.run import diagnostics, launcher, summary, verdicts

    launch = launcher.parse(argv, record_dir)
    plan = diagnostics.prepare(launch)  # issue 5: emulation, spawn style, hang timeout
    result = diagnostics.run(launch, plan)
    if result.launcher_error and not verdicts.load_records(record_dir):
        raise UserError(f"ddpcheck run: the launcher failed before any rank started: "
                        f"{result.launcher_error}")

    records = verdicts.load_records(record_dir)
    ctx = verdicts.context_from(records, launch.nproc * launch.nnodes_max, launch.options)
    judged = verdicts.judge_all(records, ctx, launch.options.checks)
    rows = verdicts.rows(judged)
    incidents = diagnostics.findings(record_dir, records, result.exit_codes, interrupted=plan.interrupted,
                                     spawn_site=plan.spawn_site, nproc_ignored=plan.nproc_ignored)
    findings = incidents + verdicts.findings(judged)

    script_code = diagnostics.script_exit_code(incidents, _script_exit_code(records, result))
    failed = any(r.status == "fail" for r in rows)
    exit_code = script_code if script_code else (1 if failed else 0)
    exit_code = diagnostics.exit_code(incidents, exit_code)
    job = {
        "target": launch.target.name if launch.target.kind == "module" else os.path.relpath(launch.target.name),
        "kind": launch.target.kind,
        "args": list(launch.target.args),
        "argv": argv,
        "world_size": ctx.world_size,
        "ranks_reported": [r.get("rank") for r in records],
        "launcher_ok": result.ok,
        "launcher_error": result.launcher_error,
        "failed_ranks": {str(k): v for k, v in result.exit_codes.items()},
        "script_exit_code": script_code,
        "exit_code": exit_code,
        "steps": max([r.get("step", 0) for r in records] or [0]),
        "checked_steps": max([len(r.get("probes", {}).get("grads", {}).get("steps", []))
                              for r in records] or [0]),
        "check_first": launch.options.check_first,
        "check_every": launch.options.check_every,
        "checks": list(launch.options.checks),
    }
    data = summary.report_dict(rows, findings, records, job)
    if launch.options.report:
        summary.write_report(launch.options.report, data)
    if launch.options.output_format == "full":
        summary.print_table(rows, job)
        diagnostics.print_section(incidents, records=records)
    else:
        print(summary.render_other(launch.options.output_format, findings, data))
    return exit_code


def _script_exit_code(records: list[dict], result) -> int:
    """The user's script's own exit code: the earliest non-zero one a rank recorded (later ones
    are usually other ranks failing because it left), else what the launcher saw (a rank killed
    before it could write its record)."""
    failed = [r for r in records if r.get("exit_code")]
    if failed:
        return int(min(failed, key=lambda r: r.get("ended_at") or float("inf"))["exit_code"])
    for rank in sorted(result.exit_codes):
        code = result.exit_codes[rank]
        if code:
            return code if code > 0 else 128 + (-code)  # -6 (SIGABRT) -> 134, as a shell says it
    return 0


if __name__ == "__main__":
    sys.exit(main())
