/*
 * pred.c: the runtime predictor's built-in GPUs and the analytic cost
 * model (pred.h); the models it prices are pred_model.c's.
 *
 * Every kernel is a roofline: time = max(FLOPs / (peak * efficiency),
 * bytes / (HBM bandwidth * efficiency)) plus a fixed cost per kernel,
 * where the compute efficiency depends on the kernel's shape (GEMM tiles
 * against the SMs, attention length); per layer and per worker of a TP
 * group, times the layers of one pipeline stage. All-reduces inside a
 * node follow NCCL's measured latency and bus bandwidth; sends and
 * collectives across nodes use InfiniBand. A layer takes at least the
 * host time of launching its kernels. The calibration and its sources
 * are with the GPU table below. Each medha_pred_* function takes its
 * time from the measured table (pred_table.c) when that has the operator
 * and from the formulas here otherwise. All are pure, allocate nothing,
 * cost O(1) (O(log n) with a table) and never decrease when a token or kv
 * argument grows: the scheduler binary-searches chunk sizes over them.
 */
#include "sched/pred.h"
#include "model/model.h"

#include <math.h>
#include <string.h>
#include <strings.h>

#define GIB (1024.0 * 1024.0 * 1024.0)
#define ACT_RESERVE GIB /* activations and workspace, per worker */

