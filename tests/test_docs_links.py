"""The README, the pages of docs/, ARCHITECTURE.md and CONTRIBUTING.md hold together:
every relative link resolves to a file of the repository, every anchor to a heading of
the page it names, and every `snaprun COMMAND` they show (in code) is a command
`snaprun` has."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from snapstate.runtime._cli import cli

ROOT = Path(__file__).resolve().parent.parent
PAGES = [
    ROOT / "README.md",
    ROOT / "ARCHITECTURE.md",
    ROOT / "CONTRIBUTING.md",
    *sorted((ROOT / "docs").glob("*.md")),
]

# Pages and commands that other branches of issue 22 add (the README links them): each
# is checked like any other once it exists; until its branch is merged it may be absent.
# Remove an entry once it has landed.
ARRIVING_FILES: set[str] = set()
ARRIVING_COMMANDS: set[str] = set()

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.S)
LINK = re.compile(r"(?<!\!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """The text without fenced blocks and inline code (links inside them are not links)."""
    text = FENCE.sub("", text)
    return INLINE_CODE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed
    (word characters, spaces and hyphens stay), each space a hyphen."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").replace("*", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a page, with GitHub's -1, -2 suffixes for repeats."""
    seen: dict[str, int] = {}
    found = set()
    for match in HEADING.finditer(FENCE.sub("", path.read_text())):
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(_prose(path.read_text()))]


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("page", PAGES, ids=_relative)
def test_every_relative_link_and_anchor_resolves(page):
    """Each `[text](target)` of the page outside code, but web addresses: the target
    exists inside the repository (the README never points outside it), and a `#anchor`
    names a heading of the target page (or of this page)."""
    problems = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.is_relative_to(ROOT):
            problems.append(f"{target}: outside the repository")
            continue
        if not resolved.exists():
            if _relative(resolved) not in ARRIVING_FILES:
                problems.append(f"{target}: no such file")
            continue
        if anchor:
            if resolved.suffix != ".md":
                problems.append(f"{target}: an anchor into a file that is not a page")
            elif anchor not in anchors(resolved):
                problems.append(f"{target}: no heading with the anchor #{anchor}")
    assert not problems, f"{_relative(page)}:\n" + "\n".join(problems)


def _code(text: str) -> list[str]:
    """The page's code: each line of its fenced blocks and each inline code span."""
    spans = []
    for block in FENCE.finditer(text):
        spans.extend(block.group(0).splitlines()[1:-1])
    spans.extend(m.group(2) for m in INLINE_CODE.finditer(FENCE.sub("", text)))
    return spans


def commands_named(text: str) -> set[tuple[str, ...]]:
    """Every `snaprun [--store X] COMMAND [SUBCOMMAND]` shown in code, as a tuple of the
    command (and, for a group, its subcommand when one follows)."""
    named = set()
    for span in _code(text):
        for match in re.finditer(r"(?<![\w/-])snaprun((?:\s+\S+)*)", span):
            tokens = match.group(1).split()
            while tokens and tokens[0].startswith("-"):
                option = tokens.pop(0)
                if option == "--store" and tokens:
                    tokens.pop(0)
            if not tokens or not re.fullmatch(r"[a-z][a-z-]*", tokens[0]):
                continue
            sub = tokens[1] if len(tokens) > 1 and re.fullmatch(r"[a-z]+", tokens[1]) else ""
            named.add((tokens[0], sub) if sub else (tokens[0],))
    return named


def test_the_command_parser_finds_what_it_should():
    """The extraction itself: commands after global options, a group's subcommand,
    nothing from prose or from a path that merely contains the name."""
    text = (
        "Prose: snaprun is a thin layer. `snaprun --store DIR ls`, `snaprun keys rotate`,\n"
        "```sh\nsnaprun run --job po agent.py   # exit 3\nbin/snaprun-old x\n```\n"
    )
    assert commands_named(text) == {("ls",), ("keys", "rotate"), ("run",)}
    assert slug("Moving a store: `snaprun migrate-store SRC DST`") == (
        "moving-a-store-snaprun-migrate-store-src-dst"
    )
    assert slug("1. Promises and refusals") == "1-promises-and-refusals"


@pytest.mark.parametrize("page", PAGES, ids=_relative)
def test_every_snaprun_command_shown_exists(page):
    """Each `snaprun COMMAND` in the page's code is one of snaprun's commands, and
    `snaprun GROUP SUB` (keys, db) one of that group's."""
    problems = []
    for named in sorted(commands_named(page.read_text())):
        command = cli.commands.get(named[0])
        if command is None:
            if named[0] not in ARRIVING_COMMANDS:
                problems.append(f"snaprun {named[0]}: no such command")
            continue
        if isinstance(command, click.Group) and len(named) > 1:
            if named[1] not in command.commands:
                problems.append(f"snaprun {' '.join(named)}: no such subcommand")
    assert not problems, f"{_relative(page)}:\n" + "\n".join(problems)
