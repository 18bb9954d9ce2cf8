/* Exact fused W8A8 kernels for AVX-512 VNNI CPUs (torch-cpu's "vnni" path).
 *
 * Built at first use by backends/torch_cpu/native.py with the system C compiler:
 *     cc -O2 -march=native -ffp-contract=off -fPIC -shared -pthread w8a8_cpu.c -lm
 * -ffp-contract=off is part of the contract: every fp32 product and sum below is rounded on its own,
 * as in the golden (NumPy); a fused multiply-add would change bits. No -ffast-math: divisions are IEEE
 * quotients, exp() is libm's double exp.
 *
 * The integer GEMM.  vpdpbusd multiplies unsigned by signed bytes, so an int8 activation code q
 * (-128..127) enters as u = q + 128 (0..255) and the weight w stays int8:
 *     sum_k u_k w_k = sum_k q_k w_k + 128 sum_k w_k
 * so acc = dot(u, w) - comp[n], comp[n] = 128 * sum_k w[k, n] (precomputed at pack time). Both sides
 * are computed in int32 with two's-complement wrap-around, i.e. exactly modulo 2^32; the true value of
 * sum_k q_k w_k (and of acc + an int32 bias, folded into comp) lies in the int32 range whenever
 * K * max|q| * max|w| (+ max|bias|) <= 2^31 - 1, and then the modular result IS the exact value. The
 * Python side only calls these kernels where that bound holds; elsewhere it takes the exact fallback
 * (which also raises the golden's OverflowError).
 *
 * Packed weight layout (w8a8_pack): panels of NR = 64 output columns; panel p holds K padded to a
 * multiple of 4 (kp) as four blocks of 16 columns, each [kp/4][16 columns][4 consecutive k] bytes: one
 * 64-byte line per k-group and block, the operand order of vpdpbusd (one int32 lane = 4 k of one
 * column), each block one contiguous stream. Padding k and columns are 0 (contribute nothing);
 * activation padding is the code of 0 (u = 128): 128 * 0 = 0.
 *
 * The epilogue is the golden quant_matmul epilogue, in its order, on fp32 lanes:
 *     v = fp32(acc)            (int32 -> fp32, round to nearest even: NumPy's astype)
 *     v = v * deq[n]           (fp32 product)
 *     v = v * pertoken[m]      (dynamic / per-token paths)
 *     v = v + fbias[n]         (a float bias)
 *     out = RNE(v) to bf16 / fp16, or v (fp32), or acc itself (int32)
 * bf16 rounding is done on the bits (round to nearest even, NaN -> sign | 0x7FC0: ml_dtypes' bits), not
 * with vcvtneps2bf16, which flushes subnormals. fp16 uses vcvtps2ph (RNE, IEEE subnormals).
 *
 * Threads: a small persistent pool; every job is a list of independent items taken dynamically
 * (atomic counter), the calling thread included. A descheduled worker on a shared machine delays
 * nothing (the others take its items); a job never waits for a worker that has not started. Each
 * call sets MXCSR to its default (round to nearest, no FTZ/DAZ) for its duration on every thread.
 *
 * Every entry point returns 0 on success, a negative number for bad arguments, and 1 when a value was
 * not finite: an intermediate of w8a8_moe_experts, or an input element of the bf16 / fp16 Linears
 * (w8a8_linear, w8a8_amx_linear: the output is still computed, NaN codes 0, Inf saturated; a caller that
 * skipped the golden's finiteness check reruns the checked path, which raises the golden's error).
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <limits.h>
#include <linux/futex.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define W8A8_ABI 6
#define NR 64
#define MR 6
#define MAX_THREADS 64
/* Software prefetch of the weight streams into L2, PF_GROUPS k-groups (64 bytes of each 16-column stream)
 * ahead in the tile kernel, 4x that in the small-M kernel's single stream. Measured on the 2-core Zen 4
 * (6 rows x 4096^2 int8 weights streamed from memory, one thread): 12.5 GB/s with an L1 prefetch 8
 * groups ahead, 15.9 at 64 groups, 24.7-26.1 GB/s with L2 (T1) prefetches 32-256 groups ahead. */
/* How long an idle worker spins before it sleeps on a futex. Waking a sleeping thread of a VM can take
 * hundreds of microseconds (the host must run the halted vCPU), against a decode Linear's ~0.8 ms: with
 * 60 us, the GEMM of every M = 16 Linear called from Python found its worker asleep (2.0 ms per Linear,
 * against 0.86 ms back to back). OpenMP runtimes spin for the same reason. */
#ifndef SPIN_S
#define SPIN_S 2e-3
#endif
#ifndef PF_GROUPS
#define PF_GROUPS 32
#endif
#ifndef PF_HINT
#define PF_HINT _MM_HINT_T1
#endif

int w8a8_abi(void) { return W8A8_ABI; }

#define LD(x) __atomic_load_n(&(x), __ATOMIC_SEQ_CST)
#define ST(x, v) __atomic_store_n(&(x), (v), __ATOMIC_SEQ_CST)
#define ADD(x, v) __atomic_fetch_add(&(x), (v), __ATOMIC_SEQ_CST)

/* ------------------------------------------------------------------------------------------------
 * thread pool
 * ---------------------------------------------------------------------------------------------- */

typedef void (*item_fn)(void *ctx, int64_t item, int worker);

static struct {
    pthread_mutex_t call;   /* one job at a time (callers from several Python threads queue here) */
    pthread_mutex_t grow;
    int nworkers;
    /* the job (written by the caller before gen is bumped; read by workers after a checked entry) */
    item_fn fn;
    void *ctx;
    int64_t items;
    int want;               /* threads the job may use, the caller included */
    int64_t next, done;
    int active, refs, sleepers;
    uint32_t gen;
} P = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void run_items(int worker) {
    item_fn fn = P.fn;
    void *ctx = P.ctx;
    int64_t items = P.items;
    for (;;) {
        int64_t it = ADD(P.next, 1);
        if (it >= items) break;
        fn(ctx, it, worker);
        ADD(P.done, 1);
    }
}

static void *worker_main(void *arg) {
    int idx = (int)(intptr_t)arg;   /* 1 .. nworkers (0 is the caller) */
    uint32_t seen = LD(P.gen);
    for (;;) {
        uint32_t g = LD(P.gen);
        if (g == seen) {
            double until = now_s() + SPIN_S;   /* spin a while: back-to-back jobs (layers, MoE) */
            int spins = 0;
            while (LD(P.gen) == seen) {
                _mm_pause();
                if (++spins % 64 == 0 && now_s() > until) break;
            }
            if (LD(P.gen) == seen) {
                ADD(P.sleepers, 1);
                syscall(SYS_futex, &P.gen, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
                ADD(P.sleepers, -1);
            }
            continue;
        }
        ADD(P.refs, 1);
        if (!LD(P.active) || LD(P.gen) != g) {
            if (LD(P.gen) == g) seen = g;   /* that job is over */
            ADD(P.refs, -1);
            continue;
        }
        seen = g;
        if (idx < LD(P.want)) {
            unsigned csr = _mm_getcsr();
            _mm_setcsr(0x1F80);
            run_items(idx);
            _mm_setcsr(csr);
        }
        ADD(P.refs, -1);
    }
    return NULL;
}

static void pool_reset_in_child(void) {
    /* after fork() only the forking thread exists: start over (jobs run on the caller until new
     * workers are made) */
    pthread_mutex_init(&P.call, NULL);
    pthread_mutex_init(&P.grow, NULL);
    P.nworkers = 0;
    P.active = P.refs = P.sleepers = 0;
}

static void pool_grow(int workers) {
    static int atfork = 0;
    pthread_mutex_lock(&P.grow);
    if (!atfork) {
        pthread_atfork(NULL, NULL, pool_reset_in_child);
        atfork = 1;
    }
    while (P.nworkers < workers && P.nworkers < MAX_THREADS - 1) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, worker_main, (void *)(intptr_t)(P.nworkers + 1)) != 0) {
            pthread_attr_destroy(&attr);
            break;
        }
        pthread_attr_destroy(&attr);
        P.nworkers++;
    }
    pthread_mutex_unlock(&P.grow);
}

/* Run fn(ctx, i, worker) for every i < items on up to `threads` threads (the caller is worker 0). */
static void pool_run(item_fn fn, void *ctx, int64_t items, int threads) {
    if (items <= 0) return;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads <= 1 || items == 1) {
        for (int64_t i = 0; i < items; i++) fn(ctx, i, 0);
        return;
    }
    if (P.nworkers < threads - 1) pool_grow(threads - 1);
    pthread_mutex_lock(&P.call);
    P.fn = fn;
    P.ctx = ctx;
    P.items = items;
    ST(P.want, threads);
    ST(P.next, 0);
    ST(P.done, 0);
    ST(P.active, 1);
    ADD(P.gen, 1);
    if (LD(P.sleepers) > 0) syscall(SYS_futex, &P.gen, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
    run_items(0);
    while (LD(P.done) < items) _mm_pause();
    ST(P.active, 0);
    while (LD(P.refs) > 0) _mm_pause();
    pthread_mutex_unlock(&P.call);
}

