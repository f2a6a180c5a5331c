"""`ddpcheck run --html PATH`: the run report as one self-contained HTML file.

Everything is inline (CSS, SVG charts); the page loads nothing, runs no script and needs no network
to be viewed. It is rendered from the same document as `--report` (see ddpcheck/run/REPORT.md):
the findings, the per-rank phase breakdown (`performance`) and, after `--scaling`, the measured
throughput against the ideal line (`scaling`). Torch-free.
"""

from __future__ import annotations

import datetime as _dt
import html
import math
from typing import Any

from ddpcheck.catalog import DOCS_URL

# Phase colours: distinct in hue and lightness, readable on white and on the dark theme.
PHASE_COLORS = {
    "data": "#e8a33d",
    "forward": "#4c8bf5",
    "backward": "#7b5cd6",
    "optimizer": "#2bb39b",
    "collectives": "#e2566b",
    "other": "#9aa3ad",
}
PHASE_LABELS = {
    "data": "waiting for data",
    "forward": "forward",
    "backward": "backward + reduction",
    "optimizer": "optimizer step",
    "collectives": "own collectives",
    "other": "other (loss, logging, your code)",
}
_SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "–"
    if s == 0:
        return "0"
    if s >= 1:
        return f"{s:.2f} s"
    ms = s * 1e3
    if ms >= 100:
        return f"{ms:.0f} ms"
    if ms >= 10:
        return f"{ms:.1f} ms"
    return f"{ms:.2f} ms"


def fmt_rate(x: float | None) -> str:
    if x is None:
        return "–"
    if x == 0:
        return "0"
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def fmt_lr(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:.4g}"


def render(report: dict[str, Any], *, generated: str | None = None) -> str:
    """The whole page for one run report (the `--report` JSON document)."""
    run = report.get("run", {})
    job = run.get("job", {})
    perf = run.get("performance")
    scaling = run.get("scaling")
    findings = sorted(report.get("findings", []),
                      key=lambda f: (_SEVERITY_ORDER.get(f.get("severity"), 3), f.get("code", "")))
    when = generated or _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    title = f"ddpcheck run: {job.get('target', 'script')}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        # No network, ever: the policy forbids loading anything but inline styles and data: images.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "style-src 'unsafe-inline'; img-src data:\">",
        f"<title>{esc(title)}</title>",
        f"<style>{CSS}</style></head><body><main>",
        _header(job, findings, perf, scaling),
        _kpis(job, perf, scaling),
        _findings(findings),
    ]
    if perf:
        parts.append(_phases(perf))
    if scaling:
        parts.append(_scaling(scaling))
    if run.get("rehearse"):
        parts.append(_rehearse(run["rehearse"]))
    parts.append(_checks(run.get("checks", [])))
    from ddpcheck import __version__

    parts.append(f"<footer>ddpcheck {esc(__version__)} · generated {esc(when)} · "
                 "one self-contained file: no scripts, fonts or network</footer>")
    parts.append("</main></body></html>")
    return "\n".join(p for p in parts if p)


def write(path: str, report: dict[str, Any]) -> None:
    import os

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(render(report))
    os.replace(tmp, path)


# --- sections ---------------------------------------------------------------------------------

