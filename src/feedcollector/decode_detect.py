"""Charset detection for bodies that declare nothing and are not UTF-8 (charset-normalizer).

The full guess runs charset-normalizer over every legacy encoding browsers know, about 5 ms
for a 9 KB feed. Its answer for the common case (Western legacy text, which browsers read as
windows-1252) is found with a fraction of that work: see :func:`_windows_1252_wins`.
"""

from __future__ import annotations

from collections.abc import Iterator

from charset_normalizer import api as charset_normalizer_api
from charset_normalizer import from_bytes
from charset_normalizer.utils import iana_name

from .decode_labels import DETECTABLE, codec_for_label

WINDOWS_1252 = "windows-1252"


def _tested_up_to_cp1252() -> list[str]:
    """The detectable encodings charset-normalizer tests before cp1252, and cp1252, in order.

    Empty if this charset-normalizer does not test cp1252 or no longer exposes its order
    (then there is no shortcut). The order is an internal of charset-normalizer 3.x, the
    version the lock pins; ``tests/test_decode.py`` checks the shortcut against the full run.
    """
    tested_order: list[str] = getattr(charset_normalizer_api, "IANA_SUPPORTED_MB_FIRST", [])
    wanted = {iana_name(codec, False) for codec in DETECTABLE}
    order = list(dict.fromkeys(name for name in tested_order if name in wanted))
    return order[: order.index("cp1252") + 1] if "cp1252" in order else []


_UP_TO_CP1252 = _tested_up_to_cp1252()


def detected_codecs(payload: bytes, tried: set[str]) -> Iterator[str]:
    """charset-normalizer's guesses among the legacy encodings browsers know, best first.

    Among the guesses tied for least chaos, windows-1252 goes first: it is what browsers assume
    for unlabelled legacy text, and charset-normalizer's tie-break picks e.g. cp1257 for
    Portuguese. When :func:`_windows_1252_wins` shows that windows-1252 leads the full list,
    it is offered before the full list is computed (the caller usually needs no more).
    """
    if WINDOWS_1252 not in tried and _windows_1252_wins(payload):
        yield WINDOWS_1252
    yield from _all_detected(payload)


def _all_detected(payload: bytes) -> list[str]:
    matches = list(from_bytes(payload, cp_isolation=DETECTABLE, preemptive_behaviour=False))
    least_chaos = min((match.chaos for match in matches), default=0.0)
    found: list[str] = []
    for match in matches:
        codec = codec_for_label(match.encoding)
        if codec is None or codec in found:
            continue
        if codec == WINDOWS_1252 and match.chaos <= least_chaos:
            found.insert(0, codec)
        else:
            found.append(codec)
    return found


def _windows_1252_wins(payload: bytes) -> bool:
    """Would windows-1252 head :func:`_all_detected`? Decided with a prefix of its work.

    charset-normalizer tests the encodings one by one in a fixed order, and whether an encoding
    becomes a match (with which chaos, or merged into an earlier identical reading) depends only
    on the encodings tested before it: a later one never removes an earlier match. So running it
    on the encodings up to cp1252 gives cp1252 exactly the entry the full run gives it. Chaos
    0.0 is the least possible, so such an entry puts windows-1252 first in the full list; any
    other outcome (no entry, merged, some chaos) falls back to the full run.
    """
    if not _UP_TO_CP1252:
        return False
    matches = from_bytes(payload, cp_isolation=_UP_TO_CP1252, preemptive_behaviour=False)
    return any(match.encoding == "cp1252" and match.chaos == 0.0 for match in matches)