/* ------------------------------------------------------------------------------------------------
 * scratch memory (kept between calls: a fresh multi-MB allocation per call costs page faults)
 * ---------------------------------------------------------------------------------------------- */

typedef struct { void *p; size_t size; } arena;

static void *arena_get(arena *a, size_t bytes) {
    if (a->size < bytes) {
        free(a->p);
        size_t size = (bytes + 4095) & ~(size_t)4095;
        a->p = aligned_alloc(64, size);
        a->size = a->p ? size : 0;
    }
    return a->p;
}

static pthread_mutex_t arena_lock = PTHREAD_MUTEX_INITIALIZER;
static arena shared_arena;                 /* the quantized activation of a linear */
static arena worker_arena[MAX_THREADS];    /* per-worker rows of the MoE chain */

/* ------------------------------------------------------------------------------------------------
 * fp32 helpers
 * ---------------------------------------------------------------------------------------------- */

static inline __mmask16 tail_mask(int64_t count) {
    return count >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << count) - 1u);
}

/* fp32 -> bf16 bits, round to nearest even; NaN -> sign | 0x7FC0 (ml_dtypes). 16 lanes -> 16 x u16. */
static inline __m256i f32_to_bf16(__m512 v) {
    __m512i u = _mm512_castps_si512(v);
    __m512i hi = _mm512_srli_epi32(u, 16);
#ifdef W8A8_PLANTED_BUG
    /* tests only (native.build(extra_flags=("-DW8A8_PLANTED_BUG",))): round half up instead of half even,
     * a one-ulp error on ties only, which the self-test and the load-time probes must catch */
    __m512i lsb = _mm512_set1_epi32(1);
#else
    __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
#endif
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb), 16);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    __m512i qnan = _mm512_or_si512(_mm512_and_si512(hi, _mm512_set1_epi32(0x8000)), _mm512_set1_epi32(0x7FC0));
    r = _mm512_mask_mov_epi32(r, nan, qnan);
    return _mm512_cvtepi32_epi16(r);
}

static inline __m512 bf16_to_f32(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* load 16 lanes of a bf16 (kind 0) or fp16 (kind 1) row as fp32 (exact), masked */
static inline __m512 load_half(const uint16_t *p, int fp16, __mmask16 m) {
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    return fp16 ? _mm512_cvtph_ps(h) : bf16_to_f32(h);
}

/* rint (half even), NaN -> 0, clamp to [lo, hi], as int32 lanes */
static inline __m512i to_codes(__m512 t, float lo, float hi) {
    t = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __mmask16 ord = _mm512_cmp_ps_mask(t, t, _CMP_ORD_Q);
    t = _mm512_maskz_mov_ps(ord, t);
    t = _mm512_min_ps(_mm512_max_ps(t, _mm512_set1_ps(lo)), _mm512_set1_ps(hi));
    return _mm512_cvtps_epi32(t);
}

static inline void store_u8(uint8_t *dst, __m512i codes, __mmask16 m) {
    __m512i u = _mm512_add_epi32(codes, _mm512_set1_epi32(128));
    _mm_mask_storeu_epi8(dst, m, _mm512_cvtepi32_epi8(u));
}

/* ------------------------------------------------------------------------------------------------
 * activation preparation: one row to u8 codes (q + 128), padded to kp with 128
 * ---------------------------------------------------------------------------------------------- */

/* dynamic per-token (golden quantize_rows, codes="mul_inv"):
 *   m = max_k |x_k|;  inv = 127 / m;  q = sat127(rint(x * inv)), NaN -> 0;
 *   scale = 1 / inv ("reciprocal"), or m * fp32(1 / 127) ("amax_mul_rcp", amax_rcp != 0): the formula of
 *   the kernel the tiling picks (w8a8.variants.dynamic_quant; the codes are the same in every kernel) */
static float quant_row_dynamic(const uint16_t *x, int fp16, int64_t k, int64_t kp, uint8_t *dst, int amax_rcp,
                               int *nonfinite) {
    __m512 mx = _mm512_setzero_ps();
    const __m512i absmask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
    __mmask16 nf = 0;
    for (int64_t i = 0; i < k; i += 16) {
        __m512 v = load_half(x + i, fp16, tail_mask(k - i));
        __m512i abs = _mm512_and_si512(_mm512_castps_si512(v), absmask);
        nf |= _mm512_cmpge_epi32_mask(abs, inf);
        mx = _mm512_max_ps(mx, _mm512_castsi512_ps(abs));
    }
    if (nf) *nonfinite = 1;
    float m = _mm512_reduce_max_ps(mx);
    volatile float q32 = 127.0f;   /* keep the quotients IEEE divisions at run time */
    float inv = q32 / m;
    volatile float one = 1.0f;
    float scale = amax_rcp ? m * (one / q32) : one / inv;
    __m512 vinv = _mm512_set1_ps(inv);
    for (int64_t i = 0; i < k; i += 16) {
        __mmask16 msk = tail_mask(k - i);
        __m512 v = load_half(x + i, fp16, msk);
        store_u8(dst + i, to_codes(_mm512_mul_ps(v, vinv), -127.0f, 127.0f), msk);
    }
    for (int64_t i = k; i < kp; i++) dst[i] = 128;
    return scale;
}

/* static (golden quantize, div_mode=False): q = sat(rint(x * r[k] + o[k])) to [-128, 127], NaN -> 0 */
static void quant_row_static(const uint16_t *x, int fp16, const float *recip, const float *offset, int64_t k,
                             int64_t kp, uint8_t *dst, int *nonfinite) {
    const __m512i absmask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
    __mmask16 nf = 0;
    for (int64_t i = 0; i < k; i += 16) {
        __mmask16 msk = tail_mask(k - i);
        __m512 v = load_half(x + i, fp16, msk);
        nf |= _mm512_cmpge_epi32_mask(_mm512_and_si512(_mm512_castps_si512(v), absmask), inf);
        __m512 t = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(msk, recip + i));
        t = _mm512_add_ps(t, _mm512_maskz_loadu_ps(msk, offset + i));
        store_u8(dst + i, to_codes(t, -128.0f, 127.0f), msk);
    }
    for (int64_t i = k; i < kp; i++) dst[i] = 128;
    if (nf) *nonfinite = 1;
}

/* int8 codes given (quant_matmul): u = q + 128 = q ^ 0x80 */
static void codes_row(const int8_t *x, int64_t k, int64_t kp, uint8_t *dst) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    int64_t i = 0;
    for (; i + 64 <= k; i += 64)
        _mm512_storeu_si512(dst + i, _mm512_xor_si512(_mm512_loadu_si512(x + i), flip));
    for (; i < k; i++) dst[i] = (uint8_t)(x[i] ^ 0x80);
    for (; i < kp; i++) dst[i] = 128;
}

/* ------------------------------------------------------------------------------------------------
 * packing
 * ---------------------------------------------------------------------------------------------- */

static inline int64_t round4(int64_t k) { return (k + 3) & ~(int64_t)3; }
static inline int64_t panels_of(int64_t n) { return (n + NR - 1) / NR; }

int64_t w8a8_packed_bytes(int64_t n, int64_t k) { return panels_of(n) * round4(k) * NR; }

/* Ask for transparent huge pages on [p, p + bytes) (2 MiB-aligned, not yet touched): the packed weights
 * are streamed, and 4 KiB pages cost a TLB walk every 4 KiB. 0, or -1 where the kernel refused. */
int w8a8_advise_huge(void *p, int64_t bytes) {
#ifdef MADV_HUGEPAGE
    return madvise(p, (size_t)bytes, MADV_HUGEPAGE) == 0 ? 0 : -1;
#else
    (void)p; (void)bytes;
    return -1;
#endif
}

typedef struct { const int8_t *w; int64_t n, k, ldw, kp; int8_t *out; int32_t *comp; } pack_ctx;

