"""check benchmark: fstool check against xfs_repair -n on the same
kernel-written image, in one run: wall time and peak RSS, the tools taking turns.

    python3 bench/bench_check.py [--inodes 200000] [--tree empty|varied]
                                 [--image IMG] [--repeat 3] [--base DIR]
                                 [--modern [--parent]]

With --image, checks that image (read-only), e.g. the kernel-written Debian
/usr image (issue 31: ``--image /work/bench-images/usr.img``).  With --base,
a second fstool tree (its native modules built) is measured as
"fstool check (base)" in the same rounds, for before/after figures.
xfs_repair -n runs as the system's and, where fixtures/modern.py finds it,
as xfsprogs 6.10.1's.  Figures are medians over the rounds (best too).

Without --image, builds bench/results/check-<N>.img by letting the kernel
create N empty files in N/1000 directories, or with ``--tree varied``
bench/results/check-varied-<N>.img holding copies of the fixture tree
(fixtures/tree.py: directories of every form, xattrs in every form with
remote values, sparse, fragmented and preallocated files, symlinks,
devices) until it has N inodes (root and a loop mount needed).  The package
is byte-compiled first, as scripts/install.sh leaves it.  ``--modern``
makes the image with mkfs.xfs 6.10.1 (its defaults) and compares with its
xfs_repair -n; ``--parent`` adds parent pointers (-n parent=1), so that a
parent-pointer image and a plain one of the same tree can be compared.
"""
import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from common import bench_image  # noqa: E402
from fixtures import modern  # noqa: E402
from fixtures.tree import build_tree  # noqa: E402


MKFS = ["mkfs.xfs"]            # the mkfs.xfs command line (--modern, --parent add to it)


def kernel_image(path: str, size_gib: int, fill) -> None:
    """mkfs.xfs an image of ``size_gib`` GiB at ``path`` and let the kernel
    write ``fill(mountpoint)`` into it."""
    tmp = path + ".tmp"
    subprocess.run(["truncate", "-s", "0", tmp], check=True)
    subprocess.run(["truncate", "-s", f"{size_gib}G", tmp], check=True)
    subprocess.run([*MKFS, "-q", "-f", tmp], check=True)
    mnt = tempfile.mkdtemp()
    subprocess.run(["mount", "-o", "loop", tmp, mnt], check=True)
    try:
        fill(mnt)
    finally:
        subprocess.run(["umount", mnt], check=True)
        os.rmdir(mnt)
    os.rename(tmp, path)


