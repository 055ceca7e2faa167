"""`slicer-opt`: mlir-opt for Slicer.

Reads MLIR (a file or stdin), checks it with the slicer semantic verifier, runs
a pass pipeline where Slicer passes and any upstream pass mix freely, and
prints the result. It loads only what it runs: a pass's module when the
pipeline names it (`slicer.passes.PASSES`), the kernel graph and the
collectives report when asked for. Errors print as `file:line:col: error: ...` and exit 1; a
failing pipeline also prints a one-line command that reproduces it. A bad command
line (an unknown flag or pass, a pipeline that does not parse, an input that cannot
be read) exits 2, as every tool does (slicer.tools.cli).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

from mlir import ir

import slicer.tools
from slicer import lowering
from slicer.core.errors import KernelGraphError, PipelineError
from slicer.core.reproducer import save_reproducer
from slicer.core.toolchain import find_tool
from slicer.dialect import make_context
from slicer.dialect.parsing import PARSER_BUFFER_NAME, parse_source
from slicer.dialect.verifier import verify
from slicer.passes import PASSES, build_pass_manager, pass_names

from .cli import EXIT_FAILURE, EXIT_OK, unreadable, usage_error
from .diagnostics import Diag, check_expectations, expectations, file_line_col, from_mlir

PROG = "slicer-opt"
SPLIT_MARKER = re.compile(r"^// -----", re.MULTILINE)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("input", nargs="?", default="-", help="input file (default: stdin)")
    parser.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    parser.add_argument("--pass-pipeline", "-pass-pipeline", default="", help="textual pipeline, e.g. "
                                                                              "'builtin.module(slicer-lower-to-loops,canonicalize)'")
    parser.add_argument("-p", dest="passes", default="", help="short form: comma-separated passes run on the module, "
                                                              "e.g. 'slicer-verify,cse'")
    parser.add_argument("--split-input-file", "-split-input-file", action="store_true", help="split the input at '// "
                                                                                             "-----' and process "
                                                                                             "each chunk alone")
    parser.add_argument("--verify-diagnostics", "-verify-diagnostics", action="store_true",
                        help="check expected-error/warning/note annotations")
    parser.add_argument("--mlir-print-ir-after-all", "-mlir-print-ir-after-all", action="store_true",
                        help="print the IR after every pass (to stderr)")
    parser.add_argument("--mlir-print-debuginfo", "-mlir-print-debuginfo", action="store_true", help="print locations")
    parser.add_argument("--mlir-print-op-generic", "-mlir-print-op-generic", action="store_true",
                        help="print every op in generic form")
    parser.add_argument("--allow-unregistered-dialect", "-allow-unregistered-dialect", action="store_true",
                        help="accept ops of unknown dialects")
    parser.add_argument("--no-implicit-verify", action="store_true", help="skip the slicer semantic verifier "
                                                                          "on the input")
    parser.add_argument("--list-passes", "-list-passes", action="store_true", help="list Slicer and upstream "
                                                                                   "passes and exit")
    parser.add_argument("--print-kernel-graph", action="store_true", help="after the pipeline, print the SPMD function "
                                                                          "cut into kernels and "
                                                                          "collectives (to stderr)")
    parser.add_argument("--print-collectives", action="store_true", help="after the pipeline, print each collective of "
                                                                         "the SPMD output with why it exists and the "
                                                                         "bytes each device receives (to stderr)")
    return parser


def parse_args(argv: list[str] | None, parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    parser = parser or build_parser()
    args = parser.parse_args(argv)
    if args.pass_pipeline and args.passes:
        parser.error("give either --pass-pipeline or -p, not both")
    return args


# ----------------------------------------------------------------------------- --list-passes


def upstream_passes() -> list[tuple[str, str]]:
    """(name, description) of every upstream pass and pipeline, read from `mlir-opt --help`.

    The Python bindings cannot enumerate the pass registry, and mlir-opt is
    built from the same registry, so its help is the authoritative list.
    """
    tool = find_tool("mlir-opt")
    if tool is None:
        return []
    text = subprocess.run([tool, "--help"], capture_output=True, text=True, check=False).stdout
    found, inside = [], False
    for line in text.splitlines():
        if line.strip() in ("Passes:", "Pass Pipelines:"):
            inside = True
        elif re.match(r"^  \S", line):
            inside = False
        elif inside and (match := re.match(r"^      --([A-Za-z0-9_.-]+)\S*\s+-\s+(.*)$", line)):
            found.append((match.group(1), match.group(2).strip()))
    return found


def list_passes() -> str:
    lines = ["Slicer passes:"]
    for name in pass_names():
        cls = PASSES[name]
        lines.append(f"  {name:<36} {cls.description}")
        for option in cls.options_help():
            lines.append(f"    {option}")
    upstream = upstream_passes()
    lines.append("")
    if upstream:
        lines.append("Upstream MLIR passes and pipelines (usable in the same pipeline):")
        lines.extend(f"  {name:<36} {description}" for name, description in upstream)
    else:
        lines.append("Upstream MLIR passes: mlir-opt not found, cannot list them (they still work by name).")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- processing


class ChunkResult:
    def __init__(self):
        self.output: str | None = None
        self.diags: list[Diag] = []
        self.messages: list[str] = []

    @property
    def ok(self) -> bool:
        return self.output is not None


def _in_file(diag: Diag, filename: str) -> Diag:
    """Parse errors name the parser's buffer; give them the input's file name."""
    if diag.file != PARSER_BUFFER_NAME:
        return diag
    notes = tuple(_in_file(n, filename) for n in diag.notes)
    return Diag(diag.severity, filename, diag.line, diag.col, diag.message, notes)


def _unique(diags: list[Diag]) -> list[Diag]:
    seen, result = set(), []
    for d in diags:
        key = (d.severity, d.file, d.line, d.col, d.message)
        if key not in seen:
            seen.add(key)
            result.append(d)
    return result


def process_chunk(text: str, filename: str, pipeline: str, args: argparse.Namespace) -> ChunkResult:
    result = ChunkResult()
    context = make_context()
    context.allow_unregistered_dialects = args.allow_unregistered_dialect
    def take(diagnostic) -> bool:
        result.diags.append(from_mlir(diagnostic))
        return True

    handler = context.attach_diagnostic_handler(take)
    try:
        with context, ir.Location.unknown():
            try:
                module = parse_source(text, filename)
            except ir.MLIRError as exc:
                result.diags.extend(_in_file(from_mlir(d), filename) for d in exc.error_diagnostics)
                return result
            if not args.no_implicit_verify:
                errors = verify(module)
                if errors:
                    for error in errors:
                        file, line, col = file_line_col(error.location)
                        result.diags.append(Diag("error", file, line, col, error.message))
                    return result
            try:
                pm = build_pass_manager(pipeline)
            except PipelineError as exc:
                result.messages.append(f"slicer-opt: error: {exc}")
                return result
            if args.mlir_print_ir_after_all:
                context.enable_multithreading(False)  # MLIR requires it for IR printing
                pm.enable_ir_printing(print_after_all=True, print_module_scope=True)
            before = module.get_asm(enable_debug_info=True)
            try:
                pm.run(module)
            except ir.MLIRError as exc:
                result.diags.extend(from_mlir(d) for d in exc.error_diagnostics)
                result.messages.append(reproducer(before, pipeline))
                return result
            result.output = module.get_asm(
                enable_debug_info=args.mlir_print_debuginfo, print_generic_op_form=args.mlir_print_op_generic
            )
            if args.print_kernel_graph:
                try:
                    result.messages.append(str(lowering.build_kernel_graph(str(module))))
                except KernelGraphError as exc:
                    result.messages.append(f"slicer-opt: error: --print-kernel-graph: {exc}")
            if args.print_collectives:
                result.messages.append(slicer.tools.collectives_text(module))
    finally:
        handler.detach()
        result.diags = _unique(result.diags)
    return result


def reproducer(module_text: str, pipeline: str) -> str:
    """Save the pipeline's input and return a ready-to-paste command that reproduces the failure."""
    return f"slicer-opt: reproduce with: {save_reproducer(module_text, pipeline)}"