/*
 * Calibration of the built-in GPUs. Each figure, where it comes from,
 * and what was assumed where no measurement was found:
 *
 * GEMMs. Plateau: the largest bf16 matmul rate measured over a sweep of
 * shapes ("Maximum Achievable Matmul FLOPS", S. Bekman, ml-engineering,
 * github.com/stas00/ml-engineering compute/accelerator/README.md):
 * A100 SXM 267.9 of 312 TFLOP/s (0.859), H100 SXM 792.1 of 989 (0.801).
 * Below the plateau (NVIDIA, "Matrix Multiplication Background User's
 * Guide", docs.nvidia.com/deeplearning/performance, tile and wave
 * quantization): the output is cut into tiles (128 x 128 is cuBLAS's
 * usual one), one thread block each, run in waves over the SMs; the
 * last wave is on average half empty, so a GEMM of T tiles runs at the
 * plateau times T / (T + SMs / 2): gemm_fill 54 on the A100 (108 SMs),
 * 66 on the H100 (132 SMs). Tiles count M (tokens) against N of the TP
 * shard, so efficiency rises with M toward the plateau, sooner for wide
 * layers (the MLP) than narrow ones (QKV at tp 8); small M is bound by
 * reading the weights (N x K) instead.
 *
 * Attention. H100: FlashAttention-3, bf16, head dim 128, 16k tokens per
 * batch (T. Dao et al., arXiv 2407.08608, as rerun in pytorch/benchmark
 * PR #2391): 430, 517, 566, 590, 614, 621 TFLOP/s at 0.5k, 1k, 2k, 4k,
 * 8k, 16k tokens; a plateau of 0.63 of peak times L / (L + 220) fits
 * every point within 2% (L = kv + chunk, the keys a chunk's last query
 * sees). A100: FlashAttention-2 (T. Dao, "FlashAttention-2", arXiv
 * 2307.08691) reports 50-73% of peak for the forward pass; 0.70 is
 * assumed for long-context head dim 128, with the H100's 220-token
 * half length (no A100 sweep by length was found). The paper's 50-60%
 * MFU for 70B prefill on H100 is out of reach with FlashAttention-2 on
 * Hopper (about 35% of peak, per the FlashAttention-3 paper), so the
 * H100 figures are FlashAttention-3's. Decode and small chunks over a
 * long cache are bound by reading K and V: eff_bw 0.85 of HBM bandwidth
 * (assumed; Medha reports up to 92% MBU in decode, an upper bound).
 *
 * All-reduce inside a node (NCCL, nccl-tests all_reduce_perf):
 * time = 2 (n-1)/n bytes / bus bandwidth + latency. A100: bus bandwidth
 * 200 GB/s on 8 x A100-SXM4-80GB (github.com/NVIDIA/nccl-tests issue
 * #149; 208 GB/s in #178); latency 15 us, NCCL's own tuning model for
 * ring/LL over NVLink at 8 ranks, 6.6 + 14 x 0.6 us (NVIDIA/nccl
 * src/graph/tuning.cc, quoted in NVIDIA/nccl issue #1334; 10.1 us
 * measured at 2 GPUs in #583). H100: 370 GB/s, NCCL's effective NVLink
 * bandwidth (S. Jeaugey in nccl-tests issue #212; NVLink SHARP reaches
 * up to 480); latency 20 us: vLLM's benchmarks of pynccl on H100 give
 * 23-24 us for 0.5 MiB and 561 us for 128 MiB (vllm-project/vllm PRs
 * #24111 and #42324), and its custom all-reduce 10-24 us for small
 * messages at tp 8 (sgl-project/sglang PR #2904). A 32-token chunk's
 * all-reduce (256 KiB for Llama-3 8B) is thus latency-bound.
 *
 * Links. NVLink sends: 376-380 of 450 GB/s measured one way on H100
 * (NVIDIA/nccl issue #1264), 0.84; A100 430-520 GB/s both ways of 600
 * (nccl-tests issue #149), 0.8. InfiniBand assumed the same. Latency of
 * one send or one step across nodes: 10 us (assumed; NCCL's tuning
 * model puts a network ring/LL step at 5 us plus a 6.6 us base).
 *
 * Launches. A Llama layer runs 9 kernels outside attention (two fused
 * add+RMSNorm, QKV, RoPE, KV-cache write, O, gate+up, SiLU-and-mul,
 * down) plus two all-reduces with tp > 1, and one attention kernel
 * (vLLM's LlamaDecoderLayer). Each costs the GPU kernel_s = 1 us beyond
 * its roofline (a tiny op replayed in a CUDA graph takes 1.1-1.3 us,
 * pytorch/pytorch issue #161104; a graph node about 0.6 us, ahrefs/ocannl
 * issue #488). Without CUDA graphs the host also spends launch_s = 4.5
 * us per launch (2.7 us for a bare cudaLaunchKernel enqueue in ocannl
 * #488, plus PyTorch's dispatch; ~4-5 us is the usual eager figure) and
 * runs ahead of the GPU, so a layer takes the longer of its GPU time
 * and its launches. The model charges launches as if no batch used
 * CUDA graphs (vLLM and Sarathi capture decode-only batches): this only
 * binds when a layer's GPU time is under about 50 us.
 *
 * H200 (SXM 141 GB): the H100's chip (the same SMs, clocks and 989
 * TFLOP/s dense bf16) with 141 GB of HBM3e at 4.8 TB/s (NVIDIA's H200
 * datasheet) and the same NVLink; its efficiencies are taken as the
 * H100's. Measured on one (issue 26): device-to-device copies at 4.30
 * TB/s (0.90 of 4.8, beside the 0.85 assumed) and a bf16 GEMM of
 * 8192^3 at 715 TFLOP/s (0.72 of peak, under the H100's 0.801 plateau:
 * a measured medha-prof profile of the cuda backend replaces these).
 *
 * name, peak bf16, HBM, capacity, NVLink (one direction), IB per GPU,
 * GPUs per node, GEMM plateau and fill, attention plateau and half
 * length, eff bw and link, all-reduce bus bandwidth and latency,
 * launch (host), kernel (GPU), send latency, uneven TP (no).
 */
