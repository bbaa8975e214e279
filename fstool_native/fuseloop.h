/* libfuse3's low-level API at the 3.12 interface (fuse_session_new and
   fuse_session_loop_mt as 3.12 defines them; 3.14 is what CI installs),
   and a log function that keeps libfuse's errors for fstool's own
   one-line message instead of printing it. */
#ifndef FSTOOL_FUSELOOP_H
#define FSTOOL_FUSELOOP_H
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <fuse_log.h>
#include <fcntl.h>
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
#endif
