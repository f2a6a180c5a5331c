#!/bin/bash
# `ddpcheck run` on a machine with a real CUDA GPU: NCCL and real kernels instead of the CPU
# emulation every other test uses. Run from the repository root with a CUDA build of torch:
#   OUT=/tmp/gpu_check bash bench/gpu_check.sh        (ONLY=REGEX: only the cases it matches)
# Each case prints one line: exit code, whether CUDA was emulated, and every check that did not skip.
# What the GPU runs are expected to show is in bench/RESULTS.md ("On a real GPU").
set -u
OUT=${OUT:-/tmp/gpu_check}
PY=${PY:-python3}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
work=$(mktemp -d)

nvidia-smi -L 2>/dev/null || echo "nvidia-smi: none"
$PY - <<'EOF'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
      "devices", torch.cuda.device_count(),
      "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)
EOF

summary() {  # summary NAME RC: one line from the JSON report
    $PY - "$OUT/$1.json" "$1" "$2" <<'EOF'
import json, sys
path, name, rc = sys.argv[1:]
try:
    report = json.load(open(path))
except (OSError, ValueError) as exc:
    print(f"{name}: exit {rc}, no report ({exc.__class__.__name__})")
    raise SystemExit
run = report.get("run") or {}
perf = run.get("performance") or {}
checks = " ".join(f"{c['code']}:{c['status']}" for c in run.get("checks", [])
                  if c["status"] != "skip")
found = ",".join(sorted({f["code"] for f in report.get("findings", [])}))
print(f"{name}: exit {rc}; device {perf.get('device')} emulated={perf.get('emulated')}; "
      f"findings [{found}]; checks {checks}")
EOF
}

case_() {  # case_ NAME SECONDS ddpcheck-run-arguments...
    local name=$1 limit=$2; shift 2
    [[ -n "${ONLY:-}" && ! "$name" =~ $ONLY ]] && return
    (cd "$work" && timeout "$limit" $PY -m ddpcheck run --report "$OUT/$name.json" --output-format json \
        "$@" >"$OUT/$name.out" 2>"$OUT/$name.err")
    local rc=$?
    summary "$name" "$rc"
    tail -n 3 "$OUT/$name.err" | sed "s/^/    $name| /"
}

F=$PWD/fixtures/run
case_ tutorial-nccl-1rank      120 --nproc 1 "$F/ddp_tutorial_gpu.py"
case_ trainer-nccl-1rank       120 --nproc 1 "$F/gpu_trainer.py" --epochs 2
case_ trainer-spawn            120 --spawn "$F/gpu_trainer_spawn.py" --epochs 2
case_ gpt-bf16-accum-1rank     120 --nproc 1 "$F/gpt_amp.py" --dtype bfloat16 --accum 2 --iters 6
case_ gpt-fp16-scaler-1rank    120 --nproc 1 "$F/gpt_amp.py" --dtype float16 --iters 6
case_ cuda-graph-1rank         120 --nproc 1 "$F/cuda_graph.py"
case_ seeded-1rank             120 --nproc 1 "$F/gpu_seeded.py" "$work/seeded.pt"
# Two ranks on one GPU: NCCL refuses to put two ranks of one communicator on one device.
case_ tutorial-nccl-2rank-1gpu 120 --nproc 2 "$F/ddp_tutorial_gpu.py"
# The same scripts with CUDA emulated, as on a CPU-only machine: the verdicts should agree.
case_ tutorial-cpu-2rank       120 --cpu --nproc 2 "$F/ddp_tutorial_gpu.py"
case_ trainer-cpu-2rank        120 --cpu --nproc 2 "$F/gpu_trainer.py" --epochs 2
rm -rf "$work"
