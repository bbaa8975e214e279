"""populate benchmark: N empty files in D directories, created
(1) by the kernel on a loop mount (a create loop, then sync and umount),
(2) by fstool populate from a host directory holding the same tree,
(3) by mkfs.xfs -p with a protofile of the same tree,
in one run, on fresh images of the same geometry.  Also reports fstool's
peak RSS, and the log each writer wrote for the same creates: how far the
log head moved (the kernel's from a mount and unmount with nothing done to
after the creates; fstool's over the populate), in bytes per file.  Needs
root (loop mount).

    python3 bench/bench_populate.py [--files 200000] [--dirs 200] [--size 4g]
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

UUID = "6a0c7f0e-1f5d-4b8e-a2f6-0d4c2b9e7a11"


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


def kernel(img, size, files, dirs, mnt, reformat=True):
    if reformat:
        fresh(img, size)
        subprocess.run(["mkfs.xfs", "-q", "-f", "-m", f"uuid={UUID}", img], check=True)
    subprocess.run(["mount", "-o", "loop", img, mnt], check=True)
    per = files // dirs
    try:
        t0 = time.perf_counter()
        for d in range(dirs):
            sub = os.path.join(mnt, f"d{d:04d}")
            os.mkdir(sub)
            for i in range(per):
                os.close(os.open(os.path.join(sub, f"f{i:07d}"), os.O_CREAT | os.O_WRONLY,
                                 0o644))
        os.sync()
        subprocess.run(["umount", mnt], check=True)
        return time.perf_counter() - t0
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


def timed(cmd):
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    dt = time.perf_counter() - t0
    return dt, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=200000)
    ap.add_argument("--dirs", type=int, default=200)
    ap.add_argument("--size", default="4g")
    a = ap.parse_args()
    n = a.files // a.dirs * a.dirs
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
        img = os.path.join(d, "b.img")
        mnt = os.path.join(d, "mnt")
        os.mkdir(mnt)
        src = os.path.join(d, "src")
        os.mkdir(src)
        make_host_tree(src, a.files, a.dirs)
        proto = os.path.join(d, "proto")
        protofile(d, a.files, a.dirs, proto)
        # the kernel's log for the creates: head after an idle mount and
        # unmount, then after the run (kernel() mounts, creates, unmounts)
        fresh(img, a.size)
        subprocess.run(["mkfs.xfs", "-q", "-f", "-m", f"uuid={UUID}", img], check=True)
        kernel_idle_mount(img, mnt)
        k0 = log_head(img)
        tk = kernel(img, a.size, a.files, a.dirs, mnt, reformat=False)
        klog = log_head(img) - k0
        fresh(img, a.size)
        subprocess.run(["mkfs.xfs", "-q", "-f", "-m", f"uuid={UUID}", img], check=True)
        f0 = log_head(img)
        tf, rss = timed([sys.executable, "-m", "fstool", "populate", "-q", img, src])
        flog = log_head(img) - f0
        r = subprocess.run(["xfs_repair", "-n", "-f", img], capture_output=True)
        clean = "clean" if r.returncode == 0 else f"NOT CLEAN (xfs_repair exit {r.returncode})"
        fresh(img, a.size)
        tp, _ = timed(["mkfs.xfs", "-q", "-f", "-m", f"uuid={UUID}", "-p", proto, img])
    print(f"{n} empty files in {a.dirs} directories")
    print(f"{'tool':28s} {'seconds':>8s} {'files/s':>9s}")
    for name, t in (("kernel (loop mount + sync)", tk), ("fstool populate", tf),
                    ("mkfs.xfs -p", tp)):
        print(f"{name:28s} {t:8.2f} {n / t:9.0f}")
    print(f"fstool / kernel rate: {tk / tf:.2f}x   fstool peak RSS: {rss} MiB   image: {clean}")
    print(f"log written: kernel {klog / n:.1f} bytes/file ({klog >> 10} KiB), "
          f"fstool {flog / n:.1f} bytes/file ({flog >> 10} KiB)")


if __name__ == "__main__":
    main()
