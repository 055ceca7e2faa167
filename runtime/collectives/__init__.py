"""Collectives on ranks: the MPI executor of redistribution plans (`plan_executor`), each kind's execution over
MPI and shared memory (`collective_kinds`), communicator groups (`communicators`), packing (`mpi_packing`), the
shared-memory protocol (`shm_collectives`) and the run that measures the cost model (`calibration`)."""
