# shellcheck shell=sh
# gpu-env.sh: sourced (". contrib/gpu-env.sh") by what runs medha's GPU
# programs (tests/run.sh, contrib/bench-gpu.sh, contrib/gpu-check.sh):
# LD_LIBRARY_PATH gains, before what it held,
#   - build/gpu-libs (GPU_LIBS): the shared libraries medha's programs
#     link (nng, msgpack-c, jansson, zstd, pcre2-32, cmocka) copied from
#     the machine that built them by contrib/gpu-pack.sh, for a machine
#     that lacks them (a lent GPU), put last so that the machine's own
#     win where it has them;
#   - CUDA's lib64 (CUDA_HOME, default /usr/local/cuda): cuBLASLt, which
#     the cuda backend loads with dlopen;
#   - NCCL's lib directory: $NCCL_LIB, else the one of the Python
#     environment's nvidia-nccl package (PyTorch's), else nothing (the
#     machine's own libnccl.so.2, if ldconfig knows it).
# It sets gpu_env_nccl to the NCCL directory found (empty if none).
gpu_env_top=$(cd "$(dirname "${0:-.}")/.." 2>/dev/null && pwd)
[ -f "$gpu_env_top/Makefile" ] || gpu_env_top=$(pwd)
gpu_env_cuda=${CUDA_HOME:-/usr/local/cuda}
gpu_env_nccl=${NCCL_LIB:-}
if [ -z "$gpu_env_nccl" ] && command -v python3 >/dev/null 2>&1; then
	gpu_env_nccl=$(python3 -c 'import nvidia.nccl, os
p = nvidia.nccl.__file__ or list(nvidia.nccl.__path__)[0]
print(os.path.join(os.path.dirname(p) if p.endswith(".py") else p, "lib"))' 2>/dev/null) || gpu_env_nccl=
	[ -d "$gpu_env_nccl" ] || gpu_env_nccl=
fi
gpu_env_libs=${GPU_LIBS:-$gpu_env_top/build/gpu-libs}
gpu_env_path=
for d in "$gpu_env_cuda/lib64" "$gpu_env_nccl"; do
	[ -n "$d" ] && [ -d "$d" ] && gpu_env_path=$gpu_env_path${gpu_env_path:+:}$d
done
[ -n "${LD_LIBRARY_PATH:-}" ] && gpu_env_path=$gpu_env_path${gpu_env_path:+:}$LD_LIBRARY_PATH
[ -d "$gpu_env_libs" ] && gpu_env_path=$gpu_env_path${gpu_env_path:+:}$gpu_env_libs
LD_LIBRARY_PATH=$gpu_env_path
export LD_LIBRARY_PATH
