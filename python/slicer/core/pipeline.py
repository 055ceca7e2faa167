"""Textual pass pipelines mixing Slicer's passes and any upstream MLIR pass.

MLIR's textual pipeline parser only knows passes registered in C++, so Slicer
parses the pipeline's top level itself: each element naming a registered Slicer
pass (`slicer.core.passes.PASSES`, or the registry a caller gives) becomes a
Python pass (`PassManager.add(callable)`), and every other element, nested
pipelines included (`func.func(canonicalize,cse)`), is handed to MLIR verbatim
(`PassManager.add(text)`), in order, in one PassManager.

The registry holds the passes whose modules were imported: `slicer.passes`
imports all of them (slicer-opt, `slicer.passes.run_pipeline`); the kernel
pipeline imports its own (`slicer.lowering.passes`).
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Mapping
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import builtin
from mlir.passmanager import PassManager

from .errors import PassFailure, PipelineError, SlicerError
from .passes import PASSES, ModulePass

PassRegistry = Mapping[str, type[ModulePass]]
MODULE_OP = builtin.ModuleOp.OPERATION_NAME


@dataclass(frozen=True)
class Element:
    """One pipeline element: `name{options}(nested)`, with its source text."""

    name: str
    options: str
    nested: str | None
    text: str


def split_top_level(text: str) -> list[str]:
    """Split `a,b{x=1,2},c(d,e)` at the commas outside brackets."""
    parts, depth, start, quote = [], 0, 0, None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
            if depth < 0:
                raise PipelineError(f"unbalanced '{ch}' in pass pipeline '{text}'")
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if depth != 0 or quote:
        raise PipelineError(f"unbalanced brackets or quotes in pass pipeline '{text}'")
    last = text[start:].strip()
    if last or parts:
        parts.append(last)
    if any(not p for p in parts):
        raise PipelineError(f"empty element in pass pipeline '{text}'")
    return parts


def parse_element(text: str) -> Element:
    name_end = len(text)
    for i, ch in enumerate(text):
        if ch in "{(":
            name_end = i
            break
    name, rest = text[:name_end].strip(), text[name_end:].strip()
    options, nested = "", None
    if rest.startswith("{"):
        close = _matching(rest, 0)
        options, rest = rest[1:close], rest[close + 1 :].strip()
    if rest.startswith("("):
        close = _matching(rest, 0)
        nested, rest = rest[1:close], rest[close + 1 :].strip()
    if rest or not name:
        raise PipelineError(f"cannot parse pipeline element '{text}'")
    return Element(name, options, nested, text)


def _matching(text: str, open_index: int) -> int:
    pairs = {"{": "}", "(": ")"}
    opener, closer, depth = text[open_index], pairs[text[open_index]], 0
    for i in range(open_index, len(text)):
        if text[i] == opener:
            depth += 1
        elif text[i] == closer:
            depth -= 1
            if depth == 0:
                return i
    raise PipelineError(f"unbalanced '{opener}' in '{text}'")


def parse_options(text: str) -> dict[str, str]:
    """`a=1 b=x,y c` -> {"a": "1", "b": "x,y", "c": ""}."""
    options = {}
    for item in text.split():
        key, _, value = item.partition("=")
        options[key] = value
    return options


def module_elements(pipeline: str) -> list[Element]:
    """The elements run on the module: unwraps `builtin.module(...)` if present."""
    elements = [parse_element(t) for t in split_top_level(pipeline.strip())]
    if len(elements) == 1 and elements[0].name == MODULE_OP:
        return [parse_element(t) for t in split_top_level(elements[0].nested or "")]
    return elements


def instantiate(element: Element, passes: PassRegistry | None = None) -> ModulePass:
    """The Slicer pass `element` names, built from its options (OptionError if one is wrong)."""
    if element.nested is not None:
        raise PipelineError(f"'{element.name}' is a slicer pass, not a pass manager; it takes no nested pipeline")
    return (PASSES if passes is None else passes)[element.name].from_options(parse_options(element.options))


def _check_no_nested_slicer_pass(element: Element, passes: PassRegistry) -> None:
    if element.nested is None:
        return
    for inner in split_top_level(element.nested):
        nested = parse_element(inner)
        if nested.name in passes or nested.name.startswith("slicer-"):
            raise PipelineError(
                f"slicer pass '{nested.name}' runs on builtin.module; list it at the top level "
                f"of the pipeline instead of inside '{element.name}(...)'"
            )
        _check_no_nested_slicer_pass(nested, passes)


def build_pass_manager(pipeline: str, context: ir.Context | None = None,
                       passes: PassRegistry | None = None) -> PassManager:
    """One PassManager on `builtin.module` running `pipeline` in order; `passes` are the Python passes it
    may name (default: every registered one)."""
    context = context or ir.Context.current
    passes = PASSES if passes is None else passes
    pm = PassManager(MODULE_OP, context)
    if not pipeline.strip():
        return pm
    for element in module_elements(pipeline):
        if element.name in passes:
            instance = instantiate(element, passes)
            for dialect in instance.dependent_dialects:
                context.dialects[dialect]  # loads it (a lookup of a registered dialect loads it)
            add_slicer_pass(pm, instance)
            continue
        if element.name.startswith("slicer-"):
            known = ", ".join(sorted(passes)) or "none in this pipeline"
            raise PipelineError(f"unknown slicer pass '{element.name}' (slicer passes: {known})")
        _check_no_nested_slicer_pass(element, passes)
        try:
            pm.add(element.text)
        except (ValueError, ir.MLIRError) as exc:
            detail = re.search(r"error: (.*)", str(exc))
            raise PipelineError(
                f"bad pipeline element '{element.text}': "
                + (detail.group(1) if detail else str(exc).strip())
                + " (see slicer-opt --list-passes)"
            ) from None
    return pm


def add_slicer_pass(pm: PassManager, instance: ModulePass) -> None:
    """Append a Slicer pass; user errors become located diagnostics, crashes an internal error."""

    def run(op: ir.Operation, pass_) -> None:
        with op.context, op.location:  # a default location for ops a pass builds without one
            try:
                instance.apply(op)
            except PassFailure as failure:
                for diag in failure.diagnostics:
                    diag.location.emit_error(diag.message)
                pass_.signal_pass_failure()
            except SlicerError as exc:  # documented: the message says what to change (BudgetExceeded says where)
                op.location.emit_error(f"slicer pass '{instance.name}': {exc}")
                pass_.signal_pass_failure()
            except Exception:  # noqa: BLE001 - a crash must not take the driver down
                op.location.emit_error(
                    f"internal error in slicer pass '{instance.name}' (please report):\n{traceback.format_exc()}"
                )
                pass_.signal_pass_failure()

    pm.add(run, name=type(instance).__name__, argument=instance.name, description=instance.description)


def run_pipeline(module: ir.Module | ir.Operation | ir.OpView, pipeline: str,
                 passes: PassRegistry | None = None) -> None:
    """Run `pipeline` on `module` in place (Slicer passes from `passes`, default: every registered one); raises
    ir.MLIRError on failure."""
    op = module.operation  # a Module, an Operation or an OpView
    build_pass_manager(pipeline, op.context, passes).run(op)
