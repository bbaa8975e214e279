"""Build the user-walk read image with ``mkfs.xfs -p``: 22,000 files in 40
directories of 500 and one of 2,000, sizes 0..8 KiB (about 90 MB of data).

    python3 bench/make_proto_read_image.py OUT.img [--seed 1]

Needs mkfs.xfs only (no root, no mount): the host tree is written to a
temporary directory and described by a protofile.
"""
import argparse
import os
import random
import subprocess
import tempfile

UUID = "4a9ea7a4-7fb4-4d5c-9d0a-5b1d0a8e0016"
DIRS = [500] * 40 + [2000]


def build(out: str, seed: int = 1) -> None:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="fstool-proto-", dir=os.environ.get("BENCH_DIR")) \
            as tmp:
        lines = ["/dev/null", "0 0", "d--755 0 0"]
        total = nfiles = 0
        for d, count in enumerate(DIRS):
            lines.append(f"dir{d:03d} d--755 0 0")
            for i in range(count):
                size = rng.randrange(0, 8192)
                host = os.path.join(tmp, f"{d:03d}-{i:05d}")
                with open(host, "wb") as f:
                    f.write(rng.randbytes(size))
                lines.append(f"file-{i:05d}-{rng.randrange(1 << 30):08x} ---644 0 0 {host}")
                total += size
                nfiles += 1
            lines.append("$")
        lines.append("$")
        proto = os.path.join(tmp, "proto")
        with open(proto, "w") as f:
            f.write("\n".join(lines) + "\n")
        if os.path.exists(out):
            os.unlink(out)
        subprocess.run(["truncate", "-s", "1G", out], check=True)
        subprocess.run(["mkfs.xfs", "-q", "-f", "-m", f"uuid={UUID}", "-p", proto, out],
                       check=True)
    print(f"{out}: {nfiles} files in {len(DIRS)} directories, {total / 1e6:.1f} MB of data")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    build(a.out, a.seed)
