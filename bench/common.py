"""Helpers shared by the benchmarks."""
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def bench_image(given, name, build):
    """``given`` if set, else bench/results/NAME, built with ``build(path)``
    the first time."""
    if given:
        return given
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    path = os.path.join(HERE, "results", name)
    if not os.path.exists(path):
        build(path)
    return path


def run_child(cmd, **kw):
    """Run ``cmd`` and return (wall seconds, CPU seconds (user + system),
    peak RSS in MiB) of that one child process; raises CalledProcessError on
    a non-zero exit.  Output goes to /dev/null unless ``stdout`` is given."""
    import subprocess
    import time
    kw.setdefault("stdout", subprocess.DEVNULL)
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, **kw)
    _pid, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise subprocess.CalledProcessError(p.returncode, cmd)
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


def byte_compile() -> None:
    """Byte-compile fstool once, as an installed package is: where
    PYTHONDONTWRITEBYTECODE is set, every timed command would otherwise
    compile its modules again (about 0.15 s)."""
    import compileall
    root = os.path.dirname(HERE)
    for pkg in ("fstool", "fstool_native"):
        compileall.compile_dir(os.path.join(root, pkg), quiet=1)


class Best:
    """Best wall and best CPU time of each named run over several rounds."""

    def __init__(self):
        self.wall: dict = {}
        self.cpu: dict = {}
        self.rss: dict = {}

    def add(self, name, wall, cpu=None, rss=None):
        self.wall[name] = min(wall, self.wall.get(name, wall))
        if cpu is not None:
            self.cpu[name] = min(cpu, self.cpu.get(name, cpu))
        if rss is not None:
            self.rss[name] = max(rss, self.rss.get(name, rss))


def kernel_copy(img: str, src: str, mnt: str) -> tuple[float, float]:
    """Wall and CPU time (cp, sync, umount processes; not the kernel's
    writeback threads) of copying ``src`` onto a loop mount of ``img``."""
    import resource
    import subprocess
    import time
    subprocess.run(["mount", "-o", "loop", img, mnt], check=True)
    try:
        c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        subprocess.run(["cp", "-a", src + "/.", mnt], check=True)
        os.sync()
        subprocess.run(["umount", mnt], check=True)
        wall = time.perf_counter() - t0
    except BaseException:
        subprocess.run(["umount", mnt])
        raise
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = sum(getattr(b, f) - getattr(a, f) for a, b in ((c0, c1), (r0, r1))
              for f in ("ru_utime", "ru_stime"))
    return wall, cpu


class Median:
    """Every wall and CPU time of each named run over several rounds; the
    median of each, and the largest peak RSS."""

    def __init__(self):
        self.walls: dict = {}
        self.cpus: dict = {}
        self.rss: dict = {}

    def add(self, name, wall, cpu=None, rss=None):
        self.walls.setdefault(name, []).append(wall)
        if cpu is not None:
            self.cpus.setdefault(name, []).append(cpu)
        if rss is not None:
            self.rss[name] = max(rss, self.rss.get(name, rss))

    @staticmethod
    def _median(values: list) -> float:
        import statistics
        return statistics.median(values)

    @property
    def wall(self) -> dict:
        return {k: self._median(v) for k, v in self.walls.items()}

    @property
    def cpu(self) -> dict:
        return {k: self._median(v) for k, v in self.cpus.items()}
