"""Bad input gives one clear error line and a non-zero exit, never a
traceback or a hang.  Corruptions are made with xfs_db on an image that
mkfs.xfs populates from a protofile."""
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(shutil.which("mkfs.xfs") is None or
                                shutil.which("xfs_db") is None,
                                reason="xfsprogs (mkfs.xfs, xfs_db) not installed")

# 600 MiB gives agblocks=38400, not a power of two, so a block number can lie
# past the end of an AG while still naming AG 0.
IMAGE_SIZE = "600M"


def fstool(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "fstool", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(res, *needles):
    assert res.returncode != 0, res
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("fstool: error: "), lines[0]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def xfs_db(img, *cmds):
    args = ["xfs_db", "-x", "-f"]
    for c in cmds:
        args += ["-c", c]
    out = subprocess.run(args + [str(img)], capture_output=True, text=True, check=True)
    return out.stdout


@pytest.fixture(scope="module")
def base_image(tmp_path_factory):
    d = tmp_path_factory.mktemp("badinput")
    src = d / "src"
    src.mkdir()
    (src / "f").write_bytes(b"hello\n" * 2000)
    proto = d / "proto"
    # /a/b/c nested shortform directories, /big a block-form directory
    lines = ["/dev/null", "0 0", "d--755 0 0",
             "a d--755 0 0", "b d--755 0 0", "c d--755 0 0", "$", "$", "$",
             "big d--755 0 0"]
    lines += [f"entry_number_{i:04d} ---644 0 0 {src / 'f'}" for i in range(60)]
    lines += ["$", f"f ---644 0 0 {src / 'f'}", "$"]
    proto.write_text("\n".join(lines) + "\n")
    img = d / "base.img"
    subprocess.run(["truncate", "-s", IMAGE_SIZE, str(img)], check=True)
    subprocess.run(["mkfs.xfs", "-q", "-f", "-p", str(proto), str(img)], check=True)
    return img


@pytest.fixture
def image(base_image, tmp_path):
    img = tmp_path / "img"
    subprocess.run(["cp", "--sparse=always", str(base_image), str(img)], check=True)
    return img



def _ino(img, path):
    # `xfs_db path P` then `stack` shows "inode N"
    out = subprocess.run(["xfs_db", "-r", "-f", "-c", f"path {path}", "-c", "stack",
                          str(img)], capture_output=True, text=True, check=True).stdout
    for tok in out.replace(",", " ").split("inode")[1:]:
        return int(tok.split()[0])
    raise AssertionError(out)


def test_clean_image_lists(image):
    res = fstool("ls", "-R", image, "/")
    assert res.returncode == 0, res.stderr
    assert "/a/b/c" in res.stdout.splitlines()


def test_missing_image(tmp_path):
    assert_one_line_error(fstool("info", tmp_path / "nope.img"))


def test_mkfs_into_a_missing_directory(tmp_path):
    """An OS error naming a file reads 'PATH: reason', not Python's
    '[Errno 2] ...' text."""
    target = tmp_path / "no-such-dir" / "x.img"
    line = assert_one_line_error(fstool("mkfs", "--size", "64m", target),
                                 f"{target}: No such file or directory")
    assert "Errno" not in line


def test_directory_as_image(tmp_path):
    assert_one_line_error(fstool("info", tmp_path))


def test_empty_file(tmp_path):
    p = tmp_path / "empty"
    p.write_bytes(b"")
    assert_one_line_error(fstool("info", p), "too small")


def test_random_garbage(tmp_path):
    p = tmp_path / "garbage"
    p.write_bytes(os.urandom(1 << 20))
    assert_one_line_error(fstool("ls", p), "not an XFS filesystem")


def test_zeroed_superblock(image):
    with open(image, "r+b") as f:
        f.write(b"\0" * 512)
    assert_one_line_error(fstool("ls", image), "superblock", "bad magic")


def test_truncated_image(image):
    os.truncate(image, 100 << 20)
    assert_one_line_error(fstool("ls", image), "truncated")


def test_stale_crc_agf(image):
    xfs_db(image, "agf 0", "fuzz -c freeblks random")
    assert_one_line_error(fstool("agf", image, 0), "agf", "AG 0", "crc")


def test_stale_crc_inode(image):
    ino = _ino(image, "/f")
    xfs_db(image, f"inode {ino}", "fuzz -c core.uid random")
    line = assert_one_line_error(fstool("cat", image, "/f"), f"inode {ino}")
    assert "CRC" in line


def test_bad_magic_with_good_crc(image):
    xfs_db(image, "agi 1", "fuzz -d magicnum random")
    assert_one_line_error(fstool("agi", image, 1), "agi", "AG 1", "magic")


def test_directory_block_past_end_of_ag(image):
    ino = _ino(image, "/big")
    agblocks = int(xfs_db(image, "sb 0", "print agblocks").split("=")[1])
    agno = ino >> 19          # agblklog 16 + inopblog 3 for this geometry
    fsb = (agno << 16) | (agblocks + 100)
    xfs_db(image, f"inode {ino}", f"write -d u3.bmx[0].startblock {fsb}")
    line = assert_one_line_error(fstool("ls", image, "/big"), "past the end of its AG")
    assert f"inode {ino}" in line


def test_directory_cycle(image):
    a, b = _ino(image, "/a"), _ino(image, "/a/b")
    # make /a/b/c point back at /a
    xfs_db(image, f"inode {b}", f"write -d u3.sfdir3.list[0].inumber.i4 {a}")
    assert_one_line_error(fstool("ls", "-R", image, "/"), "cycle")
    dest = image.parent / "out"
    res = fstool("get", image, "/", dest)
    assert res.returncode == 1 and "cycle" in res.stderr and "Traceback" not in res.stderr


def test_v4_image_is_unsupported(tmp_path):
    img = tmp_path / "v4.img"
    subprocess.run(["truncate", "-s", "512M", str(img)], check=True)
    mk = subprocess.run(["mkfs.xfs", "-q", "-f", "-m", "crc=0", str(img)],
                        capture_output=True, text=True)
    if mk.returncode:
        pytest.skip(f"mkfs.xfs cannot make a v4 image here: {mk.stderr.strip()}")
    assert_one_line_error(fstool("info", img), "not supported")


def test_no_such_path(image):
    assert_one_line_error(fstool("cat", image, "/does/not/exist"), "no such file")


def test_ag_out_of_range(image):
    assert_one_line_error(fstool("agf", image, 99), "AG 99 does not exist")


def test_cat_directory(image):
    assert_one_line_error(fstool("cat", image, "/a"), "is a directory")


def test_realtime_is_unsupported(tmp_path):
    """(An external log is supported: tests/test_external_log.py.)"""
    img, dev = tmp_path / "data.img", tmp_path / "dev.img"
    for p in (img, dev):
        subprocess.run(["truncate", "-s", "512M", str(p)], check=True)
    subprocess.run(["mkfs.xfs", "-q", "-f", "-r", f"rtdev={dev}", str(img)], check=True)
    assert_one_line_error(fstool("ls", img), "not supported")


def _patch_inode(img, ino, mutate):
    """Rewrite one inode's bytes and fix its CRC, as a hostile image would."""
    import fstool
    import fstool_native
    with fstool.open_image(img) as fs:
        agno, agbno, idx = fs.ino_location(ino)
        off = ((agno * fs.sb.agblocks + agbno) << fs.sb.blocklog) + idx * fs.sb.inodesize
        size = fs.sb.inodesize
    with open(img, "r+b") as f:
        f.seek(off)
        raw = bytearray(f.read(size))
        mutate(raw)
        crc = fstool_native.load().xfs_cksum(bytes(raw), 100)
        raw[100:104] = crc.to_bytes(4, "little")
        f.seek(off)
        f.write(raw)


def test_get_refuses_hostile_names(base_image, tmp_path):
    img = tmp_path / "hostile.img"
    subprocess.run(["cp", "--sparse=always", str(base_image), str(img)], check=True)
    a = _ino(img, "/a")

    def rename_b(raw):
        # /a holds one shortform entry "b"; call it ".." and then "/"
        i = raw.index(b"\x01\x00\x60b", 176) if b"\x01\x00\x60b" in raw else None
        assert i is not None, raw[176:220].hex()
        raw[i + 3:i + 4] = b"/"
    _patch_inode(img, a, rename_b)
    dest = tmp_path / "dest"
    res = fstool("get", img, "/", dest)
    assert res.returncode == 1
    assert "unsafe name" in res.stderr and "Traceback" not in res.stderr
    # nothing was written outside dest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dest", "hostile.img"]
    assert (dest / "f").exists()


def test_images_that_are_not_files_or_block_devices(tmp_path):
    """A FIFO, a socket or a character device as the image: one line, exit 3
    (check and repair: 4, their "could not run"), at once, for every command
    that opens an image; nothing is read from it or written to it."""
    import socket
    from fixtures.fusemount import fuse_skip_reason
    fifo = tmp_path / "ff"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    host = tmp_path / "h.txt"
    host.write_bytes(b"x")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        every = [("info",), ("ls",), ("check",), ("put", "{}", host, "/x"),
                 ("mkdir", "{}", "/d"), ("populate", "{}", tmp_path / "src"),
                 ("log", "info"), ("log", "replay"),
                 ("log", "zero", "--force"), ("repair",), ("undo", "{}", host),
                 ("mkfs", "-q", "-f")]
        (tmp_path / "src").mkdir()
        if fuse_skip_reason() is None:
            every.append(("mount", "{}", mnt))
        cases = [(fifo, "a FIFO (named pipe)", cmd) for cmd in every]
        cases += [(sock_path, "a socket", ("info",)),
                  (sock_path, "a socket", ("put", "{}", host, "/x")),
                  ("/dev/null", "a character device", ("info",)),
                  ("/dev/null", "a character device", ("mkfs", "-q", "-f"))]
        for image, what, cmd in cases:
            args = [image if a == "{}" else a for a in cmd]
            if "{}" not in cmd:
                args.append(image)
            res = fstool(*args, timeout=30)
            want = 4 if cmd[0] in ("check", "repair") else 3
            assert res.returncode == want, (args, res.returncode, res.stderr)
            assert_one_line_error(res, f"is {what}, not an image")
        assert os.stat(fifo).st_size == 0 and not os.listdir(mnt)
    finally:
        sock.close()


def test_names_are_shown_whole_as_check_shows_them(tmp_path):
    """An entry named '../../../tmp/pwned' (crafted: the kernel never makes
    one) is listed whole, and check names it with the same escape."""
    img = tmp_path / "n.img"
    crafted = "../../../tmp/pwned"
    host = tmp_path / "h"
    host.write_bytes(b"x")
    assert fstool("mkfs", "-q", img, "--size", "32m").returncode == 0
    for name in ("a" * len(crafted), "tab\there"):
        assert fstool("put", img, host, "/" + name).returncode == 0
    xfs_db(img, "inode 128", f'write -d u3.sfdir3.list[0].name "{crafted}"')
    res = fstool("ls", img)
    assert res.stdout.splitlines() == [crafted, "tab\\there"], res.stdout
    assert fstool("ls", "-l", img).stdout.splitlines()[0].endswith(" " + crafted)
    assert "/" + crafted in fstool("ls", "-R", img).stdout.splitlines()
    res = fstool("check", "--json", img)
    import json
    found = [json.loads(line) for line in res.stdout.splitlines()]
    assert any(f["code"] == "DIR_NAME" and f"entry '{crafted}' has an illegal name"
               in f["message"] for f in found), found


def test_one_escape_for_names():
    from fstool.ops.names import quoted_name, shown_name
    raw = "é\\\n\t\r\x01\x7f/'".encode() + b"\xff"
    assert shown_name(raw) == "é\\\\\\n\\t\\r\\x01\\x7f/'\\xff"
    assert shown_name(raw.decode("utf-8", "surrogateescape")) == shown_name(raw)
    assert quoted_name(b"it's") == "'it\\'s'"
