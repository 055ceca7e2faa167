"""torch and torch-mlir as the PyTorch frontends use them (`from_torch`, `training_step`): a function of tensors
turned into linalg-on-tensors MLIR with named arguments and results, cleaned up for partitioning.

Two ways from Python to an aten graph:
- `export`: `torch.export` (through `torch_mlir.fx.export_and_import`), under `torch.no_grad()`: the way for
  inference programs; it cannot trace a function that computes gradients (functorch's wrappers have no storage,
  and `torch.autograd.grad` under no_grad finds nothing that requires grad).
- `trace`: `torch.fx.experimental.proxy_tensor.make_fx`, run with gradients enabled on fake copies of the
  example tensors (shapes and dtypes only; on the tensors themselves where that fails, `TRACING_MODES`): the
  forward, the backward autograd derives and whatever the function does with the gradients, recorded as aten
  ops (a joint graph), which torch-mlir's fx importer imports as it is (`stateless_fx_import`).
Both decompose with `decompositions.py` and `stateful.py` (batch norm in both modes, dropout from the step's own
random state, `randomness.py`); any other op that draws from torch's generator is refused by `trace`. `finish` then
parses torch-mlir's output in Slicer's MLIR, rejects what Slicer cannot partition (state kept between calls), runs the
import-time cleanup (`cleanup.py`), names the entry function's arguments and results (`slicer.name`), and gives every op
the location of its Python source line (so errors about the program name the line of the user's model).

torch and torch-mlir are an optional extra (`pip install 'slicer[torch]'`), imported when first used.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import traceback
import warnings

from mlir import ir

from slicer.core.errors import FrontendError
from slicer.core.functions import entry_function, function_type
from slicer.core.names import ARG_ATTRS_ATTR, ARG_NAME_ATTR, MODULE_LOC_PREFIX, RES_ATTRS_ATTR
from slicer.core.operations import map_locations
from slicer.core.source_lines import first_user_frame, module_path, source_line, user_frame
from slicer.dialect import make_context, walk_ops

from .accumulators import widen_accumulators
from .cleanup import checked_step, clean_up, drop_last_results
from .composites import decomposed_composites
from .decompositions import decompositions
from .module_paths import module_frames
from .randomness import check_no_random_ops
from .stateful import stateful_decompositions
from .torch_lowering import lower

ENTRY = "forward"
INSTALL = "pip install 'slicer[torch]' (torch==2.13.0, torch-mlir==20261001)"


def load_torch():
    """torch and torch-mlir's fx importer (optional dependencies, imported on first use).

    torch-mlir carries its own LLVM (24), linked into its libraries with visible symbols. Once Slicer's JIT has
    run in the process, MLIR's LLVM (22) is loaded globally (the ExecutionEngine loads the runner utilities
    RTLD_GLOBAL), and torch-mlir's LLVM would register its command-line options into MLIR's registry: "Option
    'print-inst-addrs' registered more than once!", and the process aborts. Loaded with RTLD_DEEPBIND, torch-mlir's
    libraries bind to their own LLVM first, so the two coexist in either order. (torch-mlir imported by the user
    before Slicer's MLIR is the other order: then MLIR's LLVM reads torch-mlir's tables, and the JIT builds its
    kernels with the LLVM tools instead, lowering/foreign_llvm.py.)"""
    try:
        import torch  # optional dependency: only the torch frontend needs it
    except ImportError as exc:
        raise FrontendError(f"importing a PyTorch model needs torch and torch-mlir ({exc.name} is missing): "
                            f"{INSTALL}") from None
    flags = sys.getdlopenflags()
    if hasattr(os, "RTLD_DEEPBIND"):
        sys.setdlopenflags(flags | os.RTLD_DEEPBIND)
    try:
        from torch_mlir import fx  # optional dependency, loads torch-mlir's LLVM (see above)
    except ImportError as exc:
        raise FrontendError(f"importing a PyTorch model needs torch and torch-mlir ({exc.name} is missing): "
                            f"{INSTALL}") from None
    finally:
        sys.setdlopenflags(flags)
    return torch, fx


def first_line(exc: BaseException) -> str:
    """`Kind: first line of the message`, how the frontends quote an error of torch or torch-mlir."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


