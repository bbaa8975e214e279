/* Sorting flat arrays of fixed-width integer records (fstool check's block
 * claims and reverse mappings, see fstool/ops/check/records.py) in the order
 * Python sorts the same records as tuples: lexicographically, field by
 * field, as signed or as unsigned 64-bit numbers.  A natural merge sort
 * (stable, O(n log n), one scratch buffer); checks.py's pure-Python twin
 * sorts the tuples. */
#ifndef FSTOOL_RECORDS_H
#define FSTOOL_RECORDS_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int fstool_rec_less(const uint64_t *a, const uint64_t *b, size_t w, int is_signed)
{
    size_t k;
    for (k = 0; k < w; k++) {
        if (a[k] != b[k]) {
            if (is_signed)
                return (int64_t)a[k] < (int64_t)b[k];
            return a[k] < b[k];
        }
    }
    return 0;
}

static void fstool_rec_copy(uint64_t *dst, const uint64_t *src, size_t w)
{
    size_t k;
    for (k = 0; k < w; k++)
        dst[k] = src[k];
}

/* Sort the n records of w 64-bit fields at p; 0, or -1 when out of memory.
 * A natural merge sort: the ascending runs already there are found first
 * and merged pairwise, so that records mostly in order (the rmapbt's, or
 * mappings gathered inode by inode) take few passes, and records in order
 * none. */
static int fstool_sort_records(uint64_t *p, size_t n, size_t w, int is_signed)
{
    uint64_t *tmp, *src, *dst, *t;
    size_t *runs;
    size_t nruns, out, r, lo, mid, hi, i, j, k;
    if (n < 2 || w == 0)
        return 0;
    runs = (size_t *)malloc((n + 1) * sizeof(size_t));
    if (runs == NULL)
        return -1;
    nruns = 0;
    runs[nruns++] = 0;
    for (i = 1; i < n; i++)
        if (fstool_rec_less(p + i * w, p + (i - 1) * w, w, is_signed))
            runs[nruns++] = i;
    if (nruns == 1) {
        free(runs);
        return 0;
    }
    runs[nruns] = n;
    tmp = (uint64_t *)malloc(n * w * sizeof(uint64_t));
    if (tmp == NULL) {
        free(runs);
        return -1;
    }
    src = p;
    dst = tmp;
    while (nruns > 1) {
        /* runs[r] .. runs[r + 1] and runs[r + 1] .. runs[r + 2] become one;
         * runs[nruns] is n */
        out = 0;
        for (r = 0; r < nruns; r += 2) {
            lo = runs[r];
            if (r + 1 >= nruns) {
                memcpy(dst + lo * w, src + lo * w, (n - lo) * w * sizeof(uint64_t));
                runs[out++] = lo;
                break;
            }
            mid = runs[r + 1];
            hi = runs[r + 2];
            i = lo;
            j = mid;
            k = lo;
            while (i < mid && j < hi) {
                if (fstool_rec_less(src + j * w, src + i * w, w, is_signed)) {
                    fstool_rec_copy(dst + k * w, src + j * w, w);
                    j++;
                } else {
                    fstool_rec_copy(dst + k * w, src + i * w, w);
                    i++;
                }
                k++;
            }
            if (i < mid)
                memcpy(dst + k * w, src + i * w, (mid - i) * w * sizeof(uint64_t));
            else if (j < hi)
                memcpy(dst + k * w, src + j * w, (hi - j) * w * sizeof(uint64_t));
            runs[out++] = lo;
        }
        runs[out] = n;
        nruns = out;
        t = src;
        src = dst;
        dst = t;
    }
    if (src != p)
        memcpy(p, src, n * w * sizeof(uint64_t));
    free(tmp);
    free(runs);
    return 0;
}

#endif