static const struct medha_gpu gpus[] = {
    {"a100", 312e12, 2.039e12, 80e9, 300e9, 25e9, 8, 0.859, 54, 0.70, 220, 0.85,
        0.8, 200e9, 15e-6, 4.5e-6, 1e-6, 10e-6, 0},
    {"h100", 989e12, 3.35e12, 80e9, 450e9, 50e9, 8, 0.801, 66, 0.63, 220, 0.85,
        0.84, 370e9, 20e-6, 4.5e-6, 1e-6, 10e-6, 0},
    {"h200", 989e12, 4.8e12, 141e9, 450e9, 50e9, 8, 0.801, 66, 0.63, 220, 0.85,
        0.84, 370e9, 20e-6, 4.5e-6, 1e-6, 10e-6, 0},
};


#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static const char *op_names[MEDHA_OP_COUNT] = {
    "linear",
    "attn_prefill",
    "attn_decode",
    "spp_send",
    "kvp_merge",
    "lm_head",
    "moe_ffn",
};

const char *
medha_op_name(int op)
{
	if (op < 0 || op >= MEDHA_OP_COUNT)
		return NULL;
	return op_names[op];
}

int
medha_op_find(const char *name)
{
	int i;

	for (i = 0; i < MEDHA_OP_COUNT; i++)
		if (strcmp(name, op_names[i]) == 0)
			return i;
	return MEDHA_ENOTFOUND;
}

const struct medha_gpu *
medha_gpu_find(const char *name)
{
	size_t i;

	if (name == NULL)
		return NULL;
	for (i = 0; i < NELEM(gpus); i++)
		if (strcasecmp(name, gpus[i].name) == 0)
			return &gpus[i];
	return NULL;
}


/* The share of the layers whose FFN is routed (medha_layer_moe). */
static double
moe_share(const struct medha_model_config *c)
{
	int n = 0;

	for (int l = 0; l < c->n_layers; l++)
		n += medha_layer_moe(c, l);
	return c->n_layers > 0 ? (double)n / c->n_layers : 0;
}

double
medha_model_layer_params(const struct medha_pred_model *m)
{
	const struct medha_arch *a = &m->c.a;
	double h = m->c.dim, d = m->c.head_dim, f = 3 * h * m->c.ffn_dim;
	double r = moe_share(&m->c);

	/* a routed layer holds its router, every expert and the shared
	   one; the mean over the layers */
	if (r > 0)
		f = (1 - r) * f +
		    r * (h * a->n_expert +
		            3 * h * (double)a->expert_ffn_dim * a->n_expert +
		            3 * h * (double)a->shexp_ffn_dim);
	return h * m->c.n_heads * d + 2 * h * m->c.n_kv_heads * d +
	    m->c.n_heads * d * h + f;
}

double
medha_moe_experts_touched(const struct medha_model_config *c, double B)
{
	const double E = c->a.n_expert, k = c->a.n_expert_used;

	if (!(E > 0) || !(B > 0))
		return 0;
	return E * (1 - pow(1 - k / E, B));
}

int
medha_pred_init(struct medha_pred *p, const struct medha_gpu *g,
    const struct medha_pred_model *m, int tp, int spp, int kvp)
{
	MEDHA_ASSERT(p != NULL && g != NULL && m != NULL);
	memset(p, 0, sizeof(*p));
	if (tp < 1 || spp < 1 || kvp < 1 || m->c.n_layers < 1 ||
	    spp > m->c.n_layers)
		return MEDHA_EINVAL;
	if (m->c.dim < 1 || m->c.n_heads < 1 || m->c.n_kv_heads < 1 ||
	    m->c.head_dim < 1 || m->c.ffn_dim < 1 || m->c.vocab < 1 ||
	    !(m->w_bytes > 0) || !(m->kv_bytes > 0))
		return MEDHA_EINVAL;
	/* TP splits the query heads evenly; KV heads are split too, or,
	 * when there are fewer of them than GPUs, replicated evenly; the
	 * cpu backend splits kv heads (and theirs) as evenly as it can */
	if (g->tp_uneven ? tp > m->c.n_kv_heads
	                 : (m->c.n_heads % tp != 0 ||
	                       (m->c.n_kv_heads % tp != 0 &&
	                           tp % m->c.n_kv_heads != 0)))
		return MEDHA_EINVAL;
	p->gpu = *g;
	p->model = *m;
	p->tp = tp;
	p->spp = spp;
	p->kvp = kvp;
	p->stage_layers = (m->c.n_layers + spp - 1) / spp;
	p->table = NULL;
	for (int l = 0; l < m->c.n_layers; l++) {
		int w = medha_layer_span(&m->c, l);
		if (w > 0) {
			p->window = w;
			p->stage_window += 1;
		}
	}
	/* the stage's window layers, as the model's share of them */
	p->stage_window *= (double)p->stage_layers / m->c.n_layers;
	p->moe_share = moe_share(&m->c);
	return 0;
}