def export(torch, fx, module, args, what: str) -> str:
    """torch-mlir's linalg for `module` (an nn.Module whose forward takes `args`; `what` in messages), through
    torch.export under no_grad, lowered in a child process (`torch_lowering`). Raises what torch.export
    raises, or FrontendError when torch-mlir fails or crashes."""
    with torch.no_grad(), warnings.catch_warnings():
        # torch.export's own pytree code trips torch's deprecation of LeafSpec checks (torch 2.13): not ours
        warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning)
        # torch.func transforms inside the function (grad_and_value) leave a lifted constant that "requires
        # gradient"; torch.export detaches it, which is what a traced step wants
        warnings.filterwarnings("ignore", message=r".*requires gradient. but it's not properly registered")
        try:
            imported = fx.export_and_import(module, *args, output_type="raw", func_name=ENTRY,
                                            decomposition_table=tracing_table(torch))
        except FrontendError as exc:  # a decomposition's refusal; torch.export appends the node it ran
            raise FrontendError(str(exc).split("\n\nWhile executing")[0]) from None
    return lower(imported, what)


#: What torch raises where tracing reads a tensor's value: make_fx's `aten._local_scalar_dense`, torch.export's
#: guard on a data-dependent symbol.
DATA_DEPENDENT = re.compile(r"_local_scalar_dense|GuardOnDataDependentSymNode|data-dependent")


def raise_if_data_dependent(exc: BaseException, what: str) -> None:
    """Raise a FrontendError naming the Python line at which tracing `what` read a tensor's value, if `exc`
    (what torch raised) says so; return otherwise."""
    if not DATA_DEPENDENT.search(f"{type(exc).__name__}: {exc}"):
        return
    stack = [(frame.filename, frame.lineno) for frame in reversed(traceback.extract_tb(exc.__traceback__))]
    frame = first_user_frame(stack)
    where = f" at {frame[0]}:{frame[1]}" if frame else ""
    raise FrontendError(
        f"{what} reads the value of a tensor while it is traced{where} (aten._local_scalar_dense: .item(), "
        "int(tensor), or a function whose result's size depends on the data, e.g. F.one_hot without "
        "num_classes, torch.topk with k read from a tensor, nonzero, indexing with a boolean mask). Slicer's "
        "programs have static shapes: give such sizes as Python ints (F.one_hot(index, num_classes), "
        "torch.topk(x, k) with an int k), or compute that part outside the model") from exc


def tracing_table(torch) -> dict:
    """The decompositions both ways of tracing apply: `decompositions.py`'s, then `stateful.py`'s."""
    return {**decompositions(torch), **stateful_decompositions(torch)}


def trace(torch, function, args, what: str = "the traced program", *, lines: bool = True):
    """The aten graph (`torch.fx.GraphModule`) of `function(*args)`, traced by running it with gradients enabled
    (make_fx) on fake copies of `args`, else on `args` themselves (`TRACING_MODES`). Raises FrontendError if the
    graph writes into one of its arguments (a buffer updated in training mode: Slicer's programs are functions of
    their arguments; `training_step` passes the model copies of its buffers and returns them) or draws from
    torch's random generator (`randomness.check_no_random_ops`; `what` in the message), else what tracing
    raises.

    In-place ops on temporaries (dropout's scaling), which torch-mlir's importer cannot take, are made ops with
    results by tracing the aten graph again under `torch.func.functionalize`. Not the function itself: that is a
    functorch transform, inside which `torch.autograd.grad` on tensors made to require grad is refused. The graph
    runs node by node (`torch.fx.Interpreter`) with its nodes' metadata preserved, so the new nodes keep the
    stacks of the ones they come from. `lines` False: no Python stacks recorded (a function that is an aten
    graph already, whose stacks would name fx's generated code, not the model's lines)."""
    from torch.fx import traceback as fx_traceback  # optional dependency, like torch itself
    from torch.fx.experimental.proxy_tensor import make_fx

    graph = _make_fx(torch, make_fx, function, args, lines=lines)
    mutating = [node for node in graph.graph.nodes if _schema(node) is not None and _schema(node).is_mutable]
    for node in mutating:
        written = _written_argument(node)
        if written is not None:
            raise FrontendError(f"{what} writes into its argument #{written} ({node.target}, e.g. batch norm's "
                                "running statistics in training mode); call .eval() on such modules, train them "
                                "with slicer.training_step (which returns the new buffers), or compute the new "
                                "value and return it")
    check_no_random_ops(torch, graph, what)
    if mutating:
        run = torch.fx.Interpreter(graph).run
        with fx_traceback.preserve_node_meta():
            graph = _make_fx(torch, make_fx, torch.func.functionalize(run, remove="mutations"), args, grad=False,
                             lines=lines)
    return graph


