"""The filesystem core: geometry, AGs, btrees, inodes, directories, xattrs."""
