"""The names feed dates use: time zone abbreviations, month and weekday names.

Conventions (see :mod:`.dates`): ambiguous zone abbreviations take their most common meaning in
feeds, military letters but Z and J read as UTC, month names of five languages.
"""

from __future__ import annotations

import unicodedata

ZONE_MINUTES: dict[str, int] = {
    "ut": 0, "utc": 0, "gmt": 0, "z": 0, "wet": 0, "west": 60, "bst": 60, "ist": 330,
    "cet": 60, "cest": 120, "met": 60, "mest": 120, "mez": 60, "mesz": 120,
    "eet": 120, "eest": 180, "msk": 180, "msd": 240,
    "wat": 60, "cat": 120, "sast": 120, "eat": 180, "pkt": 300,
    "ict": 420, "wib": 420, "hkt": 480, "sgt": 480, "awst": 480, "pht": 480,
    "jst": 540, "kst": 540, "acst": 570, "acdt": 630, "aest": 600, "aedt": 660,
    "nzst": 720, "nzdt": 780,
    "est": -300, "edt": -240, "cst": -360, "cdt": -300, "mst": -420, "mdt": -360,
    "pst": -480, "pdt": -420, "ast": -240, "adt": -180, "nst": -210, "ndt": -150,
    "akst": -540, "akdt": -480, "hst": -600, "hast": -600, "hadt": -540,
    "brt": -180, "art": -180,
}  # fmt: skip
US_ZONES: dict[str, tuple[str, int]] = {
    "et": ("America/New_York", -300), "ct": ("America/Chicago", -360),
    "mt": ("America/Denver", -420), "pt": ("America/Los_Angeles", -480),
}  # fmt: skip
"""US zones named without S or D (Eastern Time...): standard or daylight time by the date, so
an offset table cannot hold them. Their IANA zone, and the standard offset in minutes for a
machine without zone data (feedparser's reading of them at every date)."""
IANA_AREAS = (
    "Africa", "America", "Antarctica", "Arctic", "Asia", "Atlantic", "Australia", "Brazil",
    "Canada", "Chile", "Etc", "Europe", "Indian", "Mexico", "Pacific", "US",
)  # fmt: skip
"""The first part of an IANA zone name (``Etc/UTC``, ``America/New_York``, ``US/Eastern``)."""
MILITARY_ZONES = frozenset("abcdefghiklmnopqrstuvwxy")
"""Every military letter but Z (already in ZONE_MINUTES) and J (local time, not a zone)."""

MONTH_NAMES: tuple[tuple[str, ...], ...] = (
    ("january", "jan", "janeiro", "enero", "ene", "janvier", "janv", "januar", "jänner"),
    ("february", "feb", "fevereiro", "fev", "febrero", "février", "fevrier", "févr", "fevr",
     "februar"),
    ("march", "mar", "março", "marco", "marzo", "mars", "märz", "maerz", "mär", "mrz"),
    ("april", "apr", "abril", "abr", "avril", "avr"),
    ("may", "maio", "mai", "mayo"),
    ("june", "jun", "junho", "junio", "juin", "juni"),
    ("july", "jul", "julho", "julio", "juillet", "juil", "juli"),
    ("august", "aug", "agosto", "ago", "août", "aout"),
    ("september", "sep", "sept", "setembro", "set", "septiembre", "setiembre", "septembre"),
    ("october", "oct", "outubro", "out", "octubre", "octobre", "oktober", "okt"),
    ("november", "nov", "novembro", "noviembre", "novembre"),
    ("december", "dec", "dezembro", "dez", "diciembre", "dic", "décembre", "decembre", "déc",
     "dezember"),
)  # fmt: skip
"""English, Portuguese, Spanish, French and German names and abbreviations (feeds in those
languages often localize RFC 822 dates, e.g. 'Seg, 24 Set 2018 19:42:40 -0300'); no name means
two different months across these languages."""
OTHER_MONTH_NAMES: tuple[tuple[str, ...], ...] = (
    ("január", "ιαν", "ιανουαριος", "ιανουαριου"),
    ("február", "febr", "φεβ", "φεβρουαριος", "φεβρουαριου"),
    ("március", "márc", "μαρ", "μαρτιος", "μαρτιου"),
    ("április", "ápr", "απρ", "απριλιος", "απριλιου"),
    ("május", "máj", "μαι", "μαιος", "μαιου"),
    ("június", "jún", "ιουν", "ιουνιος", "ιουνιου"),
    ("július", "júl", "ιουλ", "ιουλιος", "ιουλιου"),
    ("augusztus", "αυγ", "αυγουστος", "αυγουστου"),
    ("szeptember", "szept", "σεπ", "σεπτεμβριος", "σεπτεμβριου"),
    ("október", "οκτ", "οκτωβριος", "οκτωβριου"),
    ("νοε", "νοεμβριος", "νοεμβριου"),
    ("δεκ", "δεκεμβριος", "δεκεμβριου"),
)  # fmt: skip
"""Hungarian and Greek names and abbreviations (Greek ones without their accents: a word is
looked up as written, then without accents), which feedparser reads only from a few misspelled
tables ('máujus', 'Μάώ') after its W3C reader took ``2004-január-01`` for November 1st."""
MONTHS = {
    name: number
    for number, names in enumerate(zip(MONTH_NAMES, OTHER_MONTH_NAMES, strict=True), start=1)
    for group in names
    for name in group
}

WEEKDAYS = frozenset(
    ("mon", "monday", "tue", "tues", "tuesday", "wed", "weds", "wednesday", "thu", "thur",
     "thurs", "thursday", "fri", "friday", "sat", "saturday", "sun", "sunday",
     "seg", "ter", "qua", "qui", "sex", "sáb", "sab", "dom", "segunda", "terça", "terca",
     "quarta", "quinta", "sexta", "sábado", "sabado", "domingo",
     "lun", "mié", "mie", "jue", "vie", "lunes", "martes", "miércoles", "miercoles", "jueves",
     "viernes",
     "mer", "jeu", "ven", "sam", "dim", "lundi", "mardi", "mercredi", "jeudi", "vendredi",
     "samedi", "dimanche",
     "mo", "di", "mi", "do", "fr", "sa", "so", "montag", "dienstag", "mittwoch", "donnerstag",
     "freitag", "samstag", "sonntag",
     "κυρ", "δευ", "τρι", "τετ", "πεμ", "παρ", "σαβ", "κυριακη", "δευτερα", "τριτη", "τεταρτη",
     "πεμπτη", "παρασκευη", "σαββατο")
)  # fmt: skip
"""Weekday names are skipped (a wrong weekday is common and harmless). 'mar' (Spanish and
French Tuesday) is read as March unless another month name follows it."""


def unaccented(word: str) -> str:
    """``word`` without its combining marks (``ιούλ`` -> ``ιουλ``, ``március`` -> ``marcius``),
    for names looked up again when not found as written."""
    return "".join(
        char for char in unicodedata.normalize("NFD", word) if not unicodedata.combining(char)
    )
