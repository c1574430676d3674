#!/bin/sh
# fuzz-gguf.sh: build the libFuzzer target contrib/fuzz-gguf.c with clang
# (ASan + UBSan), seed a corpus and fuzz the GGUF reader for FUZZ_SECONDS
# (default 600). Seeds: the example model of contrib/gguf-dump.c (every
# tensor type, every metadata kind), variants of it, and the first 64 KiB
# of the cached SmolLM2 file when MEDHA_CACHE (default: cache/) has it.
# Crashes are left as crash-* files in FUZZ_DIR (default build/fuzz-gguf).
#
#	FUZZ_SECONDS=60 sh contrib/fuzz-gguf.sh
#
# Needs clang and libclang-rt-14-dev (apt-get install clang libclang-rt-14-dev).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
secs=${FUZZ_SECONDS:-600}
dir=${FUZZ_DIR:-build/fuzz-gguf}
cache=${MEDHA_CACHE:-$here/cache}
CC=${CC:-clang}
case $CC in *clang*) ;; *) CC=clang ;; esac
src="libcore/model/gguf.c libcore/model/gguf_meta.c libcore/model/gguf_tensor.c
    libcore/model/gguf_write.c libcore/model/quant.c libcore/util.c"

mkdir -p "$dir/corpus" "$dir/seeds"
# shellcheck disable=SC2086
$CC -std=c11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -iquote libcore \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -o "$dir/fuzz-gguf" contrib/fuzz-gguf.c $src
# the seeds' writer: make contrib's gguf-dump
make -s CC=cc build/contrib/gguf-dump

build/contrib/gguf-dump -w "$dir/seeds/example.gguf"
# the example cut short at a few places, and its head alone
for n in 24 200 400 600; do
	head -c "$n" "$dir/seeds/example.gguf" >"$dir/seeds/example-$n.gguf"
done
model=$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -f "$model" ]; then
	head -c 65536 "$model" >"$dir/seeds/smollm2-head.gguf"
fi
for f in "$dir"/seeds/*.gguf; do
	cp "$f" "$dir/corpus/"
done

echo "fuzz-gguf: running for ${secs}s in $dir"
cd "$dir"
./fuzz-gguf -max_total_time="$secs" -max_len=131072 -rss_limit_mb=2048 \
    -print_final_stats=1 corpus
