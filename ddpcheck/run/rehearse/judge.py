from typing import Any
def judge(runs: Any, sizes: Any, nproc: int) -> Any:
    return None
