/* A new generation's BM25 postings from the previous one's, in one pass over the entries
 * (service/engine/bm25_postings.py `Postings.moved`, which says when it is used).
 *
 * merge_postings: each term's entries of the rows that stay, renumbered, and the changed rows'
 *                 new entries merged in, ascending by row within the term, with the new
 *                 offsets. numpy made the same in a dozen passes over every entry, most of
 *                 them writing fresh arrays of 4 to 8 bytes an entry (a renumbered copy, a
 *                 mask, the kept copy, an int64 key of every entry for a binary search, the
 *                 inserted copies): 1.9 s an index at 1,000,000 books, where this writes the
 *                 two arrays it returns.
 *
 * bm25_scores:   every entry's Lucene BM25 score, idf[term] · (tf / (norm[row] + tf)) in
 *                 float64 rounded once to float32, as numpy computes them (TermScores): the
 *                 more-like-this index holds them all, made again at each swap (the idf and
 *                 the average length move with every change), where numpy's passes wrote
 *                 five temporaries of every entry.
 *
 * query_scores:  each query's BM25 over every row, its terms' posting lists added in order in
 *                 float32 (bm25s's get_scores_from_ids, an np.add.at per term, byte for byte),
 *                 into the caller's (B, N) rows: the entries computed as bm25_scores computes
 *                 them, or read where the index holds them, with no array of a posting list's
 *                 scores made per term and no fresh (N,) array per query.
 *
 * The previous rows that stay must keep their order (`new_row` ascending over them), as the
 * swap's `diff_order` keeps it; the Python side sorts otherwise and does not call this.
 * Pointers come as integers (numpy's `ctypes.data`); the GIL is released while it runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Counts of one, two or four bytes (numpy's uint8, uint16, int32): 1 where so, else an error set. */
static int counts_of(long long count_bytes) {
    if (count_bytes == 1 || count_bytes == 2 || count_bytes == 4) return 1;
    PyErr_SetString(PyExc_ValueError, "counts of 1, 2 or 4 bytes");
    return 0;
}

#define MERGE(NAME, COUNT)                                                                     \
    static int64_t NAME(int64_t v_old, int64_t v, const int64_t *indptr, const int32_t *rows,  \
                        const COUNT *counts, const int32_t *new_row, int64_t m,                \
                        const int64_t *new_term, const int32_t *new_rows,                      \
                        const COUNT *new_counts, int64_t *out_indptr, int32_t *out_rows,       \
                        COUNT *out_counts) {                                                   \
        int64_t pos = 0, j = 0;                                                                \
        out_indptr[0] = 0;                                                                     \
        for (int64_t t = 0; t < v; t++) {                                                      \
            if (t < v_old) {                                                                   \
                for (int64_t e = indptr[t]; e < indptr[t + 1]; e++) {                          \
                    int32_t r = new_row[rows[e]];                                              \
                    if (r < 0) continue; /* a row gone or changed */                           \
                    while (j < m && new_term[j] == t && new_rows[j] < r) {                     \
                        out_rows[pos] = new_rows[j];                                           \
                        out_counts[pos++] = new_counts[j++];                                   \
                    }                                                                          \
                    out_rows[pos] = r;                                                         \
                    out_counts[pos++] = counts[e];                                             \
                }                                                                              \
            }                                                                                  \
            while (j < m && new_term[j] == t) {                                                \
                out_rows[pos] = new_rows[j];                                                   \
                out_counts[pos++] = new_counts[j++];                                           \
            }                                                                                  \
            out_indptr[t + 1] = pos;                                                           \
        }                                                                                      \
        return pos;                                                                            \
    }

MERGE(merge_u8, uint8_t)
MERGE(merge_u16, uint16_t)
MERGE(merge_i32, int32_t)

static PyObject *merge_postings(PyObject *self, PyObject *args) {
    long long v_old, v, m, count_bytes;
    unsigned long long p[10];
    if (!PyArg_ParseTuple(args, "LLLLKKKKKKKKKK", &v_old, &v, &m, &count_bytes, &p[0], &p[1],
                          &p[2], &p[3], &p[4], &p[5], &p[6], &p[7], &p[8], &p[9]))
        return NULL;
    if (!counts_of(count_bytes)) return NULL;
    const int64_t *indptr = (const int64_t *)(uintptr_t)p[0];
    const int32_t *rows = (const int32_t *)(uintptr_t)p[1];
    const int32_t *new_row = (const int32_t *)(uintptr_t)p[3];
    const int64_t *new_term = (const int64_t *)(uintptr_t)p[4];
    const int32_t *new_rows = (const int32_t *)(uintptr_t)p[5];
    int64_t *out_indptr = (int64_t *)(uintptr_t)p[7];
    int32_t *out_rows = (int32_t *)(uintptr_t)p[8];
    int64_t written;
    Py_BEGIN_ALLOW_THREADS
    if (count_bytes == 1)
        written = merge_u8(v_old, v, indptr, rows, (const uint8_t *)(uintptr_t)p[2], new_row, m,
                           new_term, new_rows, (const uint8_t *)(uintptr_t)p[6], out_indptr,
                           out_rows, (uint8_t *)(uintptr_t)p[9]);
    else if (count_bytes == 2)
        written = merge_u16(v_old, v, indptr, rows, (const uint16_t *)(uintptr_t)p[2], new_row,
                            m, new_term, new_rows, (const uint16_t *)(uintptr_t)p[6],
                            out_indptr, out_rows, (uint16_t *)(uintptr_t)p[9]);
    else
        written = merge_i32(v_old, v, indptr, rows, (const int32_t *)(uintptr_t)p[2], new_row, m,
                            new_term, new_rows, (const int32_t *)(uintptr_t)p[6], out_indptr,
                            out_rows, (int32_t *)(uintptr_t)p[9]);
    Py_END_ALLOW_THREADS
    return PyLong_FromLongLong(written);
}

