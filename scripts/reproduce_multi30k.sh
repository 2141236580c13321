#!/usr/bin/env bash
# Regenerate the README's Multi30k results table: fetch the corpus, train both directions
# (60 minutes each on a CPU, one after the other with all cores, as the en-de row was; JOBS=2
# trains them side by side, one core each, as the de-en row was), translate test2016 with beam
# search, score, print the table.
#
#   bash scripts/reproduce_multi30k.sh                     # corpus from upstream GitHub
#   DATA_FROM=../shared/data/multi30k bash scripts/reproduce_multi30k.sh   # local mirror
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
JOBS=${JOBS:-1}
$PY -m transformer_mt data multi30k ${DATA_FROM:+--from "$DATA_FROM"}
run() {
  local pair=$1 core=$2
  local pin=()
  if [ "$JOBS" -gt 1 ]; then pin=(env OMP_NUM_THREADS=1 taskset -c "$core"); fi
  "${pin[@]}" $PY scripts/run_experiment.py --config "configs/multi30k_$pair.yaml" \
    > "runs/multi30k_$pair.log" 2>&1
}
mkdir -p runs
if [ "$JOBS" -gt 1 ]; then
  run de_en 0 & run en_de 1 & wait
else
  run de_en 0; run en_de 0
fi
$PY scripts/results_table.py runs/multi30k_de_en runs/multi30k_en_de