static void pack_item(void *vc, int64_t p, int worker) {
    (void)worker;
    pack_ctx *c = vc;
    int8_t *dst = c->out + p * c->kp * NR;
    memset(dst, 0, (size_t)(c->kp * NR));
    for (int j = 0; j < NR; j++) {
        int64_t n = p * NR + j;
        int64_t sum = 0;
        if (n < c->n) {
            const int8_t *row = c->w + n * c->ldw;
            for (int64_t k = 0; k < c->k; k++) {
                dst[(j >> 4) * (c->kp * 16) + (k >> 2) * 64 + (j & 15) * 4 + (k & 3)] = row[k];
                sum += row[k];
            }
        }
        c->comp[p * NR + j] = (int32_t)(128 * sum);   /* |128 K 128| < 2^31 for K < 2^17 */
    }
}

/* w: int8 [n][k] with row stride ldw (the checkpoint's [N, K]); out: w8a8_packed_bytes(n, k) bytes;
 * comp: int32 [panels * 64] = 128 * column sums (0 past n). */
int w8a8_pack(const int8_t *w, int64_t n, int64_t k, int64_t ldw, int8_t *out, int32_t *comp, int threads) {
    if (n < 0 || k < 0 || ldw < k || k >= (1 << 17)) return -1;
    pack_ctx c = {w, n, k, ldw, round4(k), out, comp};
    pool_run(pack_item, &c, panels_of(n), threads);
    return 0;
}

/* The AMX tile layout (w8a8_amx_pack): the panels above with K padded to a multiple of 64 (kp64), so that
 * block j (16 columns) of panel p at k-block b — bytes p * kp64 * 64 + j * kp64 * 16 + b * 1024 — is one
 * contiguous 16 x 64-byte B tile of _tile_dpbusd: row g = k-group 4g..4g+3 of the block, 4 bytes per
 * column (the VNNI operand order, one int32 lane = 4 k of one column). Padding is 0, as above. Plain C:
 * built and testable on any CPU. */
static inline int64_t round64(int64_t k) { return (k + 63) & ~(int64_t)63; }

int64_t w8a8_amx_packed_bytes(int64_t n, int64_t k) { return panels_of(n) * round64(k) * NR; }

int w8a8_amx_pack(const int8_t *w, int64_t n, int64_t k, int64_t ldw, int8_t *out, int32_t *comp, int threads) {
    if (n < 0 || k < 0 || ldw < k || k >= (1 << 17)) return -1;
    pack_ctx c = {w, n, k, ldw, round64(k), out, comp};
    pool_run(pack_item, &c, panels_of(n), threads);
    return 0;
}

/* ------------------------------------------------------------------------------------------------
 * the micro-kernel: rows x 64 columns, full K, int32 accumulators
 * ---------------------------------------------------------------------------------------------- */

typedef struct {
    const float *deq;        /* [n] fp32 */
    const float *fbias;      /* [n] fp32 or NULL */
    const int32_t *comp;     /* [panels * 64] */
    int64_t n;
    int out_kind;            /* 0 fp32, 1 bf16, 2 fp16, 3 int32 (acc), 4 fp32 of bf16-rounded (MoE GMM1) */
    int check;               /* set *bad when an output is not finite */
    int *bad;
} epi;

/* 0 * v is 0 for finite v and NaN for Inf / NaN */
static inline int any_nonfinite(__m512 v, __mmask16 m) {
    __m512 z = _mm512_mul_ps(v, _mm512_setzero_ps());
    return _mm512_mask_cmp_ps_mask(m, z, z, _CMP_UNORD_Q) != 0;
}

/* round and store 16 lanes; with e->check, flag an output that is not finite *after* the rounding
 * (a finite fp32 can round to a bf16 Inf) */
static inline __attribute__((always_inline)) void store_lanes(const epi *e, __m512 v, void *dst, __mmask16 m) {
    switch (e->out_kind) {
    case 0:
        if (e->check && any_nonfinite(v, m)) *e->bad = 1;
        _mm512_mask_storeu_ps(dst, m, v);
        break;
    case 1: {
        __m256i h = f32_to_bf16(v);
        if (e->check && any_nonfinite(bf16_to_f32(h), m)) *e->bad = 1;
        _mm256_mask_storeu_epi16(dst, m, h);
        break;
    }
    case 2: {
        __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if (e->check && any_nonfinite(_mm512_cvtph_ps(h), m)) *e->bad = 1;
        _mm256_mask_storeu_epi16(dst, m, h);
        break;
    }
    case 4: {
        __m512 r = bf16_to_f32(f32_to_bf16(v));
        if (e->check && any_nonfinite(r, m)) *e->bad = 1;
        _mm512_mask_storeu_ps(dst, m, r);
        break;
    }
    }
}

static inline size_t out_size(int kind) { return kind == 1 || kind == 2 ? 2 : 4; }

/* The epilogue of R rows x one 16-column block at column n0 (accumulator of row r: acc[r * stride]); the
 * block's output columns start `col` elements into each row (rowptr). */
static inline __attribute__((always_inline)) void epilogue_block(const epi *e, const __m512i *acc, int stride, int R,
                                                                 int64_t n0, const float *pt, char *const *rowptr,
                                                                 size_t col) {
    __mmask16 m = tail_mask(e->n - n0);
    __m512i c = _mm512_loadu_si512(e->comp + n0);
    if (e->out_kind == 3) {
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)
            _mm512_mask_storeu_epi32(rowptr[r] + col * 4, m, _mm512_sub_epi32(acc[r * stride], c));
        return;
    }
    size_t esz = out_size(e->out_kind);
    __m512 d = _mm512_maskz_loadu_ps(m, e->deq + n0);
    __m512 fb = e->fbias ? _mm512_maskz_loadu_ps(m, e->fbias + n0) : _mm512_setzero_ps();
    _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {
        __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r * stride], c));
        v = _mm512_mul_ps(v, d);
        if (pt) v = _mm512_mul_ps(v, _mm512_set1_ps(pt[r]));
        if (e->fbias) v = _mm512_add_ps(v, fb);
        store_lanes(e, v, rowptr[r] + col * esz, m);
    }
}

/* rows r of one MR-row tile: a (u8 codes, row stride lda), panel wp; output rows via dst_row(r).
 * `pt` per-row scales or NULL; `rowptr` the rows' output pointers (already offset to column p*64). */
#define DEFINE_TILE(R)                                                                                     \
static void tile_##R(const uint8_t *a, int64_t lda, const int8_t *wp, int64_t kg, const epi *e, int64_t p,  \
                     const float *pt, char *const *rowptr) {                                               \
    __m512i acc[R][4];                                                                                     \
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                                                    \
        _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) acc[r][j] = _mm512_setzero_si512();            \
    const int64_t bs = kg * 64;   /* bytes per 16-column block */                                        \
    for (int64_t g = 0; g < kg; g++) {                                                                     \
        const int8_t *wg = wp + g * 64;                                                                    \
        if ((g & 1) == 0) {   /* one line per block every other k-group: 128 bytes of each stream ahead */  \
            _mm_prefetch((const char *)(wg + PF_GROUPS * 64), PF_HINT);                                    \
            _mm_prefetch((const char *)(wg + bs + PF_GROUPS * 64), PF_HINT);                               \
            _mm_prefetch((const char *)(wg + 2 * bs + PF_GROUPS * 64), PF_HINT);                           \
            _mm_prefetch((const char *)(wg + 3 * bs + PF_GROUPS * 64), PF_HINT);                           \
        }                                                                                                  \
        __m512i w0 = _mm512_loadu_si512(wg), w1 = _mm512_loadu_si512(wg + bs);                             \
        __m512i w2 = _mm512_loadu_si512(wg + 2 * bs), w3 = _mm512_loadu_si512(wg + 3 * bs);                \
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {                                              \
            int32_t q4;                                                                                    \
            memcpy(&q4, a + r * lda + 4 * g, 4);                                                           \
            __m512i b = _mm512_set1_epi32(q4);                                                             \
            acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], b, w0);                                             \
            acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], b, w1);                                             \
            acc[r][2] = _mm512_dpbusd_epi32(acc[r][2], b, w2);                                             \
            acc[r][3] = _mm512_dpbusd_epi32(acc[r][3], b, w3);                                             \
        }                                                                                                  \
    }                                                                                                      \
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {                                                  \
        int64_t n0 = p * NR + j * 16;                                                                      \
        if (n0 >= e->n) break;                                                                             \
        epilogue_block(e, &acc[0][j], 4, R, n0, pt, rowptr, (size_t)(j * 16));                             \
    }                                                                                                      \
}
DEFINE_TILE(1)
DEFINE_TILE(2)
DEFINE_TILE(3)
DEFINE_TILE(4)
DEFINE_TILE(5)
DEFINE_TILE(6)

typedef void (*tile_fn)(const uint8_t *, int64_t, const int8_t *, int64_t, const epi *, int64_t, const float *,
                        char *const *);
static const tile_fn TILES[MR + 1] = {NULL, tile_1, tile_2, tile_3, tile_4, tile_5, tile_6};

