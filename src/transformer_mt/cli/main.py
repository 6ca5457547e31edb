"""`transformer-mt` command line: one module per command, each parsing its options, calling
one package function and formatting the output."""

from __future__ import annotations

import argparse
import logging
import sys

from ..config import ConfigError
from ..hardware.malloc import tune_malloc
from . import (
    attention,
    average,
    convert,
    evaluate,
    info,
    parse,
    prepare,
    serve,
    table3,
    train,
    translate,
)

COMMANDS = (info, prepare, train, average, translate, evaluate, serve, convert, attention,
            table3, parse)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="transformer-mt",
        description="The Transformer of 'Attention Is All You Need'. From two text files to "
                    "a BLEU score: prepare -> train -> average -> translate -> evaluate; "
                    "`transformer-mt COMMAND --help` for each.")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # `train --train.max_steps=100` style overrides: dotted options after the known ones
    # (`--train.max_steps 100` too)
    args, unknown = parser.parse_known_args(joined_values(sys.argv[1:] if argv is None
                                                          else argv))
    dotted = [u for u in unknown if u.startswith("--") and "." in u.split("=")[0]]
    if len(dotted) != len(unknown) or (dotted and not hasattr(args, "overrides")):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if dotted:
        args.overrides = [*args.overrides, *(d.removeprefix("--") for d in dotted)]
    return run_command(args, prog="transformer-mt")


def joined_values(argv: list[str]) -> list[str]:
    """`--section.key value` as `--section.key=value` (no option of ours has a dot)."""
    joined: list[str] = []
    for arg in argv:
        previous = joined[-1] if joined else ""
        if previous.startswith("--") and "." in previous and "=" not in previous \
                and not arg.startswith("--"):
            joined[-1] = f"{previous}={arg}"
        else:
            joined.append(arg)
    return joined


def run_command(args: argparse.Namespace, *, prog: str) -> int:
    """Run the parsed command `args.run` with logging and malloc set up; bad input (a config,
    a file, a value) is a one-line error naming it and exit code 2, not a traceback."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    tune_malloc()
    try:
        return args.run(args)
    except (ConfigError, ValueError, OSError) as err:
        print(f"{prog} {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
