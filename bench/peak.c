/* Ceilings of this CPU, measured by bench/peak.py (built with the system C compiler, -O2 -march=native).
 *
 *   peak <threads> [iters]               compute: independent chains of every int8 dot-product
 *                                        instruction (AVX-512 VNNI, AMX TDPBSSD), of AMX bf16
 *                                        (TDPBF16PS) and of fp64 FMAs; one line per unit,
 *                                        "<unit> <ops per second>"
 *   peak bw <threads> <bytes> <seconds>  memory: every thread reads its own <bytes> buffer (touched by
 *                                        that thread first) over and over, 64-byte loads summed into
 *                                        independent accumulators (a STREAM-like read-only kernel: what a
 *                                        GEMM does with its weights), passes with and without software
 *                                        prefetch; "bw_read <bytes per second>" of the best of the timed
 *                                        passes of all threads together */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/syscall.h>

static long ITERS = 20000000;
#ifndef PF_LONGS
#define PF_LONGS 512    /* the read kernel's software prefetch distance: 4 KiB */
#endif
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static volatile int sink;

#if defined(__AVX512F__)
static void *fp64_worker(void *arg) {
    (void)arg;
    /* distinct starting values: identical chains would be merged into one by the compiler (CSE) */
    __m512d a0 = _mm512_set1_pd(1.00), a1 = _mm512_set1_pd(1.01), a2 = _mm512_set1_pd(1.02), a3 = _mm512_set1_pd(1.03);
    __m512d a4 = _mm512_set1_pd(1.04), a5 = _mm512_set1_pd(1.05), a6 = _mm512_set1_pd(1.06), a7 = _mm512_set1_pd(1.07);
    __m512d a8 = _mm512_set1_pd(1.08), a9 = _mm512_set1_pd(1.09), a10 = _mm512_set1_pd(1.10), a11 = _mm512_set1_pd(1.11);
    __m512d a12 = _mm512_set1_pd(1.12), a13 = _mm512_set1_pd(1.13), a14 = _mm512_set1_pd(1.14), a15 = _mm512_set1_pd(1.15);
    const __m512d m = _mm512_set1_pd(0.9999999), c = _mm512_set1_pd(1e-9);
    for (long i = 0; i < ITERS; i++) {
        a0 = _mm512_fmadd_pd(a0, m, c); a1 = _mm512_fmadd_pd(a1, m, c); a2 = _mm512_fmadd_pd(a2, m, c);
        a3 = _mm512_fmadd_pd(a3, m, c); a4 = _mm512_fmadd_pd(a4, m, c); a5 = _mm512_fmadd_pd(a5, m, c);
        a6 = _mm512_fmadd_pd(a6, m, c); a7 = _mm512_fmadd_pd(a7, m, c); a8 = _mm512_fmadd_pd(a8, m, c);
        a9 = _mm512_fmadd_pd(a9, m, c); a10 = _mm512_fmadd_pd(a10, m, c); a11 = _mm512_fmadd_pd(a11, m, c);
        a12 = _mm512_fmadd_pd(a12, m, c); a13 = _mm512_fmadd_pd(a13, m, c); a14 = _mm512_fmadd_pd(a14, m, c);
        a15 = _mm512_fmadd_pd(a15, m, c);
    }
    __m512d s = _mm512_add_pd(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)),
                              _mm512_add_pd(_mm512_add_pd(a4, a5), _mm512_add_pd(a6, a7)));
    s = _mm512_add_pd(s, _mm512_add_pd(_mm512_add_pd(_mm512_add_pd(a8, a9), _mm512_add_pd(a10, a11)),
                                      _mm512_add_pd(_mm512_add_pd(a12, a13), _mm512_add_pd(a14, a15))));
    sink = (int)_mm512_reduce_add_pd(s);
    return NULL;
}
#define FP64_OPS_PER_ITER (16.0 * 8 * 2)
#endif

#if defined(__AVX512VNNI__)
static void *int8_worker(void *arg) {
    (void)arg;
    /* distinct starting values: identical chains would be merged into one by the compiler (CSE) */
    __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2), a3 = _mm512_set1_epi32(3);
    __m512i a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5), a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7);
    __m512i a8 = _mm512_set1_epi32(8), a9 = _mm512_set1_epi32(9), a10 = _mm512_set1_epi32(10), a11 = _mm512_set1_epi32(11);
    __m512i a12 = _mm512_set1_epi32(12), a13 = _mm512_set1_epi32(13), a14 = _mm512_set1_epi32(14), a15 = _mm512_set1_epi32(15);
    const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
    for (long i = 0; i < ITERS; i++) {
        a0 = _mm512_dpbusd_epi32(a0, u, s); a1 = _mm512_dpbusd_epi32(a1, u, s); a2 = _mm512_dpbusd_epi32(a2, u, s);
        a3 = _mm512_dpbusd_epi32(a3, u, s); a4 = _mm512_dpbusd_epi32(a4, u, s); a5 = _mm512_dpbusd_epi32(a5, u, s);
        a6 = _mm512_dpbusd_epi32(a6, u, s); a7 = _mm512_dpbusd_epi32(a7, u, s); a8 = _mm512_dpbusd_epi32(a8, u, s);
        a9 = _mm512_dpbusd_epi32(a9, u, s); a10 = _mm512_dpbusd_epi32(a10, u, s); a11 = _mm512_dpbusd_epi32(a11, u, s);
        a12 = _mm512_dpbusd_epi32(a12, u, s); a13 = _mm512_dpbusd_epi32(a13, u, s); a14 = _mm512_dpbusd_epi32(a14, u, s);
        a15 = _mm512_dpbusd_epi32(a15, u, s);
    }
    __m512i t = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                 _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
    t = _mm512_add_epi32(t, _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)),
                                             _mm512_add_epi32(_mm512_add_epi32(a12, a13), _mm512_add_epi32(a14, a15))));
    sink = _mm512_reduce_add_epi32(t);
    return NULL;
}
#define INT8_OPS_PER_ITER (16.0 * 64 * 2)
#endif

