"""Command-line options made from the config dataclasses: each field is declared once with
`config.option(default, help)`; a command that offers a section's fields as flags gets
`--field-name` (or the field's `flag`), typed by its annotation; any field of any section can
also be set with `--section.key=value`."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import typing
from pathlib import Path
from typing import Any, Literal

from ..config import ConfigError, checked_fields, read_yaml

log = logging.getLogger(__name__)


def add_config_options(parser: argparse.ArgumentParser, cls: type, section: str,
                       only: tuple[str, ...] = (), defaults: dict[str, Any] | None = None,
                       exclude: tuple[str, ...] = ()) -> None:
    """One option per field of dataclass `cls` (or per field named in `only`, but those in
    `exclude`); given values
    land in `args.<section>.<field>` (see `given`), absent ones stay None and the config
    decides. `defaults`: the command's own defaults where they differ from the field's, shown
    in --help (the command applies them)."""
    hints = typing.get_type_hints(cls)
    group = parser.add_argument_group(f"{section} options ({cls.__name__}; unset ones come "
                                      "from the config or model directory, else the default)")
    for f in dataclasses.fields(cls):
        if only and f.name not in only or f.name in exclude:
            continue
        flag = f.metadata["flag"] or "--" + f.name.replace("_", "-")
        default = (defaults or {}).get(f.name, f.default)
        help = f"{f.metadata['help']} (default: {default})".replace("%", "%%")  # argparse's %
        kwargs: dict[str, Any] = {"dest": f"{section}.{f.name}", "default": None, "help": help}
        hint = hints[f.name]
        if hint is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif hint == bool | Literal["auto"]:  # --bf16, --bf16 auto
            kwargs.update(nargs="?", const=True, type=_true_or_auto, metavar="auto")
        elif typing.get_origin(hint) is Literal:
            kwargs["choices"] = typing.get_args(hint)
        else:
            kwargs["type"], kwargs["metavar"] = hint, f.name.upper()
        flags = [flag] if flag == "--" + f.name.replace("_", "-") else \
            [flag, "--" + f.name.replace("_", "-")]
        group.add_argument(*flags, **kwargs)


def _true_or_auto(text: str) -> bool | str:
    if text != "auto":
        raise argparse.ArgumentTypeError(f"{text!r}: give the flag alone, or 'auto'")
    return "auto"


def given(args: argparse.Namespace, section: str) -> dict[str, Any]:
    """The `section` options given on the command line, by field name."""
    prefix = f"{section}."
    return {key.removeprefix(prefix): value for key, value in vars(args).items()
            if key.startswith(prefix) and value is not None}


def section_overrides(overrides: list[str], cls: type, section: str) -> dict[str, Any]:
    """`section.key=value` overrides (YAML values) of one section, by field name, checked
    against dataclass `cls`: other sections, unknown and retired keys and wrong types are
    errors naming the key."""
    values = {}
    for override in overrides:
        key, sep, raw = override.partition("=")
        prefix, _, leaf = key.partition(".")
        if not sep or prefix != section or not leaf:
            raise ConfigError(f"'--{override}': only --{section}.key=value overrides apply here")
        values[leaf] = read_yaml(raw)
    return checked_fields(cls, values, section)


def add_overrides(parser: argparse.ArgumentParser) -> None:
    """`--section.key=value` overrides, as every command takes them (main() gathers them into
    args.overrides); the bare `section.key=value` that prepare and info took before still
    works, with a warning (`overrides_given`)."""
    parser.add_argument("bare_overrides", nargs="*", help=argparse.SUPPRESS)
    parser.set_defaults(overrides=[])


def overrides_given(args: argparse.Namespace) -> list[str]:
    """The command's `section.key=value` overrides, bare ones (with a warning) first."""
    for bare in args.bare_overrides:
        log.warning("'%s': write --%s (the bare form will go)", bare, bare)
    return [*args.bare_overrides, *args.overrides]


def as_overrides(values: dict[str, Any], section: str) -> list[str]:
    """`given` values as `section.key=value` overrides for `config.load_config` (YAML)."""
    return [f"{section}.{key}={json.dumps(value)}" for key, value in values.items()]


ENGINES = ("torch", "ctranslate2")


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """--model (one directory, or several: an ensemble), --device and --engine, as translate
    and serve take them."""
    parser.add_argument("--model", required=True, type=Path, nargs="+", action="extend",
                        help="model or run directory; several: an ensemble")
    parser.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    parser.add_argument(
        "--engine", choices=ENGINES, default="torch",
        help="torch: this package's search (default); ctranslate2: CTranslate2 runs it, --model "
             "being a directory that `export ctranslate2` wrote (the interop extra); same "
             "tokenisation, length cap and ranking (docs/interop.md)")


def open_translator(args: argparse.Namespace, decode: dict[str, Any]):
    """The Translator of --model, --device and --engine with decoding overrides `decode`;
    returns (translator, the model directories)."""
    from ..inference.translator import Translator
    from ..storage.run_dir import resolve_model_dir

    if args.engine == "ctranslate2":
        from ..interop.ct2 import CTranslate2Translator

        return CTranslate2Translator.from_dirs(args.model, device=args.device, **decode), \
            list(args.model)
    model_dirs = [resolve_model_dir(m) for m in args.model]
    return Translator.from_dirs(model_dirs, device=args.device, **decode), model_dirs
