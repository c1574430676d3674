/*
 * backend_cuda.h: the cuda backend (issue 26): the model on one NVIDIA
 * GPU (the forward pass of libcore/cuda/) behind the interface of
 * backend.h, with cuBLASLt for the linear
 * layers (bf16 in, f32 accumulation), the kernels of kernels/ for the
 * rest, a paged KV cache in device memory, and NCCL for TP within the
 * backend (or the caller's collectives). Built only where nvcc is found
 * (the Makefile's CUDA=1); the registry knows the kind either way.
 *
 * p->model is a GGUF path (every weight type the cpu backend reads is
 * dequantized to bf16 at load) or a shape name medha-sched --sim knows
 * ("llama3-8b": random bf16 weights generated on the GPU from p->seed).
 * The KV cache holds p->kv_blocks blocks, or what p->mem_util (0.9) of
 * the device's free memory at open leaves after the weights and the
 * scratch of 8192 tokens; p->kv_type is f16 or bf16 (0: bf16).
 *
 * The environment, for benchmarks and checks:
 *	MEDHA_CUDA_GEMM=fast	cuBLASLt's algorithm per power-of-two row
 *				count (the fastest path; batches then
 *				change a token's bits)
 *	MEDHA_CUDA_GEMM_M=N	the row count the one batch-invariant
 *				algorithm per shape is chosen at (128)
 *	MEDHA_CUDA_GRAPHS=0	decode steps launched eagerly, not replayed
 *				from CUDA graphs
 * cuBLASLt (libcublasLt.so.13) and, for TP over NCCL, libnccl.so.2 are
 * loaded when the backend opens: LD_LIBRARY_PATH must reach them.
 */
#ifndef MEDHA_BACKEND_CUDA_H
#define MEDHA_BACKEND_CUDA_H

#include "engine/backend.h"

int medha_backend_cuda_open(struct medha_backend **be,
    const struct medha_backend_params *p, char *why, size_t whylen);

/*
 * The same on model m (borrowed only while it opens: its weights are
 * copied to the device), p->model unused: for tests on models built in
 * memory (tests/tinymodel.h). Without a device both return MEDHA_EUNSUP
 * with "cuda: no CUDA device: ..." in why.
 */
int medha_backend_cuda_init(struct medha_backend **be,
    const struct medha_model *m, const struct medha_backend_params *p,
    char *why, size_t whylen);

#endif