#if defined(__AMX_INT8__) && defined(__AMX_TILE__)
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
typedef struct { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } tilecfg;
static int amx_ok = 0;
static void *amx_worker(void *arg) {
    (void)arg;
    tilecfg cfg; memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) { cfg.rows[i] = 16; cfg.colsb[i] = 64; }
    _tile_loadconfig(&cfg);
    static int8_t buf[16 * 64] __attribute__((aligned(64)));
    _tile_loadd(4, buf, 64); _tile_loadd(5, buf, 64); _tile_loadd(6, buf, 64); _tile_loadd(7, buf, 64);
    /* tile instructions are not subject to CSE: four independent accumulators keep the unit busy */
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    for (long i = 0; i < ITERS / 4; i++) {
        _tile_dpbssd(0, 4, 5); _tile_dpbssd(1, 4, 6); _tile_dpbssd(2, 7, 5); _tile_dpbssd(3, 7, 6);
    }
    static int32_t out[16 * 16] __attribute__((aligned(64)));
    _tile_stored(0, out, 64);
    _tile_release();
    sink = out[0];
    return NULL;
}
/* one loop iteration: four TDPBSSD of 16 x 16 outputs x 64 multiply-adds each */
#define AMX_OPS_PER_ITER (4 * 16.0 * 16 * 64 * 2)
#endif

#if defined(__AMX_BF16__) && defined(__AMX_TILE__)
static void *amx_bf16_worker(void *arg) {
    (void)arg;
    tilecfg cfg; memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) { cfg.rows[i] = 16; cfg.colsb[i] = 64; }
    _tile_loadconfig(&cfg);
    static uint16_t buf[16 * 32] __attribute__((aligned(64)));
    for (int i = 0; i < 16 * 32; i++) buf[i] = 0x3F80;   /* bf16 1.0: finite sums */
    _tile_loadd(4, buf, 64); _tile_loadd(5, buf, 64); _tile_loadd(6, buf, 64); _tile_loadd(7, buf, 64);
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    for (long i = 0; i < ITERS / 4; i++) {
        _tile_dpbf16ps(0, 4, 5); _tile_dpbf16ps(1, 4, 6); _tile_dpbf16ps(2, 7, 5); _tile_dpbf16ps(3, 7, 6);
    }
    static float out[16 * 16] __attribute__((aligned(64)));
    _tile_stored(0, out, 64);
    _tile_release();
    sink = (int)out[0];
    return NULL;
}
/* one loop iteration: four TDPBF16PS of 16 x 16 outputs x 32 bf16 pairs, a multiply and an add each */
#define AMX_BF16_FLOPS_PER_ITER (4 * 16.0 * 16 * 32 * 2)
#endif

/* -- memory bandwidth ---------------------------------------------------------------------------- */

typedef struct { size_t bytes; double seconds; pthread_barrier_t *bar; double best; volatile long sum; } bw_arg;

/* one pass over p[0, n): mode 0 one sequential stream, hardware prefetch only; mode 1 four streams at
 * once (the quarters of the buffer, as a GEMM reads the four 16-column blocks of a weight panel), each
 * with a software prefetch into L2 PF_LONGS ahead. The best of both is the ceiling: a kernel that
 * prefetches must not beat it. */
