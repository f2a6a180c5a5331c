"""Functions and classes of the project as values the other layers pass around."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ddpcheck.lint.model.module import ClassInfo, ModuleModel, Param, Scope


@dataclass(frozen=True, eq=False)
class Function:
    """A function or method of a project module, by its qualified name in that module."""

    module: ModuleModel
    qualname: str

    @property
    def node(self) -> cst.FunctionDef:
        return self.module.functions[self.qualname]

    @property
    def scope(self) -> Scope:
        return self.module.function_scopes[self.qualname]

    @property
    def name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]

    @property
    def owner(self) -> ClassInfo | None:
        """The class this function is a method of."""
        parent = self.scope.parent
        if parent is not None and parent.kind == "class":
            return self.module.classes.get(parent.qualname)
        return None

    @property
    def is_static(self) -> bool:
        return any(_decorator_name(d) == "staticmethod" for d in self.module.decorators.get(self.qualname, ()))

    def params(self) -> list[Param]:
        found = []
        for values in self.scope.assignments.values():
            for value in values:
                if isinstance(value, Param) and value.function == self.qualname:
                    found.append(value)
        return sorted(found, key=lambda p: (p.index is None, p.index or 0))

    def key(self) -> tuple[str, str]:
        return (self.module.path, self.qualname)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Function) and other.module is self.module and other.qualname == self.qualname

    def __hash__(self) -> int:
        return hash((id(self.module), self.qualname))

    def __repr__(self) -> str:
        return f"<Function {self.module.path}:{self.qualname}>"


def _decorator_name(expr: cst.BaseExpression) -> str | None:
    if isinstance(expr, cst.Call):
        expr = expr.func
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        return expr.attr.value
    return None


def decorator_names(module: ModuleModel, function: str) -> list[str]:
    return [n for n in (_decorator_name(d) for d in module.decorators.get(function, ())) if n]
