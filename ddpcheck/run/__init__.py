"""`ddpcheck run`: the runtime half. Only this package imports torch, and only lazily.

Two kinds of process run its code; the folders say which:

    launcher/   the `ddpcheck run` process: parse the command line, plan and launch the job
                (torchrun, or the plain interpreter for spawn-style scripts), read the rank
                records back, judge across ranks (judging.py), the exit code, the table and the
                reports (results.py), the `--scaling` sweep (scaling_runs.py runs it, scaling.py
                compares the runs, performance_view.py prints the time and scaling tables)
    rank/       inside every rank: the bootstrap, the session and its hook lists, the hook layer
                over torch, the CUDA emulation, the hang ledger and watchdog (hang_detection.py
                wires them), spawn-style start-up
    checks/     one module per probe: its checks' pages, its in-rank capture and its judge
                (see registry.py for how a check is declared and found)
    rehearse/   `run --rehearse`: representative ranks of large worlds, each alone

Shared by both, torch-free: run_options.py (the options of one `ddpcheck run`, what travels to
the ranks), records.py (the per-rank record), registry.py (the checks), verdict.py (what a judge
returns); calls.py, live.py, diagnose.py and source_loops.py (collective call logs, the live state
file, why a job hung, the loops of the user's source: read by the ranks' watchdog and by the
launcher's judges); reach.py (how far each rank got, for the "not reached" verdicts);
performance.py (where the time went, from the ranks' timing: read by the timing probe's judge and
by the launcher's report). REPORT.md documents the records and the JSON report.
"""
