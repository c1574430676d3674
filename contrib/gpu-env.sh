# shellcheck shell=sh
# gpu-env.sh: sourced (". contrib/gpu-env.sh") by what runs medha's GPU
# programs (tests/run.sh, contrib/bench-gpu.sh, contrib/gpu-check.sh):
# LD_LIBRARY_PATH gains, before what it held,
#   - build/gpu-libs (GPU_LIBS): the shared libraries medha's programs
#     link (nng, msgpack-c, jansson, zstd, pcre2-32, cmocka) copied from
#     the machine that built them by contrib/gpu-pack.sh, for a machine
#     that lacks them (a lent GPU); the same sonames, so the same ABI, as
#     the ones the programs were linked with (put last, though the path
#     comes before the system's directories either way);
#   - CUDA's lib64 (CUDA_HOME, default /usr/local/cuda): cuBLASLt, which
#     the cuda backend loads with dlopen;
#   - NCCL's lib directory: $NCCL_LIB, else the one of the Python
#     environment's nvidia-nccl package (PyTorch's), else nothing (the
#     machine's own libnccl.so.2, if ldconfig knows it).
# It sets gpu_env_nccl to the NCCL directory found (empty if none), and
# gpu_env_orig_ld to LD_LIBRARY_PATH as it was, for programs that bring
# their own CUDA libraries (PyTorch).
gpu_env_top=$(cd "$(dirname "${0:-.}")/.." 2>/dev/null && pwd)
[ -f "$gpu_env_top/Makefile" ] || gpu_env_top=$(pwd)
gpu_env_cuda=${CUDA_HOME:-/usr/local/cuda}
gpu_env_nccl=${NCCL_LIB:-}
if [ -z "$gpu_env_nccl" ] && command -v python3 >/dev/null 2>&1; then
	# site-packages/nvidia/nccl/lib (nvidia-nccl-cu13), or another
	# nvidia/*/lib that holds it, found without importing anything
	gpu_env_nccl=$(python3 -c 'import glob, os, site
dirs = site.getsitepackages() + [site.getusersitepackages()]
for d in [os.path.join(s, "nvidia", "nccl", "lib") for s in dirs] + \
    [g for s in dirs for g in sorted(glob.glob(os.path.join(s, "nvidia", "*", "lib")))]:
    if os.path.exists(os.path.join(d, "libnccl.so.2")):
        print(d)
        break' 2>/dev/null) || gpu_env_nccl=
	[ -d "$gpu_env_nccl" ] || gpu_env_nccl=
fi
# else where CUDA's or the system's is
if [ -z "$gpu_env_nccl" ]; then
	if [ -e "$gpu_env_cuda/lib64/libnccl.so.2" ]; then
		gpu_env_nccl=$gpu_env_cuda/lib64
	else
		gpu_env_nccl=$(ldconfig -p 2>/dev/null |
		    sed -n 's|.*libnccl\.so\.2 .*=> \(.*\)/libnccl\.so\.2$|\1|p' |
		    head -n 1)
	fi
fi
gpu_env_libs=${GPU_LIBS:-$gpu_env_top/build/gpu-libs}
# as it was before the first of nested sourcings (gpu-check.sh's parts)
[ -n "${gpu_env_orig_ld+x}" ] || gpu_env_orig_ld=${LD_LIBRARY_PATH:-}
gpu_env_path=
for d in "$gpu_env_cuda/lib64" "$gpu_env_nccl"; do
	[ -n "$d" ] && [ -d "$d" ] || continue
	case ":$gpu_env_path:" in *":$d:"*) ;; *) gpu_env_path=$gpu_env_path${gpu_env_path:+:}$d ;; esac
done
[ -n "$gpu_env_orig_ld" ] && gpu_env_path=$gpu_env_path${gpu_env_path:+:}$gpu_env_orig_ld
[ -d "$gpu_env_libs" ] && gpu_env_path=$gpu_env_path${gpu_env_path:+:}$gpu_env_libs
LD_LIBRARY_PATH=$gpu_env_path
export LD_LIBRARY_PATH
