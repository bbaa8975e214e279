"""On-disk definitions of XFS v5: constants, feature bits and header layouts."""
