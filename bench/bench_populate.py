"""populate benchmark: N empty files in D directories, created
(1) by the kernel on a loop mount (a create loop, then sync and umount),
(2) by fstool populate from a host directory holding the same tree,
(3) by fstool populate from a protofile of the same tree,
(4) by fstool mkfs --populate from that protofile (mkfs included),
(5) by mkfs.xfs -p from that protofile (mkfs included),
on fresh images of the same geometry, the tools taking turns round after
round; the best wall time and the best CPU time of each are kept.  Also
reports fstool's peak RSS, whether every image fstool wrote passes
xfs_repair -n, and the log each writer wrote for the same creates: how far
the log head moved (the kernel's from a mount and unmount with nothing done
to after the creates; fstool's over the populate), in bytes per file.
Needs root (loop mount).

    python3 bench/bench_populate.py [--files 200000] [--dirs 200] [--size 4g]
                                    [--repeat 3]
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid

from common import Best, byte_compile, run_child

# one uuid for every image of a run; a fresh one each run, since the kernel
# refuses to mount a second filesystem with the uuid of a mounted one (another
# benchmark running at the same time)
UUID = str(uuid.uuid4())
FSTOOL = [sys.executable, "-m", "fstool"]


def make_host_tree(root, files, dirs):
    per = files // dirs
    for d in range(dirs):
        sub = os.path.join(root, f"d{d:04d}")
        os.mkdir(sub)
        for i in range(per):
            os.close(os.open(os.path.join(sub, f"f{i:07d}"), os.O_CREAT | os.O_WRONLY, 0o644))


def protofile(root, files, dirs, path):
    per = files // dirs
    with open(path, "w") as f:
        f.write("/dev/null\n0 0\nd--755 0 0\n")
        empty = os.path.join(root, "empty")
        open(empty, "w").close()
        for d in range(dirs):
            f.write(f"d{d:04d} d--755 0 0\n")
            for i in range(per):
                f.write(f"f{i:07d} ---644 0 0 {empty}\n")
            f.write("$\n")
        f.write("$\n")


def fresh(img, size):
    if os.path.exists(img):
        os.unlink(img)
    subprocess.run(["truncate", "-s", size, img], check=True)


def mkfs_xfs(img, size):
    fresh(img, size)
    subprocess.run(["mkfs.xfs", "-q", "-f", "-m", f"uuid={UUID}", img], check=True)


def kernel(img, files, dirs, mnt):
    """Create the tree on a loop mount of ``img``; (wall, CPU) of the create
    loop, sync and umount (the CPU of this process and of umount: the
    kernel's writeback threads are not counted)."""
    subprocess.run(["mount", "-o", "loop", img, mnt], check=True)
    per = files // dirs
    try:
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        for d in range(dirs):
            sub = os.path.join(mnt, f"d{d:04d}")
            os.mkdir(sub)
            for i in range(per):
                os.close(os.open(os.path.join(sub, f"f{i:07d}"), os.O_CREAT | os.O_WRONLY,
                                 0o644))
        os.sync()
        subprocess.run(["umount", mnt], check=True)
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = sum(getattr(b, f) - getattr(a, f) for a, b in ((r0, r1), (c0, c1))
                  for f in ("ru_utime", "ru_stime"))
        return wall, cpu
    except BaseException:
        subprocess.run(["umount", mnt])
        raise


def log_head(img):
    """The log head of a clean image, as a byte position counted from cycle
    0 (cycles times the log size plus the head block)."""
    import fstool
    from fstool.trans.logwriter import find_log_head
    with fstool.open_image(img) as fs:
        head, cycle, _prev = find_log_head(fs)
        size = fs.sb.logblocks << (fs.sb.blocklog - 9)
    return (cycle * size + head) * 512


def kernel_idle_mount(img, mnt):
    subprocess.run(["mount", "-o", "loop", img, mnt], check=True)
    subprocess.run(["umount", mnt], check=True)


def repair_clean(img):
    r = subprocess.run(["xfs_repair", "-n", "-f", img], capture_output=True)
    return r.returncode == 0


KERNEL = "kernel (loop mount + sync)"
HOST = "fstool populate (host dir)"
PROTO = "fstool populate (protofile)"
MKFS_P = "fstool mkfs --populate (proto)"
XFS_P = "mkfs.xfs -p (protofile)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=200000)
    ap.add_argument("--dirs", type=int, default=200)
    ap.add_argument("--size", default="4g")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    n = a.files // a.dirs * a.dirs
    byte_compile()
    best = Best()
    unclean = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
        img = os.path.join(d, "b.img")
        mnt = os.path.join(d, "mnt")
        os.mkdir(mnt)
        src = os.path.join(d, "src")
        os.mkdir(src)
        make_host_tree(src, a.files, a.dirs)
        proto = os.path.join(d, "proto")
        protofile(d, a.files, a.dirs, proto)
        klog = flog = 0
        for rnd in range(a.repeat):
            # the kernel's log for the creates: head after an idle mount and
            # unmount, then after the run (kernel() mounts, creates, unmounts)
            mkfs_xfs(img, a.size)
            kernel_idle_mount(img, mnt)
            k0 = log_head(img)
            best.add(KERNEL, *kernel(img, a.files, a.dirs, mnt))
            klog = log_head(img) - k0

            for name, source in ((HOST, src), (PROTO, proto)):
                mkfs_xfs(img, a.size)
                f0 = log_head(img)
                best.add(name, *run_child(FSTOOL + ["populate", "-q", img, source]))
                if name == HOST:
                    flog = log_head(img) - f0
                if rnd == 0 and not repair_clean(img):
                    unclean.append(name)

            fresh(img, a.size)
            best.add(MKFS_P, *run_child(FSTOOL + ["mkfs", "-q", "--uuid", UUID, "--populate",
                                                  proto, img]))
            if rnd == 0 and not repair_clean(img):
                unclean.append(MKFS_P)

            fresh(img, a.size)
            best.add(XFS_P, *run_child(["mkfs.xfs", "-q", "-f", "-m", f"uuid={UUID}", "-p",
                                        proto, img]))
    print(f"{n} empty files in {a.dirs} directories, best of {a.repeat} rounds")
    print(f"{'tool':32s} {'wall s':>7s} {'CPU s':>7s} {'files/s':>9s} {'peak RSS':>9s}")
    for name in (KERNEL, HOST, PROTO, MKFS_P, XFS_P):
        rss = f"{best.rss[name]:6.0f} MiB" if name in best.rss else ""
        print(f"{name:32s} {best.wall[name]:7.2f} {best.cpu[name]:7.2f} "
              f"{n / best.wall[name]:9.0f} {rss:>9s}")
    w, c = best.wall, best.cpu
    print(f"host dir vs kernel: {w[KERNEL] / w[HOST]:.2f}x (wall)")
    print(f"protofile vs mkfs.xfs -p: populate {w[XFS_P] / w[PROTO]:.2f}x wall, "
          f"{c[XFS_P] / c[PROTO]:.2f}x CPU; mkfs --populate {w[XFS_P] / w[MKFS_P]:.2f}x wall, "
          f"{c[XFS_P] / c[MKFS_P]:.2f}x CPU (target 1.0x)")
    print("images fstool wrote: " + ("all pass xfs_repair -n" if not unclean else
                                     "NOT CLEAN: " + ", ".join(unclean)))
    print(f"log written: kernel {klog / n:.1f} bytes/file ({klog >> 10} KiB), "
          f"fstool {flog / n:.1f} bytes/file ({flog >> 10} KiB)")


if __name__ == "__main__":
    main()
