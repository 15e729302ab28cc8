"""Prompt redaction for raw log lines shown in the report.

`Receive:`/`Finish:` request-log lines dump the whole request (prompt text,
token ids) and the response (`out={'text': ...}`); the JSON request log does
the same with `"text": ...`. An incident report is mailed around, so those
values are replaced by `[redacted N chars]` unless the operator asks for them.
The values are Python reprs or JSON literals, possibly truncated at the end of
the line, so a small literal scanner (quotes and nested brackets) finds where
each value ends instead of a regex.
"""

from __future__ import annotations

import re

# Fields of GenerateReqInput / ChatCompletionRequest / the `out` dict that carry user or model text.
SENSITIVE = ("text", "input_ids", "output_ids", "prompt", "messages", "input_embeds", "content")

# `name=` (dataclass repr), `'name': ` (dict repr) or `"name": ` (JSON), at a word boundary.
_KEY = re.compile(
    r"(?:(?<![\w.])(?P<kw>" + "|".join(SENSITIVE) + r")=)"
    r"|(?:(?P<q>['\"])(?P<dk>" + "|".join(SENSITIVE) + r")(?P=q):\s*)"
)
_OPEN = {"[": "]", "{": "}", "(": ")"}


def _string_end(s: str, i: int) -> int:
    """End (exclusive) of the quoted literal starting at s[i]; len(s) when truncated."""
    quote = s[i]
    j = i + 1
    while j < len(s):
        c = s[j]
        if c == "\\":
            j += 2
            continue
        if c == quote:
            return j + 1
        j += 1
    return len(s)


def _bracket_end(s: str, i: int) -> int:
    """End (exclusive) of the bracketed literal at s[i], skipping quoted strings inside."""
    stack = [_OPEN[s[i]]]
    j = i + 1
    while j < len(s) and stack:
        c = s[j]
        if c in "'\"":
            j = _string_end(s, j)
            continue
        if c in _OPEN:
            stack.append(_OPEN[c])
        elif c == stack[-1]:
            stack.pop()
        j += 1
    return j


def _value_end(s: str, i: int) -> int | None:
    """End of the literal value at s[i], or None when it is not worth redacting (None, numbers)."""
    if i >= len(s):
        return None
    c = s[i]
    if c in "'\"":
        return _string_end(s, i)
    if c in _OPEN:
        return _bracket_end(s, i)
    return None


def redact(message: str) -> str:
    """`message` with every sensitive value replaced by `[redacted N chars]`."""
    if not message or not any(name in message for name in SENSITIVE):
        return message
    out: list[str] = []
    pos = 0
    for m in _KEY.finditer(message):
        if m.start() < pos:  # inside a value already redacted
            continue
        end = _value_end(message, m.end())
        if end is None:
            continue
        value = message[m.end() : end]
        if value in ("''", '""', "[]", "{}"):
            continue
        out.append(message[pos : m.end()])
        out.append(f"[redacted {len(value)} chars]")
        pos = end
    out.append(message[pos:])
    return "".join(out)