TRACING_MODES = ("fake", "real")
"""How `trace` runs the function, in order: on fake tensors (shapes and dtypes only), else on the example tensors.

Fake first: the graph is the same (what make_fx records does not depend on the values: a data-dependent branch
or `.item()` fails in both modes), and tracing a GPT training step takes 40% less time (the real mode computes
every op and snapshots each result into a fake tensor of its own). Real where fake fails, and where a shape
depends on the data (a boolean mask): there the fake graph has a symbolic size where the real one has the
example's, which is what Slicer's static shapes need."""


def _make_fx(torch, make_fx, function, args, *, grad: bool = True, lines: bool = True):
    """make_fx's graph of `function(*args)`, in the first of `TRACING_MODES` that traces it with static shapes;
    the last mode's error if none does. `grad`: with gradients enabled and decomposed (the
    function itself: the aten table and the composite functions, `composites.py`), else as it is (its aten
    graph traced again, see `trace`). `lines`: record each node's Python stack."""
    from torch._subclasses import fake_tensor  # optional dependency, like torch itself
    from torch.fx import traceback as fx_traceback  # optional dependency, like torch itself

    options: dict[str, object] = {"decomposition_table": tracing_table(torch)} if grad else {}
    options["record_stack_traces"] = lines  # the model's lines (`located_backward`)

    @contextlib.contextmanager
    def context():
        with contextlib.ExitStack() as stack:
            if grad:
                stack.enter_context(torch.enable_grad())
                stack.enter_context(decomposed_composites(torch))
            yield

    modes = TRACING_MODES
    for mode in modes[:-1]:
        try:
            with context(), fx_traceback.preserve_node_meta(), _quiet(fake_tensor.__name__):
                graph = make_fx(function, tracing_mode=mode, **options)(*args)
        except FrontendError:
            raise  # the function's own checks (the loss is not a scalar...): the same in every mode
        except Exception:  # noqa: BLE001 - torch raises many kinds; the next mode raises what it cannot trace
            continue
        if not _has_symbolic_shapes(torch, graph):
            return _locate_backward(graph)
    with context(), fx_traceback.preserve_node_meta():
        return _locate_backward(make_fx(function, tracing_mode=modes[-1], **options)(*args))


def mark_backward(torch, loss) -> None:
    """Before autograd differentiates `loss` (inside the traced function): hooks on its graph that tag each op
    of the backward with the sequence number of the forward op it differentiates (torch's own hooks, which
    AOTAutograd installs for the same purpose), so that `_locate_backward` can give it that op's line."""
    from torch._functorch._aot_autograd.logging_utils import setup_stacktrace_preservation_hooks

    if loss.grad_fn is not None:
        setup_stacktrace_preservation_hooks([loss.grad_fn])


def record_lines_of(torch, function) -> None:
    """Make tracing record the lines of `function` (a loss function) too: make_fx keeps only the frames of
    functions named `forward` in its stack traces, and those it is told are the user's (torch's anchors)."""
    register = getattr(torch.fx.proxy, "_register_stack_trace_anchor", None)
    if register is not None:
        register(function)


def _locate_backward(graph):
    """`graph` with every node that has no stack trace of its own (the backward: autograd runs it, not the
    model's code) given the stack trace of the forward node of the same sequence number (`mark_backward`), so
    the backward of `q, k, v = qkv.split(D, 2)` (a concat) is located at that line, like its forward, and in its
    module (`module_paths.module_frames`)."""
    module_frames(graph)
    forward: dict[int, str] = {}
    for node in graph.graph.nodes:
        number = node.meta.get("seq_nr")
        if node.stack_trace and number is not None and not node.meta.get("autograd_backward"):
            forward.setdefault(number, node.stack_trace)
    for node in graph.graph.nodes:
        number = node.meta.get("seq_nr")
        if node.op == "call_function" and not _has_frames(node.stack_trace) and number in forward:
            node.stack_trace = forward[number]
    return graph


