#!/bin/sh
# bench-predictor.sh: how well a measured profile predicts the cpu
# backend's batches (make bench-predictor). Profiles SmolLM2-135M-Instruct
# (Q4_1) with medha-prof on THREADS threads (2), then times 200 random
# mixed batches (prefill chunks of 32-2048 tokens at contexts up to 8K,
# beside decodes) against the profile's predictions and prints
# "predictor error: median X%, p90 Y%". The profile is kept in
# cache/profile-smollm2-cpu-tTHREADS.csv for medha-sched --predictor.
#
# usage: contrib/bench-predictor.sh [BINDIR]   (BATCHES=N, THREADS=N)
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$top/bin}
cache=${MEDHA_CACHE:-$top/cache}
threads=${THREADS:-2}
batches=${BATCHES:-200}
model=$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$model" ] || sh "$top/contrib/fetch-refs.sh"
prof=$cache/profile-smollm2-cpu-t$threads.csv

echo "== profile: $model, $threads threads -> $prof"
t0=$(date +%s)
"$bin/medha-prof" -m "$model" -t "$threads" -o "$prof"
t1=$(date +%s)
echo "profiled in $((t1 - t0)) s: $(grep -c '^[a-z]' "$prof") points"
echo "== $batches random mixed batches against it"
"$bin/medha-prof" -m "$model" -t "$threads" --predictor "$prof" \
    --check "$batches"
echo "checked in $(($(date +%s) - t1)) s"