int
medha_pred_set_ep(struct medha_pred *p, char *why, size_t whylen)
{
	const int E = p->model.c.a.n_expert;

	if (E < 1)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "expert parallelism: %s has no experts", p->model.name);
	if (E % p->tp != 0)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "expert parallelism: %d experts of %s do not split "
		    "evenly over tp %d",
		    E, p->model.name, p->tp);
	p->ep = 1;
	medha_log(MEDHA_LOG_INFO,
	    "expert parallelism: %d of %s's %d experts whole a worker; a "
	    "routed layer all-gathers %.0f bytes a token (%.0f from each "
	    "of %d workers); experts a worker reads at 1, 16 and 256 tokens "
	    "a batch: %.2f, %.2f, %.2f",
	    E / p->tp, p->model.name, E, medha_pred_ep_bytes(p) * p->tp,
	    medha_pred_ep_bytes(p), p->tp, medha_pred_experts_read(p, 1),
	    medha_pred_experts_read(p, 16), medha_pred_experts_read(p, 256));
	return 0;
}

double
medha_pred_ep_bytes(const struct medha_pred *p)
{
	if (!p->ep)
		return 0;
	return (double)p->model.c.a.n_expert_used * p->model.c.dim * 2 /
	    p->tp;
}

double
medha_pred_experts_read(const struct medha_pred *p, double T)
{
	double g = medha_moe_experts_touched(&p->model.c, T);

	return p->ep ? g / p->tp : g;
}

/* ---------------------------------------------------------------- */
/* The analytic model: per layer, per worker                          */

/* KV heads one worker holds: ceil(hkv / tp), replicated when tp > hkv. */
static double
kv_heads_local(const struct medha_pred *p)
{
	return (double)((p->model.c.n_kv_heads + p->tp - 1) / p->tp);
}

#define TILE (128.0 * 128.0) /* outputs of one GEMM tile (thread block) */

/*
 * One GEMM of M tokens through an N x K weight (bf16 activations in and
 * out). At T = M N / TILE output tiles it runs at eff_flops * T / (T +
 * gemm_fill) of peak, that is the FLOPs of gemm_fill more tiles at the
 * plateau; below a wave (T < 2 gemm_fill, the SMs) split-K keeps a
 * wave's worth of work units, so the efficiency stays at 2/3 of the
 * plateau there. Or it reads the weights and activations at eff_bw.
 */
static double
an_gemm(const struct medha_pred *p, double M, double N, double K)
{
	const struct medha_gpu *g = &p->gpu;
	double T = M * N / TILE, tc, tm;

	if (T < 2 * g->gemm_fill)
		tc = 2 * M * N * K * 1.5;
	else
		tc = 2 * M * N * K + 2 * TILE * K * g->gemm_fill;
	tc /= g->peak_flops * g->eff_flops;
	tm = (N * K * p->model.w_bytes + 2 * M * (K + N)) /
	    (g->hbm_bw * g->eff_bw);
	return (tc > tm ? tc : tm) + g->kernel_s;
}

/*
 * Ring all-reduce of `bytes` over the TP group: NCCL's bus bandwidth and
 * latency inside a node, InfiniBand and one more step's latency across.
 */
