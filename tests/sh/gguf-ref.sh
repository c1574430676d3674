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

# contrib/gguf-dump.c as make contrib builds it (make test has)
dump=$contrib/gguf-dump
if [ ! -x "$dump" ]; then
	make -s -C "$top" build/contrib/gguf-dump
	dump=$top/build/contrib/gguf-dump
fi
"$py" "$top/tests/ref/gguf_check.py" "$dump" "$model" "$tmp"