/* acc += dot4(u8 broadcast of the 4 bytes at p, w), with the broadcast in a scratch register of its own:
 * written as intrinsics, GCC hoists all R broadcasts of a k-group into registers and then spills the
 * accumulators. */
#define DPB_BCAST(acc, p, w) \
    __asm__("vpbroadcastd %1, %%zmm31\n\tvpdpbusd %2, %%zmm31, %0" : "+v"(acc) : "m"(*(const int32_t *)(p)), "v"(w) : "xmm31")

/* The small-M micro-kernel: R (7..16) rows x one 16-column block, every weight line loaded once for all R
 * rows (a decode Linear reads its weights exactly once, in one steady stream). The activation is
 * k-group-major, at[g][r][4] (R * 4 bytes per k-group: one cache line for R = 16). */
#define DEFINE_SMALL(R)                                                                                    \
static void small_##R(const uint8_t *at, const int8_t *wp, int64_t kg, const epi *e, int64_t p,             \
                      const float *pt, char *const *rowptr) {                                              \
    for (int j = 0; j < 4; j++) {                                                                          \
        int64_t n0 = p * NR + j * 16;                                                                      \
        if (n0 >= e->n) break;                                                                             \
        __m512i acc[R];                                                                                    \
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_si512();              \
        const int8_t *wj = wp + j * kg * 64;                                                               \
        for (int64_t g = 0; g < kg; g++) {                                                                 \
            _mm_prefetch((const char *)(wj + (g + 4 * PF_GROUPS) * 64), PF_HINT);                          \
            __m512i w = _mm512_loadu_si512(wj + g * 64);                                                   \
            const uint8_t *ag = at + g * (R * 4);                                                          \
            _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) DPB_BCAST(acc[r], ag + 4 * r, w);         \
        }                                                                                                  \
        epilogue_block(e, acc, 1, R, n0, pt, rowptr, (size_t)(j * 16));                                    \
    }                                                                                                      \
}
DEFINE_SMALL(7)
DEFINE_SMALL(8)
DEFINE_SMALL(9)
DEFINE_SMALL(10)
DEFINE_SMALL(11)
DEFINE_SMALL(12)
DEFINE_SMALL(13)
DEFINE_SMALL(14)
DEFINE_SMALL(15)
DEFINE_SMALL(16)

#ifndef SMALL_MIN
#define SMALL_MIN 7      /* rows from which the small-M kernel is used (below: one 6-row tile does the same) */
#endif
#define SMALL_MAX 16
typedef void (*small_fn)(const uint8_t *, const int8_t *, int64_t, const epi *, int64_t, const float *, char *const *);
static const small_fn SMALLS[SMALL_MAX + 1] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, small_7, small_8, small_9,
                                               small_10, small_11, small_12, small_13, small_14, small_15, small_16};

/* row-major a [rows][lda] -> k-group-major at [kp/4][rows][4] */
static void to_kgroup_major(const uint8_t *a, int64_t lda, int64_t rows, int64_t kp, uint8_t *at) {
    for (int64_t g = 0; g < kp / 4; g++)
        for (int64_t r = 0; r < rows; r++) memcpy(at + (g * rows + r) * 4, a + r * lda + 4 * g, 4);
}

/* `rows` rows against panel p (weights wp, kg k-groups); output row r starts at rowbase[r] (column 0).
 * With `at` (the same rows k-group-major, SMALL_MIN <= rows <= SMALL_MAX) the small-M kernel, else MR-row
 * tiles of the row-major `a`. */
static void panel_rows(const uint8_t *a, int64_t lda, const uint8_t *at, int64_t rows, const int8_t *wp, int64_t kg,
                       const epi *e, int64_t p, const float *pt, char *const *rowbase) {
    size_t off = (size_t)(p * NR) * out_size(e->out_kind);
    char *rowptr[SMALL_MAX];
    if (at != NULL) {
        for (int64_t r = 0; r < rows; r++) rowptr[r] = rowbase[r] + off;
        SMALLS[rows](at, wp, kg, e, p, pt, rowptr);
        return;
    }
    for (int64_t r = 0; r < rows; r += MR) {
        int nr = (int)(rows - r < MR ? rows - r : MR);
        for (int q = 0; q < nr; q++) rowptr[q] = rowbase[r + q] + off;
        TILES[nr](a + r * lda, lda, wp, kg, e, p, pt ? pt + r : NULL, rowptr);
    }
}

static inline int small_rows(int64_t rows) { return rows >= SMALL_MIN && rows <= SMALL_MAX; }

/* rows [r0, r1) of a (u8 [rows][lda]) against panel p; output row r at out + r * ldy (elements) */
static void rows_x_panel(const uint8_t *a, int64_t lda, int64_t r0, int64_t r1, const int8_t *wpack, int64_t kp,
                         int64_t p, const epi *e, const float *pt, char *out, int64_t ldy) {
    size_t esz = out_size(e->out_kind);
    const int8_t *wp = wpack + p * kp * NR;
    for (int64_t r = r0; r < r1; r += MR) {
        int rows = (int)(r1 - r < MR ? r1 - r : MR);
        char *rowptr[MR];
        for (int i = 0; i < rows; i++) rowptr[i] = out + ((size_t)(r + i) * (size_t)ldy + (size_t)(p * NR)) * esz;
        TILES[rows](a + r * lda, lda, wp, kp / 4, e, p, pt ? pt + r : NULL, rowptr);
    }
}

/* ------------------------------------------------------------------------------------------------
 * the Linear: prepare rows (quantize), then rows x panels with the epilogue
 * ---------------------------------------------------------------------------------------------- */

typedef struct {
    int in_kind;             /* 0 / 1 bf16 / fp16 dynamic, 2 / 3 static, 4 int8 codes, 5 / 6 dynamic amax_mul_rcp */
    const void *x;
    int64_t m, k, ldx, kp;
    const float *recip, *offset;
    uint8_t *a;              /* [m][kp] */
    float *pt;               /* [m] per-token scales (dynamic) */
    int64_t rows_per_item;
    int nonfinite;           /* set (to 1, by any item) when an input element is Inf / NaN */
} prep_ctx;

static void prep_item(void *vc, int64_t item, int worker) {
    (void)worker;
    prep_ctx *c = vc;
    int64_t r0 = item * c->rows_per_item, r1 = r0 + c->rows_per_item;
    if (r1 > c->m) r1 = c->m;
    int nonfinite = 0;
    for (int64_t r = r0; r < r1; r++) {
        uint8_t *dst = c->a + r * c->kp;
        switch (c->in_kind) {
        case 0: case 1: case 5: case 6:
            c->pt[r] = quant_row_dynamic((const uint16_t *)c->x + r * c->ldx, c->in_kind == 1 || c->in_kind == 6, c->k,
                                         c->kp, dst, c->in_kind >= 5, &nonfinite);
            break;
        case 2: case 3:
            quant_row_static((const uint16_t *)c->x + r * c->ldx, c->in_kind == 3, c->recip, c->offset, c->k, c->kp,
                             dst, &nonfinite);
            break;
        default:
            codes_row((const int8_t *)c->x + r * c->ldx, c->k, c->kp, dst);
        }
    }
    if (nonfinite) __atomic_store_n(&c->nonfinite, 1, __ATOMIC_RELAXED);
}

/* The prologue of both Linears (w8a8_linear, w8a8_amx_linear): the arguments checked, MXCSR set to its
 * default, the arena lock taken, the activation prepared into the shared arena as u8 codes
 * [mrows][kp] (rows past m untouched) with the per-token scales. Returns 0 with the lock held and
 * *pr filled (end with linear_end), 1 for m == 0 (nothing to do, nothing held), else a negative error
 * (nothing held). */
typedef struct {
    unsigned csr;
    uint8_t *a;              /* [mrows][kp] codes */
    const float *token;      /* the epilogue's per-token scales: the dynamic ones, or `pertoken` */
    int nonfinite;           /* an input element was Inf / NaN */
} linear_state;