def _header(job: dict[str, Any], findings: list[dict[str, Any]], perf: dict[str, Any] | None,
            scaling: dict[str, Any] | None) -> str:
    counts = {s: sum(f.get("severity") == s for f in findings) for s in ("error", "warning", "info")}
    if counts["error"]:
        pill = f'<span class="pill bad">{_plural(counts["error"], "error")}</span>'
    elif counts["warning"]:
        pill = f'<span class="pill warn">{_plural(counts["warning"], "warning")}</span>'
    elif findings:
        pill = f'<span class="pill info">{_plural(len(findings), "note")}</span>'
    else:
        pill = '<span class="pill ok">all checks passed</span>'
    facts = []
    if scaling:
        sizes = ", ".join(str(r["world_size"]) for r in scaling.get("runs", []))
        facts.append(f"scaling runs at {esc(sizes)} ranks")
    elif job.get("world_size"):
        facts.append(_plural(job["world_size"], "rank"))
    if job.get("steps") is not None:
        facts.append(_plural(job["steps"], "optimizer step"))
    if job.get("checked_steps"):
        facts.append(f"{job['checked_steps']} checked")
    code = job.get("exit_code")
    if code is not None:
        facts.append(f"exit code {code}")
    if perf:
        clock = "CUDA events" if perf.get("clock") == "cuda" else "wall clock"
        facts.append(f"timed with the {clock}")
    args = " ".join(job.get("args", []))
    return (
        '<header><div class="brand">ddpcheck run</div>'
        f'<h1><span class="target">{esc(job.get("target", "script"))}</span>'
        f'{" <span class=args>" + esc(args) + "</span>" if args else ""} {pill}</h1>'
        f'<p class="facts">{" · ".join(esc(f) for f in facts)}</p></header>'
    )


def _kpis(job: dict[str, Any], perf: dict[str, Any] | None,
            scaling: dict[str, Any] | None) -> str:
    cards = []
    if perf:
        tp = perf.get("throughput", {})
        if tp.get("samples_per_s"):
            cards.append(_kpi("throughput", fmt_rate(tp.get("samples_per_s")), "samples/s, all ranks",
                              "kpi-throughput"))
        elif perf.get("step_median"):
            cards.append(_kpi("throughput", fmt_rate(1 / perf["step_median"]), "optimizer steps/s "
                              "(no DataLoader batches seen)", "kpi-throughput"))
        gb = tp.get("global_batch")
        cards.append(_kpi("median step", fmt_seconds(perf.get("step_median")),
                          f"global batch {gb}" if gb else "per optimizer step", "kpi-step"))
        dom = perf["dominant"]
        cards.append(_kpi("dominant phase", esc(dom["phase"]), f"{dom['share']:.0%} of a step",
                          "kpi-dominant", color=PHASE_COLORS.get(dom["phase"])))
        s = perf.get("straggler")
        if s:
            cards.append(_kpi("straggler", f"rank {s['rank']}",
                              f"+{fmt_seconds(s['excess_s'])} per step in {esc(s['phase'])}; the others "
                              f"wait {s['excess_share']:.0%} of each step", "kpi-straggler", tone="bad"))
        elif perf.get("enough_steps") and len(perf.get("ranks", [])) > 1:
            within = perf.get("straggler_threshold", 0.2)
            cards.append(_kpi("straggler", "none", f"ranks within {within:.0%} of each other",
                              "kpi-straggler", tone="ok"))
    if scaling:
        last = (scaling.get("runs") or [{}])[-1]
        eff = last.get("efficiency")
        if eff is not None:
            tone = "ok" if eff >= 0.8 else ("warn" if eff >= 0.5 else "bad")
            cards.append(_kpi(f"efficiency at {last['world_size']}", f"{eff:.0%}",
                              f"speed-up {last.get('speedup', 0):.2f}× of {last['world_size']}×",
                              "kpi-efficiency", tone=tone))
    if not cards:
        return ""
    return '<section class="kpis">' + "".join(cards) + "</section>"


def _kpi(label: str, value: str, sub: str, ident: str, *, tone: str = "", color: str | None = None) -> str:
    dot = f'<span class="dot" style="background:{color}"></span>' if color else ""
    size = " long" if len(value) > 8 else ""
    return (f'<div class="kpi {tone}" id="{ident}"><div class="kpi-label">{esc(label)}</div>'
            f'<div class="kpi-value{size}">{dot}{value}</div><div class="kpi-sub">{sub}</div></div>')


