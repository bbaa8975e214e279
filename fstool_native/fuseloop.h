/* libfuse3's low-level API at the 3.12 interface (fuse_session_new and
   fuse_session_loop_mt as 3.12 defines them; 3.14 is what CI installs),
   and a log function that keeps libfuse's errors for fstool's own
   one-line message instead of printing it. */
#ifndef FSTOOL_FUSELOOP_H
#define FSTOOL_FUSELOOP_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE                    /* splice */
#endif
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <fuse_log.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/uio.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

static char fstool_fuse_error[512];
static int fstool_fuse_capture;

static void fstool_fuse_log(enum fuse_log_level level, const char *fmt, va_list ap)
{
    if (fstool_fuse_capture && level <= FUSE_LOG_ERR) {
        /* one message may come in several calls: append */
        size_t used = strlen(fstool_fuse_error);
        vsnprintf(fstool_fuse_error + used, sizeof fstool_fuse_error - used, fmt, ap);
        return;
    }
    vfprintf(stderr, fmt, ap);
}

/* capture libfuse's errors (1) or print them (0); capturing clears the last */
static void fstool_fuse_log_capture(int on)
{
    if (on)
        fstool_fuse_error[0] = 0;
    fstool_fuse_capture = on;
    fuse_set_log_func(fstool_fuse_log);
}
/* FUSE_HANDLE_KILLPRIV_V2, which libfuse 3.14 does not negotiate: with it
   the kernel no longer asks for security.capability (a GETXATTR) before
   every write, and leaves clearing set-user-ID, set-group-ID and
   capabilities on write, truncate and chown to the server, telling it
   when the caller may not keep them.  The INIT request and the flags of
   the requests that carry that word are read from the raw request
   (fstool_peek) before libfuse decodes it; the flag is added to libfuse's
   INIT answer as it is written (fstool_io_writev, the session's custom
   io).  The layouts are the kernel's FUSE protocol (linux/fuse.h). */
#define FSTOOL_FUSE_SETATTR 4
#define FSTOOL_FUSE_OPEN 14
#define FSTOOL_FUSE_WRITE 16
#define FSTOOL_FUSE_INIT 26
#define FSTOOL_KILLPRIV_V2 (1u << 28)
#define FSTOOL_FATTR_KILL_SUIDGID (1u << 11)
#define FSTOOL_WRITE_KILL_SUIDGID (1u << 2)
#define FSTOOL_OPEN_KILL_SUIDGID (1u << 0)
#define FSTOOL_IN_HEADER 40            /* struct fuse_in_header */

static int fstool_v2_offered;          /* the kernel's INIT offered it */
static int fstool_v2_want;             /* the handler can keep the promise */
static int fstool_v2_on;               /* answered with it */
static int fstool_init_answer;         /* the next answer written is INIT's */
static int fstool_kill_suidgid;        /* the request at hand asks for it */

static uint32_t fstool_u32(const char *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* what the raw request ``mem`` of ``size`` bytes says for the above */
static void fstool_peek(const char *mem, size_t size)
{
    uint32_t opcode;
    fstool_kill_suidgid = 0;
    if (mem == NULL || size < FSTOOL_IN_HEADER)
        return;
    opcode = fstool_u32(mem + 4);
    mem += FSTOOL_IN_HEADER;
    size -= FSTOOL_IN_HEADER;
    if (opcode == FSTOOL_FUSE_INIT && size >= 16) {
        fstool_v2_offered = (fstool_u32(mem + 12) & FSTOOL_KILLPRIV_V2) != 0;
        fstool_init_answer = 1;
    } else if (opcode == FSTOOL_FUSE_WRITE && size >= 24) {
        /* fh, offset (8 each), size, write_flags */
        fstool_kill_suidgid = (fstool_u32(mem + 20) & FSTOOL_WRITE_KILL_SUIDGID) != 0;
    } else if (opcode == FSTOOL_FUSE_SETATTR && size >= 4) {
        fstool_kill_suidgid = (fstool_u32(mem) & FSTOOL_FATTR_KILL_SUIDGID) != 0;
    } else if (opcode == FSTOOL_FUSE_OPEN && size >= 8) {
        fstool_kill_suidgid = (fstool_u32(mem + 4) & FSTOOL_OPEN_KILL_SUIDGID) != 0;
    }
}

static ssize_t fstool_io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
    (void) userdata;
    if (fstool_init_answer) {
        /* fuse_out_header, then fuse_init_out: major, minor,
           max_readahead, flags */
        fstool_init_answer = 0;
        if (fstool_v2_offered && fstool_v2_want && count >= 2 && iov[1].iov_len >= 16) {
            uint32_t flags = fstool_u32((char *) iov[1].iov_base + 12) | FSTOOL_KILLPRIV_V2;
            memcpy((char *) iov[1].iov_base + 12, &flags, 4);
            fstool_v2_on = 1;
        }
    }
    return writev(fd, iov, count);
}

static ssize_t fstool_io_read(int fd, void *buf, size_t len, void *userdata)
{
    (void) userdata;
    return read(fd, buf, len);
}

static ssize_t fstool_io_splice_send(int fdin, off_t *offin, int fdout, off_t *offout,
                                     size_t len, unsigned int flags, void *userdata)
{
    (void) userdata;
    return splice(fdin, offin, fdout, offout, len, flags);
}

/* the custom io on the session's own descriptor (after mounting; libfuse
   3.14 and later: before, no FUSE_HANDLE_KILLPRIV_V2) */
static int fstool_use_own_io(struct fuse_session *se)
{
#if FUSE_MAJOR_VERSION > 3 || FUSE_MINOR_VERSION >= 14
    static const struct fuse_custom_io io = {
        .writev = fstool_io_writev,
        .read = fstool_io_read,
        .splice_receive = NULL,
        .splice_send = fstool_io_splice_send,
    };
    fstool_v2_on = 0;
    return fuse_session_custom_io(se, &io, fuse_session_fd(se));
#else
    (void) se;
    fstool_v2_on = 0;
    return -ENOSYS;
#endif
}
#endif
