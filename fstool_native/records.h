/* Sorting flat arrays of fixed-width integer records (fstool check's block
 * claims and reverse mappings, see fstool/ops/check/records.py) in the order
 * Python sorts the same records as tuples: lexicographically, field by
 * field, as signed or as unsigned 64-bit numbers.  A bottom-up merge sort
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

/* Sort the n records of w 64-bit fields at p; 0, or -1 when out of memory. */
static int fstool_sort_records(uint64_t *p, size_t n, size_t w, int is_signed)
{
    uint64_t *tmp, *src, *dst, *t;
    size_t width, lo, mid, hi, i, j, k;
    if (n < 2 || w == 0)
        return 0;
    tmp = (uint64_t *)malloc(n * w * sizeof(uint64_t));
    if (tmp == NULL)
        return -1;
    src = p;
    dst = tmp;
    for (width = 1; width < n; width *= 2) {
        for (lo = 0; lo < n; lo += 2 * width) {
            mid = lo + width < n ? lo + width : n;
            hi = lo + 2 * width < n ? lo + 2 * width : n;
            i = lo;
            j = mid;
            k = lo;
            while (i < mid && j < hi) {
                if (fstool_rec_less(src + j * w, src + i * w, w, is_signed)) {
                    memcpy(dst + k * w, src + j * w, w * sizeof(uint64_t));
                    j++;
                } else {
                    memcpy(dst + k * w, src + i * w, w * sizeof(uint64_t));
                    i++;
                }
                k++;
            }
            if (i < mid)
                memcpy(dst + k * w, src + i * w, (mid - i) * w * sizeof(uint64_t));
            else if (j < hi)
                memcpy(dst + k * w, src + j * w, (hi - j) * w * sizeof(uint64_t));
        }
        t = src;
        src = dst;
        dst = t;
    }
    if (src != p)
        memcpy(p, src, n * w * sizeof(uint64_t));
    free(tmp);
    return 0;
}

#endif
