"""Quick tests of the run's diagnostics that need no job: hang verdicts, spawn detection, crash
classification, and the CUDA emulation in one plain process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from diag_jobs import ROOT, cli_env

from ddpcheck.run.checks import crash
from ddpcheck.run.launcher.plan import find_spawn, scan_spawn
from ddpcheck.run.rank.watchdog import compose
from ddpcheck.run.verdict import Context


def _state(rank, op=None, seq=0, site=None, last=None):
    calls = [c for c in (last, None if op is None else [seq, op, "float32[4]", site, 0, "world"]) if c]
    current = seq if op is not None else None
    entered = max([c[0] for c in calls] or [0])
    return {"rank": rank, "logs": {"world": {"entered": entered, "recent": calls, "current": current}},
            "frames": ["/x/t.py:40 in main"] if op is None else [], "stack": ""}


def test_verdict_names_the_odd_rank_and_both_call_sites():
    states = {0: _state(0, "barrier", 7, "/x/train.py:42")}
    states.update({r: _state(r, "all_reduce", 7, "/x/train.py:57") for r in (1, 2, 3)})
    verdict = compose(states, 4, 5.0)
    assert verdict["code"] == "DDP128"
    assert verdict["message"].startswith("call #7: rank 0 barrier float32[4] at train.py:42 (before the first "
                                         "optimizer step), ranks 1–3 all_reduce float32[4] at train.py:57")
    assert verdict["ranks"] == [0]
    assert verdict["site"] == "/x/train.py:42"


def test_verdict_says_which_rank_did_not_answer_and_who_is_not_in_a_collective():
    last = [3, "all_reduce", "float32[4]", "/x/t.py:9", 0, "world"]
    states = {0: _state(0, "all_reduce", 4, "/x/t.py:9", last=last), 1: _state(1, last=last)}
    verdict = compose(states, 3, 5.0)
    assert verdict["code"] == "DDP123"  # rank 1 is outside any collective: where each rank is
    message = verdict["message"]
    assert "rank 0 is in all_reduce float32[4] at t.py:9 (before the first optimizer step) (call #4)" in message
    assert ("rank 1 is not in a collective: idle at t.py:40 in main; its last collective was call #3, "
            "all_reduce float32[4] at t.py:9") in message
    assert "rank 2 is silent" in message and message.endswith("rank 1 never joined the collective the others wait in")
    assert verdict["ranks"] == [1, 2] and verdict["site"] == "/x/t.py:40"
    states[1] = _state(1, "all_reduce", 4, "/x/t.py:9", last=last)
    message = compose(states, 3, 5.0)["message"]
    assert "ranks 0 and 1 are in all_reduce float32[4] at t.py:9 (before the first optimizer step) (call #4)" in message
    assert "rank 2 is silent" in message


def test_spawn_calls_are_found_under_every_import_spelling(tmp_path):
    cases = {
        "import torch.multiprocessing as mp\nmp.spawn(f, nprocs=2)\n": "mp.spawn",
        "from torch.multiprocessing import spawn\nspawn(f, nprocs=2)\n": "spawn",
        "import torch.multiprocessing\ntorch.multiprocessing.spawn(f)\n": "torch.multiprocessing.spawn",
        "from torch import multiprocessing as tmp\ntmp.start_processes(f)\n": "tmp.start_processes",
    }
    for i, (source, call) in enumerate(cases.items()):
        path = tmp_path / f"s{i}.py"
        path.write_text(source)
        site = find_spawn(path)
        assert site is not None and site.call == call and site.line == 2, source
    plain = tmp_path / "plain.py"
    plain.write_text("import multiprocessing as mp\nmp.Process(target=f).start()\nspawn = 1\n")
    assert find_spawn(plain) is None
    assert find_spawn(ROOT / "fixtures/run/ddp_tutorial_gpu.py") is None


def test_a_script_that_spawns_on_one_branch_and_reads_the_launchers_environment_runs_either_way(tmp_path):
    head = "import os\nimport torch.multiprocessing as mp\n"
    cases = {  # source -> (conditional, reads the launcher's environment)
        # `if args.spawn: mp.spawn(...) else: <a torchrun rank>`
        "if args.spawn:\n    mp.spawn(f, nprocs=2)\nelse:\n    f(int(os.environ['LOCAL_RANK']))\n": (True, True),
        # the spawn in the else branch, the launcher's variables read through .get / getenv / `in`
        "if 'RANK' in os.environ:\n    f(0)\nelse:\n    mp.spawn(f, nprocs=2)\n": (True, True),
        "def launch():\n    mp.spawn(f, nprocs=2)\nif n > 1:\n    launch()\nrank = os.getenv('RANK')\n": (True, True),
        "if n > 1:\n    mp.spawn(f, nprocs=n)\nelse:\n    f(0)\nw = os.environ.get('WORLD_SIZE')\n": (True, True),
        # hifi-gan: a conditional spawn, but nothing read from the launcher: spawn-style as before
        "if n > 1:\n    mp.spawn(f, nprocs=n)\nelse:\n    f(0)\n": (True, False),
        # the __main__ guard is no branch; reading the variables alone is not dual mode either
        "if __name__ == '__main__':\n    mp.spawn(f, nprocs=2)\nr = os.environ['LOCAL_RANK']\n": (False, True),
    }
    for i, (body, (conditional, reads)) in enumerate(cases.items()):
        path = tmp_path / f"d{i}.py"
        path.write_text(head + body)
        found = scan_spawn(path)
        assert found is not None, body
        assert (found.conditional, found.reads_launcher_env) == (conditional, reads), body
        assert found.dual == (conditional and reads)
    dual = scan_spawn(ROOT / "fixtures/run/dual_mode.py")
    assert dual is not None and dual.dual
    spawn_only = scan_spawn(ROOT / "fixtures/run/spawn_tutorial.py")
    assert spawn_only is not None and not spawn_only.dual


def test_a_peer_that_went_away_is_a_consequence_not_the_cause():
    records = [
        {"rank": 0, "probes": {"crash": {"rank": 0, "type": "RuntimeError", "message":
         "[pair.cc:553] Connection closed by peer [127.0.0.1]:1", "path": "/x/t.py", "line": 19,
         "function": "main", "traceback": "", "time": 1.0, "consequence": True}}},
        {"rank": 1, "probes": {"crash": {"rank": 1, "type": "ValueError", "message": "boom",
         "path": "/x/t.py", "line": 17, "function": "main", "traceback": "", "time": 2.0,
         "consequence": False}}},
    ]
    (verdict,) = crash.judge(records, Context(2, exit_codes={0: 1, 1: 1}))
    assert verdict.code == "DDP120" and verdict.ranks == (1,) and verdict.line == 17
    assert "rank 1 raised ValueError: boom at t.py:17" in (verdict.message or "")


# Handlers as training code writes them, each around `_load` (a dataclass where a mapping is
# expected, a missing key): the crash record must name the line to fix, not the handler's raise.
def _load(config, key="lr"):
    return dict(**config)[key]  # the original error


def _passes_message_on(config):
    try:
        _load(config)
    except Exception as e:
        raise ValueError(str(e))  # the handler


def _wraps_from(config):
    try:
        _load(config)
    except Exception as e:
        raise RuntimeError(e) from e  # the handler


def _prefixes_message(config):
    try:
        _load(config)
    except Exception as e:
        raise RuntimeError(f"training failed on rank 0: {e}") from e  # the handler


def _wraps_twice(config):
    try:
        _passes_message_on(config)
    except ValueError as e:
        raise RuntimeError(str(e))  # the handler


def _own_message(config):
    try:
        _load(config, key="optimizer")
    except KeyError as e:
        raise ValueError(f"unknown optimizer {e}; choose one of adam, sgd")  # the handler


def _hidden_context(config):
    try:
        _load(config)
    except Exception as e:
        raise ValueError(str(e)) from None  # the handler


def _logs_and_reraises(config):
    try:
        _load(config)
    except Exception:
        print("failed")
        raise


def _described(handler, config):
    try:
        handler(config)
    except Exception as e:
        record = crash.describe(e, 0)
    assert record is not None
    return record


def _line(function, comment: str) -> int:
    import inspect
    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, t in enumerate(lines) if comment in t)


def test_a_handler_that_only_passes_the_message_on_is_reported_at_the_original_line():
    original = _line(_load, "the original error")
    for handler, as_type in ((_passes_message_on, "ValueError"), (_wraps_from, "RuntimeError"),
                             (_prefixes_message, "RuntimeError"), (_wraps_twice, "RuntimeError")):
        record = _described(handler, object())
        assert (record["type"], record["line"], record["function"]) == ("TypeError", original, "_load"), handler
        assert record["message"].endswith("argument after ** must be a mapping, not object"), handler
        assert record["reraised_as"] == as_type, handler
        assert record["reraised_line"] == _line(handler, "the handler"), handler
        assert record["reraised_function"] == handler.__name__
    # A bare `raise` keeps the original's traceback: it was already right.
    record = _described(_logs_and_reraises, object())
    assert (record["type"], record["line"], record["reraised_as"]) == ("TypeError", original, None)


def test_a_handler_with_its_own_message_or_that_hid_the_original_is_reported_at_its_raise():
    for handler in (_own_message, _hidden_context):
        record = _described(handler, {"lr": 0.1} if handler is _own_message else object())
        assert (record["type"], record["line"], record["reraised_as"]) == \
            ("ValueError", _line(handler, "the handler"), None), handler


def test_the_verdict_names_the_original_and_where_it_was_re_raised():
    record = _described(_passes_message_on, object())
    (verdict,) = crash.judge([{"rank": 0, "probes": {"crash": record}}], Context(1, exit_codes={0: 1}))
    assert verdict.code == "DDP120" and verdict.line == _line(_load, "the original error")
    message = verdict.message or ""
    assert message.startswith("rank 0 raised TypeError: ")
    assert message.endswith(f"(in _load), re-raised as ValueError at test_diagnostics_units.py:"
                            f"{_line(_passes_message_on, 'the handler')} (in _passes_message_on)")
    assert verdict.details["reraised"]["exception"] == "ValueError"


def test_emulation_runs_cuda_calls_on_the_cpu_and_refuses_what_it_cannot_fake(tmp_path):
    script = textwrap.dedent("""
        import threading
        from ddpcheck.run.rank import emulate
        emulate.install()
        import torch
        assert torch.cuda.is_available() and torch.cuda.device_count() == 3
        assert torch.accelerator.is_available() and torch.accelerator.device_count() == 3
        assert str(torch.accelerator.current_accelerator()) == "cuda"
        torch.cuda.set_device(2); torch.cuda.synchronize(); torch.cuda.manual_seed(0)
        x = torch.ones(2, device=1).cuda().to("cuda:0", non_blocking=True).pin_memory()
        m = torch.nn.Linear(2, 2).cuda(2).to(torch.device("cuda", 1)).to(0)
        d = torch.device(1)
        print("devices", x.device, m.weight.device, torch.cuda.current_device(), d, isinstance(d, torch.device))
        props = torch.cuda.get_device_properties(0)
        print("props", props.major, props.minor, props.total_memory // 2**30, props.multi_processor_count,
              torch.cuda.get_device_capability(), torch.cuda.is_bf16_supported(), torch.cuda.max_memory_allocated())
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = m(torch.randn(3, 2, device="cuda"))
        with torch.cuda.amp.autocast():
            z = m(torch.randn(3, 2, device="cuda"))
        print("autocast", y.dtype, z.dtype)
        scaler = torch.amp.GradScaler("cuda")
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        scaler.scale(z.float().sum()).backward(); scaler.step(opt); scaler.update()
        print("scale", scaler.get_scale())
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(); end.record(); torch.cuda.synchronize()
        with torch.cuda.stream(torch.cuda.Stream()):
            torch.cuda.current_stream().wait_stream(torch.cuda.default_stream())
        print("timed", start.elapsed_time(end) >= 0)
        seen = []
        thread = threading.Thread(target=lambda: seen.append(torch.zeros(1).cuda(1).device))
        thread.start(); thread.join()
        print("thread", seen)
        for stmt in ["torch.cuda.CUDAGraph()", "torch.cuda.graph(None)", "torch.cuda.make_graphed_callables(m, ())"]:
            try:
                eval(stmt)
                print("NOT REFUSED", stmt)
            except emulate.CudaNotEmulated as exc:
                print("refused", exc)
        # Leave without the interpreter's teardown: on a loaded machine torch's native teardown
        # in a process where a second Python thread used torch sometimes aborts ("terminate
        # called without an active exception", exit -6; 10 of 24 runs at 3 in parallel, none with
        # this exit). What this test checks is printed above.
        import os, sys
        sys.stdout.flush()
        os._exit(0)
    """)
    path = tmp_path / "gpu_bits.py"
    path.write_text(script)
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120,
                         env=cli_env(DDPCHECK_EMULATED_DEVICES="3"), cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "devices cpu cpu 2 cuda:1 True" in out.stdout
    assert "props 8 0 16 108 (8, 0) True 0" in out.stdout
    assert "autocast torch.bfloat16 torch.float16" in out.stdout  # CUDA autocast's own default: float16
    assert "scale 32768.0" in out.stdout and "timed True" in out.stdout
    assert "thread [device(type='cpu')]" in out.stdout
    assert "NOT REFUSED" not in out.stdout
    refused = [line for line in out.stdout.splitlines() if line.startswith("refused")]
    assert len(refused) == 3
    # Each refusal names the call and the user's own line (the eval in the loop).
    line = next(i for i, text in enumerate(script.splitlines(), 1) if "eval(stmt)" in text)
    assert all(f" at {path}:{line} is not emulated on CPU" in text for text in refused), refused
    assert any("torch.cuda.CUDAGraph" in line for line in refused)


def test_a_cpu_only_script_never_pays_for_the_emulation_mode_and_the_first_cuda_use_turns_it_on(tmp_path):
    # The device-rewriting TorchFunctionMode costs every torch call some Python: it must stay off
    # while the script only uses the CPU, and come on at the first CUDA use, whichever it is.
    # One interpreter imports torch and runs the CPU-only part; each first CUDA use then runs in a
    # fork of it, which starts from exactly that state (a fresh interpreter per case would import
    # torch four times).
    script = textwrap.dedent("""
        import os
        import sys
        from ddpcheck.run.rank import emulate
        emulate.install()
        import torch
        from torch import nn
        depth = torch._C._len_torch_function_stack
        model = nn.Linear(4, 2)
        loss = model(torch.randn(3, 4).to("cpu")).sum()
        loss.backward()
        torch.optim.SGD(model.parameters(), lr=0.1).step()
        torch.utils.data.DataLoader(list(range(4)), pin_memory=True)
        print("cpu only", depth(), sorted(emulate.USED), flush=True)
        for first in sys.argv[1:]:
            pid = os.fork()
            if pid:
                print("exit", first, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
                continue
            if first == "factory":
                made = torch.zeros(2, device="cuda:1").device
            elif first == "tensor":
                made = torch.ones(2).cuda().device
            elif first == "context":
                with torch.device("cuda"):
                    made = nn.Linear(2, 2).weight.device
            else:
                torch.cuda.set_device(0)
                made = torch.hann_window(4, device="cuda").device  # no patch of its own: the mode's work
            print("after", first, made, depth(), flush=True)
            os._exit(0)
    """)
    path = tmp_path / "cpu_then_gpu.py"
    path.write_text(script)
    cases = ("factory", "tensor", "context", "query")
    # One thread for torch's CPU kernels, as torchrun gives each rank: a fork then inherits no pool.
    out = subprocess.run([sys.executable, str(path), *cases], capture_output=True, text=True, timeout=120,
                         env=cli_env(DDPCHECK_EMULATED_DEVICES="2", OMP_NUM_THREADS="1"), cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("cpu only 0 ['pin_memory']") == 1, out.stdout
    for first in cases:
        assert f"after {first} cpu 1" in out.stdout and f"exit {first} 0" in out.stdout, out.stdout + out.stderr


def test_a_rank_killed_by_a_signal_is_named_but_the_launchers_own_sigterm_is_not():
    (killed,) = crash.judge([], Context(2, exit_codes={0: -15, 1: -9}))
    assert killed.code == "DDP127" and killed.ranks == (1,)
    assert "SIGKILL" in (killed.message or "") and "out of memory" in (killed.message or "")


def test_a_rank_stopped_before_it_reached_the_spawn_does_not_keep_a_dual_mode_script_on_torchrun():
    # The first rank to leave for its spawn branch ends the torchrun job; a rank stopped on the way
    # there writes its record without `spawn_called`, and the script still runs plainly after.
    from ddpcheck.run.launcher.plan import Plan, spawn_requested
    from ddpcheck.run.verdict import SpawnSite

    site = SpawnSite("train.py", 49, "mp.spawn")
    plan = Plan(None, True, False, fallback=site)
    left = {"rank": 1, "spawn_called": "train.py:49"}
    stopped = {"rank": 0, "stopped": {"signal": "SIGTERM", "at": 0.0, "by": "handler"}}
    switch = spawn_requested(plan, [stopped, left])
    assert switch is not None and switch.switched and switch.line == 49
    assert spawn_requested(plan, [stopped]) is None  # nobody reached the spawn
    assert spawn_requested(plan, [{"rank": 0}, left]) is None  # rank 0 went on as a torchrun rank