def _has_frames(stack_trace) -> bool:
    """Does `stack_trace` (a node's, or None) name a Python frame (torch's marker of gradient accumulation
    alone does not)?"""
    return bool(stack_trace) and 'File "' in stack_trace


@contextlib.contextmanager
def _quiet(name: str):
    """The logger `name` quiet: torch's logger of fake tensors logs an op it cannot run on them as an error before
    raising, which is no error while a mode that may fail is tried (the next mode traces the function, or
    raises what is wrong with it)."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _has_symbolic_shapes(torch, graph) -> bool:
    """Does a value of `graph` have a size that is a symbol (a data-dependent shape, traced on fake tensors)?"""
    values = (v for node in graph.graph.nodes for v in torch.utils._pytree.tree_leaves(node.meta.get("val")))
    return any(isinstance(v, torch.SymInt) or (isinstance(v, torch.Tensor) and
                                                 any(isinstance(d, torch.SymInt) for d in v.shape)) for v in values)


def _schema(node):
    return getattr(node.target, "_schema", None) if node.op == "call_function" else None


def _written_argument(node) -> int | None:
    """The position of the graph argument (placeholder) `node` writes into, through views, or None."""
    schema = _schema(node)
    if schema is None or not schema.is_mutable:
        return None
    placeholders = [n for n in node.graph.nodes if n.op == "placeholder"]
    for argument, value in zip(schema.arguments, node.args):
        if argument.alias_info is None or not argument.alias_info.is_write or not hasattr(value, "op"):
            continue
        while _schema(value) is not None and value.args and any(r.alias_info is not None
                                                                 for r in _schema(value).returns):
            value = value.args[0]  # a view of its first argument
        if value.op == "placeholder":
            return placeholders.index(value)
    return None


def import_graph(fx, graph, what: str) -> str:
    """torch-mlir's linalg for an aten graph from `trace` (its placeholders become the arguments, in order),
    lowered in a child process like `export`'s."""
    return lower(torch_dialect(fx, graph), what)


def torch_dialect(fx, graph):
    """torch-mlir's raw import of an aten graph from `trace` (torch dialect; `lower` makes it linalg)."""
    return fx.stateless_fx_import(graph, output_type="raw", model_name=ENTRY)


def finish(text: str, what: str, arg_names, result_names=(), *, cleanup: bool = True, training: bool = False,
           fences: int = 0) -> str:
    """torch-mlir's output `text` for `what`, cleaned up, its entry function's arguments named `arg_names` and
    (if given) its results `result_names`, after which come `fences` results that only keep values apart
    during the cleanup and are then dropped (`cleanup.py`, "Fences"). FrontendError if it does not parse, keeps
    state (`training`: the model is in training mode, say so), or its arguments or results are not as many as
    the names."""
    with make_context():
        module = parse(text, what)
        stateful = next((op for op in walk_ops(module.operation) if op.name.startswith("ml_program.")), None)
        if stateful is not None:
            hint = (" (it is in training mode: call .eval() first, or train it with slicer.training_step, which "
                    "computes dropout's masks in the program)") if training else ""
            raise FrontendError(f"{what} keeps state between calls ('{stateful.name}', e.g. the random number "
                                f"generator of dropout){hint}; Slicer partitions functions of their inputs")
        fn_type = function_type(entry_function(module.operation, ENTRY))
        if len(fn_type.inputs) != len(arg_names):
            raise FrontendError(f"torch-mlir gave @{ENTRY} {len(fn_type.inputs)} arguments for the "
                                f"{len(arg_names)} of {what} ({', '.join(arg_names)})")
        if result_names and len(fn_type.results) != len(result_names) + fences:
            raise FrontendError(f"torch-mlir gave @{ENTRY} {len(fn_type.results)} results for the "
                                f"{len(result_names) + fences} of {what} ({', '.join(result_names)}"
                                f"{f' and {fences} fences' if fences else ''})")
        checked_step(module.operation, "widen_accumulators", widen_accumulators)
        if cleanup:
            clean_up(module.operation, entry=ENTRY, fences=fences)
        elif fences:
            drop_last_results(entry_function(module.operation, ENTRY), fences)
        func = entry_function(module.operation, ENTRY)
        func.attributes[ARG_ATTRS_ATTR] = _names(arg_names)
        if result_names:
            func.attributes[RES_ATTRS_ATTR] = _names(result_names)
        source_locations(module.operation)
        return module.operation.get_asm(enable_debug_info=True)


