#!/usr/bin/env bash
# The prepared GPU check: CUDA tests and GPU benchmark figures in one run of a few minutes.
#
#   bash scripts/gpu_check.sh --fetch-wheels   # beforehand, where a package registry is reached
#   OUT=DIR bash scripts/gpu_check.sh          # on the GPU machine, from the repository root
#
# The GPU machine reaches no registry, so it runs a python whose torch already sees CUDA, this
# checkout on PYTHONPATH, and the packages its image lacks from carried wheels (docs/benchmarks.md,
# "GPU", says what to carry). Every step runs even after a failure; failures are listed at the
# end and make the exit status 1. $OUT gets 8 files (the tool brings back at most 8).
set -u
WHEELS=build/gpu_wheels
if [[ ${1:-} == --fetch-wheels ]]; then  # pure Python; multiprocess has one wheel per version
  py=.venv/bin/python && [[ -x $py ]] || py=python3
  for version in 3.12 3.13; do  # the GPU image's python was 3.12 when last seen
    "$py" -m pip download --no-deps --only-binary=:all: --python-version "$version" \
      --platform manylinux2014_x86_64 -d "$WHEELS" \
      datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 sentencex==1.0.32 || exit 1
  done
  exit 0
fi
: "${OUT:?set OUT to the folder whose files come back}"
mkdir -p "$OUT"
ENV=$OUT/env.txt  # what was found and installed, and every setup error
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1  # no network: fail fast
failed=()
fail() { failed+=("$1"); echo "FAILED: $1" | tee -a "$ENV" >&2; }

# (i) Prefer a torch that already sees CUDA; install one only when there is none.
PY=
for candidate in .venv/bin/python python3 python; do
  if "$candidate" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>>"$ENV"; then
    PY=$(command -v "$candidate") && break
  fi
done
if [[ -z $PY ]]; then
  fail "no python whose torch sees CUDA: installing into .venv (needs a registry)"
  [[ -x .venv/bin/python ]] || python3 -m venv .venv >>"$ENV" 2>&1
  { .venv/bin/python scripts/install_torch.py && .venv/bin/python -m pip install --retries 1 \
    --timeout 15 -e '.[dev]'; } >>"$ENV" 2>&1 || fail "install_torch.py / pip install -e .[dev]"
  PY=.venv/bin/python
