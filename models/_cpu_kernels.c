/* The two passes of `attend` (models/attention.py) that torch's eager operations cannot fuse,
 * for float32 on the CPU; models/cpu_kernels.py is the Python side and says when each is used.
 *
 * fold_chunk:   one read of a chunk's base-2 logits x (B, c): each row's Σ 2^x and its k
 *               largest x (by block maxima), where torch read the chunk four times and wrote
 *               it once (a block-max pass, exp2 in place, a scatter, a sum) and ran two top-ks.
 * exact_scores: the winners' q·k in float64, the keys' columns taken in ascending order, so a
 *               (d, N) layout is read row by row instead of one cache line per element.
 * positive_support: a scored head's support, the columns of each row's positive scores, and
 *               −inf written over the rest, in one read of the row for each, where numpy's
 *               comparisons, nonzero and masked fill read a (B, N) batch eight times.
 * support_top:  a scored head's top k per row among the columns it holds (its support), one read
 *               of them, where numpy's argpartition and lexsort read a row's several times.
 * sweep_entropy: the mixture's entropy −Σ w log w from the heads' kept scores in one read of
 *               them (a head of few books at those books alone), w summed a cache-sized piece
 *               of a row at a time, where torch's passes read and wrote (B, N) float64 a
 *               dozen times.
 *
 * Every result is the same on every x86 CPU: no fused multiply-add (-ffp-contract=off in
 * setup.py), fixed lanes for every sum, and the same scalar code under each target clone.
 * The GIL is released while the kernels run; threads are plain pthreads, split by rows (or a
 * row's blocks, or the winners), so no OpenMP runtime is loaded beside torch's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 64     /* columns per block: models/attention_chunks.py BLOCK */
#define LANES 8      /* floats per vector: a block is 8 */
#define MAX_THREADS 64
#define MAX_K 4096 /* a row's top k lives on the stack (row_top); models/cpu_kernels.py uses ≤ 128 */
#define DIMS 4 /* key rows a pass of exact_by_dims reads side by side */
#define UNSHIFTED 64.0f /* |max x| up to this: 2^x summed as it is (models/attention.py) */

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CLONES
#endif

/* GCC's vector extensions, 8 lanes: one AVX2 register (the lower half of an AVX-512 one, two SSE
 * ones). 16-lane vectors were one AVX-512 register, but where the target has no
 * 64-byte vectors (AVX2) GCC kept them on the stack and compared and shuffled them lane by lane
 * (vcomiss, cmov, vinsertps): the AVX2 clone's fold ran ~10x slower than torch's exp2 over the
 * same logits on an AMD Zen 3 (2026-12-04). The lanes, and each lane's order of sums, are those
 * of the 16-lane code: the same bits. */
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef double v4d __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));
#define INLINE static inline __attribute__((always_inline))
#pragma GCC diagnostic ignored "-Wpsabi" /* inlined everywhere: no vector crosses a call */

INLINE v8f pick(v8i mask, v8f a, v8f b) { return (v8f)(((v8i)a & mask) | ((v8i)b & ~mask)); }
INLINE v8f vmax(v8f a, v8f b) { return pick(a > b, a, b); }

/* 2^x for float32, 8 at a time, Cephes' exp2f: x = r + f with r the nearest integer (rounded
 * by adding and taking away 1.5 · 2^23) and |f| ≤ 1/2, a degree-6 polynomial for 2^f (≤ 2 ulp),
 * times 2^r from the exponent bits. Below −126 it returns 0, and −inf gives 0. */
INLINE v8f exp2_lanes(v8f x) {
    const v8f zero = {0}, lo = zero - 127.0f, hi = zero + 127.0f;
    x = pick(x < lo, lo, x);
    x = pick(x > hi, hi, x);
    v8f r = (x + 12582912.0f) - 12582912.0f;
    v8f f = x - r;
    v8f p = f * 1.535336188319500e-4f + 1.339887440266574e-3f;
    p = p * f + 9.618437357674640e-3f;
    p = p * f + 5.550332471162809e-2f;
    p = p * f + 2.402264791363012e-1f;
    p = p * f + 6.931472028550421e-1f;
    p = p * f + 1.0f;
    v8i e = (__builtin_convertvector(r, v8i) + 127) << 23; /* 0 for r = −127: flushed to 0 */
    return p * (v8f)e;
}

