"""Every device in one process: the SPMD simulator (`simulator`) and the partitioning oracle (`oracle`)."""