static int linear_begin(int in_kind, const void *x, int64_t m, int64_t k, int64_t ldx, const float *recip,
                        const float *offset, int64_t n, const float *pertoken, int out_kind, int64_t ldy,
                        float *scale_out, int threads, int64_t kp, int64_t mrows, linear_state *st) {
    if (m < 0 || k <= 0 || n <= 0 || ldx < k || ldy < n || in_kind < 0 || in_kind > 6 || out_kind < 0 ||
        out_kind > 3 || k >= (1 << 17))
        return -1;
    if ((in_kind == 2 || in_kind == 3) && (recip == NULL || offset == NULL)) return -2;
    if (m == 0) return 1;
    st->csr = _mm_getcsr();
    _mm_setcsr(0x1F80);
    pthread_mutex_lock(&arena_lock);
    size_t a_bytes = (size_t)(mrows * kp + 64), pt_bytes = (size_t)m * sizeof(float);
    uint8_t *a = arena_get(&shared_arena, a_bytes + pt_bytes + 64);
    if (a == NULL) {
        pthread_mutex_unlock(&arena_lock);
        _mm_setcsr(st->csr);
        return -3;
    }
    float *pt = (float *)(a + ((a_bytes + 63) & ~(size_t)63));
    int dynamic = in_kind <= 1 || in_kind >= 5;
    prep_ctx pc = {in_kind, x, m, k, ldx, kp, recip, offset, a, pt, 16, 0};
    pool_run(prep_item, &pc, (m + pc.rows_per_item - 1) / pc.rows_per_item, m * k >= (1 << 18) ? threads : 1);
    if (dynamic && scale_out) memcpy(scale_out, pt, pt_bytes);
    st->a = a;
    st->token = out_kind == 3 ? NULL : dynamic ? pt : pertoken;
    st->nonfinite = pc.nonfinite;
    return 0;
}

/* the lock released, MXCSR restored; the entry point's result (rc < 0 an error, else 1 if an input was
 * not finite, else 0) */
static int linear_end(const linear_state *st, int rc) {
    pthread_mutex_unlock(&arena_lock);
    _mm_setcsr(st->csr);
    return rc < 0 ? rc : st->nonfinite;
}

typedef struct {
    const uint8_t *a;
    int64_t kp;
    const int8_t *w;
    epi e;
    const float *pt;
    char *y;
    int64_t ldy, m, mchunks, rows_per_chunk;
} gemm_ctx;

static void gemm_item(void *vc, int64_t item, int worker) {
    (void)worker;
    gemm_ctx *c = vc;
    int64_t p = item / c->mchunks, mc = item % c->mchunks;
    int64_t r0 = mc * c->rows_per_chunk, r1 = r0 + c->rows_per_chunk;
    if (r1 > c->m) r1 = c->m;
    rows_x_panel(c->a, c->kp, r0, r1, c->w, c->kp, p, &c->e, c->pt, c->y, c->ldy);
}

typedef struct {
    const uint8_t *at;
    int64_t kp;
    const int8_t *w;
    epi e;
    const float *pt;
    char *rowbase[SMALL_MAX];
    int64_t m;
} small_ctx;

static void small_item(void *vc, int64_t p, int worker) {
    (void)worker;
    small_ctx *c = vc;
    panel_rows(NULL, 0, c->at, c->m, c->w + p * c->kp * NR, c->kp / 4, &c->e, p, c->pt, c->rowbase);
}

/* y[m][n] (row stride ldy elements) = epilogue(x-codes @ W).
 *   in_kind: 0 / 1 bf16 / fp16 x, dynamic per-token quantization with the "reciprocal" scale (its
 *            scales -> scale_out if not NULL, and into the epilogue); 5 / 6 the same with the
 *            "amax_mul_rcp" scale; 2 / 3 bf16 / fp16 x with the static recip / offset [k]; 4 int8 codes
 *            (x int8 [m][ldx]) with optional per-token scales `pertoken` [m].
 *   out_kind: 0 fp32, 1 bf16, 2 fp16, 3 int32 (acc - comp: the exact accumulator, plus an int32 bias
 *            folded into comp). deq / fbias: fp32 [n] (deq unused for int32). */
int w8a8_linear(int in_kind, const void *x, int64_t m, int64_t k, int64_t ldx, const float *recip, const float *offset,
                const int8_t *w, const int32_t *comp, int64_t n, const float *deq, const float *pertoken,
                const float *fbias, int out_kind, void *y, int64_t ldy, float *scale_out, int threads) {
    int64_t kp = round4(k);
    linear_state st;
    int rc = linear_begin(in_kind, x, m, k, ldx, recip, offset, n, pertoken, out_kind, ldy, scale_out, threads, kp,
                          m, &st);
    if (rc != 0) return rc == 1 ? 0 : rc;
    uint8_t *a = st.a;
    if (small_rows(m)) {   /* decode: every weight line once, for all rows */
        uint8_t *at = arena_get(&worker_arena[0], (size_t)(m * kp) + 64);
        if (at == NULL) return linear_end(&st, -3);
        to_kgroup_major(a, kp, m, kp, at);
        small_ctx sc = {at, kp, w, {deq, fbias, comp, n, out_kind, 0, NULL}, st.token, {NULL}, m};
        for (int64_t r = 0; r < m; r++) sc.rowbase[r] = (char *)y + (size_t)r * (size_t)ldy * out_size(out_kind);
        pool_run(small_item, &sc, panels_of(n), threads);
        return linear_end(&st, 0);
    }
    gemm_ctx gc;
    gc.a = a;
    gc.kp = kp;
    gc.w = w;
    gc.e = (epi){deq, fbias, comp, n, out_kind, 0, NULL};
    gc.pt = st.token;
    gc.y = y;
    gc.ldy = ldy;
    gc.m = m;
    int64_t panels = panels_of(n);
    /* row chunks: a whole panel's rows per item while there are enough panels for the threads,
     * else split the rows (multiples of MR) so that every thread has several items */
    int64_t want_items = 4 * (int64_t)(threads > 0 ? threads : 1);
    int64_t chunks = panels >= want_items ? 1 : (want_items + panels - 1) / panels;
    int64_t rpc = (m + chunks - 1) / chunks;
    rpc = ((rpc + MR - 1) / MR) * MR;
    if (rpc < 48) rpc = 48;
    gc.rows_per_chunk = rpc;
    gc.mchunks = (m + rpc - 1) / rpc;
    pool_run(gemm_item, &gc, panels * gc.mchunks, threads);
    return linear_end(&st, 0);
}

/* ------------------------------------------------------------------------------------------------
 * AMX-INT8 (built only with -DW8A8_AMX -mamx-tile -mamx-int8: torch-cpu's "amx" path)
 *
 * The same Linear as w8a8_linear — the same activation preparation (u8 codes u = q + 128, the per-token
 * scales), the same exact compensation (acc = dot(u, w) - comp[n], modulo 2^32, exact while the int32
 * bound holds) and the same epilogue_block — with the integer GEMM on AMX tiles: _tile_dpbusd (u8 x s8
 * dot products of 4, accumulated in int32 with wrap-around, like vpdpbusd) over 16 x 64-byte A tiles of
 * the codes and the B tiles of the AMX packing. One item is 32 rows x one 64-column panel: 2 x 2 int32
 * accumulator tiles (tmm0-3) per pair of 16-column blocks, A in tmm4-5, B in tmm6-7; the accumulators go
 * through a 32 x 32 int32 scratch into the epilogue, while in cache. Rows past m are computed on whatever
 * the arena holds and never stored; columns past n are zero weights, masked in the epilogue.
 *
 * The kernel needs the process's AMX permission (w8a8_amx_request: arch_prctl(ARCH_REQ_XCOMP_PERM,
 * XFEATURE_XTILEDATA)) before any tile instruction, and each thread's tile configuration, loaded per item.
 * ---------------------------------------------------------------------------------------------- */
#define AMX_MR 32
#define AMX_DECODE_MAX 16    /* rows up to which one A tile holds every row: the decode item */

