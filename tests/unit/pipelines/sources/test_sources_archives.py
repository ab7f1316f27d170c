"""Safe streaming readers: decompression by magic bytes, truncation, bombs, tar path checks,
text decoding. Inputs are real corpus bytes, cut, wrapped or re-encoded in tmp dirs."""

from __future__ import annotations

import bz2
import functools
import gzip
import io
import lzma
import os
import tarfile
import zlib
from pathlib import Path

import pytest
import zstandard

from pipelines.sources.compression import detect_compression, open_decompressed
from pipelines.sources.file_source import plan_file_tasks, task_name
from pipelines.sources.input_errors import (
    ArchiveError,
    BinaryContentError,
    CorruptInputError,
    TooLargeError,
    TruncatedInputError,
)
from pipelines.sources.reading import decode_text, iter_lines, read_bounded, to_lf
from pipelines.sources.sizes import max_document_bytes, parse_size
from pipelines.sources.tar_members import (
    ArchiveMember,
    is_tar,
    iter_tar_members,
    unsafe_member_reason,
)
from tests.conftest import REPO

CORPORA = REPO.parent / "shared" / "corpora"
BOOKS = CORPORA / "books"
MOBY = (BOOKS / "2701-0.txt").read_bytes()

COMPRESSORS = {
    "gzip": gzip.compress,
    "bz2": bz2.compress,
    "xz": lambda data: lzma.compress(data, preset=1),  # the format is the same at any preset
    "zstd": lambda data: zstandard.ZstdCompressor().compress(data),
}


@functools.cache
def _compressed_moby(name: str) -> bytes:
    return COMPRESSORS[name](MOBY)


