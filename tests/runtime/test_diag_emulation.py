"""GPU scripts on a CPU-only machine: the emulation gives the same weights as the CPU twin, the
tutorial-style script gets exactly what is true of it, and unsupported CUDA calls stop clearly."""

from __future__ import annotations

import pytest
import torch

from diag_jobs import assert_no_survivors, codes, ddpcheck_run, finding, fixture

pytestmark = pytest.mark.slow


def test_gpu_script_on_cpu_ends_bitwise_equal_to_its_cpu_twin(tmp_path):
    gpu_out, cpu_out = tmp_path / "gpu.pt", tmp_path / "cpu.pt"
    gpu, gpu_report, mark = ddpcheck_run(["--nproc", "2", "--cpu", str(fixture("gpu_seeded.py", tmp_path)),
                                          str(gpu_out)], tmp_path)
    assert gpu.returncode == 0, gpu.stdout + gpu.stderr
    cpu, cpu_report, _ = ddpcheck_run(["--nproc", "2", str(fixture("cpu_seeded.py", tmp_path)), str(cpu_out)],
                                      tmp_path)
    assert cpu.returncode == 0, cpu.stdout + cpu.stderr
    a, b = torch.load(gpu_out), torch.load(cpu_out)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    # Said so for the GPU script; not for the CPU one, which asked nothing of the emulation.
    emulated = finding(gpu_report, "DDP122")
    assert "nccl" in emulated["message"] and "torch.cuda.set_device" in emulated["message"]
    assert "DDP122" not in codes(cpu_report)
    assert_no_survivors(mark)


def test_tutorial_gpu_script_runs_on_four_cpu_ranks_with_its_true_findings(tmp_path):
    proc, data, mark = ddpcheck_run(["--nproc", "4", str(fixture("ddp_tutorial_gpu.py", tmp_path))], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # checks failed; the script itself ran fine
    assert data["run"]["job"]["world_size"] == 4
    # The hard-coded tcp:// init_method (rewritten, so no hang), set_epoch never called, and the
    # emulation said out loud; nothing else.
    assert sorted(codes(data)) == ["DDP103", "DDP113", "DDP122"], codes(data)
    assert "no CUDA device here" in proc.stderr
    assert_no_survivors(mark)


def test_unsupported_cuda_call_is_named_with_its_line(tmp_path):
    script = fixture("cuda_graph.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "1", "--cpu", str(script)], tmp_path)
    assert proc.returncode == 1
    refused = finding(data, "DDP121")
    line = next(i for i, t in enumerate(script.read_text().splitlines(), 1) if "torch.cuda.CUDAGraph()" in t)
    assert refused["path"] == str(script) and refused["location"]["line"] == line
    assert "torch.cuda.CUDAGraph" in refused["message"] and "not emulated" in refused["message"]
    assert "DDP120" not in codes(data)  # one finding for it, not a generic crash as well
    assert "Traceback" not in proc.stdout
    assert_no_survivors(mark)
