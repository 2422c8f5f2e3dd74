#!/usr/bin/env bash
# One device call: the campaign's info + burst-daemon (three modes, the preset model with times),
# then the daemon on green context + MPS with the identified H200 model, in what time is left.
set -u
export PYTHONUNBUFFERED=1
END=$((SECONDS + ${DEADLINE:-575}))
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 9
export PYTHONPATH=/tmp/site:$PWD
{ date -u; nvidia-smi; which nvidia-cuda-mps-control;
  python3 -c "import sys,torch,cupy,numpy,scipy,control;print(sys.version);print('torch',torch.__version__,torch.version.cuda);print('cupy',cupy.__version__);print('numpy',numpy.__version__,'control',control.__version__)"; } > "$OUT/env.txt" 2>&1
python3 -m harness.hil.campaign info burst-daemon --deadline ${CDEAD:-520} \
  --out /tmp/r1 --archive "$OUT/h1.tar.gz" --commit ${COMMIT:-unknown} 2>&1 | tee "$OUT/log_call1.txt"
LEFT=$((END - SECONDS - 15))
echo "[call] $LEFT s left for the identified-model run" | tee -a "$OUT/log_call1.txt"
if [ $LEFT -ge 125 ]; then
  mkdir -p /tmp/r2
  echo "python -m harness.hil.daemon_run --out /tmp/r2/daemon_green_identified --modes green-mps --model docs/results/h200/identify_green/model.json --slo-ms 30 --preset h100 --duration 100  # commit ${COMMIT:-unknown}" > /tmp/r2/COMMAND.txt
  timeout -s TERM -k 10 $LEFT python3 -m harness.hil.daemon_run --out /tmp/r2/daemon_green_identified \
    --modes green-mps --model docs/results/h200/identify_green/model.json --slo-ms 30 --preset h100 \
    --duration 100 2>&1 | tee "$OUT/log_call2.txt"
  echo "rc ${PIPESTATUS[0]}" >> /tmp/r2/COMMAND.txt
  python3 -c "from harness.hil.campaign import quit_leftover_mps as q; print('left MPS', q())" 2>&1 | tee -a "$OUT/log_call2.txt"
  tar czf "$OUT/h2.tar.gz" -C /tmp/r2 .
fi
nvidia-smi --query-gpu=name,utilization.gpu,memory.used --format=csv >> "$OUT/env.txt" 2>&1