static long read_pass(const long *p, size_t n, int mode) {
#if defined(__AVX512F__)
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    if (mode == 1) {
        size_t q = (n / 4) & ~(size_t)7;
        const long *p1 = p + q, *p2 = p + 2 * q, *p3 = p + 3 * q;
        for (; i + 8 <= q; i += 8) {
            _mm_prefetch((const char *)(p + i + PF_LONGS), _MM_HINT_T1);
            _mm_prefetch((const char *)(p1 + i + PF_LONGS), _MM_HINT_T1);
            _mm_prefetch((const char *)(p2 + i + PF_LONGS), _MM_HINT_T1);
            _mm_prefetch((const char *)(p3 + i + PF_LONGS), _MM_HINT_T1);
            s0 = _mm512_add_epi64(s0, _mm512_load_si512((const void *)(p + i)));
            s1 = _mm512_add_epi64(s1, _mm512_load_si512((const void *)(p1 + i)));
            s2 = _mm512_add_epi64(s2, _mm512_load_si512((const void *)(p2 + i)));
            s3 = _mm512_add_epi64(s3, _mm512_load_si512((const void *)(p3 + i)));
        }
        i = 4 * q;
    } else {
        for (; i + 32 <= n; i += 32) {
            s0 = _mm512_add_epi64(s0, _mm512_load_si512((const void *)(p + i)));
            s1 = _mm512_add_epi64(s1, _mm512_load_si512((const void *)(p + i + 8)));
            s2 = _mm512_add_epi64(s2, _mm512_load_si512((const void *)(p + i + 16)));
            s3 = _mm512_add_epi64(s3, _mm512_load_si512((const void *)(p + i + 24)));
        }
    }
    long s = _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
#else
    long s = 0, t = 0, u = 0, v = 0;
    size_t i = 0;
    (void)mode;
    for (; i + 4 <= n; i += 4) { s += p[i]; t += p[i + 1]; u += p[i + 2]; v += p[i + 3]; }
    s += t + u + v;
#endif
    for (; i < n; i++) s += p[i];
    return s;
}

static void *bw_worker(void *arg) {
    bw_arg *a = (bw_arg *)arg;
    size_t n = a->bytes / sizeof(long);
    size_t bytes = (n * sizeof(long) + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
    long *p = aligned_alloc(2u << 20, bytes);
    if (p == NULL) { a->best = 0; pthread_barrier_wait(a->bar); return NULL; }
#if defined(MADV_HUGEPAGE) && !defined(NO_HUGE)
    madvise(p, bytes, MADV_HUGEPAGE);   /* as the packed weights of torch-cpu's kernels (fewer TLB misses) */
#endif
    for (size_t i = 0; i < n; i++) p[i] = (long)i;   /* first touch: this thread's pages */
    long s = read_pass(p, n, 0);                       /* warm (caches / TLB) */
    pthread_barrier_wait(a->bar);
    double best = 1e30, t_end = now() + a->seconds;
    int passes = 0;
    while (passes < 6 || now() < t_end) {   /* passes alternate between the two modes of read_pass */
        double t0 = now();
        s += read_pass(p, n, passes & 1);
        double dt = now() - t0;
        if (dt < best) best = dt;
        passes++;
    }
    a->sum = s;
    a->best = best;
    free(p);
    return NULL;
}

static int bw_main(int threads, size_t bytes, double seconds) {
    pthread_t t[256];
    bw_arg a[256];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)threads);
    for (int i = 0; i < threads; i++) {
        a[i].bytes = bytes; a[i].seconds = seconds; a[i].bar = &bar; a[i].best = 0;
        pthread_create(&t[i], NULL, bw_worker, &a[i]);
    }
    double slowest = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        if (a[i].best <= 0) return 3;
        if (a[i].best > slowest) slowest = a[i].best;
    }
    /* every thread's best pass, the slowest of them: all threads were reading at that rate at once */
    printf("bw_read %.6e\n", (double)(bytes / sizeof(long) * sizeof(long)) * threads / slowest);
    return 0;
}

static double run(void *(*fn)(void *), int threads, double ops_per_iter, long iters) {
    pthread_t t[256];
    double t0 = now();
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, fn, NULL);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    return ops_per_iter * (double)iters * threads / (now() - t0);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "bw") == 0) {
        if (argc < 5) return 2;
        int threads = atoi(argv[2]);
        long bytes = atol(argv[3]);
        double seconds = atof(argv[4]);
        if (threads < 1 || threads > 256 || bytes < 4096 || seconds < 0) return 2;
        return bw_main(threads, (size_t)bytes, seconds);
    }
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    if (argc > 2) ITERS = atol(argv[2]);
    if (threads < 1 || threads > 256) return 2;
#if defined(__AVX512F__)
    printf("fp64_fma_avx512 %.6e\n", run(fp64_worker, threads, FP64_OPS_PER_ITER, ITERS));
#endif
#if defined(__AVX512VNNI__)
    printf("int8_vnni_avx512 %.6e\n", run(int8_worker, threads, INT8_OPS_PER_ITER, ITERS));
#endif
#if defined(__AMX_INT8__) && defined(__AMX_TILE__)
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0) {
        amx_ok = 1;
        printf("int8_amx %.6e\n", run(amx_worker, threads, AMX_OPS_PER_ITER, ITERS / 4));
    }
#endif
#if defined(__AMX_BF16__) && defined(__AMX_TILE__) && defined(__AMX_INT8__)
    if (amx_ok) printf("bf16_amx %.6e\n", run(amx_bf16_worker, threads, AMX_BF16_FLOPS_PER_ITER, ITERS / 4));
#endif
    return 0;
}