/* One value's 2^x, by the same lanes: the same bits as the term fold_segment summed for it. */
static float exp2_one(float x) {
    const v8f zero = {0};
    return exp2_lanes(zero + x)[0];
}

/* One segment of one row: blocks [b0, b1) of x (c = whole blocks), each block's max into
 * bmax[b], and Σ 2^(x − shift) over the segment: each term in float64 at once, in 16 fixed
 * lanes (column mod 16, acc[lane / 4][lane % 4]) summed in order at the end. */
CLONES static double fold_segment(const float *x, float *bmax, int64_t b0, int64_t b1,
                                  float shift) {
    v4d acc[4] = {{0}};
    for (int64_t b = b0; b < b1; b++) {
        v8f v[BLOCK / LANES];
        memcpy(v, x + b * BLOCK, sizeof v);
        v8f m = v[0];
        for (int g = 1; g < BLOCK / LANES; g++) m = vmax(m, v[g]);
        for (int g = 0; g < BLOCK / LANES; g++) {
            v8f e = exp2_lanes(v[g] - shift);
            acc[2 * (g % 2)] += __builtin_convertvector(__builtin_shufflevector(e, e, 0, 1, 2, 3), v4d);
            acc[2 * (g % 2) + 1] += __builtin_convertvector(__builtin_shufflevector(e, e, 4, 5, 6, 7), v4d);
        }
        /* the block's max: the 8 lanes folded in halves */
        m = vmax(m, __builtin_shufflevector(m, m, 4, 5, 6, 7, 0, 1, 2, 3));
        m = vmax(m, __builtin_shufflevector(m, m, 2, 3, 0, 1, 6, 7, 4, 5));
        m = vmax(m, __builtin_shufflevector(m, m, 1, 0, 3, 2, 5, 4, 7, 6));
        bmax[b] = m[0];
    }
    double total = 0.0;
    for (int a = 0; a < 4; a++)
        for (int j = 0; j < 4; j++) total += acc[a][j];
    return total;
}


/* Run fn on `threads` jobs, the first on the calling thread, the others on threads of their own. */
static void run_split(void *(*fn)(void *), void *jobs, size_t job_size, int threads) {
    pthread_t ids[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int t = 1; t < threads; t++)
        started[t] = pthread_create(&ids[t], NULL, fn, (char *)jobs + t * job_size) == 0;
    fn(jobs);
    for (int t = 1; t < threads; t++) {
        if (started[t]) pthread_join(ids[t], NULL);
        else fn((char *)jobs + t * job_size); /* no thread to be had: its share runs here */
    }
}

/* Whether (v, col) goes before (w, wcol) in a top-k list: the larger value, the lower column. */
static inline int before(float v, int64_t col, float w, int64_t wcol) {
    return v > w || (v == w && col < wcol);
}

/* (v, col) into vals/cols, n of at most k entries in that order, where it goes before the last
 * (or there is room). */
static inline void keep_top(float *vals, int64_t *cols, int64_t *n, int64_t k, float v,
                            int64_t col) {
    int64_t i = *n < k ? (*n)++ : k - 1;
    for (; i > 0 && before(v, col, vals[i - 1], cols[i - 1]); i--) {
        vals[i] = vals[i - 1];
        cols[i] = cols[i - 1];
    }
    vals[i] = v;
    cols[i] = col;
}

/* A row's k largest x, best first (the lower column first among equal values), from the k
 * blocks with the largest maxima, which hold them all (models/attention_chunks.py
 * chunk_candidates says why). Two floors keep the insertions few: the least of k groups'
 * maxima is at most the k-th largest block max (k values are at least it), and the k-th
 * largest block max at most the k-th largest x; what is below a floor is passed over. */
