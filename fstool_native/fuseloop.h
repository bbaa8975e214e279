/* libfuse3's low-level API at the 3.12 interface (fuse_session_new and
   fuse_session_loop_mt as 3.12 defines them; 3.14 is what CI installs). */
#ifndef FSTOOL_FUSELOOP_H
#define FSTOOL_FUSELOOP_H
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#endif
