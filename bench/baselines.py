"""The baselines a libcst linter is measured against, one per process: `python bench/baselines.py MODE FILE...`.

Modes:
  noop          start Python and import libcst, nothing else (the fixed cost every row includes)
  ast           `ast.parse` + `ast.walk` (CPython's C parser: what parsing costs at all)
  parse         `libcst.parse_module` (the floor for any libcst linter)
  parse_visit   parse + one plain `CSTVisitor` traversal of every node
  parse_codegen parse + `module.code` (a full code generation, what a position pass is built on)
  parse_positions parse + `PositionProvider` for every node (what libcst's metadata costs)
"""

from __future__ import annotations

import ast
import sys


def main(mode: str, paths: list[str]) -> None:
    import libcst as cst

    sources = [open(p, encoding="utf-8").read() for p in paths]
    if mode == "noop":
        return
    if mode == "ast":
        for s in sources:
            for _ in ast.walk(ast.parse(s)):
                pass
        return
    if mode == "parse":
        for s in sources:
            cst.parse_module(s)
        return
    if mode == "parse_visit":
        class Every(cst.CSTVisitor):
            count = 0

            def on_visit(self, node):
                self.count += 1
                return True

        for s in sources:
            cst.parse_module(s).visit(Every())
        return
    if mode == "parse_codegen":
        for s in sources:
            assert cst.parse_module(s).code == s
        return
    if mode == "parse_positions":
        from libcst.metadata import MetadataWrapper, PositionProvider

        for s in sources:
            MetadataWrapper(cst.parse_module(s), unsafe_skip_copy=True).resolve(PositionProvider)
        return
    sys.exit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
