"""Space and inode allocation and per-AG state: free-space btrees and the
AGFL (space.py), inode chunks through the inobt and finobt (inodes.py), and
the AG headers a transaction changes (perag.py)."""