static double
an_allreduce(const struct medha_pred *p, double bytes)
{
	const struct medha_gpu *g = &p->gpu;
	double n = p->tp, wire = 2 * (n - 1) / n * bytes;

	if (p->tp == 1 || !(bytes > 0))
		return 0;
	if (p->tp <= g->gpus_per_node)
		return wire / g->ar_busbw + g->ar_lat_s;
	return wire / (g->net_bw * g->eff_link) + g->ar_lat_s + g->comm_lat_s;
}

/*
 * Ring all-gather over the TP group of `bytes` from each worker: every
 * worker receives (n - 1) of them, at the all-reduce's bus bandwidth
 * (which counts an all-reduce's two passes) and latency.
 */
static double
an_allgather(const struct medha_pred *p, double bytes)
{
	const struct medha_gpu *g = &p->gpu;
	double wire = (p->tp - 1) * bytes;

	if (p->tp == 1 || !(bytes > 0))
		return 0;
	if (p->tp <= g->gpus_per_node)
		return wire / g->ar_busbw + g->ar_lat_s;
	return wire / (g->net_bw * g->eff_link) + g->ar_lat_s + g->comm_lat_s;
}

#define LIN_KERNELS 9 /* per layer outside attention, all-reduces aside */
#define EW_KERNELS 5  /* of which elementwise (norms, RoPE, KV write, SiLU) */

/*
 * A grouped GEMM (one kernel over the experts' segments, vLLM's fused
 * MoE): M rows in all through G of the experts' N x K weights, each
 * read once; compute as one GEMM of M rows.
 */
static double
an_gemm_grouped(const struct medha_pred *p, double M, double N, double K,
    double G)
{
	const struct medha_gpu *g = &p->gpu;
	double T = M * N / TILE, tc, tm;

	if (T < 2 * g->gemm_fill)
		tc = 2 * M * N * K * 1.5;
	else
		tc = 2 * M * N * K + 2 * TILE * K * g->gemm_fill;
	tc /= g->peak_flops * g->eff_flops;
	tm = (G * N * K * p->model.w_bytes + 2 * M * (K + N)) /
	    (g->hbm_bw * g->eff_bw);
	return (tc > tm ? tc : tm) + g->kernel_s;
}

/*
 * The FFN's GEMMs of T tokens at their TP shard: a dense layer's gate+up
 * and down; a routed layer's router, its T k rows through the experts
 * they touch (E (1 - (1 - k / E)^T) of E: each touched expert's weights
 * read once, FLOPs of the active rows only) and the shared expert; the
 * mean over the layers by their share, added to t0 (a dense model's
 * sum in the order it always had). *fa: the FFN rows a token activates
 * (for the elementwise traffic). With EP (medha_pred_set_ep) a worker
 * runs T k / tp rows through its share of the touched experts at their
 * whole width, and all-gathers the experts' outputs.
 */
static double
an_ffn(const struct medha_pred *p, double T, double t0, double *fa)
{
	const struct medha_arch *a = &p->model.c.a;
	const double h = p->model.c.dim, tp = p->tp;
	double f = p->model.c.ffn_dim / tp, t, r = p->moe_share;
	double ef = a->expert_ffn_dim / tp, sf = a->shexp_ffn_dim / tp;
	double M = T * a->n_expert_used, G, tm = 0;

	*fa = f;
	if (!(r > 0))
		return t0 + an_gemm(p, T, 2 * f, h) + an_gemm(p, T, h, f);
	t = an_gemm(p, T, 2 * f, h) + an_gemm(p, T, h, f);
	G = medha_moe_experts_touched(&p->model.c, T);
	tm = an_gemm(p, T, a->n_expert, h);
	if (p->ep) { /* T k / tp rows, at the experts' whole width */
		const double ew = a->expert_ffn_dim;
		tm = tm + an_gemm_grouped(p, M / tp, 2 * ew, h, G / tp) +
		    an_gemm_grouped(p, M / tp, h, ew, G / tp) +
		    an_allgather(p, T * medha_pred_ep_bytes(p));
	} else
		tm = tm + an_gemm_grouped(p, M, 2 * ef, h, G) +
		    an_gemm_grouped(p, M, h, ef, G);
	if (sf > 0)
		tm += an_gemm(p, T, 2 * sf, h) + an_gemm(p, T, h, sf);
	*fa = (1 - r) * f + r * (a->n_expert_used * ef + sf);
	return t0 + (1 - r) * t + r * tm;
}

