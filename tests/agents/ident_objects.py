"""Objects of modules outside the agent keep their identity across a restore: an
argparse parser built before the snapshot parses as in an uninterrupted run
(argparse compares defaults with `is not SUPPRESS`), dataclasses.MISSING, an enum
member, logging's root and named loggers, sys.stdout held in a local and a library's
`_sentinel = object()` are the new process's objects after a resume."""

import argparse
import dataclasses
import enum
import logging
import sys

import identlib

from snapstate import snapshot


class Color(enum.Enum):
    RED = 1
    GREEN = 2


def build_parser():
    parser = argparse.ArgumentParser(prog="tool")
    parser.add_argument("--name", default="x")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--level", default=argparse.SUPPRESS)
    parser.add_argument("--version", action="version", version="1.0")
    return parser


PARSER = build_parser()  # a parser in a module global, saved by value


def report(step, parser, missing, field, color, root, named, out, marker, box):
    print(step, "parse", parser.parse_args([]), file=out)
    print(step, "parse", parser.parse_args(["--name", "y", "--verbose", "--level", "3"]), file=out)
    print(step, "global parse", PARSER.parse_args([]), file=out)
    print(
        step,
        "missing",
        missing is dataclasses.MISSING,
        field.default is dataclasses.MISSING,
        file=out,
    )
    print(step, "enum", color is Color.GREEN, file=out)
    print(
        step,
        "logging",
        root is logging.root,
        root is logging.getLogger(),
        named is logging.getLogger("ident.agent"),
        file=out,
    )
    print(step, "stdout", out is sys.stdout, file=out)
    print(
        step,
        "sentinel",
        marker is identlib._sentinel,
        box.is_empty(),
        identlib.lookup("absent", None),
        file=out,
    )
    out.flush()


def main():
    parser = build_parser()
    state = dict(
        parser=parser,
        missing=dataclasses.MISSING,
        field=dataclasses.field(),
        color=Color.GREEN,
        root=logging.getLogger(),
        named=logging.getLogger("ident.agent"),
        out=sys.stdout,
        marker=identlib._sentinel,
        box=identlib.Box(),
    )
    snapshot("one")
    report("after one", **state)
    snapshot("two")
    report("after two", **state)
    return "done"
