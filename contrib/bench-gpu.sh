#!/bin/sh
# bench-gpu.sh [BINDIR]: medha's GPU benchmarks (make bench-gpu), each
# beside its peer on the same shapes in the same run:
#   attention   $BUILD/tests/gpu/attn_bench, then PyTorch's SDPA
#               (contrib/bench-attn-torch.py)
#   end to end  $BUILD/tests/gpu/e2e_bench (a random Llama-3-8B in bf16:
#               8K prefill, greedy decode of one sequence), then Hugging
#               Face transformers on the same model (contrib/bench-hf.py)
# With GPU_QUICK=1 the short versions (attn_bench and its peer -q, e2e_bench
# --steps 16, bench-hf.py --quick). Libraries as contrib/gpu-env.sh finds them;
# PYTHON is the Python with PyTorch (python3). A part whose program is
# missing is said and left out; the exit status is that of the first
# part that failed (0 if none did).
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
build=${BUILD:-$top/build}
py=${PYTHON:-python3}
q= qe= qh=
[ "${GPU_QUICK:-0}" = 1 ] && q=-q qe="--steps 16" qh=--quick
. "$here/gpu-env.sh"
status=0

# part NAME COMMAND...: run it (unless its program is missing)
part() {
	name=$1
	shift
	case $1 in
	env) f=$4 ;;
	*) f=$1 ;;
	esac
	if [ ! -e "$f" ]; then
		echo "== $name: $f missing (not built, or not written yet)"
		return
	fi
	echo "== $name: $*"
	"$@"
	rc=$?
	if [ "$rc" != 0 ]; then
		echo "== $name: status $rc"
		[ "$status" != 0 ] || status=$rc
	fi
}

part attn "$build/tests/gpu/attn_bench" $q
# Python with the library path it came with: PyTorch brings its own CUDA
pyenv="env LD_LIBRARY_PATH=$gpu_env_orig_ld"
part attn-torch $pyenv "$py" "$here/bench-attn-torch.py" $q
part e2e "$build/tests/gpu/e2e_bench" $qe
part e2e-hf $pyenv "$py" "$here/bench-hf.py" $qh
exit "$status"
