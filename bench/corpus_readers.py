"""Run fstool's read commands on one image in one process, through the CLI
entry point, and report each command that crashed (an internal error or a
traceback).  Used by corpus_agreement.py: one process per image instead of
one per command.

    python3 bench/corpus_readers.py IMAGE SCRATCH_DIR STATUS_FILE CMD_JSON...

Each CMD_JSON is a JSON list of fstool arguments.  STATUS_FILE gets the
command being run (so a hang can be named) and, at the end, a JSON list of
[command, last line of its error output] for every crash.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile


def main():
    _img, scratch, status, *cmds = sys.argv[1:]
    from fstool.cli.main import main as fstool_main
    bad = []
    devnull = os.open(os.devnull, os.O_WRONLY)
    saved_out, saved_err = os.dup(1), os.dup(2)
    for raw in cmds:
        args = json.loads(raw)
        with open(status, "w") as f:
            f.write(json.dumps(args))
        with tempfile.TemporaryFile() as errf:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(devnull, 1)
            os.dup2(errf.fileno(), 2)
            try:
                fstool_main(args)
                rc = 0
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else 1
            except BaseException as e:      # an escape past the entry point
                rc = 70
                print(f"Traceback: {type(e).__name__}: {e}", file=sys.stderr)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved_out, 1)
                os.dup2(saved_err, 2)
            errf.seek(0)
            err = errf.read().decode("utf-8", "replace")
        if rc == 70 or "Traceback" in err or "internal error" in err:
            lines = err.strip().splitlines() or ["exit 70"]
            bad.append([" ".join(args[:2]), lines[-1][:300]])
        for name in os.listdir(scratch):
            p = os.path.join(scratch, name)
            subprocess.run(["chmod", "-R", "u+rwx", p], capture_output=True)
            shutil.rmtree(p, ignore_errors=True)
    with open(status, "w") as f:
        f.write(json.dumps(bad))


if __name__ == "__main__":
    main()
