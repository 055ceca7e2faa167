"""Jobs of MPI ranks: starting them, driving them and what each rank does in one.

The driver's side: a timed run (`launch`), warm ranks kept between runs (`rank_pool`), a training session
(`session`), and the job the process already belongs to (`in_job`). The job: `mpiexec` starts it, `rank_job`
drives `rank_server` on every rank over `rank_link` with `wire`'s messages (the one protocol of the jobs a driver
starts, docs/runtime.md; a pipelined program's stages are served through `pipeline_rank`), `kernel_transfer`
brings the kernels, `resources` checks what the hosts can run. A rank's side: `rank` (one failing rank stops the
job), `timed_run`, `heap`.
"""
