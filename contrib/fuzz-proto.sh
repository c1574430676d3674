#!/bin/sh
# fuzz-proto.sh: build the libFuzzer target contrib/fuzz-proto.c with clang
# (ASan + UBSan), seed a corpus with one frame of every message type (all
# fields, and the fewest) and a dictionary of the map keys, and fuzz the
# wire codec's decoder for FUZZ_SECONDS (default 600). Every input the
# decoder takes must re-encode to the same message. Inputs go up to 1 MiB;
# -malloc_limit_mb catches a decoder that allocates more than the input
# justifies. Crashes are left as crash-* files in FUZZ_DIR (default
# build/fuzz-proto).
#
#	FUZZ_SECONDS=60 sh contrib/fuzz-proto.sh
#
# Needs clang, libclang-rt-14-dev and libmsgpack-dev.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
secs=${FUZZ_SECONDS:-600}
dir=${FUZZ_DIR:-build/fuzz-proto}
CC=${CC:-clang}
case $CC in *clang*) ;; *) CC=clang ;; esac
src="libcore/net/proto.c libcore/net/proto_eq.c libcore/net/proto_dec.c libcore/net/proto_dec_get.c
    libcore/net/proto_dec_req.c libcore/net/proto_enc.c
    libcore/req.c libcore/util.c"

mkdir -p "$dir/corpus" "$dir/seeds"
# shellcheck disable=SC2086
$CC -std=c11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -iquote libcore \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -o "$dir/fuzz-proto" contrib/fuzz-proto.c $src -lmsgpackc -lm
# shellcheck disable=SC2086
cc -std=c11 -D_GNU_SOURCE -O1 -Wall -Wextra -iquote libcore -DPROTO_SEEDS \
    -o "$dir/fuzz-proto-seeds" contrib/fuzz-proto.c $src -lmsgpackc -lm

"$dir/fuzz-proto-seeds" -w "$dir/seeds" -d "$dir/proto.dict"
cp "$dir"/seeds/*.bin "$dir/corpus/"

echo "fuzz-proto: running for ${secs}s in $dir"
cd "$dir"
./fuzz-proto -max_total_time="$secs" -max_len=1048576 -rss_limit_mb=2048 \
    -malloc_limit_mb=256 -dict=proto.dict -print_final_stats=1 corpus
