"""The terminal view of where the time goes: per-rank phase bars and the median / p90 table, and the
`--scaling` table. Torch-free; prints with rich (colours when the terminal has them, distinct
glyphs when it does not)."""

from __future__ import annotations

import os
import sys
from typing import IO, Any

from ddpcheck.run.launcher.html_report import PHASE_COLORS, fmt_lr, fmt_rate, fmt_seconds

BAR_WIDTH = 36
GLYPHS = {"data": "░", "forward": "▒", "backward": "▓", "optimizer": "█", "collectives": "▞", "other": "·"}


def phase_bar(phases: dict[str, float], scale: float, color: bool, width: int = BAR_WIDTH) -> str:
    """Rich markup for one stacked bar: each phase's share of `scale` seconds in characters."""
    if scale <= 0:
        return ""
    out, used, carried = [], 0, 0.0
    for phase, value in phases.items():
        exact = width * value / scale + carried
        n = int(exact)
        carried = exact - n
        n = min(n, width - used)
        if n <= 0:
            continue
        used += n
        glyph = "█" if color else GLYPHS[phase]
        out.append(f"[{PHASE_COLORS[phase]}]{glyph * n}[/]" if color else glyph * n)
    return "".join(out) + " " * (width - used)


def _console(stream: IO[str] | None) -> Any:
    from rich.console import Console

    out = stream or sys.stdout
    return Console(file=out, highlight=False, soft_wrap=False,
                   width=None if out.isatty() or os.environ.get("COLUMNS") else 160)


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}"


def print_performance(perf: dict[str, Any], stream: IO[str] | None = None) -> None:
    from rich.table import Table

    console = _console(stream)
    color = console.color_system is not None
    ranks = perf["ranks"]
    phases = [p for p in perf["phases"] if any(r["phases"][p]["median"] > 0 for r in ranks)]
    straggler = (perf.get("straggler") or {}).get("rank")
    scale = max(sum(r["phases"][p]["median"] for p in phases) for r in ranks) or 1e-9
    width = max(12, min(BAR_WIDTH, console.width - 14 * (len(phases) + 1) - 16))
    table = Table(title=f"Where the time goes: ms per optimizer step, median / p90 ({perf['timed_steps']} "
                  "timed steps per rank)", title_justify="left", box=None, pad_edge=False)
    table.add_column("rank", no_wrap=True)
    table.add_column("", no_wrap=True)
    table.add_column("step", justify="right", no_wrap=True)
    for p in phases:
        table.add_column(p, justify="right", no_wrap=True)
    for r in ranks:
        bar = phase_bar({p: r["phases"][p]["median"] for p in phases}, scale, color, width)
        mark = " [bold red]◀ straggler[/]" if r["rank"] == straggler else ""
        cells = [f"{_ms(r['phases'][p]['median'])} / {_ms(r['phases'][p]['p90'])}" for p in phases]
        table.add_row(f"{r['rank']}{mark}", bar, f"{_ms(r['step']['median'])} / {_ms(r['step']['p90'])}", *cells)
    console.print(table)
    legend = "  ".join((f"[{PHASE_COLORS[p]}]█[/] {p}" if color else f"{GLYPHS[p]} {p}") for p in phases)
    console.print(f"  {legend}", highlight=False)
    tp = perf.get("throughput") or {}
    bits = []
    if tp.get("samples_per_s"):
        bits.append(f"throughput {fmt_rate(tp['samples_per_s'])} samples/s")
    if tp.get("global_batch"):
        bits.append(f"global batch {tp['global_batch']}")
    dom = perf["dominant"]
    bits.append(f"dominant phase: {dom['phase']} ({dom['share']:.0%} of a step)")
    if not perf.get("enough_steps"):
        bits.append("few timed steps: indicative only")
    if perf.get("emulated"):
        bits.append("CUDA emulated: the CPU's timings, not the GPU job's")
    console.print("  " + " · ".join(bits), highlight=False)


def print_scaling(scaling: dict[str, Any], stream: IO[str] | None = None) -> None:
    from rich.table import Table

    console = _console(stream)
    table = Table(title="Scaling (samples/s from the batches the loaders yielded, all ranks)",
                  title_justify="left", box=None, pad_edge=False)
    for col in ("ranks", "samples/s", "speed-up", "efficiency", "", "global batch", "learning rate",
                "median step"):
        table.add_column(col, justify="left" if col in ("ranks", "") else "right", no_wrap=True)
    color = console.color_system is not None
    for r in scaling["runs"]:
        eff = r.get("efficiency")
        style = "green" if eff is not None and eff >= 0.8 else ("yellow" if eff is not None and eff >= 0.5 else "red")
        bar = ""
        if eff is not None:
            n = max(0, min(12, round(12 * eff)))
            bar = (f"[{style}]" + "█" * n + "[/]" if color else "█" * n) + "·" * (12 - n)
        lr = fmt_lr(r.get("lr"))
        if r.get("lr_expected") is not None and r.get("lr") is not None and abs(r["lr_expected"] - r["lr"]) > 0.05 * abs(r["lr_expected"]):
            lr += f" [red](rule: {fmt_lr(r['lr_expected'])})[/]"
        table.add_row(
            f"{r['world_size']}" + ("" if r.get("ok", True) else " [red](failed)[/]"),
            fmt_rate(r.get("samples_per_s")),
            "–" if r.get("speedup") is None else f"{r['speedup']:.2f}×",
            "–" if eff is None else f"[{style}]{eff:.0%}[/]", bar,
            str(r.get("global_batch") or "–"), lr, fmt_seconds(r.get("step_median")),
        )
    console.print(table)
    if scaling.get("lr_verdict"):
        console.print(f"  [bold red]{scaling['lr_verdict']}[/]")
