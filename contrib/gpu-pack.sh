#!/bin/sh
# gpu-pack.sh [BINDIR [BUILD]]: what a lent GPU machine needs to run
# contrib/gpu-check.sh with the programs built here (it builds nothing
# there, and has no nng, msgpack-c, jansson, zstd, pcre2 or cmocka):
#
#   build/gpu-libs/        the shared libraries the programs below load
#                          that are neither the C library's nor CUDA's
#                          or the NVIDIA driver's, copied from this
#                          machine (what ldd finds), under the names the
#                          programs ask for; contrib/gpu-env.sh puts it
#                          on LD_LIBRARY_PATH
#   build/gpu-pack/bin/    BINDIR's programs (bin/), without debug info
#   build/gpu-pack/tests/gpu/  BUILD/tests/gpu's programs (the GPU tests
#                          and benchmarks), likewise
#   build/gpu-pack/random.gguf  the random test model with SmolLM2's
#                          tokenizer (tests/ref/random_model.py: 4
#                          layers, GQA, heads of 64: the attention
#                          kernels' size), for the live checks: SmolLM2's
#                          98 MB do not travel
#   build/gpu-pack/families/  a random model of each other family
#                          (tests/ref/arch_model.py's CUDA_CASES, about
#                          a megabyte each) for gpu-check.sh's families
#   build/gpu-pack/MANIFEST   the commit, the date, every file's size
#   build/gpu-smollm2-N/  SmolLM2 (98 MB, too much for one run) in four
#                         pieces with its md5, for backend_cuda_test's
#                         SmolLM2 cases: carried two by two in runs of
#                         their own before the checks' run (each path a
#                         run carries stays on the warm machine), which
#                         gpu-check.sh puts together again
#   build/gpu-moe/        a random model of each mixture of experts
#                         (CUDA_MOE_CASES, under two megabytes each) for
#                         gpu-check.sh's moe step: 5 MB the pack has no
#                         room for, carried with the SmolLM2 pieces (or
#                         in a run of its own) before the checks' run
#
# All are ignored paths (build/) that the device tool's run carries:
#
#   run(command="true", carry=["build/gpu-smollm2-1", "build/gpu-smollm2-2"])
#   run(command="true", carry=["build/gpu-smollm2-3", "build/gpu-smollm2-4",
#       "build/gpu-moe"])
#   run(command="bash contrib/gpu-check.sh",
#       carry=["build/gpu-pack", "build/gpu-libs"], timeout_s=540)
#
# (the first two only to check on SmolLM2, the second for the mixtures
# too: without SmolLM2, carry=["build/gpu-moe"] alone; each call is a
# few seconds of device time while the machine is warm, 30 s after the
# last)
#
# Build first (make -j2 all and the GPU programs: make gpu-pack does
# both). Exits 1 if a program is missing a library here, or the whole
# with the working tree is over 63 MiB (the run carries 64 MiB: about
# 4 MiB of tree, so about 59 of pack).
top=$(cd "$(dirname "$0")/.." && pwd)
bindir=${1:-$top/bin}
build=${2:-$top/build}
# GPU_PACK_OUT: another folder for the two (tests)
pack=${GPU_PACK_OUT:-$top/build}/gpu-pack
libs=${GPU_PACK_OUT:-$top/build}/gpu-libs
cache=${MEDHA_CACHE:-$top/cache}
status=0

moe=${GPU_PACK_OUT:-$top/build}/gpu-moe
rm -rf "$pack" "$libs" "$moe" "${pack%/*}"/gpu-smollm2-*
mkdir -p "$pack/bin" "$pack/tests/gpu" "$libs"

# the programs, stripped of their debug info (a third of their size)
for f in "$bindir"/medha-*; do
	[ -x "$f" ] && strip --strip-debug -o "$pack/bin/$(basename "$f")" "$f"
