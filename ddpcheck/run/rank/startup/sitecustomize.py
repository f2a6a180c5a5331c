"""ddpcheck's start-up hook: on PYTHONPATH only in processes that ddpcheck starts plainly (scripts
that spawn their own workers), and inert unless DDPCHECK_STARTUP=1. It imports nothing heavy: the
instrumentation is installed when the process first imports torch. Any other sitecustomize on the
path still runs."""

import os
import sys


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    import importlib.machinery
    import importlib.util

    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


if os.environ.get("DDPCHECK_STARTUP") == "1":
    try:
        from ddpcheck.run.rank import spawn_startup

        spawn_startup.arm()
    except Exception as exc:  # noqa: BLE001 - never stop the user's interpreter from starting
        print(f"ddpcheck: start-up hook not installed: {exc}", file=sys.stderr)
_chain()
