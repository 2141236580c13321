#!/usr/bin/env bash
# The prepared GPU check: the CUDA tests and every GPU measurement of training on a GPU, in one
# run of at most 555 s (each step has its own timeout): one command within a 10-minute limit,
# and with the machine's start inside a 15-minute lease.
#
#   bash scripts/gpu_check.sh --fetch-wheels   # beforehand, where a package registry is reached
#   OUT=DIR bash scripts/gpu_check.sh          # on the GPU machine, from the repository root
#
# Steps and their timeouts:
#   tests      the CUDA tests: the update without a wait for the device, updates replayed
#              from CUDA graphs against eager ones, a run with train.cuda_graphs           100 s
#   recipe     `make quickstart`'s GPU recipe end to end (scripts/run_experiment.py with
#              configs/multi30k_de_en_gpu.yaml): test2016 BLEU and the minutes it took, and
#              its tokens/s in the first epoch against later ones, the validations' share
#              of the run and the allocator's driver requests (metrics.jsonl); with
#              GPU_CHECK_GRAPHS=1 the recipe trains with train.cuda_graphs instead          230 s
#   shapes     scripts/benchmark.py shapes: an update on a batch shape met for the first
#              time against one met before, unpadded lengths, torch's caching allocator
#              as configured and with expandable segments                                   30 s
#   train      scripts/benchmark.py train, ours (eager and replayed from CUDA graphs) and HF
#              Marian at the quickstart and base sizes, 4k and then 32k tokens an update,
#              every batch shape of an epoch met once before the timed updates           2 x 50 s
#   translate  scripts/benchmark.py translate, ours and HF generate, beam 5 and greedy, 64
#              sentences a batch                                                            40 s
#   ct2        the same, ours and CTranslate2 (below)                                        40 s
# with about 15 s of setup: 555 s at most.
# fairseq is not among the peers: its last release (0.12.2) does not import on Python 3.11 or
# later (its config dataclasses have mutable defaults), and the GPU image's python is 3.12.
# CTranslate2's CUDA build (4.8.5, carried as a wheel) opens libcublas.so.12 when it first
# multiplies; the image has CUDA 13's cuBLAS only, and cuBLAS 12's wheel (581 MB) cannot be
# carried. Where no libcublas.so.12 is found, the ct2 step offers CUDA 13's cuBLAS under that
# name (CTranslate2 looks up eight functions in it: handle, stream, math mode and GEMMs, whose
# signatures CUDA 13 kept) and says so in env.txt; the benchmark's agreement with our
# translations shows whether its products are right. The step runs apart, so that a crash
# there costs no other figure.
# Opt-in, beyond those 555 s: GPU_CHECK_PROFILE=1 (the shapes step's allocator as configured
# again under torch's profiler, into bench_shapes.txt: the heaviest operations of new and of
# repeated shapes, 40 s),
# GPU_CHECK_COMPILE=1 (train.compile at the base size, 150 s),
# GPU_CHECK_WMT14=1 (the WMT14 base recipe's first 100 updates on a stand-in corpus, 180 s).
#
# The GPU machine reaches no registry, so it runs a python whose torch already sees CUDA, this
# checkout on PYTHONPATH, and the packages its image lacks from carried wheels (docs/benchmarks.md,
# "GPU", says what to carry: build/gpu_wheels, data/multi30k, data/cache/bench_translate).
# Without a CUDA device it stops at once. Every step runs even after a failure; failures are
# listed at the end and make the exit status 1. $OUT gets at most 8 files (the tool brings back
# at most 8).
set -u
WHEELS=build/gpu_wheels
if [[ ${1:-} == --fetch-wheels ]]; then  # pure Python; multiprocess has one wheel per version
  py=.venv/bin/python && [[ -x $py ]] || py=python3
  for version in 3.12 3.13; do  # the GPU image's python was 3.12 when last seen
    "$py" -m pip download --no-deps --only-binary=:all: --python-version "$version" \
      --platform manylinux2014_x86_64 -d "$WHEELS" \
      datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 sentencex==1.0.32 || exit 1
  done
  # CTranslate2 (43 MB) for the image's python only: two of them would not fit a call's 64 MiB
  "$py" -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux_2_28_x86_64 -d "$WHEELS" ctranslate2==4.8.5 || exit 1
  exit 0
fi
: "${OUT:?set OUT to the folder whose files come back}"
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no CUDA device here (nvidia-smi finds none); this script measures a GPU" >&2
  exit 2