done
for f in "$build"/tests/gpu/*; do
	case $f in *.d | *.o) continue ;; esac
	[ -f "$f" ] && [ -x "$f" ] &&
	    strip --strip-debug -o "$pack/tests/gpu/$(basename "$f")" "$f"
done
if [ -z "$(ls "$pack/bin")" ]; then
	echo "gpu-pack: no programs in $bindir (make first)" >&2
	exit 1
fi

# libs: every library ldd resolves for them but the C and C++ runtimes
# (every Linux has its own, and PyTorch's Python must keep its newer
# libstdc++), CUDA's and the driver's (the machine's own, matching its
# driver)
for f in "$pack"/bin/* "$pack"/tests/gpu/*; do
	[ -f "$f" ] || continue
	if ldd "$f" | grep 'not found'; then
		echo "gpu-pack: $f: a library missing here" >&2
		status=1
	fi
done
for f in "$pack"/bin/* "$pack"/tests/gpu/*; do
	[ -f "$f" ] || continue
	ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r name path; do
	case $name in
	libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | \
	    libresolv.so.* | ld-linux* | libstdc++.so.* | libgcc_s.so.* | \
	    libcuda.so.* | libcudart.so.* | \
	    libcublas*.so.* | libnccl.so.* | libnvidia*)
		continue
		;;
	esac
	cp -L "$path" "$libs/$name"
done

# the random model for the live checks (the venv's gguf package)
py=${MEDHA_PY:-$cache/venv/bin/python}
smollm2=$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
# (in the background, beside the next step: each spends most of its
# time reading SmolLM2's tokenizer, one core each)
rand=
if [ -s "$smollm2" ] && "$py" -c 'import gguf, numpy' 2>/dev/null; then
	RANDOM_MODEL_HD=64 \
	    "$py" "$top/tests/ref/random_model.py" "$smollm2" "$pack/random.gguf" &
	rand=$!
else
	echo "gpu-pack: no random.gguf: it needs $smollm2 and $py with gguf" \
	    "(contrib/fetch-refs.sh); the live checks will skip" >&2
fi

# the other families' random models (gpu-check.sh's families step)
if [ -s "$smollm2" ] && "$py" -c 'import gguf, numpy' 2>/dev/null; then
	# and the mixtures of experts (gpu-check.sh's moe step), beside the
	# pack: written by the same run (one reading of the tokenizer),
	# then moved
	mkdir -p "$pack/families" "$moe"
	moes=$("$py" "$top/tests/ref/arch_model.py" cuda-moe-cases)
	# shellcheck disable=SC2086 # the case names, one argument each
	"$py" "$top/tests/ref/arch_model.py" write "$smollm2" "$pack/families" \
	    qwen2-cu qwen3-cu gemma2-cu gemma3-cu phi3-cu llama-swa-cu \
	    gemma3-256-cu $moes || status=1
	for m in $moes; do
		mv "$pack/families/$m.gguf" "$moe/" || status=1
	done
fi
if [ -n "$rand" ]; then
	wait "$rand" || status=1
fi
# SmolLM2 in pieces of 25 MB, each folder with the whole file's md5
if [ -s "$smollm2" ]; then
	sum=$(md5sum <"$smollm2" | cut -d' ' -f1)
	split -b 25M -d -a 1 "$smollm2" "$pack/smollm2."
	n=0
	for f in "$pack"/smollm2.?; do
		n=$((n + 1))
		d=${pack%/*}/gpu-smollm2-$n
		mkdir -p "$d"
		mv "$f" "$d/part"
		echo "$n $sum" >"$d/md5"
	done
fi

{
	echo "gpu-pack of $(git -C "$top" describe --always --dirty 2>/dev/null)" \
	    "made $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -m)"
	(cd "$pack/.." && find gpu-pack gpu-libs -type f ! -name MANIFEST |
	    sort | xargs ls -l | awk '{ printf "%10d %s\n", $5, $9 }')
} >"$pack/MANIFEST"
size=$(du -skL "$pack" "$libs" | awk '{ s += $1 } END { print s }')
# the working tree travels with them (the files git tracks, and those it
# does not ignore), KiB
tree=$( (cd "$top" && git ls-files -coz --exclude-standard 2>/dev/null |
    xargs -0 cat 2>/dev/null) | wc -c)
tree=$((tree / 1024))
echo "gpu-pack: build/gpu-pack and build/gpu-libs, $((size / 1024)) MiB" \
    "($(ls "$pack/bin" | wc -l) programs, $(ls "$pack/tests/gpu" | wc -l)" \
    "GPU tests and benchmarks, $(ls "$libs" | wc -l) libraries), with the" \
    "working tree's $((tree / 1024)) MiB"
if [ $((size + tree)) -gt $((63 * 1024)) ]; then
	echo "gpu-pack: over 63 MiB with the working tree: the device tool" \
	    "carries 64 MiB" >&2
	status=1
fi
exit "$status"
