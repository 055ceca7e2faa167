"""Module paths in an imported step: which of the model's modules computed each op (`blocks.0.attn`), so tactics
that name modules (`slicer.strategies.remat(step, "blocks.*")`) find their ops in the IR.

While the step is traced, forward hooks on every module of the model annotate the nodes it records
(torch.fx.traceback's "custom" metadata, kept under `preserve_node_meta`) with the module's dotted path, as
`named_modules` spells it (the model itself: ""). The path reaches the MLIR through the one thing torch-mlir's fx
importer keeps of a node, its stack trace: `module_frames` adds the frame `File "module:PATH", line 1` to it,
which becomes one more call site of the op's location; `finish` turns that into
`NameLoc("module:PATH", file:line)` (`core.names.MODULE_LOC_PREFIX`, read back by `core.source_lines.module_path`).
The backward of an op (its stack trace copied from the forward node, `torch_import._locate_backward`) carries the
same path; what is forward and what is backward the IR's data flow says (`slicer.spmd.rematerialize`). A
pipeline's stages read the paths from the nodes themselves (`stage_partition.py`).
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
    innermost module's). Hooks are removed on exit. Only the path's key of the "custom" metadata is set and
    restored (not the whole dict, as `fx_traceback.annotate` restores it), so that other annotations made
    inside a module (the pipeline's stage marks, `stage_split.py`) outlive it."""
    from torch.fx import traceback as fx_traceback  # optional dependency, like torch itself

    previous: list[object] = []

    def enter(path):
        def hook(_module, _args):
            custom = fx_traceback.current_meta.setdefault("custom", {})
            previous.append(custom.get(_KEY, _NONE))
            custom[_KEY] = path
        return hook

    def leave(_module, _args, _output):
        if previous:
            _restore(fx_traceback.current_meta, previous.pop())

    handles = []
    try:
        for path, module in model.named_modules():
            handles.append(module.register_forward_pre_hook(enter(path)))
            handles.append(module.register_forward_hook(leave, always_call=True))
        yield
    finally:
        for handle in handles:
            handle.remove()
        while previous:
            _restore(fx_traceback.current_meta, previous.pop())


_NONE = object()
"""No path was set before a module's: the key is removed again when it ends."""


def _restore(meta: dict, value: object) -> None:
    custom = meta.setdefault("custom", {})
    if value is _NONE:
        custom.pop(_KEY, None)
        if not custom:
            meta.pop("custom")
    else:
        custom[_KEY] = value


def node_module_path(node) -> str | None:
    """The path `module_paths` annotated the fx node `node` with (None: computed by no module, or not traced
    in `module_paths`)."""
    return (node.meta.get("custom") or {}).get(_KEY)


def module_frames(graph) -> None:
    """Give every node of `graph` annotated by `module_paths` the frame naming its module, first in its stack
    trace (the outermost call site, so the user's line stays the innermost frame outside torch)."""
    for node in graph.graph.nodes:
        path = node_module_path(node)
        if path is None or not node.stack_trace or f'"{MODULE_LOC_PREFIX}' in node.stack_trace:
            continue
        node.stack_trace = f'  File "{_FRAME_FILE.format(path)}", line 1, in forward\n' + node.stack_trace


__all__ = ["module_frames", "module_paths", "node_module_path"]
