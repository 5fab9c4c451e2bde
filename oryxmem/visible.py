"""Memory text made safe to show: a terminal and the console's pages both reveal the
characters that would act rather than read (terminal controls that retitle or clear a
terminal, bidirectional marks that make a line read backwards) as visible escapes."""

from __future__ import annotations

import unicodedata

from oryxmem.store.format import escape_content

# Marks that reorder what is shown (a line could read backwards); revealed.
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)


def revealed(line: str) -> str:
    """One line as it may be shown: C0 and C1 controls and DEL as \\xNN (ESC, BEL, CSI and
    OSC could retitle or clear a terminal), bidirectional marks as \\uNNNN."""
    return "".join(
        f"\\x{ord(ch):02x}"
        if unicodedata.category(ch) == "Cc" and ch != "\t"
        else f"\\u{ord(ch):04x}"
        if ch in BIDI_CONTROLS
        else ch
        for ch in line
    )


def revealed_text(text: str) -> str:
    """Any text as one line with nothing hidden: escaped as MEMORY.md escapes it, then
    revealed."""
    return revealed(escape_content(text))
