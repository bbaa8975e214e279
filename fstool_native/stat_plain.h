/* The lstat and xattr question of writers.py's stat_plain_files and
 * scan_names for every name of a directory, with no Python object in
 * sight (the caller lets go of the interpreter around the whole call).
 *
 * out[k].plain is 1 for a plain file: regular, one link, at most `small`
 * bytes, as many bytes allocated as its size, no xattrs, times whose
 * nanosecond counts fit 63 bits.  An xattr list that cannot be read counts
 * as none, as on the general path.  Without `general`, nothing else is
 * filled in.  With it, every other entry is described too: out[k].err is
 * the errno of a failed lstat; else its stat fields, the bytes of its
 * xattr names (xlen; -1 when they cannot be listed) and, for a symlink,
 * its target (in a buffer of the caller's to free; terr the errno of a
 * readlink that failed).  out[k].redo is 1 where the caller must look
 * again the general way: a NULL name, a time or size the fields do not
 * hold, a target that grew while it was read. */
#ifndef FSTOOL_STAT_PLAIN_H
#define FSTOOL_STAT_PLAIN_H

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "xattr_at.h"

#define FSTOOL_NS_SAFE 9000000000LL   /* seconds whose nanoseconds fit 63 bits */

struct fstool_plain {
    int plain, redo, err, terr;
    unsigned int mode, uid, gid;
    unsigned long long nlink, dev, ino, rdev;
    long long atime_ns, mtime_ns, ctime_ns, size, blocks, xlen;
    char *target;
    long long tlen;
};

static int fstool_ns_ok(long long sec)
{
    return -FSTOOL_NS_SAFE < sec && sec < FSTOOL_NS_SAFE;
}

static void fstool_stat_plain(int dirfd, char **names, size_t n, const char *dirpath,
                              size_t dirlen, char *pathbuf, long long small, int general,
                              struct fstool_plain *out)
{
    size_t k;
    for (k = 0; k < n; k++) {
        struct stat st;
        struct fstool_plain *o = &out[k];
        int times_ok;
        o->plain = o->redo = o->err = o->terr = 0;
        o->target = NULL;
        o->tlen = 0;
        o->xlen = -1;
        if (names[k] == NULL) {
            o->redo = 1;
            continue;
        }
        if (fstatat(dirfd, names[k], &st, AT_SYMLINK_NOFOLLOW) != 0) {
            o->err = errno;
            continue;
        }
        /* a plain file's change time is not used */
        times_ok = fstool_ns_ok((long long)st.st_atim.tv_sec) &&
                   fstool_ns_ok((long long)st.st_mtim.tv_sec);
        o->mode = st.st_mode;
        o->uid = st.st_uid;
        o->gid = st.st_gid;
        o->nlink = st.st_nlink;
        o->dev = st.st_dev;
        o->ino = st.st_ino;
        o->rdev = st.st_rdev;
        o->size = (long long)st.st_size;
        o->blocks = (long long)st.st_blocks;
        if (times_ok) {
            o->atime_ns = (long long)st.st_atim.tv_sec * 1000000000LL + st.st_atim.tv_nsec;
            o->mtime_ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
        }
        if (fstool_ns_ok((long long)st.st_ctim.tv_sec))
            o->ctime_ns = (long long)st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec;
        else
            times_ok = 0;
        if (S_ISREG(st.st_mode) && (long long)st.st_size <= small && st.st_nlink == 1 &&
                (long long)st.st_blocks * 512 >= (long long)st.st_size && times_ok) {
            o->xlen = fstool_xattr_names_len(dirfd, names[k], dirpath, dirlen, pathbuf);
            if (o->xlen <= 0) {
                o->plain = 1;
                continue;
            }
        }
        if (!general)
            continue;
        if (!times_ok) {
            o->redo = 1;
            continue;
        }
        if (S_ISLNK(st.st_mode)) {
            size_t cap = (st.st_size > 0 ? (size_t)st.st_size : 4095) + 1;
            ssize_t got;
            o->target = malloc(cap);
            if (o->target == NULL) {
                o->redo = 1;
                continue;
            }
            got = readlinkat(dirfd, names[k], o->target, cap);
            if (got < 0) {
                o->terr = errno;
            } else if ((size_t)got >= cap) {
                o->redo = 1;            /* it grew: read again the general way */
                continue;
            } else {
                o->tlen = got;
            }
        }
        if (o->xlen < 0)
            o->xlen = fstool_xattr_names_len(dirfd, names[k], dirpath, dirlen, pathbuf);
    }
}

#endif
