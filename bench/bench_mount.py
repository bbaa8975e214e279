#!/usr/bin/env python3
"""fstool mount against fuse2fs and the kernel's XFS, in one run.

    python3 bench/bench_mount.py [--files 20000] [--dirs 100] [--mib 256] [--size 2g]
                                 [--rounds 3] [--quick] [--fio-seconds 20]
                                 [--only fstool,fuse2fs,kernel] [--writeback] [--pyfuse3]
                                 [--baseline TREE] [--reads 3] [--icache] [--creates-only]
                                 [--fstool-mkfs "-n parent=1"]

For each filesystem, on a fresh image of the same size (XFS from
``fstool mkfs`` for fstool, from ``mkfs.xfs`` for the kernel, ext4 from
``mkfs.ext4`` for fuse2fs, mounted ``-o fakeroot``), the access patterns
users have:

- creates per second (FILES empty files, open O_CREAT|O_EXCL and close,
  then sync) in three patterns: ``seq``, FILES/DIRS files in one directory
  before the next; ``rr``, round-robin over DIRS directories
  (``d{i % DIRS}/f{i}``); ``4proc``, four processes at once, each
  round-robin over the same DIRS directories;
- a streaming write of MIB MiB (1 MiB writes, then fsync) and the
  streaming read of it after dropping the caches (the median of READS);
- 4 KiB random writes, random reads and a 70/30 read/write mix on a
  MIB MiB file (fio, psync, one job, FIO_SECONDS each; where fio is not
  installed, a Python pwrite/pread loop of the same shape, said so in the
  output), then 4 KiB random writes into a new sparse MIB MiB file (every
  first write to a block fills a hole);
- a full tree walk (lstat of every entry, after dropping the caches);
- ``tar x`` of a real tree: TAR_SOURCE (/usr/share/doc; with ``--quick``
  its first 100 entries) tarred once into the work directory, extracted
  into the mount and the mount synced (syncfs), entries per second and
  the server's CPU per entry.

Every figure is the median of ROUNDS rounds, each on a fresh image
(``--quick``: one round, 5,000 files, 64 MiB, 5 s fio jobs, for
iteration).  For the FUSE servers, the resident memory of the server
process after the creates and its CPU time per create and per random
I/O (user and system, from /proc: these move less with the machine's
load than the rates do).  Needs root (loop mount, drop_caches), fuse2fs (apt fuse2fs)
and FUSE; fio (apt fio) for the random I/O.

``--creates-only``: the three create patterns alone, each with the
server's CPU per create.  ``--fstool-mkfs``: more options of ``fstool
mkfs`` for fstool's images (the baseline's too), ``"-n parent=1"`` for
parent pointers.

``--icache``: the mount's inode cache alone, lookups per second with 10^4 to
10^7 inodes cached (the cost must stay flat).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from fixtures import modern  # noqa: E402


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_mounted(mnt: str, timeout: float = 30) -> None:
    from fixtures.fusemount import is_mounted
    deadline = time.monotonic() + timeout
    while not is_mounted(mnt):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{mnt} did not come up")
        time.sleep(0.05)


class Target:
    name = ""
    pid = None

    def __init__(self, work: str, size: str):
        slug = "".join(c if c.isalnum() else "-" for c in self.name)
        self.img = os.path.join(work, f"{slug}.img")
        self.mnt = os.path.join(work, f"{slug}-mnt")
        os.makedirs(self.mnt, exist_ok=True)
        subprocess.run(["truncate", "-s", size, self.img], check=True)


class Kernel(Target):
    name = "kernel XFS"

    def mount(self):
        subprocess.run(["mkfs.xfs", "-q", "-f", self.img], check=True)
        subprocess.run(["mount", "-o", "loop", self.img, self.mnt], check=True)

    def umount(self):
        subprocess.run(["umount", self.mnt], check=True)


class Fuse2fs(Target):
    name = "fuse2fs"

    def mount(self):
        subprocess.run(["mkfs.ext4", "-q", "-F", self.img], check=True)
        self.proc = subprocess.Popen(["fuse2fs", "-f", self.img, self.mnt,
                                      "-o", "rw,fakeroot"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.pid = self.proc.pid
        wait_mounted(self.mnt)

    def umount(self):
        subprocess.run(["fusermount3", "-u", self.mnt], check=True)
        self.proc.wait(120)


class Fstool(Target):
    name = "fstool"
    options: list = []
    mkfs: list = []                 # more options of fstool mkfs (--fstool-mkfs)
    repo = REPO

    def mount(self):
        env = dict(os.environ, PYTHONPATH=self.repo)
        size = os.path.getsize(self.img)
        # run from the tree itself: "python -m" puts the current directory
        # ahead of PYTHONPATH, so another checkout there would be imported
        subprocess.run([sys.executable, "-m", "fstool", "mkfs", "-f", "--size", str(size),
                        *self.mkfs, self.img], check=True, env=env, stdout=subprocess.DEVNULL,
                       cwd=self.repo)
        self.proc = subprocess.Popen([sys.executable, "-m", "fstool", "mount", "-f",
                                      *self.options, self.img, self.mnt], env=env,
                                     cwd=self.repo)
        self.pid = self.proc.pid
        wait_mounted(self.mnt)

    def umount(self):
        subprocess.run(["fusermount3", "-u", self.mnt], check=True)
        self.proc.wait(600)


class FstoolWriteback(Fstool):
    name = "fstool -o writeback_cache"
    options = ["-o", "writeback_cache"]


class FstoolPyfuse3(Fstool):
    name = "fstool --fuse-loop pyfuse3"
    options = ["--fuse-loop", "pyfuse3"]


def _make(path: str) -> None:
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))


def _make_rr(top: str, dirs: int, files: int, tag: str) -> None:
    for i in range(files):
        _make(os.path.join(top, f"d{i % dirs}", f"f{tag}{i}"))


def creates(mnt: str, files: int, dirs: int, pattern: str) -> float:
    """Creates per second in ``pattern`` (see the module docstring), in a
    directory of its own under ``mnt``; the directories are made first,
    untimed."""
    top = os.path.join(mnt, pattern)
    os.mkdir(top)
    for d in range(dirs):
        os.mkdir(os.path.join(top, f"d{d}"))
    os.sync()
    t = time.perf_counter()
    if pattern == "seq":
        per = files // dirs
        for d in range(dirs):
            base = os.path.join(top, f"d{d}")
            for i in range(per):
                _make(os.path.join(base, f"file-{i:06d}"))
        files = per * dirs
    elif pattern == "rr":
        _make_rr(top, dirs, files, "")
    else:
        procs = [multiprocessing.Process(target=_make_rr, args=(top, dirs, files // 4, f"{p}-"))
                 for p in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
            if p.exitcode:
                raise RuntimeError(f"a create process exited {p.exitcode}")
        files = files // 4 * 4
    os.sync()
    return files / (time.perf_counter() - t)


CREATE_PATTERNS = ("seq", "rr", "4proc")
FIO_JOBS = (("randwrite", "randwrite", None), ("randread", "randread", None),
            ("randrw 70/30", "randrw", 70))
# 4 KiB random writes into a new sparse file (fio creates it, sets its size,
# allocates nothing): every first write to a block fills a hole
FRESH_JOB = ("randwrite new file", "randwrite", None)


def fio_iops(path: str, mib: int, rw: str, mix, seconds: int, fresh: bool = False) -> float:
    """(IOPS, I/Os done) of a 4 KiB random job on ``path`` (laid out MIB MiB first, not
    timed; ``fresh``: a new sparse file), fio psync with one job; the caches are
    dropped first."""
    drop_caches()
    cmd = ["fio", "--name=bench", f"--filename={path}", f"--size={mib}M", "--bs=4k",
           f"--rw={rw}", "--ioengine=psync", "--numjobs=1", "--time_based",
           f"--runtime={seconds}", "--output-format=json", "--randrepeat=1"]
    if fresh:
        cmd.append("--fallocate=none")
    if mix is not None:
        cmd.append(f"--rwmixread={mix}")
    r = subprocess.run(cmd, check=True, capture_output=True, text=True)
    job = json.loads(r.stdout[r.stdout.index("{"):])["jobs"][0]
    return (job["read"]["iops"] + job["write"]["iops"],
            job["read"]["total_ios"] + job["write"]["total_ios"])


def py_iops(path: str, mib: int, rw: str, mix, seconds: int, fresh: bool = False) -> float:
    """The fallback where fio is missing: the same job as a Python loop of
    4 KiB pread/pwrite at random aligned offsets (no O_DIRECT)."""
    size = mib << 20
    if fresh:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(fd, size)
        os.close(fd)
    elif not os.path.exists(path) or os.path.getsize(path) < size:
        stream_write(path, mib)
    drop_caches()
    rng = random.Random(1)
    buf = rng.randbytes(4096)
    blocks = size // 4096
    reads = {"randread": 100, "randwrite": 0}.get(rw, mix)
    fd = os.open(path, os.O_RDWR)
    n = 0
    t = time.perf_counter()
    end = t + seconds
    try:
        while True:
            for _ in range(64):
                off = rng.randrange(blocks) * 4096
                if rng.randrange(100) < reads:
                    os.pread(fd, 4096, off)
                else:
                    os.pwrite(fd, buf, off)
            n += 64
            if time.perf_counter() >= end:
                break
    finally:
        os.close(fd)
    return n / (time.perf_counter() - t), n


def stream_write(path: str, mib: int) -> float:
    buf = random.Random(1).randbytes(1 << 20)
    t = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(mib):
            os.write(fd, buf)
        os.fsync(fd)
    finally:
        os.close(fd)
    return mib / (time.perf_counter() - t)


def stream_read(path: str, cold: bool = True) -> float:
    """MB/s of reading ``path`` with 1 MiB reads after dropping every cache
    (``cold``), else only the file's own pages (posix_fadvise DONTNEED)."""
    if cold:
        drop_caches()
    fd = os.open(path, os.O_RDONLY)
    if not cold:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    t = time.perf_counter()
    n = 0
    try:
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            n += len(b)
    finally:
        os.close(fd)
    return n / (1 << 20) / (time.perf_counter() - t)