/*
 * Everything of a layer but attention for T tokens: the QKV, O, gate+up
 * and down GEMMs at their TP shard (an_ffn: a routed layer's experts); two fused add+RMSNorms, RoPE, the KV
 * write and SiLU-and-mul, bound by their bf16 traffic; with tp > 1 two
 * all-reduces of the T x hidden output. At least the host time of
 * launching those kernels.
 */
static double
an_linear(const struct medha_pred *p, double T)
{
	const struct medha_pred_model *m = &p->model;
	const struct medha_gpu *g = &p->gpu;
	double h = m->c.dim, d = m->c.head_dim,
	       hq = m->c.n_heads / (double)p->tp;
	double hkv = kv_heads_local(p), f;
	double t, ew, host;

	if (!(T > 0))
		return 0;
	t = an_ffn(p, T,
	    an_gemm(p, T, (hq + 2 * hkv) * d, h) + an_gemm(p, T, h, hq * d),
	    &f);
	ew = T * (16 * h + 4 * (hq + hkv) * d + 8 * hkv * d + 6 * f);
	t += ew / (g->hbm_bw * g->eff_bw) + EW_KERNELS * g->kernel_s;
	t += 2 * an_allreduce(p, T * h * 2);
	host = (LIN_KERNELS + (p->tp > 1 ? 2 : 0)) * g->launch_s;
	return t > host ? t : host;
}

/*
 * Causal attention of a chunk of c tokens after kv cached ones. Compute
 * runs at eff_attn * L / (L + attn_half) of peak, L = kv + c; reading K
 * and V (once per chunk: GQA heads share them) at eff_bw.
 */
static double
an_attn_prefill(const struct medha_pred *p, double c, double kv)
{
	const struct medha_pred_model *m = &p->model;
	const struct medha_gpu *g = &p->gpu;
	double tp = p->tp, d = m->c.head_dim, hq = m->c.n_heads;
	double flops, bytes, L, tc, tm;

	if (!(c > 0))
		return 0;
	if (!(kv > 0))
		kv = 0;
	flops = 4 * c * (kv + (c + 1) / 2.0) * d * hq / tp;
	bytes = (kv + c) * 2 * d * kv_heads_local(p) * m->kv_bytes +
	    2 * c * d * hq / tp * 2;
	L = kv + c;
	tc = flops * (L + g->attn_half) / (L * g->peak_flops * g->eff_attn);
	tm = bytes / (g->hbm_bw * g->eff_bw);
	return (tc > tm ? tc : tm) + g->kernel_s;
}

/* n decode queries against K cached tokens in all: reading K and V. */
static double
an_attn_decode(const struct medha_pred *p, double n, double K)
{
	const struct medha_pred_model *m = &p->model;
	const struct medha_gpu *g = &p->gpu;
	double tp = p->tp, d = m->c.head_dim, hq = m->c.n_heads;
	double tc, tm;

	if (!(n > 0))
		return 0;
	if (!(K > 0))
		K = 0;
	tc = 4 * K * d * hq / tp / (g->peak_flops * g->eff_attn);
	tm = (K * 2 * d * kv_heads_local(p) * m->kv_bytes +
	         n * d * hq / tp * 4) /
	    (g->hbm_bw * g->eff_bw);
	return (tc > tm ? tc : tm) + g->kernel_s;
}

