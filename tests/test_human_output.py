"""Output for people and for pipes: every command that prints a table prints
plain aligned columns without box characters into a pipe (or with --format
plain) and a table with bars on a terminal (a pty here); sizes in
KiB/MiB/GiB with -b/--bytes for raw numbers, JSON raw; NULL pointers as
xfs_db prints them; stat's Blocks in 512-byte units; `inode` and `btree
dump --inode` by path; frag lists fragmented files by path."""
import json
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

import fstool

REPO = Path(__file__).resolve().parent.parent
# rich's box drawing and block characters: none may reach a pipe
BOX = re.compile("[\u2500-\u257f\u2580-\u259f]")


def run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "fstool", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def run_on_pty(*args, columns=120) -> str:
    """What a command prints on a terminal (a pty of ``columns`` columns)."""
    master, slave = pty.openpty()
    import fcntl
    import struct
    import termios
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    p = subprocess.Popen([sys.executable, "-m", "fstool", *map(str, args)], cwd=REPO,
                         stdout=slave, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                         env={**env, "TERM": "xterm"})
    os.close(slave)
    out = b""
    while True:
        r, _, _ = select.select([master], [], [], 60)
        if not r:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    p.wait(timeout=60)
    os.close(master)
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode("utf-8", "replace"))


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    d = tmp_path_factory.mktemp("human")
    src = d / "src"
    (src / "d").mkdir(parents=True)
    (src / "big").write_bytes(os.urandom(3_000_000))
    (src / "d" / "f").write_bytes(b"hi\n")
    os.symlink("big", src / "l")
    img = d / "h.img"
    r = run("mkfs", "-q", "--size", "128m", img, "--populate", src)
    assert r.returncode == 0, r.stderr
    # a damaged copy, so that check has findings to tabulate
    bad = d / "bad.img"
    bad.write_bytes(img.read_bytes())
    subprocess.run(["xfs_db", "-x", "-f", "-c", "agi 0", "-c", "write -d freecount 1234",
                    str(bad)], check=True, capture_output=True)
    return img, bad


# command -> (arguments, the column headers its table names)
def _tables(img, bad):
    return {
        "agstats": (["agstats", img], ["AG", "size", "used", "free", "longest", "extents",
                                       "AGFL", "used %", "allocated", "bnobt"]),
        "freesp": (["freesp", img], ["from", "to", "extents", "blocks"]),
        "frag": (["frag", img], ["actual"]),
        "check": (["check", bad], ["code", "severity", "where", "problem", "AGI_COUNT"]),
        "btree": (["btree", "dump", "--summary", "--ag", "0", "--tree", "inobt", img],
                  ["level", "blocks", "records", "fill"]),
    }


def test_tables_are_plain_in_a_pipe_and_boxed_on_a_terminal(image):
    img, bad = image
    for name, (args, columns) in _tables(img, bad).items():
        piped = run(*args)
        assert "Traceback" not in piped.stderr, piped.stderr
        assert not BOX.search(piped.stdout), (name, piped.stdout)
        for c in columns:
            assert c in piped.stdout, (name, c, piped.stdout)
        # NO_COLOR changes nothing of the layout: still plain
        assert run(*args[:1], "--format", "plain", *args[1:]).stdout == \
            run(*args[:1], "--format", "plain", *args[1:], env={"NO_COLOR": "1"}).stdout
        plain = run(*args[:1], "--format", "plain", *args[1:])
        assert not BOX.search(plain.stdout), (name, plain.stdout)
        # one line per row, never wrapped at 80 columns (check's messages
        # are longer than that)
        if name == "check":
            assert any(len(ln) > 80 for ln in plain.stdout.splitlines()), plain.stdout
        on_tty = run_on_pty(*args)
        for c in columns:
            assert c in on_tty, (name, c, on_tty)
        if name != "frag":          # frag's listing is empty on this image
            assert BOX.search(on_tty), (name, on_tty)
        assert run(*args[:1], "--format", "json", *args[1:]).stdout.strip()[:1] in "{[", name


def test_agstats_bars_and_percentages(image):
    img, _ = image
    data = json.loads(run("agstats", "--json", img).stdout)
    tot = data["total"]
    assert tot["used_blocks"] == tot["size"] - tot["free_blocks"]
    assert tot["used_pct"] == round(tot["used_blocks"] * 100 / tot["size"], 2)
    assert data["blocksize"] == 4096
    plain = run("agstats", img).stdout
    assert f"{tot['used_pct']:.1f}%" in plain
    # the per-AG bars on a terminal: one per AG and one for the total
    tty = run_on_pty("agstats", img)
    bars = [ln for ln in tty.splitlines() if "%" in ln and re.search("[\u2580-\u259f]", ln)]
    assert len(bars) >= 2, tty
    # -b: blocks, as before
    raw = run("agstats", "-b", img).stdout
    assert re.search(rf"\ball\s+{tot['size']}\s+{tot['used_blocks']}\s+{tot['free_blocks']}\b",
                     raw), raw


