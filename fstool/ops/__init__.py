"""Whole-image operations built on the filesystem core."""