def _decompress(data: bytes) -> bytes:
    return open_decompressed(io.BytesIO(data)).stream.read()


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
def test_round_trip_by_magic_bytes(name: str) -> None:
    compressed = _compressed_moby(name)
    opened = open_decompressed(io.BytesIO(compressed))
    assert opened.compression == name
    assert opened.head == MOBY[: len(opened.head)] and len(opened.head) == 1024
    assert opened.stream.read() == MOBY


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
def test_concatenated_streams_and_zero_padding(name: str) -> None:
    compress = COMPRESSORS[name]
    # pigz/pbzip2/pixz and per-record WARC gzip write one stream after another
    joined = compress(MOBY[:100_000]) + compress(MOBY[100_000:]) + b"\0" * 700
    assert _decompress(joined) == MOBY


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
def test_truncated_stream_returns_good_prefix_then_fails(name: str) -> None:
    compressed = _compressed_moby(name)
    received = bytearray()
    with pytest.raises(TruncatedInputError, match="end-of-stream marker"):
        stream = open_decompressed(io.BytesIO(compressed[: len(compressed) * 2 // 3])).stream
        while chunk := stream.read(1 << 16):
            received += chunk
    assert MOBY.startswith(bytes(received))
    if name != "bz2":  # bz2 emits nothing before a whole 900 kB block is in
        assert len(received) > 100_000


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
def test_garbage_after_stream_is_corrupt(name: str) -> None:
    with pytest.raises(CorruptInputError, match="not another"):
        _decompress(_compressed_moby(name) + b"<html>trailing junk</html>")


def test_cut_inside_next_stream_header_is_truncated() -> None:
    # one byte of the next gzip member's magic: a cut file, not garbage
    with pytest.raises(TruncatedInputError):
        _decompress(gzip.compress(MOBY[:5000]) + b"\x1f")


def test_corrupt_compressed_data() -> None:
    compressed = bytearray(gzip.compress(MOBY))
    compressed[5000:5100] = bytes(100)
    with pytest.raises(CorruptInputError):
        _decompress(bytes(compressed))


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
def test_decompression_bomb_stops_at_limit(name: str) -> None:
    bomb = COMPRESSORS[name](b"\0" * (16 << 20))
    assert len(bomb) < (16 << 20) // 100
    stream = open_decompressed(io.BytesIO(bomb)).stream
    with pytest.raises(TooLargeError, match="max_document_bytes=1048576"):
        read_bounded(stream, 1 << 20, "member")


def test_read_bounded_limit_is_inclusive() -> None:
    assert read_bounded(io.BytesIO(MOBY), len(MOBY), "book") == MOBY
    with pytest.raises(TooLargeError):
        read_bounded(io.BytesIO(MOBY), len(MOBY) - 1, "book")


def test_plain_and_empty_streams_pass_through() -> None:
    opened = open_decompressed(io.BytesIO(MOBY))
    assert opened.compression is None and opened.stream.read() == MOBY
    empty = open_decompressed(io.BytesIO(b""))
    assert empty.head == b"" and empty.stream.read() == b""


def test_detect_compression_needs_the_whole_magic() -> None:
    assert detect_compression(b"BZh9") == "bz2"
    assert detect_compression(b"BZhx is text") is None
    assert detect_compression(MOBY[:6]) is None
    assert detect_compression(zlib.compress(MOBY)[:6]) is None  # raw zlib is not gzip


def test_iter_lines_skips_an_overlong_line_and_goes_on() -> None:
    lines = [b"short", b"x" * 5000, b"after", b"last-no-newline"]
    stream = open_decompressed(io.BytesIO(gzip.compress(b"\n".join(lines)))).stream
    assert list(iter_lines(stream, 100)) == [(1, b"short"), (2, None), (3, b"after"),
                                             (4, b"last-no-newline")]


# ----------------------------------------------------------------------------------- tar


SOME_BOOKS = ("11-0.txt", "1952-0.txt", "2701-0.txt", "41-0.txt")


def _book_tar(path: Path, mode: str = "w", names: tuple[str, ...] = ()) -> list[str]:
    names = names or tuple(sorted(p.name for p in BOOKS.iterdir()))
    options = {"preset": 1} if mode.endswith("xz") else {}
    with tarfile.open(path, mode, **options) as archive:
        for name in names:
            archive.add(BOOKS / name, arcname=f"./books/{name}")
    return [f"books/{name}" for name in names]


def _read_members(stream, location: str = "x.tar") -> list[tuple[str, bytes] | str]:
    out: list[tuple[str, bytes] | str] = []
    for item in iter_tar_members(stream, location):
        if isinstance(item, ArchiveMember):
            out.append((item.name, read_bounded(item.stream, 1 << 30, "member")))
        else:
            out.append(item.reason)
    return out


@pytest.mark.parametrize("mode", ["w", "w:gz", "w:xz", "w:bz2"])
def test_tar_members_stream_in_order(tmp_path: Path, mode: str) -> None:
    names = _book_tar(tmp_path / "books.tar", mode, SOME_BOOKS)
    opened = open_decompressed((tmp_path / "books.tar").open("rb"))
    assert is_tar(opened.head)
    members = _read_members(opened.stream)
    assert [name for name, _ in members] == names  # "./" removed, directories passed over
    assert members[2][1] == MOBY


def test_tar_zstd_is_read_too(tmp_path: Path) -> None:
    _book_tar(tmp_path / "books.tar")
    compressed = zstandard.ZstdCompressor().compress((tmp_path / "books.tar").read_bytes())
    members = _read_members(open_decompressed(io.BytesIO(compressed)).stream)
    assert len(members) == 8 and members[2][1] == MOBY


def _unsafe_tar(path: Path, outside: Path) -> None:
    text = (BOOKS / "1952-0.txt").read_bytes()
    with tarfile.open(path, "w") as archive:
        def add(info: tarfile.TarInfo, data: bytes | None = None) -> None:
            info.size = len(data) if data is not None else 0
            archive.addfile(info, io.BytesIO(data) if data is not None else None)

        add(tarfile.TarInfo("ok/first.txt"), text)
        add(tarfile.TarInfo("../evil.txt"), text)
        add(tarfile.TarInfo("ok/../../evil2.txt"), text)
        add(tarfile.TarInfo(str(outside / "absolute.txt")), text)
        link = tarfile.TarInfo("ok/link.txt")
        link.type, link.linkname = tarfile.SYMTYPE, str(outside / "target.txt")
        add(link)
        hard = tarfile.TarInfo("ok/hard.txt")
        hard.type, hard.linkname = tarfile.LNKTYPE, "ok/first.txt"
        add(hard)
        device = tarfile.TarInfo("ok/dev")
        device.type = tarfile.CHRTYPE
        add(device)
        fifo = tarfile.TarInfo("ok/fifo")
        fifo.type = tarfile.FIFOTYPE
        add(fifo)
        add(tarfile.TarInfo("ok/last.txt"), text)


def test_unsafe_members_are_counted_failures_and_nothing_is_written(tmp_path: Path,
                                                                   caplog) -> None:
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    _unsafe_tar(work / "unsafe.tar", outside)
    before = sorted(p for p in tmp_path.rglob("*"))
    cwd = os.getcwd()
    os.chdir(work)  # a reader that extracted "../evil.txt" would write into tmp_path
    try:
        items = list(iter_tar_members((work / "unsafe.tar").open("rb"), "unsafe.tar"))
    finally:
        os.chdir(cwd)
    regular = [item.name for item in items if isinstance(item, ArchiveMember)]
    failures = [item for item in items if not isinstance(item, ArchiveMember)]
    assert regular == ["ok/first.txt", "ok/last.txt"]
    assert [f.reason for f in failures] == ["unsafe_tar_member"] * 7
    details = [f.detail for f in failures]
    assert details[:3] == ["path with a '..' component"] * 2 + ["absolute path"]
    assert details[3].startswith("symlink to") and details[4].startswith("hardlink to")
    assert details[5:] == ["device file", "fifo"]
    assert failures[0].location == "unsafe.tar:../evil.txt"
    assert sorted(p for p in tmp_path.rglob("*")) == before
    # made, not logged: the read stage logs each Failure where it counts it, once
    assert not [r for r in caplog.records if "unsafe_tar_member" in r.getMessage()]


def test_unsafe_member_reason_windows_paths() -> None:
    for name in ("C:\\Windows\\evil.txt", "\\\\server\\share.txt", "a\\..\\..\\evil.txt"):
        info = tarfile.TarInfo(name)
        assert unsafe_member_reason(info) is not None, name
    assert unsafe_member_reason(tarfile.TarInfo("books/a..b.txt")) is None


@pytest.mark.parametrize("compress", [None, "gzip", "xz"])
def test_truncated_tar_yields_every_member_before_the_cut(tmp_path: Path,
                                                           compress: str | None) -> None:
    _book_tar(tmp_path / "books.tar", names=SOME_BOOKS)
    whole = (tmp_path / "books.tar").read_bytes()
    full = _read_members(io.BytesIO(whole))
    data = COMPRESSORS[compress](whole) if compress else whole
    # cuts inside member data, inside a header, and on a block boundary between members
    cuts = [len(data) // 3, len(data) * 2 // 3]
    if compress is None:
        with tarfile.open(tmp_path / "books.tar") as archive:
            second_header = archive.getmembers()[1].offset
        cuts += [second_header + 100, second_header]
    else:
        cuts.append(len(data) - 20)  # only the end of the compressed stream is missing
    for cut in cuts:
        received: list = []
        with pytest.raises(ArchiveError) as raised:
            for item in iter_tar_members(open_decompressed(io.BytesIO(data[:cut])).stream,
                                         "books.tar"):
                received.append((item.name, read_bounded(item.stream, 1 << 30, "m")))
        assert raised.value.reason == "truncated_input", (cut, raised.value.detail)
        assert raised.value.location == "books.tar"
        assert received == full[: len(received)], cut


def test_corrupt_tar_header_is_reported(tmp_path: Path) -> None:
    _book_tar(tmp_path / "books.tar", names=("1952-0.txt", "41-0.txt"))
    with tarfile.open(tmp_path / "books.tar") as archive:
        second_header = archive.getmembers()[1].offset
    data = bytearray((tmp_path / "books.tar").read_bytes())
    data[second_header:second_header + 10] = b"garbage!!!"
    with pytest.raises(ArchiveError) as raised:
        _read_members(io.BytesIO(bytes(data)))
    assert raised.value.reason == "corrupt_input"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["books/huge.txt", "../huge.txt"])
def test_member_claiming_more_bytes_than_the_stream_holds_is_truncated(name: str) -> None:
    # a 1.5 KB tar (built here) whose one member's header claims 2**60 bytes (GNU base-256 size
    # field), followed by 1 KB of real book text; the member is skipped unread (and, as
    # "../huge.txt", refused as unsafe), so tarfile would seek past it 1 block at a time forever
    info = tarfile.TarInfo(name)
    info.size = 2**60
    data = info.tobuf(format=tarfile.GNU_FORMAT) + MOBY[:1024]
    assert len(data) == 1536
    with pytest.raises(ArchiveError) as raised:
        for _ in iter_tar_members(open_decompressed(io.BytesIO(data)).stream, "huge.tar"):
            pass
    assert raised.value.reason == "truncated_input" and raised.value.location == "huge.tar"
    assert str(2**60) in raised.value.detail


# -------------------------------------------------------------------------------- decoding


def test_decode_utf8_strips_bom() -> None:
    raw = (BOOKS / "41-0.txt").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf")
    decoded = decode_text(raw)
    assert decoded.encoding == "utf-8"
    assert decoded.text.startswith("Project Gutenberg’s The Legend")


def test_decode_cp1252_book() -> None:
    text = (BOOKS / "41-0.txt").read_bytes().decode("utf-8-sig")
    decoded = decode_text(text.encode("cp1252"))
    assert decoded.encoding == "cp1252"
    assert decoded.text == text  # curly quotes and dashes survive the round trip


def test_decode_latin1_bytes_undefined_in_cp1252() -> None:
    assert decode_text(b"caf\xe9 \x81").text == "café \x81"


def test_decode_mostly_utf8_with_damage_uses_replacement() -> None:
    raw = (BOOKS / "Candide-fr.txt").read_bytes()
    damaged = raw[:50_000] + b"\xff\xfe\xfa" + raw[50_000:]
    decoded = decode_text(damaged)
    assert decoded.encoding == "utf-8+replace"
    assert decoded.text.count("\ufffd") == 3
    assert "Bibliothèque Nationale" in decoded.text


def test_decode_utf16_with_bom() -> None:
    text = (BOOKS / "1952-0.txt").read_text(encoding="utf-8")
    assert decode_text(text.encode("utf-16")).text == text


@pytest.mark.parametrize("make", [
    lambda: zlib.compress(MOBY),  # raw zlib: not sniffed, so it looks like what it is
    lambda: bytes(range(256)) * 100,
    lambda: (BOOKS / "1952-0.txt").read_bytes()[:2000].replace(b"e", b"\x01").replace(b"t", b"\x02"),
])
def test_binary_data_is_refused(make) -> None:
    with pytest.raises(BinaryContentError, match="binary data"):
        decode_text(make())


def test_text_with_tabs_form_feeds_and_escapes_is_text() -> None:
    text = (BOOKS / "pg1080.txt").read_bytes().replace(b"  ", b"\t\x0c\x1b")
    assert decode_text(text).encoding == "utf-8"


def test_to_lf() -> None:
    assert to_lf("a\r\nb\rc\n") == "a\nb\nc\n"


# ---------------------------------------------------------------------- options, planning


def test_parse_size() -> None:
    assert parse_size("1GiB") == 1 << 30
    assert parse_size("50MB") == 50_000_000
    assert parse_size("512 mib") == 512 << 20
    assert parse_size("4096") == 4096
    with pytest.raises(ValueError, match="not a size"):
        parse_size("lots")
    assert max_document_bytes({}) == 256 << 20
    with pytest.raises(ValueError, match="must be positive"):
        max_document_bytes({"max_document_bytes": "0"})


def test_plan_directory_glob_and_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    for name in ("b.txt", "a.txt", "sub/c.txt"):
        (tmp_path / name).write_bytes(b"x")
    tasks = plan_file_tasks("books", str(tmp_path), {"k": "v"})
    assert [task_name(t) for t in tasks] == ["a.txt", "b.txt", "sub/c.txt"]
    assert all(t.options["k"] == "v" and t.source == "books" for t in tasks)
    assert [task_name(t) for t in plan_file_tasks("books", f"{tmp_path}/*.txt", {})] == [
        "a.txt", "b.txt"]
    assert [task_name(t) for t in plan_file_tasks("books", f"{tmp_path}/sub/c.txt", {})] == [
        "c.txt"]
    with pytest.raises(FileNotFoundError):
        plan_file_tasks("books", f"{tmp_path}/*.none", {})
    with pytest.raises(ValueError):
        plan_file_tasks("books", str(tmp_path), {"max_document_bytes": "huge"})