typedef struct __attribute__((packed)) {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* The tile configuration (palette 1) of an item of `m` rows: the decode item (m <= AMX_DECODE_MAX): C tiles
 * tmm0-3 and the A tile tmm4 of m rows x 64 bytes, B tiles tmm5-7 of 16 rows x 64 bytes; the 32-row item:
 * tmm0-7 all 16 x 64 bytes. Plain C (both builds): its bytes are tested where AMX is absent. */
static void amx_fill_config(tile_config *cfg, int64_t m) {
    memset(cfg, 0, sizeof *cfg);
    cfg->palette_id = 1;
    int decode = m >= 1 && m <= AMX_DECODE_MAX;
    for (int t = 0; t < 8; t++) {
        cfg->rows[t] = (uint8_t)(decode && t <= 4 ? m : 16);
        cfg->colsb[t] = 64;
    }
}

int w8a8_amx_tile_config(int64_t m, uint8_t *out) {
    if (m < 1 || out == NULL) return -1;
    tile_config cfg;
    amx_fill_config(&cfg, m);
    memcpy(out, &cfg, sizeof cfg);
    return 0;
}

/* How w8a8_amx_linear splits m rows x n columns: out[0] the item kind (0 decode: all rows x one 64-column
 * panel per item; 1: 32 rows x one panel per item), out[1] the items, out[2] the rows of the code buffer
 * (m, or m rounded up to 32: the 32-row item's A tiles read whole blocks). Plain C (both builds). */
int w8a8_amx_plan(int64_t m, int64_t n, int64_t *out) {
    if (m < 1 || n < 1 || out == NULL) return -1;
    int decode = m <= AMX_DECODE_MAX;
    int64_t mrows = decode ? m : (m + AMX_MR - 1) / AMX_MR * AMX_MR;
    out[0] = decode ? 0 : 1;
    out[1] = decode ? panels_of(n) : panels_of(n) * (mrows / AMX_MR);
    out[2] = mrows;
    return 0;
}

#ifdef W8A8_AMX
#include <errno.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

int w8a8_has_amx(void) { return 1; }

#ifdef W8A8_AMX_EMULATE
/* The AMX intrinsics used below, emulated in C for tests on CPUs without AMX (built with -DW8A8_AMX
 * -DW8A8_AMX_EMULATE and no -mamx flags): a per-thread file of 8 tiles of 16 rows x 64 bytes and its
 * configuration, with the semantics of the Intel SDM's pseudo-code: LDTILECFG; TILEZERO; TILELOADD /
 * TILESTORED (rows x colsb bytes at base + row * stride; rows past the configured ones zeroed);
 * TDPBUSD (dst.dword[m][n] += sum over k < colsb(src1) / 4, i < 4 of zx(src1.byte[m][4k + i]) *
 * sx(src2.byte[k][4n + i]), wrapping int32) and its #UD shape rules (src1.colsb / 4 == src2.rows,
 * dst.rows == src1.rows, dst.colsb == src2.colsb, at most 16 rows and 64 bytes), counted in
 * w8a8_amx_emulated_faults(); TILERELEASE. Only a test's build has it: the real build uses the CPU's. */
static _Thread_local struct { tile_config cfg; int on; uint8_t t[8][16][64]; } emu;
static int emu_faults;
int w8a8_amx_emulated_faults(void) { return __atomic_load_n(&emu_faults, __ATOMIC_RELAXED); }
static void emu_fault(void) { __atomic_fetch_add(&emu_faults, 1, __ATOMIC_RELAXED); }
static void emu_loadconfig(const void *p) {
    memcpy(&emu.cfg, p, sizeof emu.cfg);
    memset(emu.t, 0, sizeof emu.t);
    emu.on = emu.cfg.palette_id == 1;
    for (int t = 0; t < 8; t++)
        if (emu.cfg.rows[t] > 16 || emu.cfg.colsb[t] > 64) emu_fault();
}
static void emu_zero(int t) {
    if (!emu.on) emu_fault();
    memset(emu.t[t], 0, sizeof emu.t[t]);
}
static void emu_loadd(int t, const void *base, int64_t stride) {
    if (!emu.on) emu_fault();
    memset(emu.t[t], 0, sizeof emu.t[t]);
    for (int r = 0; r < emu.cfg.rows[t]; r++) memcpy(emu.t[t][r], (const char *)base + r * stride, emu.cfg.colsb[t]);
}
static void emu_stored(int t, void *base, int64_t stride) {
    if (!emu.on) emu_fault();
    for (int r = 0; r < emu.cfg.rows[t]; r++) memcpy((char *)base + r * stride, emu.t[t][r], emu.cfg.colsb[t]);
}
static void emu_dpbusd(int d, int a, int b) {
    const tile_config *c = &emu.cfg;
    if (!emu.on || c->colsb[a] / 4 != c->rows[b] || c->rows[d] != c->rows[a] || c->colsb[d] != c->colsb[b]) {
        emu_fault();
        return;
    }
    for (int m = 0; m < c->rows[d]; m++)
        for (int n = 0; n < c->colsb[d] / 4; n++) {
            uint32_t acc;
            memcpy(&acc, &emu.t[d][m][4 * n], 4);
            for (int k = 0; k < c->colsb[a] / 4; k++)
                for (int i = 0; i < 4; i++)
                    acc += (uint32_t)((int32_t)emu.t[a][m][4 * k + i] * (int32_t)(int8_t)emu.t[b][k][4 * n + i]);
            memcpy(&emu.t[d][m][4 * n], &acc, 4);
        }
}
#undef _tile_loadconfig
#undef _tile_zero
#undef _tile_loadd
#undef _tile_stored
#undef _tile_dpbusd
#undef _tile_release
#define _tile_loadconfig(p) emu_loadconfig(p)
#define _tile_zero(t) emu_zero(t)
#define _tile_loadd(t, base, stride) emu_loadd(t, base, stride)
#define _tile_stored(t, base, stride) emu_stored(t, base, stride)
#define _tile_dpbusd(d, a, b) emu_dpbusd(d, a, b)
#define _tile_release() (emu.on = 0)
#endif

/* 0 when the kernel grants this process the AMX tile state, else -errno (EINVAL / EOPNOTSUPP on a CPU or
 * kernel without AMX: the caller then never runs an AMX kernel) */
int w8a8_amx_request(void) {
#ifdef W8A8_AMX_EMULATE
    return 0;
#endif
    long rc = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
    return rc == 0 ? 0 : -(errno ? errno : 1);
}

static void amx_configure(int64_t m) {
    tile_config cfg;
    amx_fill_config(&cfg, m);
    _tile_loadconfig(&cfg);
}

typedef struct {
    const uint8_t *a;        /* [rows padded to AMX_MR][kp64] u8 codes */
    int64_t kp;              /* kp64 */
    const int8_t *w;         /* the AMX packing */
    epi e;
    const float *pt;
    char *y;
    int64_t ldy, m, rblocks;
} amx_ctx;

/* 32 rows (r0..) x 32 columns (blocks j, j + 1 of panel p): C[i][jj] = A[i] . B[jj] over every k-block */
static void amx_32x32(const amx_ctx *c, int64_t r0, int64_t p, int j, int32_t *scratch) {
    const uint8_t *a0 = c->a + r0 * c->kp, *a1 = a0 + 16 * c->kp;
    const int8_t *b0 = c->w + p * c->kp * NR + (int64_t)j * c->kp * 16, *b1 = b0 + c->kp * 16;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t kb = 0; kb < c->kp / 64; kb++) {
        _tile_loadd(4, a0 + kb * 64, c->kp);
        _tile_loadd(5, a1 + kb * 64, c->kp);
        _tile_loadd(6, b0 + kb * 1024, 64);
        _tile_loadd(7, b1 + kb * 1024, 64);
        _tile_dpbusd(0, 4, 6);
        _tile_dpbusd(1, 4, 7);
        _tile_dpbusd(2, 5, 6);
        _tile_dpbusd(3, 5, 7);
    }
    /* scratch [32 rows][32 int32]: row r, column block jj at r * 32 + jj * 16 */
    _tile_stored(0, scratch, 128);
    _tile_stored(1, scratch + 16, 128);
    _tile_stored(2, scratch + 16 * 32, 128);
    _tile_stored(3, scratch + 16 * 32 + 16, 128);
}

static void amx_item(void *vc, int64_t item, int worker) {
    (void)worker;
    const amx_ctx *c = vc;
    int64_t p = item / c->rblocks, r0 = (item % c->rblocks) * AMX_MR;
    int rows = (int)(c->m - r0 < AMX_MR ? c->m - r0 : AMX_MR);
    int32_t scratch[AMX_MR * 32] __attribute__((aligned(64)));
    size_t esz = out_size(c->e.out_kind);
    char *rowptr[AMX_MR];
    for (int i = 0; i < rows; i++) rowptr[i] = c->y + ((size_t)(r0 + i) * (size_t)c->ldy + (size_t)(p * NR)) * esz;
    amx_configure(AMX_MR);
    for (int j = 0; j < 4; j += 2) {
        int64_t n0 = p * NR + j * 16;
        if (n0 >= c->e.n) break;
        amx_32x32(c, r0, p, j, scratch);
        for (int jj = 0; jj < 2 && n0 + jj * 16 < c->e.n; jj++)
            epilogue_block(&c->e, (const __m512i *)(scratch + jj * 16), 2, rows, n0 + jj * 16,
                           c->pt ? c->pt + r0 : NULL, rowptr, (size_t)((j + jj) * 16));
    }
    _tile_release();
}

/* The decode item (m <= AMX_DECODE_MAX rows): every row x one 64-column panel p. Per k-block one A tile
 * (tmm4, m rows x 64 codes) against the panel's four B tiles, into four m x 16 int32 accumulators
 * (tmm0-3: each weight byte is loaded once for all the rows, no tile row is wasted); B tiles cycle
 * through tmm5-7. The accumulators go through an m x 64 int32 scratch into the epilogue. */