# the real tree extracted by the tar x pattern (tarred once per run)
TAR_SOURCE = "/usr/share/doc"


def make_tarball(work: str, quick: bool) -> tuple:
    """TAR_SOURCE (with ``quick``, its first 100 entries) tarred into
    ``work``: (the tarball's path, its entries); (None, 0) where there is
    no TAR_SOURCE."""
    if not os.path.isdir(TAR_SOURCE):
        return None, 0
    parent, base = os.path.split(TAR_SOURCE)
    names = sorted(os.listdir(TAR_SOURCE))[:100] if quick else None
    members = [os.path.join(base, n) for n in names] if names is not None else [base]
    tar = os.path.join(work, "tree.tar")
    subprocess.run(["tar", "-cf", tar, "-C", parent, *members], check=True,
                   stderr=subprocess.DEVNULL)
    r = subprocess.run(["tar", "-tf", tar], check=True, capture_output=True, text=True)
    return tar, len(r.stdout.splitlines())


def tar_x(mnt: str, tar: str, entries: int) -> float:
    """Entries per second of ``tar x`` of ``tar`` into ``mnt`` (a new
    directory there), the mount synced (syncfs) before the clock stops."""
    dest = os.path.join(mnt, "tarx")
    os.mkdir(dest)
    t = time.perf_counter()
    subprocess.run(["tar", "-xf", tar, "-C", dest], check=True)
    subprocess.run(["sync", "-f", dest], check=True)
    return entries / (time.perf_counter() - t)


