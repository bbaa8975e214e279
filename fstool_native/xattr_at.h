/* Does a directory entry have extended attributes?  For writers.py's
 * compiled scan of a host directory.  listxattrat(2) (Linux 6.13) asks
 * relative to the directory's descriptor, sparing the kernel a walk of the
 * whole path for every file; where the kernel or the architecture lacks it,
 * llistxattr(2) on the full path ("dirpath/name", built in buf) answers the
 * same question. */
#ifndef FSTOOL_XATTR_AT_H
#define FSTOOL_XATTR_AT_H

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/types.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <sys/syscall.h>

#if !defined(__NR_listxattrat) && defined(__linux__) && \
    (defined(__x86_64__) || defined(__aarch64__))
#define __NR_listxattrat 465          /* the unified syscall table's number */
#endif

static int fstool_listxattrat_ok = 1;

/* Bytes of xattr names of dirpath/name (not following a symlink), or -1
 * with errno set.  buf holds at least dirlen + 2 + strlen(name) bytes. */
static ssize_t fstool_xattr_names_len(int dirfd, const char *name, const char *dirpath,
                                      size_t dirlen, char *buf)
{
    size_t nlen;
#ifdef __NR_listxattrat
    if (fstool_listxattrat_ok) {
        long r = syscall(__NR_listxattrat, dirfd, name, AT_SYMLINK_NOFOLLOW, NULL, 0);
        /* ENOSYS: an older kernel; EINVAL: flags it does not know; EPERM:
         * a seccomp filter that refuses syscalls it does not know */
        if (r >= 0 || (errno != ENOSYS && errno != EINVAL && errno != EPERM))
            return (ssize_t)r;
        fstool_listxattrat_ok = 0;
    }
#endif
    nlen = strlen(name);
    memcpy(buf, dirpath, dirlen);
    buf[dirlen] = '/';
    memcpy(buf + dirlen + 1, name, nlen + 1);
    return llistxattr(buf, NULL, 0);
}

#endif
