"""The namespace layer: names, inodes and their forks on the write path
(namespace.py, files.py) and the encoders of directories, xattrs and
symlinks (dirbuild.py, attrbuild.py, dablock.py, forkplan.py), over the
write session (writer.py)."""