def walk(mnt: str) -> float:
    drop_caches()
    t = time.perf_counter()
    n = 0
    for dirpath, dirnames, filenames in os.walk(mnt):
        for name in dirnames + filenames:
            os.lstat(os.path.join(dirpath, name))
            n += 1
    return n / (time.perf_counter() - t)


def data_patterns(t, args, out: dict) -> None:
    """The streaming, random I/O and walk figures of one mounted target, into ``out``."""
    big = os.path.join(t.mnt, "big")
    out["write MB/s"] = stream_write(big, args.mib) * 1.048576
    # one cold read spreads 3x between runs on a virtual disk: the
    # median of READS (bench_mount_read.py alternates servers for more)
    out["read MB/s"] = statistics.median(stream_read(big) for _ in range(args.reads)) \
        * 1.048576
    iops = fio_iops if args.fio else py_iops
    rnd = os.path.join(t.mnt, "random")
    # the file laid out once, untimed, before the first job
    stream_write(rnd, args.mib)
    for label, rw, mix in FIO_JOBS:
        cpu0 = cpu_seconds(t.pid) if t.pid else 0
        out[f"{label} IOPS"], ios = iops(rnd, args.mib, rw, mix, args.fio_seconds)
        if t.pid:
            # as for creates: the server's CPU per I/O moves less with
            # the machine's load than the rate does
            out[f"{label} server CPU us/IO"] = (cpu_seconds(t.pid) - cpu0) / ios * 1e6
    label, rw, mix = FRESH_JOB
    cpu0 = cpu_seconds(t.pid) if t.pid else 0
    out[f"{label} IOPS"], ios = iops(os.path.join(t.mnt, "random-new"), args.mib, rw,
                                     mix, args.fio_seconds, fresh=True)
    if t.pid:
        out[f"{label} server CPU us/IO"] = (cpu_seconds(t.pid) - cpu0) / ios * 1e6
    out["walk entries/s"] = walk(t.mnt)
    if args.tarball:
        cpu0 = cpu_seconds(t.pid) if t.pid else 0
        out["tar x entries/s"] = tar_x(t.mnt, args.tarball, args.tar_entries)
        if t.pid:
            out["tar x server CPU us/entry"] = (cpu_seconds(t.pid) - cpu0) / \
                args.tar_entries * 1e6