fi
mkdir -p "$OUT"
ENV=$OUT/env.txt  # what was found and installed, every setup error, and nvidia-smi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1  # no network: fail fast
failed=()
fail() { failed+=("$1"); echo "FAILED: $1" | tee -a "$ENV" >&2; }
timings=()
step() {  # step NAME SECONDS COMMAND...: run under a timeout, note its time and failure
  local name=$1 limit=$2 started=$SECONDS
  shift 2
  timeout -k 10 "$limit" "$@" || fail "$name (exit $?)"
  timings+=("$name $((SECONDS - started)) s")
}

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
if ! "$PY" -c "$NEEDED; import ctranslate2" 2>>"$ENV"; then
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
for name in ("triton", "transformers", "ctranslate2", "datasets", "numpy", "sentencepiece"):
    try:  # a missing one is recorded here; a step that needs it fails on its own
        print(name, importlib.import_module(name).__version__)
    except Exception as error:
        print(name, "MISSING", repr(error))
REPORT
echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)" >>"$ENV"
nvidia-smi >>"$ENV" 2>&1 || fail "nvidia-smi"  # the card, driver and clocks of the figures
[[ -f data/multi30k/test2016.de ]] || fail "data/multi30k not carried: recipe and translate fail"

# (ii) The CUDA tests; TMT_GPU_TEST_DEVICE=cuda turns a missing CUDA into failures, not skips.
TMT_GPU_TEST_DEVICE=cuda step tests 100 "$PY" -m pytest -m gpu tests/gpu \
  tests/training/test_sync_free.py -q -p no:cacheprovider >"$OUT/tests.txt" 2>&1

# (iii) The GPU recipe as `make quickstart` runs it where torch sees CUDA, from a fresh run
# directory: trains (3 minutes, or fewer when validation BLEU stops improving), averages,
# translates test2016 with beam search and prints BLEU. Then what a batch shape met for the
# first time costs an update (the first epoch's every batch, unpadded), and whether the
# allocator's expandable segments take that away.
RECIPE=/tmp/gpu_check_recipe
rm -rf "$RECIPE"
RECIPE_SET=()
[[ ${GPU_CHECK_GRAPHS:-0} == 1 ]] && RECIPE_SET=(--set train.cuda_graphs=true)
step recipe 230 "$PY" scripts/run_experiment.py --config configs/multi30k_de_en_gpu.yaml \
  --run-dir "$RECIPE" "${RECIPE_SET[@]}" >"$OUT/recipe.log" 2>&1
cp "$RECIPE/metrics.jsonl" "$OUT/recipe_metrics.jsonl" 2>/dev/null
step shapes 30 "$PY" scripts/benchmark.py shapes --device cuda --max-tokens 8192 \
  --pad-to-multiple 1 --shapes 12 --allocators default expandable >"$OUT/bench_shapes.txt" 2>&1
if [[ ${GPU_CHECK_PROFILE:-0} == 1 ]]; then
  step "shapes --profile" 40 "$PY" scripts/benchmark.py shapes --device cuda --max-tokens 8192 \
    --pad-to-multiple 1 --shapes 12 --allocators default --profile >>"$OUT/bench_shapes.txt" 2>&1
fi

# (iv) Side by side on this card. MFU against the card's dense bf16 peak from its datasheet
# (H100/H200 SXM: 989 TFLOP/s). JSON lines on stdout, progress rows and the table on stderr,
# both in one file (progress rows are kept when a timeout cuts a run short).
case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)" in
  *H100*|*H200*) PEAK=(--peak-gflops 989000) ;;
  *) PEAK=() ;;  # another card: MFU left out rather than guessed
esac
for tokens in 4096 32768; do
  step "train $tokens" 50 "$PY" scripts/benchmark.py train --sizes quickstart base \
    --systems ours ours-graphs hf --max-tokens "$tokens" --pad-to-multiple 8 --precision bf16 \
    --device cuda --warm-shapes --steps 10 --warmup 1 "${PEAK[@]}" >>"$OUT/bench_train.txt" 2>&1
done
TRANSLATE=(scripts/benchmark.py translate --device cuda --beams 5 1 --batch-sizes 64
  --fixed-length 20 --repeats 2)
step translate 40 "$PY" "${TRANSLATE[@]}" --systems ours hf >"$OUT/bench_translate.txt" 2>&1
if "$PY" -c "import ctranslate2" 2>>"$ENV"; then
  SHIM=/tmp/gpu_check_cublas CUBLAS=
  if ! ldconfig -p | grep -q 'libcublas\.so\.12 '; then  # torch's own cuBLAS, else the system's
    CUBLAS=$("$PY" -c 'import glob, os, torch; root = os.path.dirname(os.path.dirname(
      torch.__file__)); print(max([""] + glob.glob(root + "/nvidia/**/libcublas.so.*",
      recursive=True)))' 2>>"$ENV")
    [[ -n $CUBLAS ]] ||
      CUBLAS=$(ldconfig -p | awk '/libcublas\.so\.[0-9]+ /{print $NF}' | sort | tail -1)
    if [[ -n $CUBLAS ]]; then
      mkdir -p "$SHIM" && ln -sf "$CUBLAS" "$SHIM/libcublas.so.12"
      echo "ctranslate2: no libcublas.so.12; offered $CUBLAS under that name" >>"$ENV"
    fi
  fi
  step ct2 40 env LD_LIBRARY_PATH="$SHIM:${CUBLAS%/*}:${LD_LIBRARY_PATH:-}" "$PY" \
    "${TRANSLATE[@]}" --systems ours ct2 >>"$OUT/bench_translate.txt" 2>&1
