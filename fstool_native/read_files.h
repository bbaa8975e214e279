/* Read a run of host files for writers.py's read_files, with no Python
 * object in sight (the caller lets go of the interpreter around the whole
 * call).  Files are opened a window at a time and the kernel asked to read
 * all of the window (posix_fadvise WILLNEED); then each file with an
 * offset (offs[k] >= 0) is read to its size or its end into buf and
 * closed, and each without (offs[k] < 0) is kept open for the caller, in
 * fds[k], once it is known to be a regular file.  Files are opened without
 * waiting, so a FIFO put in a file's place fails instead of hanging.
 * errs[k] is 0, or the errno of what failed for file k.  File k is named
 * relative to dirfds[k], or to dirfd when dirfds is NULL. */
#ifndef FSTOOL_READ_FILES_H
#define FSTOOL_READ_FILES_H

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>

#define FSTOOL_READ_WINDOW 64

static void fstool_read_files(int dirfd, const int *dirfds, char **names,
                              const long long *sizes,
                              const long long *offs, unsigned char *buf, size_t n, int *errs,
                              int *fds)
{
    int win[FSTOOL_READ_WINDOW];
    size_t w0, w1, k;

    for (w0 = 0; w0 < n; w0 += FSTOOL_READ_WINDOW) {
        w1 = w0 + FSTOOL_READ_WINDOW < n ? w0 + FSTOOL_READ_WINDOW : n;
        for (k = w0; k < w1; k++) {
            int fd = -1;
            errs[k] = 0;
            fds[k] = -1;
            if (sizes[k] > 0) {
                fd = openat(dirfds ? dirfds[k] : dirfd, names[k],
                            O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
                if (fd < 0)
                    errs[k] = errno;
                else
                    posix_fadvise(fd, 0, (off_t)sizes[k], POSIX_FADV_WILLNEED);
            }
            win[k - w0] = fd;
        }
        for (k = w0; k < w1; k++) {
            int fd = win[k - w0];
            long long done = 0, want = sizes[k];
            if (fd < 0)
                continue;
            if (offs[k] < 0) {
                struct stat st;
                if (fstat(fd, &st) != 0) {
                    errs[k] = errno;
                    close(fd);
                } else if (!S_ISREG(st.st_mode)) {
                    errs[k] = EINVAL;
                    close(fd);
                } else {
                    fds[k] = fd;
                }
                continue;
            }
            while (done < want) {
                ssize_t got = pread(fd, buf + offs[k] + done, (size_t)(want - done), (off_t)done);
                if (got < 0) {
                    if (errno == EINTR)
                        continue;
                    errs[k] = errno;
                    break;
                }
                if (got == 0)
                    break;
                done += got;
            }
            close(fd);
        }
    }
}

#endif