def split_chunks(text: str, split: bool) -> list[str]:
    """Chunks padded with newlines so every chunk keeps the line numbers of the whole file."""
    if not split:
        return [text]
    chunks, offset_lines = [], 0
    for piece in SPLIT_MARKER.split(text):
        chunks.append("\n" * offset_lines + piece)
        offset_lines += piece.count("\n")
    return chunks


def read_input(args: argparse.Namespace) -> tuple[str, str, str]:
    """(pipeline, text, file name) of the command line; raises PipelineError for a pipeline that does not
    build and OSError for an input that cannot be read (both usage errors)."""
    pipeline = args.pass_pipeline or (f"builtin.module({args.passes})" if args.passes else "")
    with make_context():  # like mlir-opt, reject a bad pipeline before reading any input
        build_pass_manager(pipeline)
    if args.input == "-":
        return pipeline, sys.stdin.read(), "<stdin>"
    return pipeline, Path(args.input).read_text(), args.input


def main(argv: list[str] | None = None) -> int:
    """The console script: exit codes as `slicer.tools.cli` describes (0 ok, 1 failure, 2 usage)."""
    parser = build_parser()
    args = parse_args(argv, parser)
    if args.list_passes:
        sys.stdout.write(list_passes())
        return EXIT_OK
    try:
        pipeline, text, filename = read_input(args)
    except PipelineError as exc:
        return usage_error(parser, exc)
    except OSError as exc:
        return usage_error(parser, unreadable(args.input, exc))
    outputs, ok = [], True
    for chunk in split_chunks(text, args.split_input_file):
        result = process_chunk(chunk, filename, pipeline, args)
        if args.verify_diagnostics:
            problems = check_expectations(expectations(chunk), result.diags)
            problems += result.messages if not result.diags else []
            for problem in problems:
                print(f"{filename}: error: {problem}", file=sys.stderr)
            ok &= not problems
        else:
            for diag in result.diags:
                print(diag.render(filename), file=sys.stderr)
            for message in result.messages:
                print(message, file=sys.stderr)
            ok &= result.ok
        if result.ok and result.output is not None:
            outputs.append(result.output)
    rendered = "// -----\n".join(outputs)
    if args.output == "-":
        sys.stdout.write(rendered)
    else:
        Path(args.output).write_text(rendered)
    return EXIT_OK if ok else EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