static void amx_decode_item(void *vc, int64_t p, int worker) {
    (void)worker;
    const amx_ctx *c = vc;
    int rows = (int)c->m;
    int32_t scratch[AMX_DECODE_MAX * 64] __attribute__((aligned(64)));
    size_t esz = out_size(c->e.out_kind);
    char *rowptr[AMX_DECODE_MAX];
    for (int i = 0; i < rows; i++) rowptr[i] = c->y + ((size_t)i * (size_t)c->ldy + (size_t)(p * NR)) * esz;
    const int8_t *b = c->w + p * c->kp * NR;   /* block j of k-block kb at b + j * kp * 16 + kb * 1024 */
    int64_t bj = c->kp * 16;
    amx_configure(rows);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t kb = 0; kb < c->kp / 64; kb++) {
        const int8_t *bk = b + kb * 1024;
        _tile_loadd(4, c->a + kb * 64, c->kp);
        _tile_loadd(5, bk, 64);
        _tile_dpbusd(0, 4, 5);
        _tile_loadd(6, bk + bj, 64);
        _tile_dpbusd(1, 4, 6);
        _tile_loadd(7, bk + 2 * bj, 64);
        _tile_dpbusd(2, 4, 7);
        _tile_loadd(5, bk + 3 * bj, 64);
        _tile_dpbusd(3, 4, 5);
    }
    /* scratch [rows][64 int32]: column block j at row * 64 + j * 16 */
    _tile_stored(0, scratch, 256);
    _tile_stored(1, scratch + 16, 256);
    _tile_stored(2, scratch + 32, 256);
    _tile_stored(3, scratch + 48, 256);
    _tile_release();
    for (int j = 0; j < 4 && p * NR + j * 16 < c->e.n; j++)
        epilogue_block(&c->e, (const __m512i *)(scratch + j * 16), 4, rows, p * NR + j * 16, c->pt, rowptr,
                       (size_t)(j * 16));
}

/* w8a8_linear's contract (in_kind, out_kind, deq, pertoken, fbias, scale_out as there) on a weight packed by
 * w8a8_amx_pack; comp as w8a8_amx_pack wrote it (or with an int32 bias folded in). */
int w8a8_amx_linear(int in_kind, const void *x, int64_t m, int64_t k, int64_t ldx, const float *recip,
                    const float *offset, const int8_t *w, const int32_t *comp, int64_t n, const float *deq,
                    const float *pertoken, const float *fbias, int out_kind, void *y, int64_t ldy, float *scale_out,
                    int threads) {
    int64_t kp = round64(k), plan[3] = {0, 0, m};
    if (m > 0 && n > 0) w8a8_amx_plan(m, n, plan);
    int64_t mp = plan[2];
    linear_state st;
    int rc = linear_begin(in_kind, x, m, k, ldx, recip, offset, n, pertoken, out_kind, ldy, scale_out, threads, kp,
                          mp, &st);
    if (rc != 0) return rc == 1 ? 0 : rc;
    amx_ctx ac = {st.a, kp, w, {deq, fbias, comp, n, out_kind, 0, NULL}, st.token, y, ldy, m, mp / AMX_MR};
    pool_run(plan[0] == 0 ? amx_decode_item : amx_item, &ac, plan[1], threads);
    return linear_end(&st, 0);
}
#else
int w8a8_has_amx(void) { return 0; }
#endif

/* ------------------------------------------------------------------------------------------------
 * the MoE experts: per expert, GEMM1 (W13) -> bf16 -> clamped SwiGLU -> per-row requant -> GEMM2 (W2)
 * -> bf16, scattered to the rows' token-major slots
 * ---------------------------------------------------------------------------------------------- */

typedef struct {
    const int8_t *xq;        /* int8 [T][h] token codes */
    const float *xs;         /* [T] token scales */
    const int64_t *tokens;   /* [M] token of each expert-sorted row */
    const int64_t *order;    /* [M] its flat slot (t * k + j): the output row */
    const int64_t *runs;     /* [R][3] expert, start, stop */
    int64_t h, i;            /* hidden, intermediate */
    const int8_t *w13;       /* packed, per expert w13_stride bytes */
    const int32_t *comp13;   /* [E][panels(2i) * 64] */
    const float *s13;        /* [E][2i] */
    const int8_t *w2;
    const int32_t *comp2;    /* [E][panels(h) * 64] */
    const float *s2;         /* [E][h] */
    int has_limit;
    float limit;
    int scale_rcp, codes_rcp; /* the requant's variant (swiglu_quant_row) */
    uint16_t *out;           /* bf16 [M][h] */
    int *bad;
    int64_t rows_per_chunk;
} moe_ctx;

/* float64 exp, 8 lanes, for arguments in [-104, 89] (NaN passes through): x = k ln2 / 128 + r,
 * |r| <= ln2 / 256, reduced with two FMAs (ln2 / 128 split in a head and a tail); exp(r) - 1 by a
 * degree-5 polynomial (truncation error < 6e-19); 2^(j / 128) from a double-double table made with
 * long double exp2l; one final rounding: exp(x) = 2^(k >> 7) (T_hi + (T_hi q + T_lo)). About 0.5 ulp,
 * the accuracy class of glibc's and NumPy's exp: rounded to fp32 it agrees with NumPy's float64 exp
 * rounded to fp32 except where the true value lies within ~2^-29 relative of an fp32 rounding boundary
 * (tests/backends/test_torch_cpu_vnni.py compares them on 2^22 arguments). */
static double EXP_HI[128], EXP_LO[128];
static pthread_once_t exp_once = PTHREAD_ONCE_INIT;

static void exp_table(void) {
    for (int j = 0; j < 128; j++) {
        long double v = exp2l((long double)j / 128.0L);
        EXP_HI[j] = (double)v;
        EXP_LO[j] = (double)(v - (long double)EXP_HI[j]);
    }
}

static inline __m512d exp_pd(__m512d x) {
    const __m512d n_ln2 = _mm512_set1_pd(0x1.71547652b82fep7);   /* 128 / ln 2 */
    const __m512d c1 = _mm512_set1_pd(0x1.62e42fefa3800p-8);     /* ln 2 / 128, head (trailing zeros) */
    const __m512d c2 = _mm512_set1_pd(0x1.ef35793c76730p-52);    /* ln 2 / 128 - head */
    __m512d kf = _mm512_roundscale_pd(_mm512_mul_pd(x, n_ln2), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512d r = _mm512_fnmadd_pd(kf, c1, x);
    r = _mm512_fnmadd_pd(kf, c2, r);
    __m512i k = _mm512_cvtpd_epi64(kf);
    __m512i j = _mm512_and_si512(k, _mm512_set1_epi64(127));
    __m512i e = _mm512_srai_epi64(k, 7);
    __m512d thi = _mm512_i64gather_pd(j, EXP_HI, 8), tlo = _mm512_i64gather_pd(j, EXP_LO, 8);
    __m512d p = _mm512_fmadd_pd(r, _mm512_set1_pd(1.0 / 120.0), _mm512_set1_pd(1.0 / 24.0));
    p = _mm512_fmadd_pd(r, p, _mm512_set1_pd(1.0 / 6.0));
    p = _mm512_fmadd_pd(r, p, _mm512_set1_pd(0.5));
    __m512d q = _mm512_fmadd_pd(_mm512_mul_pd(r, r), p, r);          /* exp(r) - 1 */
    __m512d y = _mm512_add_pd(thi, _mm512_fmadd_pd(thi, q, tlo));
    __m512d scale = _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_add_epi64(e, _mm512_set1_epi64(1023)), 52));
    return _mm512_mul_pd(y, scale);                                   /* exact: a power of two, no subnormal */
}

/* golden exp in fp32: float64 exp of the argument clamped to [-104, 89], rounded once to fp32 */
static inline __m512 exp32_16(__m512 x) {
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    __m512 c = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
    __m512d lo = exp_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(c)));
    __m512d hi = exp_pd(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(c), 1))));
    __m512 y = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi), 1);
    return _mm512_mask_mov_ps(y, nan, x);   /* NaN stays NaN */
}

/* y = exp32(x) for n floats (tests: against NumPy's float64 exp rounded to fp32) */
int w8a8_exp32(const float *x, float *y, int64_t n) {
    pthread_once(&exp_once, exp_table);
    unsigned csr = _mm_getcsr();
    _mm_setcsr(0x1F80);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m, exp32_16(_mm512_maskz_loadu_ps(m, x + i)));
    }
    _mm_setcsr(csr);
    return 0;
}

/* one row: o = silu(gate) * up (with the DeepSeek-V4 clamp), then the per-row requant of the
 * dequant_swiglu_quant kernel the tiling picks (w8a8.variants.swiglu): with m = max|o|, the scale
 * s = m / 127 (scale_rcp = 0, "amax_div") or m * fp32(1/127) (1, "amax_mul_rcp"), the codes
 * q = rint(o / s) (codes_rcp = 0, "div_scale") or rint(o * fp32(1 / s)) (1, "mul_rcp"); sat127, NaN -> 0 */
