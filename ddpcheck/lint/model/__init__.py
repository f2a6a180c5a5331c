"""The semantic model of a project that every lint rule queries.

One small module per job:

    api.py        the torch (and MPI, Horovod) API names rules know — the only place they are written
    syntax.py     readers of one libcst expression (dotted names, literals, arguments)
    index.py      a module's exports read from its text (no parse)
    project.py    where the project's modules are; their indexes and models, loaded lazily per run
    syspath.py    folders a project adds to sys.path itself
    imports.py    a module's imports as it reads them
    module.py     a module's model: scopes, bindings, calls with loops/guards/withs, classes, returns
    build.py      the one traversal that fills a module's model (and runs the rules' hooks)
    resolve.py    qualified names across modules (aliases, re-exports, star imports)
    symbols.py    functions and classes as values
    graph.py      the call graph (functions, methods, constructors, __call__, properties)
    values.py     bounded value flow (assignments, arguments, returns, attributes, dicts)
    facts.py      what functions do, through the call graph
    conditions.py rank and "is distributed" tests
    options.py    command-line options and their defaults (argparse)
    paths.py      what runs on every rank; what the linted file reaches in other modules
    semantic.py   Model: the one object rules query (its docstring lists the queries)
"""

from ddpcheck.lint.model.project import Project
from ddpcheck.lint.model.semantic import Model

__all__ = ["Model", "Project"]
