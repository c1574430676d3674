#!/bin/sh
# gguf-ref.sh: medha's GGUF reader and dequantization against the gguf
# Python package (llama.cpp's own reader) on the real SmolLM2 file: the
# metadata and tensor listing agree, every tensor dequantizes to the same
# float32 bits, and so do F16/BF16/Q4_0/Q4_K/Q6_K (and the rest) made from
# it with gguf's writer (tests/ref/gguf_check.py says what it compares).
# The model and the Python come from contrib/fetch-refs.sh under
# MEDHA_CACHE (default: the repository's cache/); without them it skips.
. "$(dirname "$0")/lib.sh"
model=$smollm2
need_model
need_py gguf numpy

lib=$top/libcore
${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -iquote "$lib" \
    -o "$tmp/gguf-dump" "$top/contrib/gguf-dump.c" "$lib/model/gguf.c" \
    "$lib/model/gguf_meta.c" "$lib/model/gguf_tensor.c" "$lib/model/gguf_write.c" \
    "$lib/model/quant.c" "$lib/util.c" -lm
"$py" "$top/tests/ref/gguf_check.py" "$tmp/gguf-dump" "$model" "$tmp"
