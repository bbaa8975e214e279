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

With ``--tree DIR`` (given once or more, e.g. /usr/share and /usr/lib) it
times a real tree instead, side by side in one run, the tools taking turns
round after round, medians of the rounds:
(1) the kernel: a loop mount of a fresh image, ``cp -a``, sync, umount;
(2) ``fstool populate`` of the directory into a fresh image (mkfs.xfs not
    timed, as for the kernel);
(3) ``fstool mkfs --populate`` of the directory (mkfs included);
(4) ``mkfs.xfs -p`` from an equivalent protofile written from the tree, by
    the system's mkfs.xfs and by xfsprogs 6.10.1 where it is built (mkfs
    included).  A protofile cannot name what has whitespace in its name or
    symlink target, nor a hard link (it becomes a copy): those are left out
    of it, and counted.
The first round checks every image fstool wrote with xfs_repair -n (the
system's and 6.10.1) and compares the kernel's view of the populated image
with the source (fixtures.tree.assert_same_tree: types, modes, owners,
sizes, times, hard links, symlink targets, xattrs, contents by hash).  ``--baseline DIR`` also times ``fstool
populate`` from another checkout (its PYTHONPATH), for a before/after
figure in the same run.

    python3 bench/bench_populate.py --tree /usr/share [--tree /usr/lib]
                                    [--size 8g] [--repeat 3] [--baseline DIR]
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid

from common import Best, Median, byte_compile, kernel_copy, run_child

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


def _proto_safe(name: bytes) -> bool:
    """A name (or symlink target) a protofile can hold as one token, for
    mkfs.xfs and for fstool alike."""
    text = name.decode("utf-8", "surrogateescape")
    return text.split() == [text] and not text.startswith((":", "#")) and text != "$"


def _proto_mode(mode: int) -> str:
    import stat
    kind = {stat.S_IFREG: "-", stat.S_IFDIR: "d", stat.S_IFLNK: "l", stat.S_IFIFO: "p",
            stat.S_IFSOCK: "s", stat.S_IFCHR: "c", stat.S_IFBLK: "b"}[stat.S_IFMT(mode)]
    return (kind + ("u" if mode & stat.S_ISUID else "-") + ("g" if mode & stat.S_ISGID else "-")
            + f"{mode & 0o777:03o}")


def tree_protofile(root: str, path: str) -> tuple[int, int]:
    """Write an mkfs.xfs protofile describing the host tree at ``root`` (files
    named by absolute path, names in byte order); returns (entries written,
    entries left out: names or symlink targets a protofile cannot hold, and
    what is below such a directory)."""
    import stat
    written = left = 0
    broot = os.fsencode(os.path.abspath(root))
    with open(path, "wb") as f:
        st = os.lstat(broot)
        f.write(b"/dev/null\n0 0\n%s %d %d\n" % (_proto_mode(st.st_mode).encode(),
                                                 st.st_uid, st.st_gid))

        def walk(d: bytes, depth: int) -> None:
            nonlocal written, left
            with os.scandir(d) as it:
                ents = sorted(it, key=lambda e: e.name)
            for e in ents:
                st = e.stat(follow_symlinks=False)
                if not _proto_safe(e.name):
                    left += 1 + (sum(len(n) + len(s) for _p, s, n in os.walk(e.path))
                                 if stat.S_ISDIR(st.st_mode) else 0)
                    continue
                head = b"%s%s %s %d %d" % (b" " * depth, e.name, _proto_mode(st.st_mode).encode(),
                                           st.st_uid, st.st_gid)
                fmt = stat.S_IFMT(st.st_mode)
                if fmt == stat.S_IFREG:
                    f.write(head + b" " + e.path + b"\n")
                elif fmt == stat.S_IFLNK:
                    target = os.readlink(e.path)
                    if not _proto_safe(target):
                        left += 1
                        continue
                    f.write(head + b" " + target + b"\n")
                elif fmt in (stat.S_IFCHR, stat.S_IFBLK):
                    f.write(head + b" %d %d\n" % (os.major(st.st_rdev), os.minor(st.st_rdev)))
                else:
                    f.write(head + b"\n")
                written += 1
                if fmt == stat.S_IFDIR:
                    walk(e.path, depth + 1)
                    f.write(b" " * (depth + 1) + b"$\n")

        walk(broot, 1)
        f.write(b"$\n")
    return written, left


def tree_want(tree: str) -> tuple:
    """What assert_same_tree compares the copy of ``tree`` with: its
    manifest and xattrs, a file's link count being the links it has inside
    the tree (a copy of /usr/lib cannot have the links of its files that
    lie elsewhere, /usr/lib64's for one)."""
    from collections import Counter
    from fixtures.tree import tree_manifest, xattr_values
    records = tree_manifest(tree)
    inside = Counter(r["ino"] for r in records if r["type"] != "dir")
    for r in records:
        if r["type"] != "dir":
            r["nlink"] = min(r["nlink"], inside[r["ino"]])
    return records, xattr_values(tree)


def repair_problems(img: str) -> list:
    """Which xfs_repair -n (the system's, and 6.10.1 where built) find
    problems in ``img``."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from fixtures import modern
    out = []
    if not repair_clean(img):
        out.append("xfs_repair -n")
    if modern.available() and modern.repair_n(img).returncode:
        out.append(f"xfs_repair -n {modern.VERSION}")
    return out


def tree_bench(tree: str, size: str | None, repeat: int, baseline: str | None) -> None:
    import shutil
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from fixtures import modern
    from pathlib import Path
    from fixtures.images import Mounted
    from fixtures.tree import assert_same_tree
    byte_compile()
    tree = os.path.abspath(tree)
    du = int(subprocess.run(["du", "-sb", "--apparent-size", tree], capture_output=True,
                            text=True, check=True).stdout.split()[0])
    entries = sum(len(d) + len(f) for _p, d, f in os.walk(tree))
    size = size or f"{max(1 << 30, 2 * du) >> 20}m"
    med = Median()
    problems = []
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    KERNEL_CP = "kernel (cp -a + sync + umount)"
    POP = "fstool populate"
    POP_BASE = f"fstool populate ({os.path.basename(baseline.rstrip('/'))})" if baseline else None
    MKFS_POP = "fstool mkfs --populate"
    XFS61 = "mkfs.xfs -p (system)"
    XFS610 = f"mkfs.xfs -p ({modern.VERSION})"
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
        img = os.path.join(d, "t.img")
        mnt = os.path.join(d, "mnt")
        os.mkdir(mnt)
        proto = os.path.join(d, "proto")
        written, left = tree_protofile(tree, proto)
        runs = [(KERNEL_CP, None), (POP, here)]
        if baseline:
            runs.append((POP_BASE, os.path.abspath(baseline)))
        runs += [(MKFS_POP, here), (XFS61, "mkfs.xfs")]
        if modern.available():
            runs.append((XFS610, modern.tool("mkfs.xfs")))
        loads = [os.getloadavg()[0]]
        for rnd in range(repeat):
            for name, what in runs:
                if name == KERNEL_CP:
                    mkfs_xfs(img, size)
                    med.add(name, *kernel_copy(img, tree, mnt))
                    continue
                if name in (POP, POP_BASE):
                    mkfs_xfs(img, size)
                    env = {**os.environ, "PYTHONPATH": what}
                    med.add(name, *run_child(FSTOOL + ["populate", "-q", img, tree], env=env))
                elif name == MKFS_POP:
                    fresh(img, size)
                    med.add(name, *run_child(FSTOOL + ["mkfs", "-q", "--uuid", UUID,
                                                       "--populate", tree, img]))
                else:
                    fresh(img, size)
                    med.add(name, *run_child([what, "-q", "-f", "-m", f"uuid={UUID}", "-p",
                                              proto, img], cwd=d))
                    continue
                if rnd == 0:
                    problems += [f"{name}: not clean by {p}" for p in repair_problems(img)]
                    if name == POP:
                        with Mounted(img, readonly=True, nouuid=True) as view:
                            try:
                                assert_same_tree(Path(tree), view, dir_sizes=False,
                                                 want=tree_want(tree))
                            except AssertionError as exc:
                                problems.append(f"{name}: the kernel's view differs from "
                                                f"the source: {str(exc)[:300]}")
            loads.append(os.getloadavg()[0])
            print(f"round {rnd + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s"
                                                  for k, v in med.walls.items())
                  + f" (load average {loads[-1]:.1f})", flush=True)
        if os.path.exists(img):
            os.unlink(img)
        shutil.rmtree(mnt, ignore_errors=True)
    w, c = med.wall, med.cpu
    print(f"{tree}: {entries} entries, {du / 1e6:.0f} MB; protofile: {written} entries "
          f"({left} left out); image {size}; medians of {repeat} rounds; "
          f"load average {min(loads):.1f}-{max(loads):.1f}")
    print(f"{'tool':34s} {'wall s':>7s} {'CPU s':>7s} {'entries/s':>10s} {'peak RSS':>9s}")
    for name, _w in runs:
        rss = f"{med.rss[name]:6.0f} MiB" if name in med.rss else ""
        print(f"{name:34s} {w[name]:7.2f} {c[name]:7.2f} {entries / w[name]:10.0f} {rss:>9s}")
    for name in (POP, POP_BASE):
        if name:
            print(f"{name} vs kernel: {w[KERNEL_CP] / w[name]:.2f}x wall (target 3x); "
                  f"vs mkfs.xfs -p: " + ", ".join(f"{w[x] / w[name]:.2f}x ({x[13:-1]})"
                                                  for x, _w in runs if x.startswith("mkfs.xfs"))
                  + " (target 1x)")
    print(f"{MKFS_POP} vs mkfs.xfs -p: " + ", ".join(
        f"{w[x] / w[MKFS_POP]:.2f}x ({x[13:-1]})" for x, _w in runs if x.startswith("mkfs.xfs")))
    print("images fstool wrote: " + ("pass xfs_repair -n (both) and match the source"
                                     if not problems else "PROBLEMS: " + "; ".join(problems)))


KERNEL = "kernel (loop mount + sync)"
HOST = "fstool populate (host dir)"
PROTO = "fstool populate (protofile)"
MKFS_P = "fstool mkfs --populate (proto)"
XFS_P = "mkfs.xfs -p (protofile)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=200000)
    ap.add_argument("--dirs", type=int, default=200)
    ap.add_argument("--size", help="image size (default 4g; with --tree: twice the tree's)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tree", action="append", help="time this host directory instead")
    ap.add_argument("--baseline", help="with --tree: another fstool checkout to time too")
    a = ap.parse_args()
    if a.tree:
        for tree in a.tree:
            tree_bench(tree, a.size, a.repeat, a.baseline)
        return
    a.size = a.size or "4g"
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
