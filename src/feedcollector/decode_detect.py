"""Charset detection for bodies that declare nothing and are not UTF-8 (charset-normalizer).

The full guess runs charset-normalizer over every legacy encoding browsers know, about 5 ms
for a 9 KB feed. Its answer for the common case (Western legacy text, which browsers read as
windows-1252) is found with a fraction of that work: see :func:`_windows_1252_wins`.

On a small body its scores are noisy: a few hundred characters of French or Finnish get a
little less "chaos" read as windows-1257 or Mac Roman ("H‰m‰l‰inen") than as windows-1252.
Browsers default to windows-1252 for such text, and so does :func:`_all_detected` when its
reading is tied or nearly tied (:data:`NEAR_TIE_CHAOS`) and reads as the more coherent
language; Central European, Cyrillic or Greek text read as windows-1252 is not.
"""

from __future__ import annotations

from collections.abc import Iterator

from charset_normalizer import CharsetMatch, from_bytes
from charset_normalizer import api as charset_normalizer_api
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


NEAR_TIE_CHAOS = 0.1
"""How much more chaos than the best reading windows-1252's may have and still go first, when
it is also the more coherent one: a single odd character in a few hundred makes that much."""
NEVER_PREFERRED = frozenset({"mac_roman"})
"""Guesses windows-1252 goes before on a near tie whatever their coherence: Mac Roman reads
Western windows-1252 text as words with ‰ and ˆ inside, which charset-normalizer's language
check does not hold against it, and no browser guesses it."""


def detected_codecs(payload: bytes, tried: set[str]) -> Iterator[str]:
    """charset-normalizer's guesses among the legacy encodings browsers know, best first.

    windows-1252 goes first when its reading is tied for least chaos (charset-normalizer's
    tie-break picks e.g. cp1257 for Portuguese), or nearly tied and more coherent
    (:func:`_prefers_windows_1252`): it is what browsers assume for unlabelled legacy text.
    When :func:`_windows_1252_wins` shows that windows-1252 leads the full list, it is offered
    before the full list is computed (the caller usually needs no more).
    """
    if WINDOWS_1252 not in tried and _windows_1252_wins(payload):
        yield WINDOWS_1252
    yield from _all_detected(payload)


def _all_detected(payload: bytes) -> list[str]:
    matches = list(from_bytes(payload, cp_isolation=DETECTABLE, preemptive_behaviour=False))
    found: list[str] = []
    for match in matches:
        codec = codec_for_label(match.encoding)
        if codec is not None and codec not in found:
            found.append(codec)
    if _prefers_windows_1252(matches):
        found = [WINDOWS_1252, *(codec for codec in found if codec != WINDOWS_1252)]
    return found


def _prefers_windows_1252(matches: list[CharsetMatch]) -> bool:
    """Whether windows-1252's reading goes first: tied for least chaos, or within
    :data:`NEAR_TIE_CHAOS` of it and more coherent than every reading with less chaos (but
    :data:`NEVER_PREFERRED` ones).

    Its reading is the first match that windows-1252 decodes to the same text: charset-
    normalizer files identical readings under the first encoding that gave them (cp1250 for
    German without Czech letters), so that encoding's name says nothing against windows-1252.
    """
    western = next((match for match in matches if "cp1252" in match.could_be_from_charset), None)
    if western is None:
        return False
    least_chaos = min(match.chaos for match in matches)
    if western.chaos <= least_chaos:
        return True
    return western.chaos <= least_chaos + NEAR_TIE_CHAOS and all(
        match.encoding in NEVER_PREFERRED or match.coherence < western.coherence
        for match in matches
        if match.chaos < western.chaos
    )


def _windows_1252_wins(payload: bytes) -> bool:
    """Would windows-1252 head :func:`_all_detected`? Decided with a prefix of its work.

    charset-normalizer tests the encodings one by one in a fixed order, and whether an encoding
    becomes a match (with which chaos, or merged into an earlier identical reading) depends only
    on the encodings tested before it: a later one never removes an earlier match. So running it
    on the encodings up to cp1252 gives cp1252's reading exactly the entry the full run gives it
    (its own, or the earlier identical reading it was merged into). Chaos 0.0 is the least
    possible, so such an entry puts windows-1252 first in the full list; any other outcome (no
    entry, some chaos) falls back to the full run.
    """
    if not _UP_TO_CP1252:
        return False
    matches = from_bytes(payload, cp_isolation=_UP_TO_CP1252, preemptive_behaviour=False)
    return any("cp1252" in match.could_be_from_charset and match.chaos == 0.0 for match in matches)
