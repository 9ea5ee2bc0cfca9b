"""``render/junit.py`` writes the JUnit file of ``pytest-retrieval combine`` and ``eval``
without importing pytest, yet as the installed pytest's ``--junitxml`` writes it: the same
escape of characters XML 1.0 cannot hold, and the same ``message`` attribute (cut from
pytest 9.2, whole before). Compared here with pytest's own functions (tests may import
``_pytest``)."""

from __future__ import annotations

import re

import _pytest.junitxml
import pytest

from pytest_retrieval.render import junit

#: the code point classes of XML 1.0's ``Char`` production, and DEL, each with its edges
EDGES = [
    0x00, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x1F, 0x20, 0x7E, 0x7F, 0x80, 0x9F, 0xFF,
    0x100, 0xD7FF, 0xD800, 0xDBFF, 0xDC00, 0xDFFF, 0xE000, 0xFFFD, 0xFFFE, 0xFFFF, 0x10000,
    0x10FFFF,
]  # fmt: skip


#: pytest before the fix of pytest-dev/pytest#14483 (9.0.x backport, 9.2) spelled its rule's
#: astral range ``\u10000-\u10ffff``: it showed every character above U+FFFF as ``#x1F600``
#: and, the range ``0-\u10ff`` being read instead, kept DEL. Ours is the rule as pytest
#: states and fixed it; on such a pytest only those characters differ.
ASTRAL_BUG = _pytest.junitxml.bin_xml_escape(chr(0x10000)) != chr(0x10000)


def pytests(text: str) -> str:
    """``text`` as the installed pytest escapes it, its astral-range bug (:data:`ASTRAL_BUG`)
    corrected: characters above U+FFFF kept, DEL escaped."""
    if not ASTRAL_BUG:
        return _pytest.junitxml.bin_xml_escape(text)
    return re.sub(
        "[^\x7f\U00010000-\U0010ffff]+|\x7f",
        lambda found: "#x7F" if found[0] == "\x7f" else _pytest.junitxml.bin_xml_escape(found[0]),
        text,
    )


@pytest.mark.parametrize("code", EDGES, ids=hex)
def test_the_escape_is_pytests_at_every_class_edge(code: int) -> None:
    text = f"a{chr(code)}b"
    assert junit.escape(text) == pytests(text)


def test_the_escape_is_pytests_for_every_code_point() -> None:
    every = "".join(map(chr, range(0x110000)))
    assert junit.escape(every) == pytests(every)


def test_the_escape_writes_any_value_as_its_text() -> None:
    for value in (0.5, True, None, 3, ("x", "\x00")):
        assert junit.escape(value) == _pytest.junitxml.bin_xml_escape(value)


MESSAGES = [
    "",
    "one line",
    "\n",
    "a\n",
    "x" * 500,
    "x" * 501,
    "x" * 2000,
    "\n".join(["y" * 99] * 5),  # exactly 500 with the newlines
    "\n".join(["y" * 99] * 6),
    "\n".join(["short"] * 200),
    "first\r\nsecond\rthird\x0bfourth\x85fifth" * 60,
    "z" * 600 + "\n" + "tail",
    "\x00\x7f" * 300,  # escaped after it is cut, as pytest does
]


@pytest.mark.parametrize("text", MESSAGES, ids=range(len(MESSAGES)))
def test_the_message_attribute_is_the_installed_pytests(text: str) -> None:
    """pytest 9.2 cuts the attribute (``shorten_message``); older pytest writes it whole: the
    version installed decides, as it decides for the plugin's own ``--junitxml``."""
    shorten = getattr(_pytest.junitxml, "shorten_message", str)
    assert junit.message(text) == pytests(shorten(text))


@pytest.mark.parametrize(
    ("version", "shortens"),
    [
        ("7.4.4", False),
        ("9.1.3", False),
        ("9.2.0", True),
        ("9.2.0rc1", True),
        ("9.3.0.dev12+g1234", True),
        ("10.0", True),
        ("not a version", True),
    ],
)
def test_the_installed_pytest_version_decides_the_cut(version: str, shortens: bool) -> None:
    assert junit.shortens(version) is shortens