/* One stage boundary: each TP rank sends its 1/tp of T hidden states. */
static double
an_spp_send(const struct medha_pred *p, double T)
{
	double link;

	if (p->spp == 1 || !(T > 0))
		return 0;
	link = p->tp * p->spp > p->gpu.gpus_per_node ? p->gpu.net_bw
	                                             : p->gpu.nvlink_bw;
	return T * p->model.c.dim * 2 / p->tp / (link * p->gpu.eff_link) +
	    p->gpu.comm_lat_s;
}

/* All-gather of partial outputs and log-sum-exps from g KVP groups. */
static double
an_kvp_merge(const struct medha_pred *p, double T, double g)
{
	const struct medha_pred_model *m = &p->model;
	double hq = (double)m->c.n_heads / p->tp, bytes;

	if (!(g > 1) || !(T > 0))
		return 0;
	bytes = T * hq * m->c.head_dim * 2 + T * hq * 4;
	return (g - 1) * bytes / (p->gpu.net_bw * p->gpu.eff_link) +
	    p->gpu.comm_lat_s;
}

/* Logits of n last tokens: the whole op, once. */
static double
an_lm_head(const struct medha_pred *p, double n)
{
	const struct medha_pred_model *m = &p->model;

	if (!(n > 0))
		return 0;
	return an_gemm(p, n, (double)m->c.vocab / p->tp, m->c.dim);
}

/*
 * Keys a window layer reads where a global one reads kv: a prefill
 * chunk's queries see at most the window before them (kv <= W), n
 * decodes at most n W keys in all. Non-decreasing in kv and n.
 */
static double
win_keys(const struct medha_pred *p, double kv, double n)
{
	double w = (double)p->window * n;

	return kv < w ? kv : w;
}

/* L layers of an attention op of time f(kv): the stage's global layers
 * at kv keys, its window layers at win_keys() */
#define ATTN_LAYERS(p, f, kv, n)                                    \
	((p)->stage_window > 0                                      \
	        ? ((p)->stage_layers - (p)->stage_window) * f(kv) + \
	            (p)->stage_window * f(win_keys(p, kv, n))       \
	        : (p)->stage_layers * f(kv))

double
medha_pred_analytic(const struct medha_pred *p, int op, int64_t tokens,
    int64_t kv)
{
	double L = p->stage_layers, t = (double)tokens, k = (double)kv;

#define PF(x) an_attn_prefill(p, t, (x))
#define DC(x) an_attn_decode(p, t, (x))
	switch (op) {
	case MEDHA_OP_LINEAR: return L * an_linear(p, t);
	case MEDHA_OP_ATTN_PREFILL: return ATTN_LAYERS(p, PF, k, 1.0);
	case MEDHA_OP_ATTN_DECODE: return ATTN_LAYERS(p, DC, k, t);
	case MEDHA_OP_SPP_SEND: return an_spp_send(p, t);
	case MEDHA_OP_KVP_MERGE: return L * an_kvp_merge(p, t, k);
	case MEDHA_OP_LM_HEAD: return an_lm_head(p, t);
	case MEDHA_OP_MOE_FFN: return 0; /* within an_linear */
	}
#undef PF
#undef DC
	return 0;
}

/* ---------------------------------------------------------------- */
/* The operators: table first, analytic otherwise                     */

double
medha_pred_linear(const struct medha_pred *p, int64_t tokens)
{
	double s;

	if (tokens <= 0)
		return 0;
	if (medha_table_lookup(p->table, MEDHA_OP_LINEAR, (double)tokens, 0,
	        &s))
		return s * p->stage_layers + medha_pred_moe_ffn(p, tokens);
	return p->stage_layers * an_linear(p, (double)tokens);
}

/* One layer's prefill attention: the table's time, else the formula */
static double
layer_prefill(const struct medha_pred *p, double chunk, double kv)
{
	double s;

	if (medha_table_lookup(p->table, MEDHA_OP_ATTN_PREFILL, chunk, kv, &s))
		return s;
	return an_attn_prefill(p, chunk, kv);
}

