"""Write rules/CODE.md for every code from the rule classes (the docstrings are the source).

    python -m ddpcheck.tools.pages          # regenerate rules/
    python -m ddpcheck.tools.pages --check  # exit 1 if rules/ is out of date (tests use this)
"""

from __future__ import annotations

import sys
from pathlib import Path

from ddpcheck.catalog import all_rules, render_page

ROOT = Path(__file__).resolve().parents[2]


def expected_pages() -> dict[str, str]:
    pages = {f"{code}.md": render_page(info) for code, info in all_rules().items()}
    index = ["# ddpcheck rules", "", "| Code | Name | Kind | Severity | Default | Summary |", "|---|---|---|---|---|---|"]
    for code, info in all_rules().items():
        index.append(f"| [{code}]({code}.md) | `{info.name}` | {info.kind} | {info.severity.value} | "
                     f"{'on' if info.default_enabled else 'off'} | {info.summary} |")
    pages["README.md"] = "\n".join(index) + "\n"
    return pages


def main(argv: list[str]) -> int:
    rules_dir = ROOT / "rules"
    pages = expected_pages()
    if "--check" in argv:
        stale = [n for n, text in pages.items()
                 if not (rules_dir / n).is_file() or (rules_dir / n).read_text(encoding="utf-8") != text]
        extra = [p.name for p in rules_dir.glob("*.md") if p.name not in pages]
        for n in stale:
            print(f"rules/{n} is out of date; run `python -m ddpcheck.tools.pages`")
        for n in extra:
            print(f"rules/{n} has no rule behind it; delete it")
        return 1 if stale or extra else 0
    rules_dir.mkdir(exist_ok=True)
    for p in rules_dir.glob("*.md"):
        if p.name not in pages:
            p.unlink()
    for name, text in pages.items():
        (rules_dir / name).write_text(text, encoding="utf-8")
    print(f"wrote {len(pages)} pages to {rules_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