static void row_top(const float *x, const float *bm, int64_t nblocks, int64_t k, float *top,
                    int64_t *top_col) {
    int64_t kb = k < nblocks ? k : nblocks, nb = 0, n = 0;
    float bval[kb], floor = INFINITY;
    int64_t blocks[kb];
    memset(bval, 0, sizeof bval); /* read only once filled: for the compiler's sake */
    for (int64_t g = 0; g < kb; g++) {
        float m = -INFINITY;
        for (int64_t b = nblocks * g / kb; b < nblocks * (g + 1) / kb; b++) m = bm[b] > m ? bm[b] : m;
        floor = m < floor ? m : floor;
    }
    for (int64_t b = 0; b < nblocks; b++)
        if (bm[b] >= floor && (nb < kb || before(bm[b], b, bval[kb - 1], blocks[kb - 1])))
            keep_top(bval, blocks, &nb, kb, bm[b], b);
    floor = kb == k ? bval[kb - 1] : -INFINITY;
    for (int64_t i = 0; i < kb; i++) {
        const float *v = x + blocks[i] * BLOCK;
        for (int64_t j = 0; j < BLOCK; j++)
            if (v[j] >= floor &&
                (n < k || before(v[j], blocks[i] * BLOCK + j, top[k - 1], top_col[k - 1])))
                keep_top(top, top_col, &n, k, v[j], blocks[i] * BLOCK + j);
    }
}

typedef struct {
    const float *s;
    float *bmax, *top;
    int64_t *top_col;
    double *partial; /* (B · segs,) each segment's sum */
    int64_t ld, nblocks, k, segs, first, last; /* this thread's work items [first, last) */
} FoldJob;

static void *fold_items(void *arg) {
    FoldJob *job = (FoldJob *)arg;
    for (int64_t item = job->first; item < job->last; item++) {
        int64_t row = item / job->segs, seg = item % job->segs;
        int64_t b0 = job->nblocks * seg / job->segs, b1 = job->nblocks * (seg + 1) / job->segs;
        const float *x = job->s + row * job->ld;
        float *bm = job->bmax + row * job->nblocks;
        job->partial[item] = fold_segment(x, bm, b0, b1, 0.0f);
        if (job->segs == 1) /* a whole row: its top k now, while its logits are in cache */
            row_top(x, bm, job->nblocks, job->k, job->top + row * job->k, job->top_col + row * job->k);
    }
    return NULL;
}

/* fold_chunk(s, B, ld, c, k, top, top_col, rest, shift, threads)
 *   s       float32 (B, ld), the chunk's x in its first c columns (c whole blocks, −inf past
 *           the keys); k ≤ c
 *   top     float32 (B, k) out: each row's k largest x, descending; top_col int64 (B, k) their
 *           columns (the lowest first among equal values)
 *   rest    float64 (B,) out: Σ 2^(x − shift) over the row but its max's term
 *   shift   float64 (B,) out: 0 where the row's max is within ±UNSHIFTED or −inf, else the max
 */
