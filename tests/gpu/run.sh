#!/usr/bin/env bash
# GPU learning for real, on a machine with NVIDIA GPUs (none in CI): one script, under 8 minutes with set-up.
#   bash tests/gpu/run.sh                 # writes its report to $OUT (default /tmp/mpiray-gpu), prints it
# 1. torch sees CUDA (the GPUs' count and names);
# 2. `mpirun -np 2 start_ray.py` splits the host's GPUs between its two ranks (each Ray node's GPU ids, disjoint),
#    and each GPU actor sees its own device in CUDA_VISIBLE_DEVICES and no other vendor's variable
#    (tests/drivers/gpu_holders.py, the driver of the faked-count tests in tests/gpu_vendors/);
# 3. PPO with N GPU learners over NCCL (N = the GPUs, at most 4), 3 iterations: '[train] learners: N on ...';
# 4. nothing of the runs is left (every PID the ranks logged is gone).
# Set-up: MPIRAYTEST_GPU_PYTHON names a Python that already has Ray 2.52-2.60 with RLlib, a CUDA torch, gymnasium,
# mpi4py and an MPI (a site's module, a container); without it, .venv-gpu is made with pip (needs PyPI: PyPI's
# default torch for Linux is a CUDA build).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/mpiray-gpu}
mkdir -p "$OUT"
report=$OUT/gpu_report.md
started=$SECONDS
python=${MPIRAYTEST_GPU_PYTHON:-}
if [ -z "$python" ]; then
  [ -x .venv-gpu/bin/python ] || python3 -m venv .venv-gpu
  .venv-gpu/bin/python -m pip install -q "ray[default,rllib]>=2.52,<2.61" torch "gymnasium>=1.0" "mpi4py>=4.0" mpich \
    psutil tensorboardX >"$OUT/pip.log" 2>&1 || { tail -20 "$OUT/pip.log"; exit 1; }
  python=.venv-gpu/bin/python
fi
mpirun=$(dirname "$python")/mpirun
[ -x "$mpirun" ] || mpirun=mpirun
export MPIRAY_REGISTRY=$OUT/registry OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "# GPU checks ($(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname))" >"$report"
echo "set-up: $((SECONDS - started)) s; python $python" >>"$report"

cuda='import torch; assert torch.cuda.is_available(), "torch sees no CUDA: a CPU build, or no driver"'
gpus=$("$python" -c "$cuda; print(torch.cuda.device_count())")
"$python" -c "$cuda; print('torch', torch.__version__, [torch.cuda.get_device_name(i) for i in range($gpus)])" >>"$report"
echo "1. torch sees $gpus GPUs" | tee -a "$report"

probe='import json, ray; ray.init(); print("GPUS", json.dumps([{"ip": n["NodeManagerAddress"], "gpus": n["Resources"].get("GPU", 0)} for n in ray.nodes() if n["Alive"]]))'
split=0
timeout 300 "$mpirun" -np 2 "$python" start_ray.py --log-dir "$OUT/logs" --job-id gpu-split -- "$python" -c "$probe" \
  >"$OUT/split.out" 2>&1 || split=$?
grep -h "GPUS" "$OUT/split.out" | tee -a "$report" || true
grep -h "resources given to Ray" "$OUT"/logs/gpu-split/rank-*.log | tee -a "$report" || true
holders=0
timeout 300 "$mpirun" -np 2 "$python" start_ray.py --log-dir "$OUT/logs" --job-id gpu-holders -- \
  "$python" tests/drivers/gpu_holders.py >"$OUT/holders.out" 2>&1 || holders=$?
variables=$("$python" - "$OUT/holders.out" <<'PY'
import json, sys
line = [l for l in open(sys.argv[1]) if l.startswith("GPUS ")][-1]
seen = json.loads(line[5:])["holders"]
own = sorted(s["CUDA_VISIBLE_DEVICES"] for s in seen)
others = [n for s in seen for n in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK") if s.get(n)]
ok = len(set(own)) == len(own) and all("," not in d for d in own) and not others
print(f"{'ok' if ok else 'WRONG'}: each actor's CUDA_VISIBLE_DEVICES {own}; other vendors' variables {others}")
PY
) || variables="no report: $(tail -3 "$OUT/holders.out")"
echo "2. the GPUs split between 2 ranks (above: each node's GPU count and ids); exit code $split; the variables:" \
  "$variables (exit code $holders)" | tee -a "$report"

learners=$((gpus < 4 ? gpus : 4))
t0=$SECONDS
learn=0
timeout 420 "$mpirun" -np 2 "$python" start_ray.py --log-dir "$OUT/logs" --job-id gpu-learn -- \
  "$python" -m train --num-learners "$learners" --num-gpus-per-learner 1 --stop-iters 3 --storage-path "$OUT/results" \
  >"$OUT/learn.out" 2>&1 || learn=$?
grep -h "\[train\] learners:\|iter [0-9]* |\|^error:" "$OUT/learn.out" | tee -a "$report" || true
echo "3. PPO with $learners GPU learners (NCCL): exit code $learn after $((SECONDS - t0)) s" | tee -a "$report"

left=$("$python" - "$OUT/logs" <<'PY'
import json, pathlib, sys, psutil
pids = [p for f in pathlib.Path(sys.argv[1]).glob("*/rank-*.jsonl") for line in open(f)
        for r in [json.loads(line)] if r["event"] in ("node_pids", "processes_stopped") for p in r["fields"]["pids"]]
print(sum(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in set(pids)))
PY
)
echo "4. processes left of the runs: $left" | tee -a "$report"
echo "total: $((SECONDS - started)) s" | tee -a "$report"
[ "$split" = 0 ] && [ "$holders" = 0 ] && [ "${variables%%:*}" = ok ] && [ "$learn" = 0 ] && [ "$left" = 0 ]
