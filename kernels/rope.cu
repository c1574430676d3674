/*
 * rope.cu: RoPE in place, the GGUF llama layout (adjacent pairs (2i,
 * 2i+1) rotate) or NEOX's halves (i, i + n_rot / 2), with the scalings
 * of model.h's struct medha_rope (linear, YaRN's ramp and attention
 * factor, LongRoPE's or rope_freqs' divisors), as the cpu twins
 * medha_cpu_rope_table_ext + medha_cpu_rope_ext compute them: pair i of
 * a row at position p turns by p * base^(-2i / n_rot) / freqs[i], scaled
 * and ramped. The angle is made as the cpu twin makes it, so that the
 * two agree at any position (at position 1M an f32 angle's last bit is
 * 0.06 rad, and another order of roundings would turn high pairs by
 * that much): the factor powf(base, -2 / n_rot) on the host (the same
 * libm as the twin), then p multiplied up by it i times in f32; the
 * YaRN magnitude's logf on the host too. sinf and cosf are CUDA's (2
 * ulp). One thread per (row, head, pair).
 */
#include "common.cuh"

/* what the kernel needs, by value */
struct rope_args {
	float scale;      /* base^(-2 / n_rot) */
	float freq_scale, ext_factor, ms, corr0, corr1;
	const float *freqs;
	int neox;
};

static __global__ void
rope_kernel(float *x, const int64_t *pos, int n, int row_stride, int n_heads,
    int head_dim, int n_rot, struct rope_args a)
{
	int half = n_rot / 2;
	int64_t total = (int64_t)n * n_heads * half;

	for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	     t < total; t += (int64_t)gridDim.x * blockDim.x) {
		int i = (int)(t % half);
		int h = (int)((t / half) % n_heads);
		int64_t r = t / ((int64_t)half * n_heads);
		float *v = x + r * row_stride + (int64_t)h * head_dim +
		    (a.neox ? i : 2 * i);
		float *w = v + (a.neox ? half : 1);
		float th = (float)pos[r], ti, s, c, x0, x1;

		for (int j = 0; j < i; j++)
			th *= a.scale;
		if (a.freqs != NULL)
			th = th / a.freqs[i];
		ti = a.freq_scale * th;
		if (a.ext_factor != 0.0f) {
			/* ggml's rope_yarn_ramp */
			float y = ((float)i - a.corr0) /
			    fmaxf(0.001f, a.corr1 - a.corr0);
			float mix = (1 - fminf(1, fmaxf(0, y))) * a.ext_factor;

			ti = ti * (1 - mix) + th * mix;
		}
		sincosf(ti, &s, &c);
		c *= a.ms;
		s *= a.ms;
		x0 = *v;
		x1 = *w;
		*v = x0 * c - x1 * s;
		*w = x0 * s + x1 * c;
	}
}

extern "C" int
medha_k_rope_ext(float *x, const int64_t *pos, int n, int row_stride,
    int n_heads, int head_dim, int n_rot, const struct medha_k_rope *r,
    cudaStream_t stream)
{
	struct rope_args a;
	int64_t total;

	if (n < 0 || n_heads < 1 || head_dim < 2 || n_rot < 0 ||
	    n_rot > head_dim || (n_rot & 1) ||
	    row_stride < n_heads * head_dim || r == NULL || !(r->base > 0))
		return cudaErrorInvalidValue;
	total = (int64_t)n * n_heads * (n_rot / 2);
	if (total == 0)
		return 0;
	a.scale = powf(r->base, -2.0f / (float)n_rot);
	a.freq_scale = r->freq_scale;
	a.ext_factor = r->ext_factor;
	a.ms = r->mscale;
	if (r->ext_factor != 0.0f) /* the cpu twin's, per pair: constant */
		a.ms *= 1.0f + 0.1f * logf(1.0f / r->freq_scale);
	a.corr0 = r->corr[0];
	a.corr1 = r->corr[1];
	a.freqs = r->freqs;
	a.neox = r->neox != 0;
	MEDHA_LAUNCH(rope_kernel, grid_for(total, 256, 65536), 256, 0,
	    stream)(x, pos, n, row_stride, n_heads, head_dim, n_rot, a);
	return launch_status();
}

extern "C" int
medha_k_rope(float *x, const int64_t *pos, int n, int row_stride, int n_heads,
    int head_dim, int n_rot, float theta_base, const float *freqs,
    cudaStream_t stream)
{
	struct medha_k_rope r = {theta_base, 1.0f, 0.0f, 1.0f, {0, 0}, freqs,
	    0};

	return medha_k_rope_ext(x, pos, n, row_stride, n_heads, head_dim,
	    n_rot, &r, stream);
}
