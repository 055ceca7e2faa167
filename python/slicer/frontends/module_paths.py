"""Module paths in an imported step: which of the model's modules computed each op (`blocks.0.attn`), so tactics
that name modules (`slicer.strategies.remat(step, "blocks.*")`) find their ops in the IR.

While the step is traced, forward hooks on every module of the model annotate the nodes it records
(`torch.fx.traceback.annotate`, kept under `preserve_node_meta`) with the module's dotted path, as
`named_modules` spells it (the model itself: ""). The path reaches the MLIR through the one thing torch-mlir's fx
importer keeps of a node, its stack trace: `module_frames` adds the frame `File "module:PATH", line 1` to it,
which becomes one more call site of the op's location; `finish` turns that into
`NameLoc("module:PATH", file:line)` (`core.names.MODULE_LOC_PREFIX`, read back by `core.source_lines.module_path`).
The backward of an op (its stack trace copied from the forward node, `torch_import._locate_backward`) carries the
same path; what is forward and what is backward the IR's data flow says (`slicer.spmd.rematerialize`).
"""

from __future__ import annotations

import contextlib

from slicer.core.names import MODULE_LOC_PREFIX

_KEY = "slicer_module"
"""The key of the path in a node's `meta["custom"]` (torch's field for user annotations)."""

_FRAME_FILE = MODULE_LOC_PREFIX + "{}"
"""The file of the frame naming a module: not a `.py` file, so never taken for the user's line."""


@contextlib.contextmanager
def module_paths(torch, model):
    """While tracing in this context, every node a module of `model` records is annotated with its path (the
    innermost module's). Hooks are removed on exit."""
    from torch.fx import traceback as fx_traceback  # optional dependency, like torch itself

    open_contexts: list[contextlib.ExitStack] = []

    def enter(path):
        def hook(_module, _args):
            stack = contextlib.ExitStack()
            stack.enter_context(fx_traceback.annotate({_KEY: path}))
            open_contexts.append(stack)
        return hook

    def leave(_module, _args, _output):
        if open_contexts:
            open_contexts.pop().close()

    handles = []
    try:
        for path, module in model.named_modules():
            handles.append(module.register_forward_pre_hook(enter(path)))
            handles.append(module.register_forward_hook(leave, always_call=True))
        yield
    finally:
        for handle in handles:
            handle.remove()
        while open_contexts:
            open_contexts.pop().close()


def module_frames(graph) -> None:
    """Give every node of `graph` annotated by `module_paths` the frame naming its module, first in its stack
    trace (the outermost call site, so the user's line stays the innermost frame outside torch)."""
    for node in graph.graph.nodes:
        path = (node.meta.get("custom") or {}).get(_KEY)
        if path is None or not node.stack_trace or f'"{MODULE_LOC_PREFIX}' in node.stack_trace:
            continue
        node.stack_trace = f'  File "{_FRAME_FILE.format(path)}", line 1, in forward\n' + node.stack_trace


__all__ = ["module_frames", "module_paths"]