def build(path: str, inodes: int) -> None:
    """N empty files, 1,000 to a directory."""
    def fill(mnt):
        per = 1000
        for d in range(inodes // per):
            dpath = os.path.join(mnt, f"d{d:05d}")
            os.mkdir(dpath)
            for i in range(per):
                os.close(os.open(os.path.join(dpath, f"f{i:05d}"), os.O_CREAT | os.O_WRONLY))
    # inodes may take 25% of the space (imaxpct): leave room for 512-byte inodes
    kernel_image(path, max(8, inodes * 2048 // (1 << 30) + 8), fill)


def build_varied(path: str, inodes: int) -> None:
    """Copies of the fixture tree until the filesystem holds N inodes."""
    def fill(mnt):
        copy = 0
        while True:
            st = os.statvfs(mnt)
            if st.f_files - st.f_ffree >= inodes:
                break
            dest = os.path.join(mnt, f"tree{copy:03d}")
            os.mkdir(dest)
            build_tree(dest, "small", seed=copy)
            copy += 1
    kernel_image(path, max(8, inodes * 4096 // (1 << 30) + 8), fill)


def measure(cmd, root=None):
    """Wall seconds, peak RSS (MB), exit status and CPU seconds (user +
    system, every thread) of one child process."""
    wrapper = ("import resource,subprocess,sys,time;t=time.perf_counter();"
               "r=subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL,"
               "stderr=subprocess.DEVNULL).returncode;"
               "u=resource.getrusage(resource.RUSAGE_CHILDREN);"
               "print(time.perf_counter()-t,u.ru_maxrss/1024,r,u.ru_utime+u.ru_stime)")
    root = root or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    env = dict(os.environ, PYTHONPATH=root)
    # (python -m puts the working directory first on the path: the tree's own)
    out = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True,
                         text=True, check=True, env=env, cwd=root).stdout.split()
    return float(out[0]), float(out[1]), int(out[2]), float(out[3])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inodes", type=int, default=200000)
    ap.add_argument("--tree", choices=("empty", "varied"), default="empty")
    ap.add_argument("--image")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--base", help="another fstool tree, measured alongside")
    ap.add_argument("--modern", action="store_true",
                    help="mkfs.xfs and xfs_repair 6.10.1 (fixtures/modern.py)")
    ap.add_argument("--parent", action="store_true",
                    help="with --modern: parent pointers (-n parent=1)")
    a = ap.parse_args()
    repair = "xfs_repair"
    tag = ""
    if a.modern:
        MKFS[:] = [modern.tool("mkfs.xfs")] + (["-n", "parent=1"] if a.parent else [])
        repair = modern.tool("xfs_repair")
        tag = "-pptr" if a.parent else "-modern"
    repo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(repo, "fstool"),
                    os.path.join(repo, "fstool_native")], check=True,
                   stdout=subprocess.DEVNULL)
    if a.tree == "varied":
        img = bench_image(a.image, f"check-varied{tag}-{a.inodes}.img",
                          lambda p: build_varied(p, a.inodes))
    else:
        img = bench_image(a.image, f"check{tag}-{a.inodes}.img", lambda p: build(p, a.inodes))
    img = os.path.abspath(img)
    subprocess.run(["cat", img], stdout=subprocess.DEVNULL)
    # with --modern the image needs 6.10.1's xfs_repair (6.1 does not know
    # its features): it is the one compared with
    tools = {"xfs_repair -n": ([repair, "-n", "-f", img], None)}
    if not a.modern and modern.available():
        tools["xfs_repair -n 6.10"] = ([modern.tool("xfs_repair"), "-n", "-f", img], None)
    tools["fstool check"] = ([sys.executable, "-m", "fstool", "check", img], None)
    tools["fstool check -j2"] = ([sys.executable, "-m", "fstool", "check", "-j", "2", img], None)
    if a.base:
        tools["fstool check (base)"] = ([sys.executable, "-m", "fstool", "check", img], a.base)
    # the tools take turns, round after round, so a busy moment on a shared
    # machine weighs on all of them alike; the ratio is also taken per round
    runs = {name: [] for name in tools}
    ratios = []
    load_before = os.getloadavg()[0]
    for _ in range(a.repeat):
        for name, (cmd, root) in tools.items():
            runs[name].append(measure(cmd, root))
        ratios.append(runs["fstool check"][-1][0] / runs["xfs_repair -n"][-1][0])

    def median(vals):
        vals = sorted(vals)
        return vals[len(vals) // 2] if len(vals) % 2 else \
            (vals[len(vals) // 2 - 1] + vals[len(vals) // 2]) / 2

    med = {}
    for name, rs in runs.items():
        med[name] = tuple(median([q[k] for q in rs]) for k in range(4))
        best = min(rs)
        print(f"{name:20s} median {med[name][0]:6.2f} s {med[name][1]:6.0f} MB RSS  "
              f"CPU {med[name][3]:.2f} s  (best {best[0]:.2f} s)  exit "
              f"{sorted({q[2] for q in rs})}")
    for ours in [n for n in tools if n.startswith("fstool")]:
        for theirs in [n for n in tools if n.startswith("xfs_repair")]:
            print(f"{ours} / {theirs}: {med[ours][0] / med[theirs][0]:.2f}x the wall time, "
                  f"{med[ours][1] / med[theirs][1]:.2f}x the memory, "
                  f"{med[ours][3] / med[theirs][3]:.2f}x the CPU (medians)")
    print(f"per round, fstool check / xfs_repair -n: {', '.join(f'{q:.2f}' for q in ratios)}")
    print(f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")

if __name__ == "__main__":
    main()
