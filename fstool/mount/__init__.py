"""The image as a live filesystem through FUSE.

``volume.Volume`` is the filesystem itself: one write session for the
mount's life, one transaction per operation, inode numbers as FUSE node ids,
every operation a plain method that returns values or raises an error that
carries the kernel's errno.  It imports nothing of FUSE, so the suite can
drive it directly.  ``fuseops`` adapts it to pyfuse3 (libfuse3's low-level,
inode-based API) and ``run`` mounts, daemonises, runs the checkpoint timer
and unmounts.
"""
