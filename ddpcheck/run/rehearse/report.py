import json
from typing import Any
def present(verdict: Any, runs: Any, launch: Any, argv: Any) -> int:
    for w, rs in runs.items():
        for r in rs:
            print(json.dumps({k: v for k, v in r.to_json().items() if k != "crash"}, default=str)[:2500])
            print(r.output_tail[-1500:])
    return 0
