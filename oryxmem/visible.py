"""Memory text made safe to show: a terminal and the console's pages both reveal the
characters that would act rather than read (terminal controls that retitle or clear a
terminal, bidirectional marks that make a line read backwards) as visible escapes."""

from __future__ import annotations

import re

from oryxmem.store.format import escape_content

# Marks that reorder what is shown (a line could read backwards); revealed.
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
# What is revealed: the C0 controls but the tab, DEL and the C1 controls (Unicode's Cc),
# and the bidirectional marks. A line without any (nearly all) is given back as it is.
_HIDDEN = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f" + "".join(sorted(BIDI_CONTROLS)) + "]")


def _reveal(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\u{code:04x}" if code > 0xFF else f"\\x{code:02x}"


def revealed(line: str) -> str:
    """One line as it may be shown: C0 and C1 controls and DEL as \\xNN (ESC, BEL, CSI and
    OSC could retitle or clear a terminal), bidirectional marks as \\uNNNN."""
    return _HIDDEN.sub(_reveal, line)


def revealed_text(text: str) -> str:
    """Any text as one line with nothing hidden: escaped as MEMORY.md escapes it, then
    revealed."""
    return revealed(escape_content(text))
