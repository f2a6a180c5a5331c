"""Helpers the step-wise probes share: per-rank step digests, live exchange bookkeeping, and the
comparison of per-parameter fingerprints across ranks. Torch-free."""

from __future__ import annotations

from ddpcheck.run.rank.fingerprint import NONE

MAX_DETAIL = 3  # steps whose per-tensor fingerprints a rank keeps once ranks are seen to differ
MAX_DETAIL_OFFLINE = 20  # ... or, without a live exchange, the first checked steps


def steps_by_rank(records: list[dict], probe: str, key: str = "steps") -> dict[int, dict[int, int]]:
    """rank -> {step: digest} from each record's probe section."""
    out = {}
    for r in records:
        sec = r.get("probes", {}).get(probe)
        if sec is not None:
            out[r["rank"]] = {int(s): int(d) for s, d, *_ in sec.get(key, [])}
    return out


def first_mismatch(per_rank: dict[int, dict[int, int]]):
    """(first differing step, {rank: digest} there, differing steps, compared steps)."""
    if len(per_rank) < 2:
        return None, {}, 0, 0
    common = sorted(set.intersection(*(set(v) for v in per_rank.values())))
    first, at, bad = None, {}, 0
    for step in common:
        values = {r: v[step] for r, v in per_rank.items()}
        if len(set(values.values())) > 1:
            bad += 1
            if first is None:
                first, at = step, values
    return first, at, bad, len(common)


def differing_tensors(records: list[dict], probe: str, step: int, key: str = "detail"):
    """[(name, {rank: crc})] for the tensors whose fingerprints differ at `step` (if kept)."""
    per_rank = {}
    for r in records:
        for d in r.get("probes", {}).get(probe, {}).get(key, []):
            if d["step"] == step:
                per_rank[r["rank"]] = d
    if len(per_rank) < 2:
        return None
    names = next(iter(per_rank.values()))["names"]
    out = []
    for i, name in enumerate(names):
        values = {rank: d["crcs"][i] for rank, d in per_rank.items() if i < len(d["crcs"])}
        if len(set(values.values())) > 1:
            out.append((name, values))
    return out


def describe_tensor(name: str, values: dict[int, int]) -> str:
    missing = tuple(r for r, v in values.items() if v == NONE)
    if missing and len(missing) < len(values):
        return f"{name} (None on rank{'s' if len(missing) > 1 else ''} {','.join(map(str, missing))})"
    return name


class DetailKeeper:
    """Keeps a probe's per-tensor fingerprints for a step only when they may be needed: when the
    live exchange shows ranks differ (a few steps), or when there is no live exchange."""

    def __init__(self, session, section: dict, slot: int, key: str = "detail"):
        self.session, self.section, self.slot, self.key = session, section, slot, key
        self.pending = None
        section.setdefault(key, [])

    def hold(self, step: int, names: list[str], crcs: list[int]) -> None:
        self.pending = {"step": step, "names": names, "crcs": crcs}
        live = self.session.group is not None and self.session.exchange_ok and self.session.world_size > 1
        if not live and len(self.section[self.key]) < MAX_DETAIL_OFFLINE:
            self.section[self.key].append(self.pending)
            self.pending = None

    def exchanged(self, step: int, rows: list[list[int]]) -> bool:
        """Store the held detail if ranks differ in this slot; True if they differ."""
        values = {row[self.slot] for row in rows}
        differ = len(values) > 1
        if differ and self.pending is not None and self.pending["step"] == step \
                and len(self.section[self.key]) < MAX_DETAIL:
            self.section[self.key].append(self.pending)
        self.pending = None
        return differ