else
  fail "ct2: ctranslate2 does not import (build/gpu_wheels carried?)"
fi
if [[ ${GPU_CHECK_COMPILE:-0} == 1 ]]; then  # slower than eager on the development CPU
  step "train --compile" 150 "$PY" scripts/benchmark.py train --sizes base --systems ours \
    --compile --precision bf16 --device cuda --steps 20 --warmup 5 "${PEAK[@]}" \
    >>"$OUT/bench_train.txt" 2>&1
fi
if [[ ${GPU_CHECK_WMT14:-0} == 1 ]]; then  # batch shapes that keep changing, streamed
  step "wmt14 stand-in" 180 bash -c "'$PY' -m transformer_mt data wmt14_standin --pairs 100000 \
    --out /tmp/standin && '$PY' -m transformer_mt train \
    --config configs/transformer_base_wmt14_en_de.yaml --run-dir /tmp/wmt14_run --set \
    data.train=/tmp/standin/train data.valid=/tmp/standin/valid data.test=/tmp/standin/test \
    tokenizer.vocab_size=8000 tokenizer.input_sentence_size=100000 train.max_steps=100 \
    train.warmup_steps=50 train.valid_every=100 train.valid_max_sentences=100 \
    train.log_every=20 train.precision=bf16 train.device=cuda train.pad_to_multiple=8" \
    >"$OUT/wmt14_standin.log" 2>&1
fi

# (v) Summary on stdout, whose tail the tool returns.
grep -E '^(torch|gpu|commit) ' "$ENV"
echo "== tests"; tail -n 6 "$OUT/tests.txt"
echo "== recipe (test2016; train_minutes from results.json)"
grep -E '^(BLEU|chrF)|run_experiment:' "$OUT/recipe.log"
"$PY" - "$RECIPE" <<'SPEED' || fail "recipe summary"
import json, statistics, sys
from pathlib import Path
run = Path(sys.argv[1])
rows = [json.loads(line) for line in Path(run, "metrics.jsonl").read_text().splitlines() if line]
train = [r for r in rows if r["kind"] == "train" and r["step"] > 1]  # step 1: start-up
valid = [r for r in rows if r["kind"] == "valid"]
def median(key, rows):
    return statistics.median(r[key] for r in rows) if rows else float("nan")
first, later = [r for r in train if r["epoch"] == 0], [r for r in train if r["epoch"] >= 2]
speed_first, speed_later = median("tokens_per_s", first), median("tokens_per_s", later)
print(f"epoch 0 median {speed_first:.0f} tok/s, epochs 2+ {speed_later:.0f} "
      f"(later / first {speed_later / speed_first:.2f}); waiting for data "
      f"{median('data_wait', first):.1%} / {median('data_wait', later):.1%}")
if first and "gpu_mallocs" in first[-1]:
    print(f"allocator driver requests: {first[-1]['gpu_mallocs']} by the end of epoch 0, "
          f"{train[-1]['gpu_mallocs']} at the end; retries {train[-1]['gpu_alloc_retries']}; "
          f"peak {train[-1]['gpu_peak_gib']:.1f} GiB")
elapsed = train[-1]["elapsed"] if train else float("nan")
spent = sum(r["seconds"] for r in valid)
print(f"{len(valid)} validations took {spent:.1f} s of {elapsed:.0f} s "
      f"({spent / elapsed:.1%}); valid BLEU by step {[(r['step'], r['bleu']) for r in valid]}")
results = Path(run, "results.json")
if results.exists():
    result = json.loads(results.read_text())
    print(f"test2016 {result['bleu']:.2f} after {result['train_minutes']:.2f} min of training")
SPEED
for log in "$OUT"/bench_*.txt; do
  echo "== $log"
  awk 'NF == 0 { keep = 0; next } /^(system|allocator) / { keep = 1 } keep' "$log"
done
[[ -f $OUT/wmt14_standin.log ]] && grep -E 'step (20|60|100) \|' "$OUT/wmt14_standin.log"
echo "== times: ${timings[*]/%/;} total ${SECONDS} s"
echo "== ${#failed[@]} failed step(s)" && printf '  %s\n' "${failed[@]}"
((${#failed[@]} == 0))