def source_locations(module: ir.Operation) -> None:
    """Give every op of `module` the location of the Python line that wrote it (`model.py:67`, the innermost
    frame of torch's call stack outside torch, torch-mlir and Slicer: `slicer.core.source_lines`), or an unknown
    location where it has none, so that every error about the program names that line (not a line of the
    imported MLIR, which the user never saw); named `module:<path>` after the model's module that computed it
    when tracing recorded one (`module_paths.py`)."""
    unknown = ir.Location.unknown()
    cache: dict[str, ir.Location] = {}

    def simplified(location: ir.Location) -> ir.Location:
        text = str(location)
        if text not in cache:
            frame, path = user_frame(text), module_path(text)
            simple = ir.Location.file(frame[0], frame[1], 0) if frame else unknown
            cache[text] = ir.Location.name(MODULE_LOC_PREFIX + path, childLoc=simple) if path else simple
        return cache[text]

    map_locations(module, simplified)


def _names(names) -> ir.ArrayAttr:
    return ir.ArrayAttr.get([ir.DictAttr.get({ARG_NAME_ATTR: ir.StringAttr.get(n)}) for n in names])


def parse(text: str, what: str) -> ir.Module:
    """torch-mlir's output in MLIR 22 (in a slicer context). Ops of torch-mlir's own dialects (`tm_tensor.scan`
    for cumsum, `tm_tensor.sort` for sort and topk, `tm_tensor.scatter` for index_put) have no upstream form
    this MLIR knows: a FrontendError names the op and what to do, instead of the parser's diagnostic."""
    try:
        return ir.Module.parse(text)
    except ir.MLIRError as exc:
        message = str(exc)
        unknown = re.search(r"Dialect `([\w.]+)' not found for custom op '([\w.]+)'", message)
        if unknown:
            dialect, op = unknown.groups()
            line = _op_source_line(text, op)
            at = f"at {line}; " if line else ""
            raise FrontendError(
                f"{what} uses '{op}', an op of torch-mlir's own '{dialect}' dialect ({at}torch-mlir lowers cumsum, "
                "sort, scatter with a reduction, and index_put with a mask or several indices that way) which "
                "MLIR's linalg cannot express and Slicer cannot compile; compute that part outside the imported "
                "model, or write it with ops that lower to linalg (comparisons, one-hot masks, sums)"
            ) from None
        lines = [line.strip() for line in message.splitlines() if line.strip()]
        raise FrontendError(f"the MLIR torch-mlir produced for {what} does not parse with this MLIR: "
                            f"{' '.join(lines[1:3]) or lines[0]}") from None


def _op_source_line(text: str, op: str) -> str | None:
    """`file:line` of the first `op` in torch-mlir's printed `text` (read from its location: the `loc(#locN)`
    on the op's line, or on the line closing its regions, with the `#locN = loc(...)` aliases expanded)."""
    start = re.search(rf"^( *).*\b{re.escape(op)}\b", text, re.MULTILINE)
    if start is None:
        return None
    indent = len(start.group(1))
    location = None
    for line in text[start.start():].splitlines():
        found = re.search(r"(loc\(.*\))\s*$", line)
        if found and len(line) - len(line.lstrip(" ")) == indent:
            location = found.group(1)
            break
    if location is None:
        return None
    aliases = dict(re.findall(r"^(#loc\d*) = (loc\(.*\))$", text, re.MULTILINE))
    for _ in range(64):  # nested call sites: each expansion names the aliases of its frames
        expanded = re.sub(r"#loc\d*", lambda m: aliases.get(m.group(0), m.group(0)), location)
        if expanded == location:
            break
        location = expanded
    return source_line(location)


__all__ = ["DATA_DEPENDENT", "ENTRY", "INSTALL", "export", "finish", "first_line", "import_graph", "load_torch",
           "mark_backward", "parse", "raise_if_data_dependent", "record_lines_of", "source_locations", "trace",
           "tracing_table"]