def _findings(findings: list[dict[str, Any]]) -> str:
    if not findings:
        return ('<section id="findings"><h2>Findings</h2><p class="empty">No findings: every check '
                "that ran passed.</p></section>")
    items = []
    for f in findings:
        sev = f.get("severity", "info")
        ranks = f.get("ranks") or []
        meta = []
        if ranks:
            meta.append(("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks)))
        if f.get("path"):
            loc = f["path"] + (f":{f['location']['line']}" if f.get("location") else "")
            meta.append(loc)
        hint = f'<p class="hint"><b>Fix:</b> {esc(f["hint"])}</p>' if f.get("hint") else ""
        url = DOCS_URL.format(code=f.get("code"))
        items.append(
            f'<article class="finding {esc(sev)}"><div class="fhead">'
            f'<span class="code">{esc(f.get("code"))}</span><span class="fname">{esc(f.get("name"))}</span>'
            f'<span class="sev">{esc(sev)}</span>'
            f'{"<span class=meta>" + esc(" · ".join(meta)) + "</span>" if meta else ""}'
            f'<a class="page" href="{esc(url)}">page</a></div>'
            f'<p class="msg">{esc(f.get("message", ""))}</p>{hint}</article>'
        )
    return f'<section id="findings"><h2>Findings <span class="count">{len(findings)}</span></h2>' + "".join(items) + "</section>"


def _phases(perf: dict[str, Any]) -> str:
    ranks = perf.get("ranks", [])
    phases = [p for p in perf.get("phases", PHASE_COLORS) if any(r["phases"][p]["median"] > 0 for r in ranks)]
    straggler = (perf.get("straggler") or {}).get("rank")
    note = ""
    if perf.get("emulated"):
        note += ('<p class="note">CUDA was emulated on the CPU: these are the CPU\'s timings, not '
                 "those of the GPU job.</p>")
    if not perf.get("enough_steps"):
        note += ('<p class="note">Few timed steps: the figures are indicative only (the first steps '
                "after start-up are left out).</p>")
    legend = "".join(f'<span class="lg"><span class="sw" style="background:{PHASE_COLORS[p]}"></span>'
                     f"{esc(PHASE_LABELS[p])}</span>" for p in phases)
    return (
        '<section id="phases"><h2>Where the time goes</h2>'
        f'<p class="lead">Median time per optimizer step on each rank, split by phase '
        f'({perf.get("timed_steps", 0)} timed steps per rank). Under DDP every rank waits for the '
        "slowest one inside the gradient reduction, so a slow rank shows up as longer "
        "<i>backward</i> on the others.</p>"
        f'<div class="legend">{legend}</div>'
        + phase_chart(ranks, phases, straggler)
        + _phase_table(ranks, phases, straggler)
        + note + _ddp_timers(perf) + "</section>"
    )


def phase_chart(ranks: list[dict[str, Any]], phases: list[str], straggler: int | None) -> str:
    """Horizontal stacked bars, one per rank, on a shared time axis."""
    width, label_w, right = 860, 70, 90
    bar_h, gap, top, axis_h = 26, 12, 8, 28
    plot_w = width - label_w - right
    height = top + len(ranks) * (bar_h + gap) + axis_h
    longest = max((sum(r["phases"][p]["median"] for p in phases) for r in ranks), default=0) or 1e-9
    tick = _nice_step(longest / 4)
    scale_max = max(tick * math.ceil(longest / tick), tick)
    out = [f'<svg class="chart" id="phase-chart" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="median step time per rank, by phase" xmlns="http://www.w3.org/2000/svg">']
    # grid and axis
    t = 0.0
    axis_y = top + len(ranks) * (bar_h + gap)
    while t <= scale_max + 1e-12:
        x = label_w + plot_w * t / scale_max
        out.append(f'<line class="grid" x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{axis_y}"/>')
        out.append(f'<text class="tick" x="{x:.1f}" y="{axis_y + 16}" text-anchor="middle">{esc(fmt_seconds(t))}</text>')
        t += tick
    for i, r in enumerate(ranks):
        y = top + i * (bar_h + gap)
        slow = r["rank"] == straggler
        out.append(f'<text class="rlabel{" slow" if slow else ""}" x="{label_w - 10}" y="{y + bar_h / 2 + 5:.1f}" '
                   f'text-anchor="end">rank {r["rank"]}</text>')
        x = float(label_w)
        total = 0.0
        for p in phases:
            v = r["phases"][p]["median"]
            if v <= 0:
                continue
            w = plot_w * v / scale_max
            total += v
            out.append(f'<rect class="seg" x="{x:.2f}" y="{y}" width="{max(w, 0.5):.2f}" height="{bar_h}" '
                       f'fill="{PHASE_COLORS[p]}"><title>rank {r["rank"]} · {esc(PHASE_LABELS[p])}: '
                       f'{esc(fmt_seconds(v))} median, {esc(fmt_seconds(r["phases"][p]["p90"]))} p90</title></rect>')
            if w > 46:
                out.append(f'<text class="seglabel" x="{x + w / 2:.1f}" y="{y + bar_h / 2 + 4:.1f}" '
                           f'text-anchor="middle">{esc(fmt_seconds(v))}</text>')
            x += w
        out.append(f'<text class="rtotal" x="{x + 8:.1f}" y="{y + bar_h / 2 + 5:.1f}">{esc(fmt_seconds(total))}'
                   f'{" ▲" if slow else ""}</text>')
        if slow:
            out.append(f'<rect class="slowbox" x="{label_w - 4}" y="{y - 4}" width="{x - label_w + 8:.1f}" '
                       f'height="{bar_h + 8}" rx="4"/>')
    out.append("</svg>")
    return "".join(out)


def _phase_table(ranks: list[dict[str, Any]], phases: list[str], straggler: int | None) -> str:
    head = "".join(f'<th><span class="sw" style="background:{PHASE_COLORS[p]}"></span>{esc(p)}</th>' for p in phases)
    rates = any(r.get("samples_per_s") for r in ranks)
    rows = []
    for r in ranks:
        cells = "".join(f'<td>{fmt_seconds(r["phases"][p]["median"])}'
                        f'<small>{fmt_seconds(r["phases"][p]["p90"])}</small></td>' for p in phases)
        tp = f"<td>{fmt_rate(r.get('samples_per_s'))}</td>" if rates else ""
        cls = ' class="slow"' if r["rank"] == straggler else ""
        rows.append(f'<tr{cls}><th>rank {r["rank"]}</th><td><b>{fmt_seconds(r["step"]["median"])}</b>'
                    f'<small>{fmt_seconds(r["step"]["p90"])}</small></td>{cells}{tp}</tr>')
    rate_head = "<th>samples/s</th>" if rates else ""
    return (f'<div class="scroll"><table class="data stacked" id="phase-table"><thead><tr><th></th>'
            f"<th>step</th>{head}{rate_head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
            '<p class="caption">per optimizer step: median, and below it the 90th percentile</p>')


def _ddp_timers(perf: dict[str, Any]) -> str:
    ddp = perf.get("ddp")
    walk = perf.get("graph_walk")
    bits = []
    if ddp:
        bits.append(f"DDP's own timers: forward {fmt_seconds(ddp['forward_s'])}, backward compute "
                    f"{fmt_seconds(ddp['backward_compute_s'])}, gradient reduction {fmt_seconds(ddp['comm_s'])} "
                    f"of which {fmt_seconds(ddp['exposed_comm_s'])} not hidden behind backward")
        if ddp.get("bucket_cap_mb"):
            bits[-1] += f"; buckets of {ddp['bucket_cap_mb']:.0f} MB"
    if walk:
        bits.append(f"find_unused_parameters graph walk: {fmt_seconds(walk['per_step_s'])} per step "
                    f"({walk['share']:.1%} of a step)")
    if not bits:
        return ""
    return '<p class="ddp">' + esc(". ".join(bits)) + ".</p>"


def _scaling(scaling: dict[str, Any]) -> str:
    runs = scaling.get("runs", [])
    rows = []
    for r in runs:
        eff = r.get("efficiency")
        tone = "" if eff is None else ("ok" if eff >= 0.8 else ("warn" if eff >= 0.5 else "bad"))
        lr_cell = fmt_lr(r.get("lr"))
        exp = r.get("lr_expected")
        if exp is not None and r.get("lr") is not None and not math.isclose(exp, r["lr"], rel_tol=0.05):
            lr_cell += f' <small class="bad">(linear rule: {fmt_lr(exp)})</small>'
        status = "" if r.get("ok", True) else ' <small class="bad">(failed)</small>'
        rows.append(
            f'<tr><th>{r["world_size"]}{status}</th><td>{fmt_rate(r.get("samples_per_s"))}</td>'
            f'<td>{_fmt_x(r.get("speedup"))}</td><td class="{tone}">'
            f'{"–" if eff is None else f"{eff:.0%}"}</td>'
            f'<td>{r.get("global_batch") or "–"}</td><td>{lr_cell}</td>'
            f'<td>{fmt_seconds(r.get("step_median"))}</td></tr>'
        )
    table = ('<table class="data" id="scaling-table"><thead><tr><th>ranks</th><th>samples/s</th>'
             "<th>speed-up</th><th>efficiency</th><th>global batch</th><th>learning rate</th>"
             f"<th>median step</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")
    lr = scaling.get("lr_verdict")
    lr_html = f'<p class="hint-lr">{esc(lr)}</p>' if lr else ""
    return ('<section id="scaling"><h2>Scaling</h2><p class="lead">Throughput at each world size '
            "(samples the loaders yielded per second, all ranks) against the ideal: N ranks, N× the "
            "one-rank throughput.</p>" + scaling_chart(runs) + table + lr_html + "</section>")


def _rehearse(block: dict[str, Any]) -> str:
    """`--rehearse`: world size × finding, each problem's first world size marked, then the facts."""
    sizes = [str(w) for w in block.get("world_sizes", [])]
    head = "".join(f"<th>{esc(w)} ranks</th>" for w in sizes)
    rows = []
    for row in block.get("table", []):
        cells = []
        for w in sizes:
            text = row.get("cells", {}).get(w, "ok")
            tone = "ok" if text == "ok" else "bad"
            first = " <small>(first)</small>" if w == str(row.get("first_world_size")) else ""
            cells.append(f'<td class="{tone}">{esc(text)}{first}</td>')
        rows.append(f'<tr><th>{esc(row.get("code"))} {esc(row.get("name"))}</th>{"".join(cells)}</tr>')
    if not rows:
        rows.append(f'<tr><th>no finding</th>{"".join("<td class=ok>ok</td>" for _ in sizes)}</tr>')
    facts = []
    for size in block.get("sizes", []):
        lr = size.get("lr")
        facts.append(f'<tr><th>{esc(size.get("world_size"))}</th>'
                     f'<td>{esc(", ".join(map(str, size.get("ranks_run", []))))}</td>'
                     f'<td>{esc(size.get("global_batch") or "–")}</td><td>{fmt_lr(lr) if lr is not None else "–"}</td>'
                     f'<td>{fmt_seconds(size.get("seconds_per_rank"))}</td>'
                     f"<td>{float(size.get('peak_mb') or 0):.0f} MB</td></tr>")
    return ('<section id="rehearse"><h2>Rehearsal</h2><p class="lead">The job at each world size, '
            f'{esc(block.get("gpus_per_node"))} GPUs per node: representative ranks, each run alone with '
            "every collective answered locally; data shards computed for every rank.</p>"
            f'<table class="data" id="rehearse-table"><thead><tr><th>finding</th>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>'
            '<table class="data" id="rehearse-sizes"><thead><tr><th>ranks</th><th>rehearsed</th>'
            "<th>global batch</th><th>learning rate</th><th>time per rank</th><th>peak memory</th></tr>"
            f'</thead><tbody>{"".join(facts)}</tbody></table></section>')


def _fmt_x(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}×"


def scaling_chart(runs: list[dict[str, Any]]) -> str:
    """Measured throughput against world size, with the ideal (linear) line from one rank."""
    pts = [(r["world_size"], r["samples_per_s"]) for r in runs if r.get("samples_per_s")]
    width, height = 860, 340
    left, right, top, bottom = 78, 150, 20, 46
    plot_w, plot_h = width - left - right, height - top - bottom
    if not pts:
        return '<p class="empty">No throughput was measured.</p>'
    base = next((r for r in runs if r["world_size"] == min(p[0] for p in pts) and r.get("samples_per_s")), None)
    per_rank = base["samples_per_s"] / base["world_size"] if base else None
    max_n = max(p[0] for p in pts)
    ideal_max = per_rank * max_n if per_rank else 0
    y_max_raw = max([v for _, v in pts] + [ideal_max]) * 1.08
    tick = _nice_step(y_max_raw / 5)
    y_max = tick * math.ceil(y_max_raw / tick)

    def X(n: float) -> float:
        return left + plot_w * (n - 0) / max_n if max_n else left

    def Y(v: float) -> float:
        return float(top + plot_h * (1 - v / y_max))

    out = [f'<svg class="chart" id="scaling-chart" viewBox="0 0 {width} {height}" role="img" '
           'aria-label="throughput against world size, with the ideal line" xmlns="http://www.w3.org/2000/svg">']
    v = 0.0
    while v <= y_max + 1e-9:
        out.append(f'<line class="grid" x1="{left}" y1="{Y(v):.1f}" x2="{left + plot_w}" y2="{Y(v):.1f}"/>')
        out.append(f'<text class="tick" x="{left - 8}" y="{Y(v) + 4:.1f}" text-anchor="end">{esc(fmt_rate(v))}</text>')
        v += tick
    for n in sorted({p[0] for p in pts} | {0}):
        out.append(f'<text class="tick" x="{X(n):.1f}" y="{top + plot_h + 18}" text-anchor="middle">{n}</text>')
    out.append(f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}"/>')
    out.append(f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}"/>')
    out.append(f'<text class="axlabel" x="{left + plot_w / 2:.1f}" y="{height - 6}" text-anchor="middle">ranks (world size)</text>')
    out.append(f'<text class="axlabel" x="16" y="{top + plot_h / 2:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 16 {top + plot_h / 2:.1f})">samples/s</text>')
    if per_rank:
        out.append(f'<line class="ideal" x1="{X(0):.1f}" y1="{Y(0):.1f}" x2="{X(max_n):.1f}" y2="{Y(ideal_max):.1f}">'
                   f"<title>ideal: {esc(fmt_rate(per_rank))} samples/s per rank</title></line>")
        out.append(f'<text class="ideal-label" x="{X(max_n) + 8:.1f}" y="{Y(ideal_max) + 4:.1f}">ideal {esc(fmt_rate(ideal_max))}</text>')
    path = " ".join(f"{'M' if i == 0 else 'L'}{X(n):.1f},{Y(v):.1f}" for i, (n, v) in enumerate(pts))
    out.append(f'<path class="measured" d="{path}"/>')
    for r in runs:
        if not r.get("samples_per_s"):
            continue
        n, v = r["world_size"], r["samples_per_s"]
        eff = r.get("efficiency")
        out.append(f'<circle class="pt" cx="{X(n):.1f}" cy="{Y(v):.1f}" r="6"><title>{n} ranks: '
                   f'{esc(fmt_rate(v))} samples/s{"" if eff is None else f", {eff:.0%} efficiency"}</title></circle>')
        first = base is not None and n == base["world_size"]
        label = f"{fmt_rate(v)}" + ("" if eff is None or first else f" · {eff:.0%}")
        out.append(f'<text class="ptlabel" x="{X(n) + 10:.1f}" y="{Y(v) - 10:.1f}">{esc(label)}</text>')
    out.append(f'<g class="key" transform="translate({left + 14},{top + 14})">'
               '<line class="measured" x1="0" y1="0" x2="26" y2="0"/><text x="34" y="4">measured</text>'
               '<line class="ideal" x1="110" y1="0" x2="136" y2="0"/><text x="144" y="4">ideal (linear)</text></g>')
    out.append("</svg>")
    return "".join(out)


def _checks(checks: list[dict[str, Any]]) -> str:
    if not checks:
        return ""
    label = {"fail": "FAIL", "pass": "pass", "skip": "skip", "not-run": "not run"}
    rows = "".join(
        f'<tr class="st-{esc(c.get("status"))}"><td><span class="st">{esc(label.get(str(c.get("status")), c.get("status")))}</span></td>'
        f'<td class="code">{esc(c.get("code"))}</td><td>{esc(c.get("name"))}</td>'
        f'<td>{esc(c.get("detail") or "")}</td></tr>' for c in checks
    )
    passed = sum(c.get("status") == "pass" for c in checks)
    return ('<section id="checks"><details><summary><h2>Checks</h2> '
            f'<span class="count">{passed} of {len(checks)} passed</span></summary>'
            '<table class="data checks"><thead><tr><th>status</th><th>code</th><th>check</th><th>detail</th>'
            f"</tr></thead><tbody>{rows}</tbody></table></details></section>")


# --- helpers ----------------------------------------------------------------------------------

def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _nice_step(raw: float) -> float:
    """1, 2 or 5 times a power of ten, at least `raw`."""
    if raw <= 0:
        return 1.0
    exp = math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        step = m * 10 ** exp
        if step >= raw:
            return float(step)
    return float(10 ** (exp + 1))


CSS = """
:root{--bg:#f6f7f9;--card:#fff;--ink:#1d2433;--muted:#667085;--line:#e4e7ec;--grid:#eef0f3;
--bad:#d92d20;--warn:#dc6803;--ok:#079455;--info:#1570ef;--accent:#344054}
@media (prefers-color-scheme:dark){:root{--bg:#0f1218;--card:#171b23;--ink:#e6e9ef;--muted:#98a2b3;
--line:#2a303c;--grid:#222834;--accent:#cfd6e2}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,
"Helvetica Neue",Arial,sans-serif}
main{max-width:1040px;margin:0 auto;padding:28px 24px 40px}
h1{font-size:26px;margin:2px 0 4px;display:flex;flex-wrap:wrap;align-items:center;gap:12px}
h2{font-size:18px;margin:0 0 12px;display:inline-flex;align-items:center;gap:8px}
.brand{font-size:12px;letter-spacing:.08em;text-transform:uppercase;color:var(--muted);font-weight:600}
.target{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.args{font:14px ui-monospace,Menlo,Consolas,monospace;color:var(--muted)}
.facts{color:var(--muted);margin:0 0 20px}
.pill{font-size:13px;font-weight:600;padding:3px 10px;border-radius:999px;color:#fff}
.pill.bad{background:var(--bad)}.pill.warn{background:var(--warn)}.pill.ok{background:var(--ok)}.pill.info{background:var(--info)}
section{background:var(--card);border:1px solid var(--line);border-radius:12px;padding:20px 22px;margin:0 0 18px}
section.kpis{display:grid;grid-template-columns:repeat(auto-fit,minmax(170px,1fr));gap:12px;background:none;border:0;padding:0}
.kpi{background:var(--card);border:1px solid var(--line);border-radius:12px;padding:14px 16px;border-top:4px solid var(--accent)}
.kpi.ok{border-top-color:var(--ok)}.kpi.warn{border-top-color:var(--warn)}.kpi.bad{border-top-color:var(--bad)}
.kpi-label{font-size:12px;text-transform:uppercase;letter-spacing:.06em;color:var(--muted);font-weight:600}
.kpi-value{font-size:26px;font-weight:700;margin:2px 0;display:flex;align-items:center;gap:8px;
font-variant-numeric:tabular-nums;min-width:0}
.kpi-value.long{font-size:20px;min-height:39px}
.kpi-sub{font-size:13px;color:var(--muted)}
.dot{width:14px;height:14px;border-radius:4px;display:inline-block;flex:none}
.count{font-size:13px;font-weight:600;color:var(--muted);background:var(--bg);border:1px solid var(--line);border-radius:999px;padding:1px 9px}
.finding{border:1px solid var(--line);border-left:5px solid var(--info);border-radius:8px;padding:10px 14px;margin:10px 0}
.finding.error{border-left-color:var(--bad)}.finding.warning{border-left-color:var(--warn)}
.fhead{display:flex;flex-wrap:wrap;gap:10px;align-items:baseline}
.code{font-family:ui-monospace,Menlo,Consolas,monospace;font-weight:700}
.fname{font-weight:600}
.sev{font-size:12px;text-transform:uppercase;letter-spacing:.05em;color:var(--muted)}
.finding.error .sev{color:var(--bad)}.finding.warning .sev{color:var(--warn)}
.meta{font-size:13px;color:var(--muted)}
.page{margin-left:auto;font-size:13px;color:var(--info);text-decoration:none}
.msg{margin:6px 0 0}.hint{margin:6px 0 0;color:var(--muted)}
.empty,.note,.caption,.ddp{color:var(--muted)}
.lead{color:var(--muted);margin:-4px 0 12px}
.caption{font-size:13px;margin:4px 0 0}
.legend{display:flex;flex-wrap:wrap;gap:14px;font-size:13px;color:var(--muted);margin:0 0 6px}
.lg{display:inline-flex;align-items:center;gap:6px}
.sw{width:11px;height:11px;border-radius:3px;display:inline-block;margin-right:5px;vertical-align:-1px}
.chart{width:100%;height:auto;display:block;margin:4px 0 8px}
.chart text{font:13px system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif;fill:var(--ink)}
.chart .tick{fill:var(--muted);font-size:12px}
.chart .grid{stroke:var(--grid);stroke-width:1}
.chart .axis{stroke:var(--muted);stroke-width:1}
.chart .rlabel{font-weight:600}.chart .rlabel.slow{fill:var(--bad)}
.chart .seglabel{fill:#fff;font-size:12px;font-weight:600}
.chart .rtotal{font-weight:700}
.chart .slowbox{fill:none;stroke:var(--bad);stroke-width:2;stroke-dasharray:5 3}
.chart .ideal{stroke:var(--muted);stroke-width:2;stroke-dasharray:7 5}
.chart .ideal-label{fill:var(--muted)}
.chart .measured{stroke:var(--info);stroke-width:3;fill:none}
.chart .pt{fill:var(--card);stroke:var(--info);stroke-width:3}
.chart .ptlabel{font-weight:700}
.chart .axlabel{fill:var(--muted);font-size:12px}
table.data{width:100%;border-collapse:collapse;font-variant-numeric:tabular-nums;font-size:14px}
table.data th,table.data td{text-align:right;padding:6px 8px;border-bottom:1px solid var(--line);white-space:nowrap}
table.data th:first-child,table.data td:first-child{text-align:left}
table.data thead th{font-size:12px;text-transform:uppercase;letter-spacing:.04em;color:var(--muted);font-weight:600}
table.data small{color:var(--muted)}
table.stacked small{display:block;font-size:12px}
.scroll{overflow-x:auto}
table.data tr.slow th,table.data tr.slow td{background:color-mix(in srgb,var(--bad) 7%,transparent)}
td.ok{color:var(--ok);font-weight:700}td.warn{color:var(--warn);font-weight:700}td.bad{color:var(--bad);font-weight:700}
small.bad,.hint-lr{color:var(--bad)}
.hint-lr{margin:12px 0 0;font-weight:600}
table.checks td,table.checks th{text-align:left;white-space:normal}
.st{font-size:12px;font-weight:700;text-transform:uppercase}
.st-fail .st{color:var(--bad)}.st-pass .st{color:var(--ok)}.st-skip .st,.st-not-run .st{color:var(--muted)}
details summary{cursor:pointer;list-style:none;display:flex;align-items:center;gap:8px}
details summary h2{margin:0}
details[open] summary{margin-bottom:10px}
footer{color:var(--muted);font-size:12px;text-align:center;margin-top:24px}
"""
