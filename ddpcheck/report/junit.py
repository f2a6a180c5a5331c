"""JUnit XML for CI test reports (GitLab, Jenkins, test-reporter actions).

One <testsuite> per file; in it one <testcase> per code reported there (classname = the path,
name = the code and rule name, so a test keeps its name when lines move), holding one <failure>
per finding. A file linted without findings gets one passing testcase, so the report also shows
what was checked. A file that could not be checked (DDP902, DDP903) gets a testcase holding an
<error> instead, never a passing one; an error of the run that names no file goes in the suite
named after the run. Runtime findings, which have no file, go in that suite too.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence

from ddpcheck.findings import Finding, ToolError

ALL_PASSED = "all checks"


def _failure_text(f: Finding) -> str:
    lines = [f"{f.location}: {f.code} {f.message}"]
    if f.ranks:
        lines.append(f"ranks: {', '.join(map(str, f.ranks))}")
    if f.hint:
        lines.append(f"help: {f.hint}")
    return "\n".join(lines)


def _failure_message(f: Finding) -> str:
    where = f"{f.line}:{f.column or 1}: " if f.line is not None else ""
    return f"{where}{f.message}"


def document(findings: list[Finding], sources: dict[str, str], tool: str,
             errors: Sequence[ToolError] = ()) -> ET.Element:
    run_suite = "ddpcheck run" if tool == "run" else "ddpcheck"
    by_file: dict[str, dict[str, list[Finding]]] = {path: {} for path in sources}
    for f in findings:
        by_file.setdefault(f.path or run_suite, {}).setdefault(f.code, []).append(f)
    errors_at: dict[str, list[ToolError]] = {}
    for e in errors:
        errors_at.setdefault(e.path or run_suite, []).append(e)
        by_file.setdefault(e.path or run_suite, {})

    root = ET.Element("testsuites", name=f"ddpcheck {tool}")
    total_tests = total_failures = total_errors = 0
    for path in sorted(by_file):
        codes = by_file[path]
        suite = ET.SubElement(root, "testsuite", name=path)
        failed = errors_at.get(path, [])
        for e in failed:
            case = ET.SubElement(suite, "testcase", name=_error_name(e), classname=path)
            if e.path:
                case.set("file", e.path)
            error = ET.SubElement(case, "error", message=e.message, type=e.code or "error")
            error.text = e.line
        if not codes and not failed:
            ET.SubElement(suite, "testcase", name=ALL_PASSED, classname=path, file=path)
            tests, failures = 1, 0
        else:
            tests = failures = len(codes)
            for code in sorted(codes):
                group = codes[code]
                case = ET.SubElement(suite, "testcase", name=f"{code} {group[0].name}", classname=path)
                if group[0].path:
                    case.set("file", group[0].path)
                    if group[0].line is not None:
                        case.set("line", str(group[0].line))
                for f in group:
                    failure = ET.SubElement(case, "failure", message=_failure_message(f), type=f.code)
                    failure.text = _failure_text(f)
        tests += len(failed)
        suite.set("tests", str(tests))
        suite.set("failures", str(failures))
        suite.set("errors", str(len(failed)))
        suite.set("skipped", "0")
        total_tests += tests
        total_failures += failures
        total_errors += len(failed)
    if not by_file:
        # Nothing was linted (or everything was excluded): one passing case keeps the report valid.
        suite = ET.SubElement(root, "testsuite", name=run_suite, tests="1", failures="0", errors="0", skipped="0")
        ET.SubElement(suite, "testcase", name=ALL_PASSED, classname=run_suite)
        total_tests = 1
    root.set("tests", str(total_tests))
    root.set("failures", str(total_failures))
    root.set("errors", str(total_errors))
    return root


def _error_name(e: ToolError) -> str:
    if e.code is None:
        return "error"
    from ddpcheck.tool_codes import InternalError, UnreadableFile

    names = {c.code: c.name for c in (UnreadableFile, InternalError)}
    return f"{e.code} {names.get(e.code, 'error')}"


def render(findings: list[Finding], *, sources: dict[str, str], color: bool, tool: str,
           errors: Sequence[ToolError] = ()) -> str:
    root = document(findings, sources, tool, errors)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