static PyObject *fold_chunk(PyObject *self, PyObject *args) {
    (void)self;
    unsigned long long ps, ptop, pcol, prest, pshift;
    Py_ssize_t B, ld, c, k;
    int threads;
    if (!PyArg_ParseTuple(args, "KnnnnKKKKi", &ps, &B, &ld, &c, &k, &ptop, &pcol, &prest,
                          &pshift, &threads))
        return NULL;
    if (c % BLOCK || c <= 0 || B <= 0 || ld < c || k < 1 || k > c || k > MAX_K) {
        PyErr_SetString(PyExc_ValueError, "fold_chunk: need B > 0, c > 0 a whole number of "
                                          "blocks ≤ ld, 1 ≤ k ≤ min(c, 4096)");
        return NULL;
    }
    const float *s = (const float *)(uintptr_t)ps;
    float *top = (float *)(uintptr_t)ptop;
    double *rest = (double *)(uintptr_t)prest, *shift = (double *)(uintptr_t)pshift;
    int64_t *top_col = (int64_t *)(uintptr_t)pcol;
    int64_t nblocks = c / BLOCK;
    /* a thread pays for itself past ~2^18 logits (its start costs ~20-40 µs) */
    threads = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
    if ((int64_t)B * c < (1 << 18)) threads = 1;
    int64_t segs = B >= threads ? 1 : threads; /* one row over several threads: by its blocks */
    if (segs > nblocks) segs = nblocks;
    int64_t items = B * segs;
    if (threads > items) threads = (int)items;
    double *partial = malloc(sizeof(double) * items);
    float *bmax = malloc(sizeof(float) * B * nblocks); /* (B, c / BLOCK) each block's max */
    if (!partial || !bmax) {
        free(partial);
        free(bmax);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    FoldJob jobs[MAX_THREADS];
    for (int t = 0; t < threads; t++)
        jobs[t] = (FoldJob){s, bmax, top, top_col, partial, ld, nblocks, k, segs,
                            items * t / threads, items * (t + 1) / threads};
    run_split(fold_items, jobs, sizeof(FoldJob), threads);
    for (int64_t row = 0; row < B; row++) {
        const float *x = s + row * ld;
        float *bm = bmax + row * nblocks, *t = top + row * k;
        if (segs > 1) row_top(x, bm, nblocks, k, t, top_col + row * k);
        float m = t[0];
        double total = 0.0;
        float sh = 0.0f;
        if (m == -INFINITY || (m <= UNSHIFTED && m >= -UNSHIFTED)) {
            for (int64_t g = 0; g < segs; g++) total += partial[row * segs + g];
        } else { /* far from 0: summed again relative to the max (rare: |logit| > 44) */
            sh = m;
            total = fold_segment(x, bm, 0, nblocks, sh);
        }
        /* the max's own term leaves the sum: the caller adds it in float64 */
        rest[row] = m == -INFINITY ? total : total - (double)exp2_one(m - sh);
        shift[row] = sh;
    }
    Py_END_ALLOW_THREADS
    free(partial);
    free(bmax);
    Py_RETURN_NONE;
}

typedef struct {
    const float *q, *keys;
    int by_dims; /* (d, N) keys: dimension by dimension (exact_by_dims) */
    const int64_t *idx, *order;
    double *out;
    int64_t B, k, d, sn, sd, first, last; /* key n, dim j at keys[n·sn + j·sd] */
} ExactJob;

/* (d, N) memory: dimension by dimension, each a row of the keys read at ascending columns,
 * the winners' sums side by side (in order of column). Each winner's sum runs over j in
 * order: the same bits as key by key. Not cloned: the AVX-512 clone's gathers ran 1.15x
 * slower than scalar loads here, and 16 winners at a time in registers 1.6x slower. */
static void exact_by_dims(const ExactJob *job, const int64_t *restrict cols,
                          const int64_t *restrict rows, double *restrict acc, int64_t n) {
    const int64_t d = job->d, sd = job->sd;
    for (int64_t p = 0; p < n; p++) acc[p] = 0.0;
    for (int64_t j = 0; j < d; j += DIMS) { /* DIMS rows at once: a winner's column read once */
        const int64_t dims = d - j < DIMS ? d - j : DIMS;
        const float *restrict key = job->keys + j * sd, *restrict qj = job->q + j;
        for (int64_t p = 0; p < n; p++) {
            const float *kc = key + cols[p], *qb = qj + rows[p] * d;
            double a = acc[p];
            for (int64_t t = 0; t < dims; t++) a += (double)qb[t] * (double)kc[t * sd]; /* j in order */
            acc[p] = a;
        }
    }
}

static void *exact_items(void *arg) {
    ExactJob *job = (ExactJob *)arg;
    const int64_t k = job->k, d = job->d, sn = job->sn, sd = job->sd;
    int64_t n = job->last - job->first;
    if (n <= 0) return NULL;
    const int64_t *order = job->order + job->first;
    if (job->by_dims) {
        int64_t *cols = malloc(sizeof(int64_t) * 2 * n);
        double *acc = malloc(sizeof(double) * n);
        if (cols && acc) {
            int64_t *rows = cols + n;
            for (int64_t p = 0; p < n; p++) {
                cols[p] = job->idx[order[p]];
                rows[p] = order[p] / k;
            }
            exact_by_dims(job, cols, rows, acc, n);
            for (int64_t p = 0; p < n; p++) job->out[order[p]] = acc[p];
            free(cols);
            free(acc);
            return NULL;
        }
        free(cols);
        free(acc); /* no memory for the side arrays: key by key below, the same sums */
    }
    for (int64_t p = 0; p < n; p++) {
        int64_t w = order[p];
        const float *key = job->keys + job->idx[w] * sn, *qb = job->q + (w / k) * d;
        double acc = 0.0;
        for (int64_t j = 0; j < d; j++) acc += (double)qb[j] * (double)key[j * sd];
        job->out[w] = acc;
    }
    return NULL;
}

/* exact_scores(q, B, d, keys, sn, sd, idx, k, order, out, threads)
 *   q float32 (B, d) contiguous; keys float32, key n's dim j at keys[n·sn + j·sd];
 *   idx int64 (B, k) rows (≥ 0); order int64 (B·k,) a permutation of the winners, ascending idx;
 *   out float64 (B, k): Σ_j q[b, j]·key[j], summed over j in order: the same bits whatever the
 *   layout, the batch or the thread count.
 */
static PyObject *exact_scores(PyObject *self, PyObject *args) {
    (void)self;
    unsigned long long pq, pkeys, pidx, porder, pout;
    Py_ssize_t B, d, sn, sd, k;
    int threads;
    if (!PyArg_ParseTuple(args, "KnnKnnKnKKi", &pq, &B, &d, &pkeys, &sn, &sd, &pidx, &k,
                          &porder, &pout, &threads))
        return NULL;
    int64_t items = (int64_t)B * k;
    threads = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
    if (items * d < (1 << 18)) threads = 1;
    if (threads > items) threads = items < 1 ? 1 : (int)items;
    const float *q = (const float *)(uintptr_t)pq;
    Py_BEGIN_ALLOW_THREADS
    ExactJob jobs[MAX_THREADS];
    for (int t = 0; t < threads; t++) {
        jobs[t] = (ExactJob){q, (const float *)(uintptr_t)pkeys, sn == 1 && items > 1, (const int64_t *)(uintptr_t)pidx,
                             (const int64_t *)(uintptr_t)porder, (double *)(uintptr_t)pout, B, k,
                             d, sn, sd, items * t / threads, items * (t + 1) / threads};
    }
    run_split(exact_items, jobs, sizeof(ExactJob), threads);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}


typedef struct {
    float *s;
    int64_t n;
    const int64_t *offsets; /* NULL: count only, into counts */
    int64_t *counts, *cols;
    int64_t first, last; /* rows */
} SupportJob;

static void *support_rows(void *arg) {
    SupportJob *job = (SupportJob *)arg;
    for (int64_t b = job->first; b < job->last; b++) {
        float *x = job->s + b * job->n;
        if (!job->offsets) {
            int64_t c = 0;
            for (int64_t i = 0; i < job->n; i++) c += x[i] > 0.0f;
            job->counts[b] = c;
            continue;
        }
        if (job->offsets[b + 1] == job->offsets[b]) continue; /* no positive score: as it is */
        int64_t *out = job->cols + job->offsets[b];
        for (int64_t i = 0; i < job->n; i++) {
            if (x[i] > 0.0f) *out++ = i;
            else x[i] = -INFINITY;
        }
    }
    return NULL;
}

/* positive_support(s, B, n, offsets, counts, cols, threads)
 *   s       float32 (B, n) contiguous, scores ≥ 0 (BM25)
 *   offsets 0: counts each row's positive scores into counts (B,) int64
 *           else int64 (B + 1,) the running sum of those counts: each row's columns of a
 *           positive score into cols[offsets[b]:offsets[b + 1]], ascending, and −inf over the
 *           row's other scores (a row with none left as it is)
 */
static PyObject *positive_support(PyObject *self, PyObject *args) {
    (void)self;
    unsigned long long ps, poffsets, pcounts, pcols;
    Py_ssize_t B, n;
    int threads;
    if (!PyArg_ParseTuple(args, "KnnKKKi", &ps, &B, &n, &poffsets, &pcounts, &pcols, &threads))
        return NULL;
    if (B <= 0 || n < 0) {
        PyErr_SetString(PyExc_ValueError, "positive_support: need B > 0, n ≥ 0");
        return NULL;
    }
    threads = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
    if ((int64_t)B * n < (1 << 18)) threads = 1;
    if (threads > B) threads = (int)B;
    Py_BEGIN_ALLOW_THREADS
    SupportJob jobs[MAX_THREADS];
    for (int t = 0; t < threads; t++)
        jobs[t] = (SupportJob){(float *)(uintptr_t)ps, n, (const int64_t *)(uintptr_t)poffsets,
                               (int64_t *)(uintptr_t)pcounts, (int64_t *)(uintptr_t)pcols,
                               B * t / threads, B * (t + 1) / threads};
    run_split(support_rows, jobs, sizeof(SupportJob), threads);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

typedef struct {
    const float *s;
    int64_t n, k;
    const int64_t *cols, *starts;
    int64_t *top_col;
    int64_t first, last; /* rows */
} SupportTopJob;

static void *support_top_rows(void *arg) {
    SupportTopJob *job = (SupportTopJob *)arg;
    float top[job->k];
    for (int64_t b = job->first; b < job->last; b++) {
        const float *x = job->s + b * job->n;
        int64_t *out = job->top_col + b * job->k, n = 0;
        for (int64_t i = job->starts[b]; i < job->starts[b + 1]; i++) {
            int64_t c = job->cols[i];
            if (n < job->k || before(x[c], c, top[job->k - 1], out[job->k - 1]))
                keep_top(top, out, &n, job->k, x[c], c);
        }
        for (int64_t j = n; j < job->k; j++) out[j] = -1;
    }
    return NULL;
}

/* support_top(s, B, n, cols, starts, k, top_col, threads)
 *   s       float32 (B, n) contiguous
 *   cols    int64 row b's columns at cols[starts[b]:starts[b + 1]] (starts (B + 1,) int64)
 *   top_col int64 (B, k): each row's k largest s among its columns, best first, the lower
 *           column first among equal values (a top-k over the row alone orders them so), −1
 *           past a row's columns
 */
static PyObject *support_top(PyObject *self, PyObject *args) {
    (void)self;
    unsigned long long ps, pcols, pstarts, ptop;
    Py_ssize_t B, n, k;
    int threads;
    if (!PyArg_ParseTuple(args, "KnnKKnKi", &ps, &B, &n, &pcols, &pstarts, &k, &ptop, &threads))
        return NULL;
    if (B <= 0 || k <= 0 || k > MAX_K) {
        PyErr_SetString(PyExc_ValueError, "support_top: need B > 0 and 0 < k ≤ MAX_K");
        return NULL;
    }
    const int64_t *starts = (const int64_t *)(uintptr_t)pstarts;
    threads = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
    if (starts[B] - starts[0] < (1 << 18)) threads = 1;
    if (threads > B) threads = (int)B;
    Py_BEGIN_ALLOW_THREADS
    SupportTopJob jobs[MAX_THREADS];
    for (int t = 0; t < threads; t++)
        jobs[t] = (SupportTopJob){(const float *)(uintptr_t)ps, n, k,
                                  (const int64_t *)(uintptr_t)pcols, starts,
                                  (int64_t *)(uintptr_t)ptop, B * t / threads,
                                  B * (t + 1) / threads};
    run_split(support_top_rows, jobs, sizeof(SupportTopJob), threads);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* ln x for float32, 8 at a time, Cephes' logf: x = m · 2^e with m in [√½, √2), a degree-9
 * polynomial for ln(1 + f), f = m − 1 (≤ 1 ulp over the normal floats). Only for x ≥ FLT_MIN. */
INLINE v8f log_lanes(v8f x) {
    v8i bits = (v8i)x;
    v8i e = ((bits >> 23) & 0xff) - 126;
    v8f m = (v8f)((bits & 0x007fffff) | 0x3f000000); /* [0.5, 1) */
    v8i small = m < 0.707106781186547524f;
    e = e + small; /* small is −1 where true */
    v8f f = pick(small, m + m, m) - 1.0f;
    v8f z = f * f;
    v8f y = f * 7.0376836292e-2f - 1.1514610310e-1f;
    y = y * f + 1.1676998740e-1f;
    y = y * f - 1.2420140846e-1f;
    y = y * f + 1.4249322787e-1f;
    y = y * f - 1.6668057665e-1f;
    y = y * f + 2.0000714765e-1f;
    y = y * f - 2.4999993993e-1f;
    y = y * f + 3.3333331174e-1f;
    y = y * f * z;
    v8f fe = __builtin_convertvector(e, v8f);
    y = y + fe * -2.12194440e-4f;
    y = y - z * 0.5f;
    return (f + y) + fe * 0.693359375f;
}

#define SWEEP_PIECE 512 /* columns of a row worked at once: w stays in L1 */
#define MAX_HEADS 16

typedef struct {
    int64_t B, n, H, S; /* H heads read whole, then S read at their support alone */
    const float *const *scores; /* H + S pointers: head h's score of (b, i) at
                                   scores[h][b·stride[h] + i] */
    const int64_t *stride;
    const double *scale2;  /* (H + S,) log2(e) · scale_h */
    const double *shift2;  /* (B, H + S) log2(e) · (log π_bh − lse_bh) */
    const int64_t *const *cols;    /* S pointers: a sparse head's columns, row by row, ascending */
    const int64_t *const *offsets; /* S pointers: (B + 1,) where each row's columns start */
    const uint8_t *mask;           /* NULL, or (B, n) with mask_stride n, or (n,) with 0 */
    int64_t mask_stride, segs, first, last;
    double *partial; /* (B · segs,) each item's Σ w ln w */
} SweepJob;

/* Σ w ln w over columns [c0, c1) of row b, w = Σ_h 2^(scale2_h · s + shift2_bh) + the sparse
 * heads' terms, 0 where masked; each w in float32, the sum in float64 lanes. */
CLONES static double sweep_segment(const SweepJob *job, int64_t b, int64_t c0, int64_t c1) {
    float w[SWEEP_PIECE] __attribute__((aligned(32)));
    v4d acc[2] = {{0}};
    double tail = 0.0;
    int64_t at[MAX_HEADS];
    for (int64_t s = 0; s < job->S; s++) { /* the row's first entry at or past c0 */
        int64_t lo = job->offsets[s][b], hi = job->offsets[s][b + 1];
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (job->cols[s][mid] < c0) lo = mid + 1;
            else hi = mid;
        }
        at[s] = lo;
    }
    for (int64_t p0 = c0; p0 < c1; p0 += SWEEP_PIECE) {
        int64_t len = c1 - p0 < SWEEP_PIECE ? c1 - p0 : SWEEP_PIECE;
        int64_t whole = len / LANES * LANES;
        for (int64_t h = 0; h < job->H; h++) {
            const float *x = job->scores[h] + b * job->stride[h] + p0;
            const double a = job->scale2[h], c = job->shift2[b * (job->H + job->S) + h];
            const v4d va = {a, a, a, a}, vc = {c, c, c, c};
            for (int64_t j = 0; j < whole; j += LANES) {
                v8f v;
                memcpy(&v, x + j, sizeof v);
                v4d lo = __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3), v4d);
                v4d hi = __builtin_convertvector(__builtin_shufflevector(v, v, 4, 5, 6, 7), v4d);
                v8f e = exp2_lanes(__builtin_shufflevector(
                    __builtin_convertvector(lo * va + vc, v4f),
                    __builtin_convertvector(hi * va + vc, v4f), 0, 1, 2, 3, 4, 5, 6, 7));
                v8f prev;
                memcpy(&prev, w + j, sizeof prev);
                prev = h == 0 ? e : prev + e;
                memcpy(w + j, &prev, sizeof prev);
            }
            for (int64_t j = whole; j < len; j++) {
                float e = exp2_one((float)((double)x[j] * a + c));
                w[j] = h == 0 ? e : w[j] + e;
            }
        }
        if (job->H == 0) memset(w, 0, sizeof(float) * len);
        for (int64_t s = 0; s < job->S; s++) { /* 8 of the head's books at a time */
            const int64_t h = job->H + s, *cols = job->cols[s], end = job->offsets[s][b + 1];
            const float *x = job->scores[h] + b * job->stride[h];
            const double a = job->scale2[h], c = job->shift2[b * (job->H + job->S) + h];
            int64_t i = at[s], stop = i;
            while (stop < end && cols[stop] < p0 + len) stop++;
            for (; i + LANES <= stop; i += LANES) {
                v8f v;
                for (int j = 0; j < LANES; j++) v[j] = (float)((double)x[cols[i + j]] * a + c);
                v8f e = exp2_lanes(v);
                for (int j = 0; j < LANES; j++) w[cols[i + j] - p0] += e[j];
            }
            for (; i < stop; i++) w[cols[i] - p0] += exp2_one((float)((double)x[cols[i]] * a + c));
            at[s] = i;
        }
        if (job->mask) {
            const uint8_t *m = job->mask + b * job->mask_stride + p0;
            for (int64_t j = 0; j < len; j++) w[j] = m[j] ? w[j] : 0.0f;
        }
        for (int64_t j = 0; j < whole; j += LANES) {
            v8f v;
            memcpy(&v, w + j, sizeof v);
            v8i live = v >= 1.17549435e-38f; /* FLT_MIN: below it a term is < 1e-36, and 0 */
            v8f safe = pick(live, v, v - v + 1.0f);
            v8f t = pick(live, v * log_lanes(safe), v - v);
            acc[0] += __builtin_convertvector(__builtin_shufflevector(t, t, 0, 1, 2, 3), v4d);
            acc[1] += __builtin_convertvector(__builtin_shufflevector(t, t, 4, 5, 6, 7), v4d);
        }
        for (int64_t j = whole; j < len; j++) {
            if (w[j] >= 1.17549435e-38f) {
                const v8f zero = {0};
                tail += (double)(w[j] * log_lanes(zero + w[j])[0]);
            }
        }
    }
    double total = tail;
    for (int a = 0; a < 2; a++)
        for (int j = 0; j < 4; j++) total += acc[a][j];
    return total;
}

