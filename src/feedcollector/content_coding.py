"""Undoing HTTP content codings (gzip, deflate, br, zstd) within a byte limit.

Each decoder holds its output to the limit, so a compression bomb stops there instead of
exhausting memory, and tells whether its stream ended: for a body whose end is only the
connection closing, an unfinished stream is the one sign that the connection was cut.
"""

from __future__ import annotations

import zlib
from typing import Protocol

import brotli
import zstandard

DECODABLE_ENCODINGS = ("gzip", "deflate", "br", "zstd")
ACCEPT_ENCODING = ", ".join(DECODABLE_ENCODINGS)
INVALID_DATA_ERRORS: tuple[type[Exception], ...] = (zlib.error, brotli.error, zstandard.ZstdError)
"""What a decoder raises for bytes that are not valid data of its coding."""


_ALIASES = {"x-gzip": "gzip"}


def content_encodings(header: str) -> list[str]:
    """Known codings in the order they were applied; unknown ones pass through like httpx does."""
    return [name for name in _coding_names(header) if name in DECODABLE_ENCODINGS]


def unknown_encodings(header: str) -> list[str]:
    """The codings :func:`content_encodings` passes through (``identity`` is none): servers
    name bogus ones (``utf-8``, ``none``) over plain bodies, so they are no error, but they
    may be why a body does not parse."""
    known = (*DECODABLE_ENCODINGS, "identity", "")
    return [name for name in _coding_names(header) if name not in known]


def _coding_names(header: str) -> list[str]:
    return [_ALIASES.get(n.strip().lower(), n.strip().lower()) for n in header.split(",")]


class OutputTooLarge(Exception):
    """A decoder would produce more than its limit."""


class Decoder(Protocol):
    """One coding undone, or a chain of them: bytes in, at most the limit out in all."""

    def decode(self, data: bytes) -> bytes: ...

    def flush(self) -> bytes: ...

    @property
    def finished(self) -> bool:
        """No input, or a whole compressed stream: not cut off inside one."""
        ...