def run_target(cls, work: str, args) -> dict:
    t = cls(work, args.size)
    t.mount()
    try:
        out = {}
        cpu0 = cpu_seconds(t.pid) if t.pid else 0
        for pattern in CREATE_PATTERNS:
            c0 = cpu_seconds(t.pid) if t.pid else 0
            out[f"creates/s {pattern}"] = creates(t.mnt, args.files, args.dirs, pattern)
            if t.pid:
                out[f"server CPU us/create {pattern}"] = (cpu_seconds(t.pid) - c0) / \
                    args.files * 1e6
        if t.pid:
            # the server's own CPU time per create: what the machine's load
            # does not change much (the rates above move with it)
            out["server CPU us/create"] = (cpu_seconds(t.pid) - cpu0) / \
                (args.files * len(CREATE_PATTERNS)) * 1e6
            out["server RSS MiB"] = rss_kib(t.pid) / 1024
        if not args.creates_only:
            data_patterns(t, args, out)
    finally:
        t.umount()
    if isinstance(t, Fstool) or isinstance(t, Kernel):
        # xfsprogs 6.10.1 where built: it reads every feature (6.1 refuses
        # parent pointers, which --fstool-mkfs -n parent=1 images have)
        repair = modern.tool("xfs_repair") if modern.available() else "xfs_repair"
        r = subprocess.run([repair, "-n", "-f", t.img], capture_output=True)
        out["repair -n"] = "clean" if r.returncode == 0 else f"exit {r.returncode}"
    os.unlink(t.img)
    return out


def medians(rounds: list) -> dict:
    """The median of each figure over the rounds (the worst repair verdict)."""
    out = {}
    for k in rounds[0]:
        vals = [r[k] for r in rounds if k in r]
        if isinstance(vals[0], str):
            bad = [v for v in vals if v != "clean"]
            out[k] = bad[0] if bad else "clean"
        else:
            out[k] = statistics.median(vals)
    return out