static void *sweep_items(void *arg) {
    SweepJob *job = (SweepJob *)arg;
    for (int64_t item = job->first; item < job->last; item++) {
        int64_t b = item / job->segs, seg = item % job->segs;
        int64_t c0 = job->n * seg / job->segs, c1 = job->n * (seg + 1) / job->segs;
        job->partial[item] = c1 > c0 ? sweep_segment(job, b, c0, c1) : 0.0;
    }
    return NULL;
}

/* sweep_entropy(B, n, H, S, scores, stride, scale2, shift2, cols, offsets, mask, mask_stride,
 *               out, threads)
 *   scores  int64 (H + S,) pointers to float32 scores, row b of head h at scores[h] + b·stride[h]:
 *           H heads read whole, then S heads read at their columns alone
 *   scale2  float64 (H + S,); shift2 float64 (B, H + S): a term is 2^(scale2_h · s + shift2_bh)
 *   cols, offsets: int64 (S,) pointers, per sparse head its int64 columns (ascending within a
 *           row) and int64 (B + 1,) row offsets
 *   mask    0, or a uint8 pointer (B, n) (mask_stride n) or (n,) (mask_stride 0)
 *   out     float64 (B,): −Σ_i w_i ln w_i over the row
 */
static PyObject *sweep_entropy(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t B, n, H, S, mask_stride;
    unsigned long long pscores, pstride, pscale, pshift, pcols, poffsets, pmask, pout;
    int threads;
    if (!PyArg_ParseTuple(args, "nnnnKKKKKKKnKi", &B, &n, &H, &S, &pscores, &pstride, &pscale,
                          &pshift, &pcols, &poffsets, &pmask, &mask_stride, &pout, &threads))
        return NULL;
    if (B <= 0 || n < 0 || H < 0 || S < 0 || S > MAX_HEADS) {
        PyErr_SetString(PyExc_ValueError, "sweep_entropy: need B > 0, n ≥ 0, 0 ≤ S ≤ 16");
        return NULL;
    }
    threads = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
    if ((int64_t)B * n * (H + 1) < (1 << 18)) threads = 1;
    int64_t segs = B >= threads ? 1 : threads; /* one row over several threads: by columns */
    int64_t items = B * segs;
    if (threads > items) threads = (int)items;
    double *partial = malloc(sizeof(double) * items);
    if (!partial) return PyErr_NoMemory();
    double *out = (double *)(uintptr_t)pout;
    Py_BEGIN_ALLOW_THREADS
    SweepJob jobs[MAX_THREADS];
    for (int t = 0; t < threads; t++)
        jobs[t] = (SweepJob){B, n, H, S,
                             (const float *const *)(uintptr_t)pscores,
                             (const int64_t *)(uintptr_t)pstride,
                             (const double *)(uintptr_t)pscale,
                             (const double *)(uintptr_t)pshift,
                             (const int64_t *const *)(uintptr_t)pcols,
                             (const int64_t *const *)(uintptr_t)poffsets,
                             (const uint8_t *)(uintptr_t)pmask, mask_stride, segs,
                             items * t / threads, items * (t + 1) / threads, partial};
    run_split(sweep_items, jobs, sizeof(SweepJob), threads);
    for (int64_t b = 0; b < B; b++) {
        double total = 0.0;
        for (int64_t g = 0; g < segs; g++) total += partial[b * segs + g];
        out[b] = -total;
    }
    Py_END_ALLOW_THREADS
    free(partial);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"fold_chunk", fold_chunk, METH_VARARGS, "A chunk's top k and Σ 2^x in one read."},
    {"exact_scores", exact_scores, METH_VARARGS, "The winners' q·k in float64."},
    {"positive_support", positive_support, METH_VARARGS, "A scored head's positive columns."},
    {"support_top", support_top, METH_VARARGS, "Each row's top k among its given columns."},
    {"sweep_entropy", sweep_entropy, METH_VARARGS, "The mixture's entropy from kept scores."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cpu_kernels", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__cpu_kernels(void) { return PyModule_Create(&module); }