/* A BM25 index's arrays (pointers as numpy's `ctypes.data` integers, in this order). */
typedef struct {
    const int64_t *indptr;
    const int32_t *rows;
    const void *counts; /* uint8, uint16 or int32: count_bytes says */
    const float *idf;
    const double *norm;
} Bm25;

static Bm25 bm25_of(const unsigned long long *p) {
    return (Bm25){(const int64_t *)(uintptr_t)p[0], (const int32_t *)(uintptr_t)p[1],
                  (const void *)(uintptr_t)p[2], (const float *)(uintptr_t)p[3],
                  (const double *)(uintptr_t)p[4]};
}

/* Entry e's Lucene BM25 score: idf · (tf / (norm[row] + tf)) in float64, rounded once. */
#define ENTRY(x, COUNT, w, e)                                                                  \
    ((float)((w) * ((double)(float)((const COUNT *)(x).counts)[e] /                            \
                    ((x).norm[(x).rows[e]] + (double)(float)((const COUNT *)(x).counts)[e]))))

#define SCORES(NAME, COUNT)                                                                    \
    static void NAME(int64_t v, Bm25 x, float *out) {                                          \
        for (int64_t t = 0; t < v; t++) {                                                      \
            double w = (double)x.idf[t];                                                       \
            for (int64_t e = x.indptr[t]; e < x.indptr[t + 1]; e++) out[e] = ENTRY(x, COUNT, w, e); \
        }                                                                                      \
    }

SCORES(scores_u8, uint8_t)
SCORES(scores_u16, uint16_t)
SCORES(scores_i32, int32_t)

static PyObject *bm25_scores(PyObject *self, PyObject *args) {
    long long v, count_bytes;
    unsigned long long p[6];
    if (!PyArg_ParseTuple(args, "LLKKKKKK", &v, &count_bytes, &p[0], &p[1], &p[2], &p[3], &p[4],
                          &p[5]))
        return NULL;
    if (!counts_of(count_bytes)) return NULL;
    Bm25 x = bm25_of(p);
    float *out = (float *)(uintptr_t)p[5];
    Py_BEGIN_ALLOW_THREADS
    if (count_bytes == 1) scores_u8(v, x, out);
    else if (count_bytes == 2) scores_u16(v, x, out);
    else scores_i32(v, x, out);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

#define QUERY(NAME, COUNT)                                                                     \
    static void NAME(int64_t b, int64_t n, Bm25 x, const float *held, const int64_t *terms,    \
                     const int64_t *starts, float *out) {                                      \
        for (int64_t q = 0; q < b; q++) {                                                      \
            float *row = out + q * n;                                                          \
            memset(row, 0, (size_t)n * sizeof(float));                                         \
            for (int64_t i = starts[q]; i < starts[q + 1]; i++) {                              \
                int64_t t = terms[i];                                                          \
                double w = held ? 0.0 : (double)x.idf[t];                                      \
                for (int64_t e = x.indptr[t]; e < x.indptr[t + 1]; e++)                        \
                    row[x.rows[e]] += held ? held[e] : ENTRY(x, COUNT, w, e);                  \
            }                                                                                  \
        }                                                                                      \
    }

QUERY(query_u8, uint8_t)
QUERY(query_u16, uint16_t)
QUERY(query_i32, int32_t)

/* query_scores(B, N, count_bytes, indptr, rows, counts, idf, norm, held, terms, starts, out):
 * held 0 when the index computes its entries (else counts, idf and norm may be 0); terms (Σ,)
 * int64 each query's term ids in order, starts (B + 1,) where each query's begin; out (B, N)
 * float32 C-contiguous. */
static PyObject *query_scores(PyObject *self, PyObject *args) {
    long long b, n, count_bytes;
    unsigned long long p[9];
    if (!PyArg_ParseTuple(args, "LLLKKKKKKKKK", &b, &n, &count_bytes, &p[0], &p[1], &p[2], &p[3],
                          &p[4], &p[5], &p[6], &p[7], &p[8]))
        return NULL;
    if (!counts_of(count_bytes)) return NULL;
    Bm25 x = bm25_of(p);
    const float *held = (const float *)(uintptr_t)p[5];
    const int64_t *terms = (const int64_t *)(uintptr_t)p[6];
    const int64_t *starts = (const int64_t *)(uintptr_t)p[7];
    float *out = (float *)(uintptr_t)p[8];
    Py_BEGIN_ALLOW_THREADS
    if (count_bytes == 1) query_u8(b, n, x, held, terms, starts, out);
    else if (count_bytes == 2) query_u16(b, n, x, held, terms, starts, out);
    else query_i32(b, n, x, held, terms, starts, out);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"merge_postings", merge_postings, METH_VARARGS,
     "The previous postings' kept entries renumbered, the new ones merged in."},
    {"bm25_scores", bm25_scores, METH_VARARGS, "Every entry's BM25 score."},
    {"query_scores", query_scores, METH_VARARGS, "Each query's BM25 over every row."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_postings", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__postings(void) { return PyModule_Create(&module); }