def test_freesp_bars_on_a_terminal(image):
    img, _ = image
    h = json.loads(run("freesp", "--json", img).stdout)
    tty = run_on_pty("freesp", img)
    rows = [ln for ln in tty.splitlines() if re.match(r"\s*\d+\s+\d+\s+\d+\s+\d+", ln)]
    assert len(rows) == len(h["bins"]), tty
    assert any(re.search("[\u2580-\u259f]", ln) for ln in rows), tty
    assert "% of free" in tty


def test_frag_lists_fragmented_files_by_path(fragmented_img):
    f = json.loads(run("frag", "--json", "--top", "50", fragmented_img).stdout)
    assert f["worst"], f
    with fstool.open_image(fragmented_img) as fs:
        for w in f["worst"]:
            assert w["extents"] > w["ideal"], w
            assert w["path"] and fs.lookup(w["path"]).ino == w["ino"], w
    text = run("frag", "--top", "50", fragmented_img).stdout
    assert "path" in text and "ideal extents" in text
    for w in f["worst"]:
        assert re.search(rf"^{re.escape(w['path'])}\s+{w['ino']}\s", text, re.M), (w, text)


def test_sizes_for_people_and_raw(image):
    img, _ = image
    long = run("ls", "-l", img, "/").stdout
    assert re.search(r"\s2\.9 MiB .* big$", long, re.M), long
    raw = run("ls", "-l", "-b", img, "/").stdout
    assert re.search(r"\s3000000 .* big$", raw, re.M), raw
    info = run("info", img).stdout
    assert re.search(r"^size\s+= 128 MiB \(32768 blocks\)$", info, re.M), info
    assert re.search(r"^free\s+= [0-9.]+ MiB \(\d+ blocks\)$", info, re.M), info
    assert re.search(r"^free\s+= \d+ blocks$", run("info", "-b", img).stdout, re.M)
    # JSON keeps raw integers
    assert json.loads(run("stat", "--json", img, "/big").stdout)["size"] == 3_000_000
    assert isinstance(json.loads(run("info", "--json", img).stdout)["fdblocks"], int)


def test_stat_blocks_are_512_byte_units(image):
    img, _ = image
    out = run("stat", img, "/big").stdout
    with fstool.open_image(img) as fs:
        st = fs.stat("/big")
        nblocks = fs.lookup("/big").nblocks
    assert st.st_blocks == nblocks * 4096 // 512
    assert re.search(rf"Blocks: {st.st_blocks}\s.*FS blocks: {nblocks}\b", out), out
    assert "Size: 3000000 (2.9 MiB)" in out
    assert "Size: 3000000 " in run("stat", "-b", img, "/big").stdout
    rec = json.loads(run("stat", "--json", img, "/big").stdout)
    assert rec["blocks"] == st.st_blocks and rec["nblocks"] == nblocks


def test_null_pointers_print_as_xfs_db_prints_them(image):
    img, _ = image
    agi = run("agi", img, "1").stdout
    db = subprocess.run(["xfs_db", "-r", "-c", "agi 1", "-c", "print newino dirino",
                         str(img)], capture_output=True, text=True, check=True).stdout
    assert "newino = null" in db          # the oracle says null for an empty AG's
    for line in db.splitlines():
        assert line in agi.splitlines(), (line, agi)
    assert "next_unlinked = null" in run("inode", img, "/big").stdout
    assert "left null right null" in run("btree", "dump", "--ag", "1", "--tree", "bnobt",
                                         img).stdout
    # JSON: the raw value
    assert json.loads(run("agi", "--json", img, "1").stdout)["newino"] == 0xFFFFFFFF


def test_inode_takes_a_path(image):
    img, _ = image
    ino = json.loads(run("stat", "--json", img, "/big").stdout)["ino"]
    by_path = run("inode", img, "/big")
    assert by_path.returncode == 0, by_path.stderr
    assert by_path.stdout == run("inode", img, str(ino)).stdout
    assert run("inode", img, hex(ino)).stdout == by_path.stdout
    assert run("btree", "dump", "--inode", "/big", img).stdout == \
        run("btree", "dump", "--inode", str(ino), img).stdout
    missing = run("inode", img, "/nope")
    assert missing.returncode == 1 and "no such file" in missing.stderr


def test_force_and_json_everywhere(image, tmp_path):
    img, _ = image
    work = tmp_path / "w.img"
    work.write_bytes(img.read_bytes())
    host = tmp_path / "x.txt"
    host.write_text("x")
    assert run("put", work, host, "/x").returncode == 0
    assert run("put", work, host, "/x").returncode == 1           # exists
    assert run("put", "-f", work, host, "/x").returncode == 0
    assert run("cp", "-f", work, "/x", "/big").returncode == 0
    r = run("log", "zero", "-f", "--json", work)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"image": str(work), "cycle": json.loads(r.stdout)["cycle"],
                                    "lost_sectors": 0}
