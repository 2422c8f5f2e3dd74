#!/usr/bin/env bash
# One device call: at a tighter SLO, the daemon with sleep only (the preset model) and on
# green context + MPS (the identified H200 model), one after the other.
set -u
export PYTHONUNBUFFERED=1
END=$((SECONDS + ${DEADLINE:-300}))
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 9
export PYTHONPATH=/tmp/site:$PWD
SLO=${SLO:-22}
mkdir -p /tmp/r3
for spec in "sleep auto" "green-mps docs/results/h200/identify_green/model.json"; do
  set -- $spec; mode=$1; model=$2
  LEFT=$((END - SECONDS - 10))
  [ $LEFT -ge 115 ] || { echo "[call] $mode skipped, $LEFT s left" | tee -a "$OUT/log.txt"; continue; }
  echo "python -m harness.hil.daemon_run --out /tmp/r3/daemon_slo${SLO}_$mode --modes $mode --model $model --slo-ms $SLO --preset h100 --duration 100  # commit ${COMMIT:-unknown}" >> /tmp/r3/COMMAND.txt
  timeout -s TERM -k 10 $LEFT python3 -m harness.hil.daemon_run --out /tmp/r3/daemon_slo${SLO}_$mode \
    --modes $mode --model $model --slo-ms $SLO --preset h100 --duration 100 2>&1 | tee -a "$OUT/log.txt"
  echo "rc ${PIPESTATUS[0]} ($mode, $((SECONDS)) s)" >> /tmp/r3/COMMAND.txt
  python3 -c "from harness.hil.campaign import quit_leftover_mps as q; print('left MPS', q())" 2>&1 | tee -a "$OUT/log.txt"
  tar czf "$OUT/h3.tar.gz" -C /tmp/r3 .
done