static float swiglu_quant_row(float *g, int64_t i, int has_limit, float limit, int64_t kp, uint8_t *dst, int scale_rcp,
                              int codes_rcp) {
    float *gate = g, *up = g + i;
    __m512 mx = _mm512_setzero_ps();
    const __m512i absmask = _mm512_set1_epi32(0x7FFFFFFF);
    const __m512 one = _mm512_set1_ps(1.0f), lim = _mm512_set1_ps(limit), nlim = _mm512_set1_ps(-limit);
    for (int64_t j = 0; j < i; j += 16) {
        __mmask16 m = tail_mask(i - j);
        __m512 a = _mm512_maskz_loadu_ps(m, gate + j), u = _mm512_maskz_loadu_ps(m, up + j);
        if (has_limit) {
            a = _mm512_min_ps(a, lim);
            u = _mm512_min_ps(_mm512_max_ps(u, nlim), lim);
        }
        __m512 e = exp32_16(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT_MIN))));
        __m512 o = _mm512_mul_ps(_mm512_div_ps(a, _mm512_add_ps(e, one)), u);
        _mm512_mask_storeu_ps(gate + j, m, o);
        mx = _mm512_max_ps(mx, _mm512_maskz_mov_ps(m, _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(o), absmask))));
    }
    float amax = _mm512_reduce_max_ps(mx);
    volatile float one_s = 1.0f, q32 = 127.0f;
    float s = scale_rcp ? amax * (one_s / q32) : amax / q32;
    __m512 vs = _mm512_set1_ps(s), vr = _mm512_set1_ps(one_s / s);
    for (int64_t j = 0; j < i; j += 16) {
        __mmask16 m = tail_mask(i - j);
        __m512 o = _mm512_maskz_loadu_ps(m, gate + j);
        __m512 t = codes_rcp ? _mm512_mul_ps(o, vr) : _mm512_div_ps(o, vs);
        store_u8(dst + j, to_codes(t, -127.0f, 127.0f), m);
    }
    for (int64_t j = i; j < kp; j++) dst[j] = 128;
    return s;
}

/* The chain's SwiGLU + requant on fp32 rows g [rows][2i] (tests: against the golden's
 * dequant_swiglu_quant): int8 codes [rows][i] and scales [rows]. g is overwritten. */
int w8a8_swiglu_quant(float *g, int64_t rows, int64_t i, int has_limit, float limit, int scale_rcp, int codes_rcp,
                      int8_t *codes, float *scales) {
    if (rows < 0 || i <= 0) return -1;
    pthread_once(&exp_once, exp_table);
    unsigned csr = _mm_getcsr();
    _mm_setcsr(0x1F80);
    int64_t kp = round4(i);
    uint8_t *u = malloc((size_t)kp);
    if (u == NULL) { _mm_setcsr(csr); return -3; }
    for (int64_t r = 0; r < rows; r++) {
        scales[r] = swiglu_quant_row(g + r * 2 * i, i, has_limit, limit, kp, u, scale_rcp, codes_rcp);
        for (int64_t j = 0; j < i; j++) codes[r * i + j] = (int8_t)(u[j] ^ 0x80);
    }
    free(u);
    _mm_setcsr(csr);
    return 0;
}

static void moe_item(void *vc, int64_t item, int worker) {
    moe_ctx *c = vc;
    int64_t ex = c->runs[3 * item], start = c->runs[3 * item + 1], stop = c->runs[3 * item + 2];
    int64_t h = c->h, i = c->i, i2 = 2 * i;
    int64_t kp1 = round4(h), kp2 = round4(i);
    int64_t p1 = panels_of(i2), p2 = panels_of(h);
    const int8_t *w13 = c->w13 + ex * (p1 * kp1 * NR);
    const int8_t *w2 = c->w2 + ex * (p2 * kp2 * NR);
    int64_t rc = c->rows_per_chunk;
    /* per worker: a1 [rc][kp1] u8 (+ k-group-major copy), g [rc][2i] fp32, a2 [rc][kp2] u8 (+ copy),
     * scales [rc] x 2, output row pointers [rc] x 2 */
    size_t a1b = ((size_t)(rc * kp1) + 63) & ~(size_t)63, gb = ((size_t)(rc * i2) * 4 + 63) & ~(size_t)63;
    size_t a2b = ((size_t)(rc * kp2) + 63) & ~(size_t)63, sb = ((size_t)rc * 8 + 63) & ~(size_t)63;
    char *base = arena_get(&worker_arena[worker], 2 * a1b + gb + 2 * a2b + sb + 2 * (size_t)rc * sizeof(char *));
    if (base == NULL) { *c->bad = -3; return; }
    uint8_t *a1 = (uint8_t *)base, *at1 = a1 + a1b;
    float *g = (float *)(at1 + a1b);
    uint8_t *a2 = (uint8_t *)g + gb, *at2 = a2 + a2b;
    float *s_in = (float *)(at2 + a2b);
    float *s_act = s_in + rc;
    char **rows1 = (char **)((char *)s_in + sb), **rows2 = rows1 + rc;
    epi e1 = {c->s13 + ex * i2, NULL, c->comp13 + ex * (p1 * NR), i2, 4, 1, c->bad};
    epi e2 = {c->s2 + ex * h, NULL, c->comp2 + ex * (p2 * NR), h, 1, 1, c->bad};
    for (int64_t r0 = start; r0 < stop; r0 += rc) {
        int64_t rows = stop - r0 < rc ? stop - r0 : rc;
        for (int64_t r = 0; r < rows; r++) {
            int64_t t = c->tokens[r0 + r];
            codes_row(c->xq + t * h, h, kp1, a1 + r * kp1);
            s_in[r] = c->xs[t];
        }
        const uint8_t *t1 = NULL, *t2 = NULL;
        if (small_rows(rows)) {
            to_kgroup_major(a1, kp1, rows, kp1, at1);
            t1 = at1;
        }
        for (int64_t r = 0; r < rows; r++) rows1[r] = (char *)(g + r * i2);
        for (int64_t p = 0; p < p1; p++) panel_rows(a1, kp1, t1, rows, w13 + p * kp1 * NR, kp1 / 4, &e1, p, s_in, rows1);
        for (int64_t r = 0; r < rows; r++) {
            s_act[r] = swiglu_quant_row(g + r * i2, i, c->has_limit, c->limit, kp2, a2 + r * kp2, c->scale_rcp,
                                        c->codes_rcp);
            if (!isfinite(s_act[r])) *c->bad = 1;
        }
        if (small_rows(rows)) {
            to_kgroup_major(a2, kp2, rows, kp2, at2);
            t2 = at2;
        }
        /* GMM2's rows go straight to their token-major slots */
        for (int64_t r = 0; r < rows; r++) rows2[r] = (char *)(c->out + (size_t)c->order[r0 + r] * (size_t)h);
        for (int64_t p = 0; p < p2; p++) panel_rows(a2, kp2, t2, rows, w2 + p * kp2 * NR, kp2 / 4, &e2, p, s_act, rows2);
    }
}

/* The routed experts of the W8A8 MoE layer (see moe_ctx); w13 / w2 packed with w8a8_pack per expert,
 * consecutively. Returns 1 if any intermediate (GMM1 / GMM2 output, requant scale) was not finite. */
int w8a8_moe_experts(const int8_t *xq, const float *xs, const int64_t *tokens, const int64_t *order,
                     const int64_t *runs, int64_t nruns, int64_t h, int64_t i, const int8_t *w13,
                     const int32_t *comp13, const float *s13, const int8_t *w2, const int32_t *comp2, const float *s2,
                     int has_limit, float limit, int scale_rcp, int codes_rcp, uint16_t *out, int threads) {
    if (h <= 0 || i <= 0 || nruns < 0 || h >= (1 << 17) || i >= (1 << 17)) return -1;
    pthread_once(&exp_once, exp_table);
    unsigned csr = _mm_getcsr();
    _mm_setcsr(0x1F80);
    int bad = 0;
    moe_ctx c = {xq, xs, tokens, order, runs, h, i, w13, comp13, s13, w2, comp2, s2, has_limit, limit, scale_rcp,
                 codes_rcp, out, &bad, 96};
    pthread_mutex_lock(&arena_lock);
    pool_run(moe_item, &c, nruns, threads);
    pthread_mutex_unlock(&arena_lock);
    _mm_setcsr(csr);
    return bad < 0 ? bad : (bad ? 1 : 0);
}
