"""Pipelined training steps (layer between `slicer.api` and `slicer.strategies`): a step with a `Pipeline`
tactic compiled into its stages' programs, their schedule and the module that runs them
(`stage_compile.py`), and the result, `PipelineProgram`, which explains itself and trains (`pipeline_program.py`).
`slicer.compile` hands a step with a `Pipeline` tactic here, with itself to compile each stage's programs."""

from .pipeline_program import PipelineProgram
from .stage_compile import compile_pipeline, refuse_pipelined_module

__all__ = ["PipelineProgram", "compile_pipeline", "refuse_pipelined_module"]