fi
# The checkout, uninstalled: an editable install would need setuptools from a registry.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
NEEDED="import datasets, sentencepiece, sacrebleu, yaml, tqdm, sentencex, pytest, transformers"
if ! "$PY" -c "$NEEDED" 2>>"$ENV"; then
  if compgen -G "$WHEELS/*.whl" >/dev/null; then
    for wheel in "$WHEELS"/*.whl; do  # one by one: pip refuses another Python's wheel
      "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/tmt_site \
        "$wheel" >>"$ENV" 2>&1
    done
    export PYTHONPATH="$PYTHONPATH:/tmp/tmt_site"
  else
    "$PY" -m pip install -q --retries 1 --timeout 15 -e '.[dev]' >>"$ENV" 2>&1
  fi
  "$PY" -c "$NEEDED" 2>>"$ENV" || fail "python packages missing ($NEEDED)"
fi
"$PY" - >>"$ENV" 2>&1 <<'REPORT' || fail "environment report"
import importlib, os, sys, torch
print("python", sys.executable, sys.version.split()[0], "PYTHONPATH", os.environ["PYTHONPATH"])
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())
print("gpu", torch.cuda.is_available() and torch.cuda.get_device_name())
for name in ("triton", "transformers", "datasets", "pyarrow", "numpy", "sentencepiece"):
    try:  # a missing one is recorded here; a step that needs it fails on its own
        print(name, importlib.import_module(name).__version__)
    except Exception as error:
        print(name, "MISSING", repr(error))
REPORT
echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)" >>"$ENV"

# (ii) The card, driver and clocks the figures below belong to.
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || fail "nvidia-smi"

# (iii) The CUDA tests; TMT_GPU_TEST_DEVICE=cuda turns a missing CUDA into failures, not skips.
TMT_GPU_TEST_DEVICE=cuda timeout -k 10 240 "$PY" -m pytest -m gpu tests/gpu -q \
  -p no:cacheprovider >"$OUT/tests.txt" 2>&1 || fail "pytest -m gpu tests/gpu (tests.txt)"

# (iv) Benchmarks: JSON lines on stdout; progress rows (kept if a timeout cuts a run short),
# errors and the table on stderr, in the .log beside them.
# MFU against the card's dense bf16 peak from its datasheet (H100/H200 SXM: 989 TFLOP/s).
case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)" in
  *H100*|*H200*) PEAK=(--peak-gflops 989000) ;;
  *) PEAK=() ;;  # another card: MFU left out rather than guessed
esac
# Translation first: of the benchmarks, the one a 15-minute lease must not lose.
[[ -f data/multi30k/test2016.de ]] || fail "data/multi30k not carried: translate cannot run"
timeout -k 10 120 "$PY" scripts/benchmark.py translate --device cuda --beams 5 1 \
  --batch-sizes 32 64 --fixed-length 20 --repeats 2 >"$OUT/bench_translate.jsonl" \
  2>"$OUT/bench_translate.log" || fail "benchmark translate (bench_translate.log)"
timeout -k 10 150 "$PY" scripts/benchmark.py train --sizes quickstart base --precision bf16 \
  --device cuda --steps 20 --warmup 5 "${PEAK[@]}" >"$OUT/bench_train.jsonl" \
  2>"$OUT/bench_train.log" || fail "benchmark train (bench_train.log)"
# train.compile: slower than eager on the development CPU (docs/benchmarks.md); measured here
# only on request, as it does not fit a 15-minute lease beside the rest.
if [[ ${GPU_CHECK_COMPILE:-0} == 1 ]]; then
  timeout -k 10 150 "$PY" scripts/benchmark.py train --sizes base --systems ours --compile \
    --precision bf16 --device cuda --steps 20 --warmup 5 "${PEAK[@]}" \
    >>"$OUT/bench_train.jsonl" 2>>"$OUT/bench_train.log" \
    || fail "benchmark train --compile (bench_train.log)"
fi
# The WMT14 base recipe's first 100 updates, streamed from a 100k-pair stand-in (docs/data.md);
# warm-up shortened to fit in them (max_steps must exceed it), which speed does not notice.
{ "$PY" scripts/get_data.py wmt14_standin --pairs 100000 --out /tmp/standin \
  && timeout -k 10 180 "$PY" -m transformer_mt train \
    --config configs/transformer_base_wmt14_en_de.yaml --run-dir /tmp/wmt14_run --set \
    data.train=/tmp/standin/train data.valid=/tmp/standin/valid data.test=/tmp/standin/test \
    tokenizer.vocab_size=8000 tokenizer.input_sentence_size=100000 train.max_steps=100 \
    train.warmup_steps=50 \
    train.valid_every=100 train.valid_max_sentences=100 train.log_every=20 \
    train.precision=bf16 train.device=cuda; } >"$OUT/wmt14_standin.log" 2>&1 \
  || fail "wmt14 base on the stand-in (wmt14_standin.log)"

# (v) Summary on stdout, whose tail the tool returns: the tables, paragraphs of the logs that
# start with their "system" header line.
grep -E '^(torch|gpu|commit) ' "$ENV"
echo "== tests"; tail -n 12 "$OUT/tests.txt"
grep -E 'step (20|60|100) \|' "$OUT/wmt14_standin.log" | tail -n 3
for log in "$OUT"/bench_*.log; do
  echo "== $log"
  awk 'NF == 0 { keep = 0; next } /^system / { keep = 1 } keep' "$log"
done
echo "== ${#failed[@]} failed step(s)" && printf '  %s\n' "${failed[@]}"
((${#failed[@]} == 0))