class _Budget:
    """Counts produced bytes and refuses to go past the limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.produced = 0

    @property
    def room(self) -> int:
        """One byte more than allowed, so a full buffer proves the limit was crossed."""
        return self.limit - self.produced + 1

    def take(self, data: bytes) -> bytes:
        self.produced += len(data)
        if self.produced > self.limit:
            raise OutputTooLarge
        return data


class _ZlibDecoder:
    """gzip (several members allowed, trailing junk ignored) or deflate (zlib-wrapped or raw).

    Which deflate it is shows in the first two bytes, and a gzip member's start in its first
    two: bytes that may begin either wait for the next chunk, whatever size the chunks are.
    A "gzip" body that does not start as gzip data does (``1f 8b``) is read as zlib-wrapped
    deflate when it starts so (servers mix the two labels up; no text starts so), else taken
    as it is: servers label plain files gzip (a doubly configured proxy), and the feed is
    there to read.
    """

    def __init__(self, encoding: str, limit: int) -> None:
        self._gzip = encoding == "gzip"
        self._wbits = 16 + zlib.MAX_WBITS if self._gzip else zlib.MAX_WBITS
        self._obj = zlib.decompressobj(self._wbits)
        self._started = False
        self._waiting = b""
        self._plain = False
        self._budget = _Budget(limit)

    def decode(self, data: bytes) -> bytes:
        data = self._waiting + data
        self._waiting = b""
        if self._plain:
            return self._budget.take(data)
        if not self._started:
            if len(data) < 2:
                self._waiting = data
                return b""
            self._started = True
            if self._gzip and not data.startswith(GZIP_MAGIC):
                if not _looks_zlib_wrapped(data):
                    self._plain = True
                    return self._budget.take(data)
                self._gzip, self._wbits = False, zlib.MAX_WBITS
                self._obj = zlib.decompressobj(self._wbits)
            if not self._gzip and not _looks_zlib_wrapped(data):
                self._obj = zlib.decompressobj(-zlib.MAX_WBITS)
        out: list[bytes] = []
        while data:
            if self._obj.eof:
                if self._gzip and data == b"\x1f":
                    self._waiting = data
                    break
                if not (self._gzip and data.startswith(GZIP_MAGIC)):
                    break
                self._obj = zlib.decompressobj(self._wbits)
            out.append(self._budget.take(self._obj.decompress(data, self._budget.room)))
            data = self._obj.unconsumed_tail or (self._obj.unused_data if self._obj.eof else b"")
        return b"".join(out)

    def flush(self) -> bytes:
        return b"" if self._plain else self._budget.take(self._obj.flush())

    @property
    def finished(self) -> bool:
        return self._plain or self._obj.eof or not (self._started or self._waiting)


GZIP_MAGIC = b"\x1f\x8b"
"""How gzip data starts (no feed, XML or JSON, starts so)."""


def _looks_zlib_wrapped(data: bytes) -> bool:
    return len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0


class _BrotliDecoder:
    def __init__(self, limit: int) -> None:
        self._obj = brotli.Decompressor()
        self._started = False
        self._budget = _Budget(limit)

    def decode(self, data: bytes) -> bytes:
        self._started = self._started or bool(data)
        out = [self._budget.take(self._obj.process(data, output_buffer_limit=self._budget.room))]
        while not self._obj.can_accept_more_data():
            out.append(
                self._budget.take(self._obj.process(b"", output_buffer_limit=self._budget.room))
            )
        return b"".join(out)

    def flush(self) -> bytes:
        return b""

    @property
    def finished(self) -> bool:
        return not self._started or bool(self._obj.is_finished())


class _ZstdDecoder:
    """zstd frames, several allowed (as zstandard's stream writer reads them).

    zstandard's decompressobj tells where a frame ends (``eof``), which a close-delimited
    body needs, but has no output cap per call. A frame's output is bounded by its input: a
    block of 4 bytes (an RLE block) stands for 128 KiB at most. So the input goes in slices
    that can produce at most the room left: a bomb is stopped within one slice of the limit.
    """

    def __init__(self, limit: int) -> None:
        self._budget = _Budget(limit)
        self._decompressor = zstandard.ZstdDecompressor()
        self._frame: zstandard.ZstdDecompressionObj | None = None

    def decode(self, data: bytes) -> bytes:
        out: list[bytes] = []
        view = memoryview(data)
        position = 0
        while position < len(view):
            if self._frame is None or self._frame.eof:
                self._frame = self._decompressor.decompressobj()
            step = max(_ZSTD_MIN_SLICE, self._budget.room // _ZSTD_MAX_EXPANSION)
            piece = view[position : position + step]
            out.append(self._budget.take(self._frame.decompress(piece)))
            consumed = len(piece) - (len(self._frame.unused_data) if self._frame.eof else 0)
            if consumed <= 0:  # cannot happen with zstandard 0.25; never loop on it
                raise zstandard.ZstdError("a zstd frame ended without reading its input")
            position += consumed
        return b"".join(out)

    def flush(self) -> bytes:
        return b""

    @property
    def finished(self) -> bool:
        return self._frame is None or self._frame.eof


_ZSTD_MAX_EXPANSION = 128 * 1024 // 4
"""Output bytes per input byte at most: an RLE block is a 3-byte header and one byte."""
_ZSTD_MIN_SLICE = 64
"""Input bytes given at once even when the room left is tiny (at most 2 MiB of output)."""


class _PlainWhenInvalid:
    """A deflate, br or zstd decoder that takes a plain document under that label as it is, as
    ``gzip`` already does: a doubly configured server sends the file itself as
    ``Content-Encoding: deflate`` or ``br``, and the feed failed every fetch as invalid data,
    unread and without a backup. Only a body that starts as a document does (``<`` or ``{``,
    after a BOM or blanks) and that the decoder refuses; its output is held until the stream
    ends, since text may decode as deflate for a while before it fails. A damaged stream of
    the coding still fails."""

    def __init__(self, inner: Decoder, limit: int) -> None:
        self._inner = inner
        self._seen: bytes | None = b""
        """The input so far while it may yet be a plain document; None once it cannot."""
        self._held: list[bytes] = []
        self._plain = False
        self._budget = _Budget(limit)

    def decode(self, data: bytes) -> bytes:
        if self._plain:
            return self._budget.take(data)
        if self._seen is not None:
            self._seen += data
            if not _looks_plain(self._seen):
                self._seen = None
        try:
            out = self._inner.decode(data)
        except INVALID_DATA_ERRORS:
            if self._seen is None:
                raise
            self._plain, self._held = True, []
            return self._budget.take(self._seen)
        if self._seen is None:
            return b"".join([*self._held, out]) if self._held else out
        self._held.append(out)
        return b""

    def flush(self) -> bytes:
        if self._plain:
            return b""
        held, self._held = b"".join(self._held), []
        return held + self._inner.flush()

    @property
    def finished(self) -> bool:
        return self._plain or self._inner.finished


_BOMS = (b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")


def _looks_plain(data: bytes) -> bool:
    """Whether ``data`` may start a plain feed document: XML or JSON text (blanks alone: not
    yet known)."""
    for bom in _BOMS:
        if data.startswith(bom):
            return True
    text = data.lstrip(b" \t\r\n")
    return not text or text[:1] in (b"<", b"{")


class _Chain:
    """Undoes the codings last-applied first; the plain output is held to the limit too."""

    def __init__(self, decoders: list[Decoder], limit: int) -> None:
        self._decoders = decoders
        self._budget = _Budget(limit)

    def decode(self, data: bytes) -> bytes:
        for decoder in self._decoders:
            data = decoder.decode(data)
        return self._budget.take(data)

    def flush(self) -> bytes:
        data = b""
        for decoder in self._decoders:
            data = (decoder.decode(data) if data else b"") + decoder.flush()
        return self._budget.take(data)

    @property
    def finished(self) -> bool:
        return all(decoder.finished for decoder in self._decoders)


def decoder_chain(encodings: list[str], limit: int) -> Decoder:
    """The decoder of a body coded with ``encodings`` (in the order they were applied), every
    step's output and the plain bytes held to ``limit``."""
    decoders: list[Decoder] = []
    for encoding in reversed(encodings):
        if encoding == "br":
            decoders.append(_PlainWhenInvalid(_BrotliDecoder(limit), limit))
        elif encoding == "zstd":
            decoders.append(_PlainWhenInvalid(_ZstdDecoder(limit), limit))
        elif encoding == "deflate":
            decoders.append(_PlainWhenInvalid(_ZlibDecoder(encoding, limit), limit))
        else:
            decoders.append(_ZlibDecoder(encoding, limit))
    return _Chain(decoders, limit)
