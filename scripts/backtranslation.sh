#!/usr/bin/env bash
# Back-translation on Multi30k de->en (docs/backtranslation.md): the first half of the training
# pairs is the parallel data, the second half's English the monolingual text.
#
#   1. train en->de (the reverse model) on the first half
#   2. back-translate the second half's English into German with it (beam search, or
#      sampling with SAMPLING=1): synthetic pairs, their German machine-made
#   3. train de->en on the first half alone; with the synthetic pairs mixed in by weight,
#      untagged and tagged (`tagged: true`); and on all the pairs, real English and German
#   4. translate test2016 with each and print its BLEU
#
#   bash scripts/backtranslation.sh                                  # the table of the docs
#   STEPS=4000 CONFIG=configs/multi30k_de_en.yaml bash scripts/backtranslation.sh
#
# Settings (environment): CONFIG (configs/multi30k_tiny.yaml), STEPS (updates of each training,
# 2400), CORPUS (the path prefix of the parallel corpus, data/multi30k/train), OUT (its
# folder, runs/backtranslation), BT_WEIGHT (the synthetic pairs' mixing weight against the real
# ones' 1, 1), SAMPLING (1: back-translate by sampling, top-k 10), SET (more config overrides,
# space-separated KEY=VALUE). Runs that finished are kept and skipped when it is run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
CONFIG=${CONFIG:-configs/multi30k_tiny.yaml}
STEPS=${STEPS:-2400}
CORPUS=${CORPUS:-data/multi30k/train}
OUT=${OUT:-runs/backtranslation}
BT_WEIGHT=${BT_WEIGHT:-1}
read -r -a SET <<< "${SET:-}"
D=$OUT/data
mkdir -p "$D"

pairs=$(wc -l < "$CORPUS.en")
half=$((pairs / 2))
for lang in de en; do
  head -n "$half" "$CORPUS.$lang" > "$D/real.$lang"
  cat "$CORPUS.$lang" > "$D/all.$lang"
done
tail -n "+$((half + 1))" "$CORPUS.en" > "$D/mono.en"

run() {  # NAME KEY=VALUE...: train and score one model unless it is done
  local name=$1
  shift
  [ -f "$OUT/$name/results.json" ] && return 0
  echo "$(date +%T) training $name" >&2
  $PY scripts/run_experiment.py --config "$CONFIG" --run-dir "$OUT/$name" \
    --set train.max_minutes=null "train.max_steps=$STEPS" "${SET[@]}" "$@" > "$OUT/$name.log" 2>&1 \
    || { echo "backtranslation: $name failed; see $OUT/$name.log" >&2; return 1; }
}

run reverse_en_de data.src_lang=en data.tgt_lang=de "data.train=$D/real"
if [ ! -f "$D/synthetic.de" ]; then
  echo "$(date +%T) back-translating $(wc -l < "$D/mono.en") sentences" >&2
  search=()
  if [ "${SAMPLING:-0}" = 1 ]; then search=(--sampling --top-k 10); fi
  $PY -m transformer_mt translate --checkpoint "$OUT/reverse_en_de/checkpoints/best.pt" \
    --input "$D/mono.en" --output "$D/synthetic.de" --quiet "${search[@]}"
fi
cp "$D/mono.en" "$D/synthetic.en"  # a text corpus is a pair of files: {prefix}.{de,en}

run half "data.train=$D/real"
run half_bt "data.train=[{path: $D/real}, {path: $D/synthetic, weight: $BT_WEIGHT}]"
run half_tagged_bt \
  "data.train=[{path: $D/real}, {path: $D/synthetic, weight: $BT_WEIGHT, tagged: true}]"
run all "data.train=$D/all"

$PY - "$OUT" "$half" <<'EOF'
import json, sys
from pathlib import Path

out, half = Path(sys.argv[1]), int(sys.argv[2])
rows = [
    ("reverse_en_de", f"en->de, {half} real pairs (the back-translator)"),
    ("half", f"de->en, {half} real pairs"),
    ("half_bt", f"de->en, {half} real + {half} back-translated"),
    ("half_tagged_bt", f"de->en, {half} real + {half} back-translated, tagged"),
    ("all", f"de->en, {2 * half} real pairs"),
]
print("| training data | test BLEU | chrF |\n|---|---:|---:|")
for name, label in rows:
    r = json.loads((out / name / "results.json").read_text(encoding="utf-8"))
    print(f"| {label} | {r['bleu']:.2f} | {r['chrf']:.2f} |")
EOF
