"""What a module exports, read from its text without parsing it: imports, star imports, top-level
functions, classes (with their bases as written) and assigned names.

Resolving a name through another module of the project (a re-export in a package's `__init__`,
`from common import *`, the base class of a project sampler) needs only this, and a regular
expression over the text costs a small fraction of a libcst parse. The full model of a module
(lint/model/build.py) is made only when a question needs its function bodies.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass, field

# Triple-quoted strings are blanked (newlines kept) so docstrings never look like code.
_TRIPLE = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'')
_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(?P<module>\.*[\w.]*)[ \t]+import[ \t]*(?P<names>\([^)]*\)|[^\n;#]*)"
    r"|import[ \t]+(?P<plain>[^\n;#]+))",
    re.MULTILINE,
)
_DEF = re.compile(r"^(?:async[ \t]+)?def[ \t]+(\w+)", re.MULTILINE)
_CLASS = re.compile(r"^class[ \t]+(\w+)[ \t]*(?:\(([^)]*)\))?[ \t]*:", re.MULTILINE)
_ASSIGN = re.compile(r"^(\w+)[ \t]*(?::[^=\n]*)?=(?!=)", re.MULTILINE)


@dataclass
class ModuleIndex:
    """A module's top-level names. `aliases`: local name → the dotted name it was imported as
    (relative imports keep their leading dots); `stars`: modules imported with `*`, in order."""

    aliases: dict[str, str] = field(default_factory=dict)
    stars: tuple[str, ...] = ()
    functions: frozenset[str] = frozenset()
    classes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    assigned: frozenset[str] = frozenset()

    def defines(self, name: str) -> bool:
        return name in self.functions or name in self.classes or name in self.assigned


def join_import(module: str, name: str) -> str:
    """`from module import name` as one dotted origin (`from . import x` → ".x")."""
    if not module:
        return name
    return module + name if module.endswith(".") else f"{module}.{name}"


_COMMENT = re.compile(r"#[^\n]*")


@functools.lru_cache(maxsize=512)  # asked of the same files' and functions' texts by many queries
def code_only(text: str) -> str:
    """The text without docstrings and comments (roughly: triple-quoted strings and `#` to the
    end of the line), for searches that must not match prose."""
    return _COMMENT.sub("", _TRIPLE.sub("", text))


# A bare name: a run of word characters not written after another or after a dot (`name`, not
# `self.name`, `other_name` or `x.name`).
_BARE = re.compile(r"(?<![\w.])\w+")


@functools.lru_cache(maxsize=64)
def bare_names(text: str) -> Counter[str]:
    r"""How often each name is written bare in the code of `text` (comments and docstrings left
    out): `bare_names(source)[name]` counts what `(?<![\w.])name\b` finds, read once per text
    instead of once per name asked about."""
    return Counter(_BARE.findall(code_only(text)))


def read_index(text: str) -> ModuleIndex:
    code = _TRIPLE.sub(lambda m: "\n" * m.group(0).count("\n"), text).replace("\\\n", " ")
    aliases: dict[str, str] = {}
    stars: list[str] = []
    for m in _IMPORT.finditer(code):
        plain = m.group("plain")
        if plain is not None:
            for item in plain.split(","):
                name, _, alias = item.strip().partition(" as ")
                name, alias = name.strip(), alias.strip()
                if not name:
                    continue
                if alias:
                    aliases[alias] = name
                else:
                    root = name.split(".", 1)[0]
                    aliases.setdefault(root, root)
            continue
        module = m.group("module")
        listed = m.group("names").strip()
        if listed.startswith("*"):
            stars.append(module)
            continue
        for item in listed.strip("()").split(","):
            name, _, alias = item.strip().partition(" as ")
            name, alias = name.strip(), alias.strip()
            if name.isidentifier():
                aliases[alias if alias.isidentifier() else name] = join_import(module, name)
    classes = {}
    for m in _CLASS.finditer(code):
        bases = tuple(b.strip() for b in (m.group(2) or "").split(",") if b.strip() and "=" not in b)
        classes[m.group(1)] = bases
    functions = frozenset(_DEF.findall(code))
    assigned = frozenset(_ASSIGN.findall(code)) - {"if", "else", "elif", "while", "for", "with", "try"}
    # A def or class of the module shadows an import of the same name.
    for name in (*functions, *classes):
        aliases.pop(name, None)
    return ModuleIndex(aliases, tuple(stars), functions, classes, assigned)