def icache_bench() -> None:
    from fstool.mount.icache import InodeCache
    print(f"{'cached inodes':>14} {'lookups/s':>12} {'cache MiB':>10}")
    rng = random.Random(7)
    probes = [rng.random() for _ in range(1_000_000)]

    def ino_of(i: int) -> int:
        # inode numbers as XFS hands them out: chunks of 64 in runs, across AGs
        return ((i >> 12) << 24) | (i & 0xfff) + 128

    for n in (10_000, 100_000, 1_000_000, 10_000_000):
        before = rss_kib(os.getpid())
        c = InodeCache(max_attrs=1)
        for i in range(n):
            c.ref(ino_of(i))
        size = (rss_kib(os.getpid()) - before) / 1024
        held = c.held
        # the probe numbers are computed in the loop (a list of them would
        # measure the list's memory, not the cache's)
        t = time.perf_counter()
        for p in probes:
            held(ino_of(int(p * n)))
        took = time.perf_counter() - t
        t = time.perf_counter()
        for p in probes:
            ino_of(int(p * n))
        took -= time.perf_counter() - t
        print(f"{n:>14,} {len(probes) / took:>12,.0f} {size:>10.0f}")
        del c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=None, help="files per create pattern "
                    "(default 20000, 5000 with --quick)")
    ap.add_argument("--dirs", type=int, default=100)
    ap.add_argument("--mib", type=int, default=None,
                    help="MiB of the streaming and random files (default 256, 64 with --quick)")
    ap.add_argument("--size", default="2g")
    ap.add_argument("--rounds", type=int, default=None,
                    help="rounds, each on fresh images; medians reported (default 3)")
    ap.add_argument("--fio-seconds", type=int, default=None,
                    help="seconds of each random I/O job (default 20, 5 with --quick)")
    ap.add_argument("--quick", action="store_true",
                    help="one round, 5000 files, 64 MiB, 5 s random jobs")
    ap.add_argument("--only", default="fstool,fuse2fs,kernel")
    ap.add_argument("--reads", type=int, default=3,
                    help="cold reads of the file, the median reported (default 3)")
    ap.add_argument("--writeback", action="store_true",
                    help="also fstool with -o writeback_cache")
    ap.add_argument("--pyfuse3", action="store_true",
                    help="also fstool with the pyfuse3 request loop (the fallback)")
    ap.add_argument("--baseline", metavar="TREE",
                    help="also fstool from another checkout (built), e.g. the main branch")
    ap.add_argument("--icache", action="store_true", help="only the inode cache lookups")
    ap.add_argument("--creates-only", action="store_true",
                    help="only the create patterns (each with its server CPU per create)")
    ap.add_argument("--fstool-mkfs", default="", metavar="OPTS",
                    help="more options of fstool mkfs for fstool's images (\"-n parent=1\")")
    args = ap.parse_args()
    Fstool.mkfs = args.fstool_mkfs.split()
    if args.icache:
        icache_bench()
        return
    q = args.quick
    for name, full, quick in (("files", 20000, 5000), ("mib", 256, 64), ("rounds", 3, 1),
                              ("fio_seconds", 20, 5)):
        if getattr(args, name) is None:
            setattr(args, name, quick if q else full)
    if os.geteuid() != 0:
        sys.exit("needs root (loop mounts, drop_caches)")
    args.fio = shutil.which("fio") is not None
    if not args.fio:
        print("fio is not installed (apt-get install fio): the random I/O figures come "
              "from a Python pread/pwrite loop instead", flush=True)
    kinds = {"fstool": Fstool, "fuse2fs": Fuse2fs, "kernel": Kernel}
    chosen = [kinds[k] for k in args.only.split(",")]
    if args.writeback:
        chosen.append(FstoolWriteback)
    if args.pyfuse3:
        chosen.append(FstoolPyfuse3)
    if args.baseline:
        chosen.insert(0, type("FstoolBaseline", (Fstool,), {
            "name": "fstool " + os.path.basename(os.path.abspath(args.baseline)),
            "repo": os.path.abspath(args.baseline)}))
    if Fuse2fs in chosen and not shutil.which("fuse2fs"):
        sys.exit("fuse2fs is not installed (apt-get install fuse2fs)")
    work = tempfile.mkdtemp(prefix="bench-mount-", dir=os.environ.get("BENCH_DIR"))
    rounds: dict = {cls.name: [] for cls in chosen}
    try:
        args.tarball, args.tar_entries = make_tarball(work, q) if not args.creates_only \
            else (None, 0)
        for n in range(args.rounds):
            # the servers alternate within a round: a change in the
            # machine's load falls on all of them
            for cls in chosen:
                r = run_target(cls, work, args)
                rounds[cls.name].append(r)
                print(f"round {n + 1}", cls.name,
                      {k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items()},
                      flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results = {name: medians(rs) for name, rs in rounds.items()}
    keys = [f"creates/s {p}" for p in CREATE_PATTERNS] + \
        ["write MB/s", "read MB/s"] + \
        [f"{label} IOPS" for label, _rw, _mix in FIO_JOBS + (FRESH_JOB,)] + \
        ["walk entries/s", "tar x entries/s", "server RSS MiB", "server CPU us/create"] + \
        [f"server CPU us/create {p}" for p in CREATE_PATTERNS] + \
        [f"{label} server CPU us/IO" for label, _rw, _mix in FIO_JOBS + (FRESH_JOB,)] + \
        ["tar x server CPU us/entry", "repair -n"]
    keys = [k for k in keys if any(k in r for r in results.values())]
    names = list(results)
    print()
    print(f"medians of {args.rounds} round(s); {args.files} files per create pattern over "
          f"{args.dirs} directories, {args.mib} MiB files, random I/O "
          f"{'fio' if args.fio else 'Python loop (no fio)'} {args.fio_seconds} s per job")
    ratio = "fstool" in results and "fuse2fs" in results
    print(f"{'':34}" + "".join(f"{n[:26]:>27}" for n in names) +
          (f"{'fstool/fuse2fs':>16}" if ratio else ""))
    for k in keys:
        row = f"{k:34}"
        for n in names:
            v = results[n].get(k, "-")
            row += f"{v:>27,.1f}" if isinstance(v, float) else f"{str(v):>27}"
        if ratio and isinstance(results["fstool"].get(k), float) and \
                isinstance(results["fuse2fs"].get(k), float) and "server" not in k:
            row += f"{results['fstool'][k] / results['fuse2fs'][k]:>15.2f}x"
        print(row)


if __name__ == "__main__":
    main()
