"""Pipeline parallelism across stages that each run their own program (MPMD): schedules as values
(`pipeline_schedule.py`), the pipelined step as one module with a function per stage and `slicer.send` /
`slicer.recv` between them (`stage_module.py`), and that module lowered to each stage's instructions
(`instructions.py`), which the runtime executes (`runtime/execution/pipeline_exec.py`)."""
