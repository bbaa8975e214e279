"""One walker per reader, run in a child process by bench_read.py.

    python3 bench/read_walkers.py READER list|read IMAGE

Prints one JSON line: entries, files, bytes, seconds (wall), cpu (user +
system seconds), peak RSS in MB.  "list" walks the whole tree and fetches
name, mode and size of every entry (an inode read each); "read" also reads
every regular file completely.  Imports count: each walker imports its
library inside the timed part.

fstool has three walkers: "fstool" (listdir and inode by number, the
original benchmark loop), "fstool-walk" (what a user writes first:
``for path, inode in fs.walk("/")`` and ``inode.read()``) and
"fstool-scandir" (the os-shaped API: scandir, entry.stat(), fs.open()).
"""
import json
import resource
import stat
import sys
import time


def walk_fstool(img, read):
    import fstool
    fs = fstool.open_image(img)
    entries = files = nbytes = 0
    stack = [fs.root]
    while stack:
        d = stack.pop()
        for ent in fs.listdir(d):
            node = fs.inode(ent.ino)
            entries += 1
            _ = (ent.name, node.mode, node.size)
            if node.is_dir:
                stack.append(node)
            elif read and node.is_reg:
                nbytes += len(node.read())
                files += 1
    return entries, files, nbytes


def walk_fstool_user(img, read):
    import fstool
    entries = files = nbytes = 0
    with fstool.open_image(img) as fs:
        for path, inode in fs.walk("/"):
            if path == "/":
                continue
            entries += 1
            _ = (path, inode.mode, inode.size)
            if read and inode.is_reg:
                nbytes += len(inode.read())
                files += 1
    return entries, files, nbytes


def walk_fstool_scandir(img, read):
    import fstool
    entries = files = nbytes = 0
    with fstool.open_image(img) as fs:
        stack = ["/"]
        while stack:
            with fs.scandir(stack.pop()) as it:
                for e in it:
                    entries += 1
                    s = e.stat(follow_symlinks=False)
                    _ = (e.name, s.st_mode, s.st_size)
                    if stat.S_ISDIR(s.st_mode):
                        stack.append(e.path)
                    elif read and stat.S_ISREG(s.st_mode):
                        with fs.open(e.path) as f:
                            nbytes += len(f.read())
                        files += 1
    return entries, files, nbytes


def walk_libfsxfs(img, read):
    import pyfsxfs
    v = pyfsxfs.volume()
    v.open(img)
    entries = files = nbytes = 0
    stack = [v.get_root_directory()]
    while stack:
        d = stack.pop()
        for i in range(d.number_of_sub_file_entries):
            e = d.get_sub_file_entry(i)
            entries += 1
            mode = e.file_mode
            _ = (e.name, mode, e.size)
            if stat.S_ISDIR(mode):
                stack.append(e)
            elif read and stat.S_ISREG(mode):
                nbytes += len(e.read())
                files += 1
    return entries, files, nbytes


def walk_dissect(img, read):
    from dissect.xfs import XFS
    fs = XFS(open(img, "rb"))
    entries = files = nbytes = 0
    stack = [fs.get("/")]
    while stack:
        d = stack.pop()
        for name, node in d.listdir().items():
            if name in (".", ".."):
                continue
            entries += 1
            mode = node.inode.di_mode
            _ = (name, mode, node.size)
            if stat.S_ISDIR(mode):
                stack.append(node)
            elif read and stat.S_ISREG(mode):
                nbytes += len(node.open().read())
                files += 1
    return entries, files, nbytes


WALKERS = {"fstool": walk_fstool, "fstool-walk": walk_fstool_user,
           "fstool-scandir": walk_fstool_scandir, "libfsxfs": walk_libfsxfs,
           "dissect.xfs": walk_dissect}

if __name__ == "__main__":
    reader, mode, img = sys.argv[1:4]
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    entries, files, nbytes = WALKERS[reader](img, mode == "read")
    dt = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    print(json.dumps({"entries": entries, "files": files, "bytes": nbytes, "seconds": dt,
                      "cpu": cpu, "rss_mb": r1.ru_maxrss / 1024}))