static double
layer_decode(const struct medha_pred *p, double n, double kv)
{
	double s;

	if (medha_table_lookup(p->table, MEDHA_OP_ATTN_DECODE, n, kv, &s))
		return s;
	return an_attn_decode(p, n, kv);
}

double
medha_pred_attn_prefill(const struct medha_pred *p, int64_t chunk, int64_t kv)
{
	double c = (double)chunk;

	if (chunk <= 0)
		return 0;
	if (kv < 0)
		kv = 0;
#define PF(x) layer_prefill(p, c, (x))
	return ATTN_LAYERS(p, PF, (double)kv, 1.0);
#undef PF
}

double
medha_pred_attn_decode(const struct medha_pred *p, int64_t n_seqs,
    int64_t kv_total)
{
	double n = (double)n_seqs;

	if (n_seqs <= 0)
		return 0;
	if (kv_total < 0)
		kv_total = 0;
#define DC(x) layer_decode(p, n, (x))
	return ATTN_LAYERS(p, DC, (double)kv_total, n);
#undef DC
}

double
medha_pred_spp_send(const struct medha_pred *p, int64_t tokens)
{
	double s;

	if (p->spp == 1 || tokens <= 0)
		return 0;
	if (medha_table_lookup(p->table, MEDHA_OP_SPP_SEND, (double)tokens, 0,
	        &s))
		return s;
	return an_spp_send(p, (double)tokens);
}

double
medha_pred_kvp_merge(const struct medha_pred *p, int64_t tokens, int groups)
{
	double s;

	if (groups <= 1 || tokens <= 0)
		return 0;
	if (medha_table_lookup(p->table, MEDHA_OP_KVP_MERGE, (double)tokens,
	        (double)groups, &s))
		return s * p->stage_layers;
	return p->stage_layers *
	    an_kvp_merge(p, (double)tokens, (double)groups);
}

double
medha_pred_lm_head(const struct medha_pred *p, int64_t n_seqs)
{
	double s;

	if (n_seqs <= 0)
		return 0;
	if (medha_table_lookup(p->table, MEDHA_OP_LM_HEAD, (double)n_seqs, 0,
	        &s))
		return s;
	return an_lm_head(p, (double)n_seqs);
}

/* ---------------------------------------------------------------- */
/* Memory                                                             */

/*
 * The stage's layers plus both the embedding (stage 0) and the output
 * head (last stage): counting both on every stage errs on the safe side.
 */
double
medha_pred_weight_bytes(const struct medha_pred *p)
{
	const struct medha_pred_model *m = &p->model;

	return (p->stage_layers * medha_model_layer_params(m) +
	           2.0 * m->c.vocab * m->c.dim) *
	    m->w_bytes / p->tp;
}

double
medha_pred_kv_bytes_per_token(const struct medha_pred *p)
{
	return 2.0 * p->stage_layers * kv_heads_local(p) * p->model.c.head_dim *
	    p->model.kv_bytes;
}

double
medha_pred_kv_bytes(const struct medha_pred *p, int64_t tokens, int64_t chunk)
{
	double n = tokens > 0 ? (double)tokens : 0, w = n;

	if (p->stage_window > 0 && (double)p->window + (double)chunk < n)
		w = (double)p->window + (double)chunk;
	return medha_pred_kv_bytes_per_token(p) / p->stage_layers *
	    ((p->stage_layers - p->stage_window) * n + p->stage_window * w);
}

int64_t
medha_pred_kv_capacity(const struct medha_pred *p, double mem_util)
{
	double free_b, n;

	free_b = p->gpu.mem_bytes * mem_util - medha_pred_weight_bytes(p) -
	    ACT_RESERVE;
	if (!(free_b > 0))
		return 0;
	n = floor(free_b / medha_pred_kv_bytes_per_token(p));
	if (n >= 9.2e18)
		return INT64_MAX;
	return (int64_t)n;
}
