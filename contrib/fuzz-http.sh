#!/bin/sh
# fuzz-http.sh: build the libFuzzer target contrib/fuzz-http.c with clang
# (ASan + UBSan), seed a corpus with completion and chat bodies (good ones
# and each kind of mistake), and fuzz the HTTP front door's request
# parser for FUZZ_SECONDS (default 600), chat bodies formatted with the
# chat template of MEDHA_MODEL (default the cached SmolLM2; none if it is
# missing). Crashes are left as crash-* files in FUZZ_DIR (default
# build/fuzz-http).
#
#	FUZZ_SECONDS=60 sh contrib/fuzz-http.sh
#
# Needs clang, libclang-rt-14-dev and the build's libraries.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
secs=${FUZZ_SECONDS:-600}
dir=${FUZZ_DIR:-build/fuzz-http}
CC=${CC:-clang}
case $CC in *clang*) ;; *) CC=clang ;; esac
model=${MEDHA_MODEL:-$here/cache/models/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -s "$model" ] || model=
src="libcore/serve/http/oai.c libcore/serve/http/parse.c
    $(ls libcore/serve/router/*.c) libcore/serve/front.c libcore/serve/clients.c
    libcore/net/link.c libcore/net/link_auth.c libcore/net/link_probe.c libcore/net/auth.c
    libcore/net/pcli.c libcore/net/proto.c libcore/net/proto_eq.c
    libcore/net/proto_dec.c libcore/net/proto_dec_get.c libcore/net/proto_dec_req.c
    libcore/net/proto_enc.c libcore/req.c libcore/util.c libcore/map.c
    libcore/hmac.c libcore/sched/prefix.c
    $(ls libcore/model/*.c libcore/tok/*.c libcore/template/*.c)"

mkdir -p "$dir/corpus"
# shellcheck disable=SC2086
$CC -std=c11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -iquote libcore \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -o "$dir/fuzz-http" contrib/fuzz-http.c $src \
    -lnng -lmsgpackc -ljansson -lpcre2-32 -lzstd -lcrypto -lpthread -lm

# seeds: the first byte says completions (0) or chat (1)
seed() {
	printf '%s' "$1" >"$dir/corpus/seed-$2"
}
seed '0{"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}' 1
seed '0{"prompt": [1, 2, 3], "max_tokens": 4, "stream": true, "stream_options": {"include_usage": true}}' 2
seed '0{"prompt": "x", "stop": ["a", "bc"], "top_p": 0.5, "seed": 7, "top_k": 3, "ignore_eos": true}' 3
seed '1{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "max_tokens": 5}' 4
seed '1{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}], "max_completion_tokens": 3}' 5
seed '0{"prompt": "x", "n": 2, "logprobs": 1, "echo": true}' 6
seed '0{"prompt": "x", "max_tokens": "many", "temperature": 3}' 7
seed '1{"messages": [{"role": "tool", "content": null}], "model": 5}' 8
seed '0[1, 2]' 9
seed '0{"prompt": "\ud800", "stop": "' 10

echo "fuzz-http: running for ${secs}s in $dir${model:+ (chat template of $model)}"
cd "$dir"
MEDHA_MODEL=$model ./fuzz-http -max_total_time="$secs" -max_len=65536 \
    -rss_limit_mb=2048 -malloc_limit_mb=256 -print_final_stats=1 corpus
