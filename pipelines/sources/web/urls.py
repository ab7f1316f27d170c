"""URL-list filtering, as OpenWebText / Megatron's `blacklist_urls.py` does before scraping.

Input lines are plain URLs (one a line) or JSON lines with the URL under "u" (the WebText
`RS_*.urk.json` dumps; "url" also works), plain or compressed. Each URL is normalized
(`normalize_url`: HTML entities such as `&amp;` unescaped, scheme and host lower-cased,
default port and #fragment dropped), checked by `is_blacklisted` and de-duplicated on
`dedup_key` (the normalized URL without scheme and leading "www."). Rejection reasons:

    too_short (<= 8 characters, as Megatron), too_long (> 2048), malformed (not http(s) with
    a valid host name or IPv4 address), blacklisted_domain (the registered-domain label is in
    DOMAIN_BLACKLIST: image/video hosts, social networks, shops, wikis, ... as Megatron),
    blacklisted_extension (the path ends in a non-HTML file type), duplicate, bad_json.

Megatron uses tldextract to find the registered-domain label (`google` in `maps.google.co.uk`);
that needs the public-suffix list, so here the label is the one before a known two-level
suffix (co.uk, com.au, ...) or before the last label otherwise: the same answer for every
host of the blacklisted sites.

    python -m pipelines.sources.web.urls --input 'urls/*.txt' --output kept_urls.txt
"""

# ruff: noqa: E402 - the stop signals' handlers go in before the imports
from __future__ import annotations

if __name__ == "__main__":
    from common.signals import exit_on_stop_signals

    exit_on_stop_signals("python -m pipelines.sources.web.urls")

import html
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from urllib.parse import urlsplit, urlunsplit

from common.cli import ArgumentParser
from common.storage import OutputDir, parent_and_name
from pipelines.inputs import add_input_arguments, match_patterns, parsed_inputs
from pipelines.io import open_input
from pipelines.sources.compression import open_decompressed
from pipelines.sources.input_errors import InputError
from pipelines.sources.reading import iter_lines

MIN_URL_LENGTH = 9  # Megatron drops URLs of 8 characters or fewer
MAX_URL_LENGTH = 2048  # longer "URLs" are query-string dumps or tracking junk
_MAX_LINE_BYTES = 1 << 20

# Megatron's blacklist (registered-domain labels)
DOMAIN_BLACKLIST = frozenset("""
500px aapks akamaihd amazon apple artifactfire artstation awwni bandcamp battleforthenet
coinscalendar dailymotion deviantart discord discordapp dlapkandroid dropbox e621 ebay
edealinfo erome eroshare explosm facebook fbcdn flickr furaffinity futhead gatopardo gfycat
gifsound gifsoup giphy github google gunprime gyazo hotdealstar imagefap imageshack imgflip
imgur instagram karmadecay kryptocal kym-cdn liveleak livememe lmgtfy magaimg memegenerator
minorplanetcenter minus mobafire morejpeg nocookie pcpartpicker photobucket pinimg pinterest
pixiv pornhub prntscr puu qkme quickmeme radd redd reddit reddit-stream redditlog redditmedia
reddituploads redtube reupp reverb roanoke rollingstone sli soundcloud soundgasm spankbang
spotify strawpoll streamable timeanddate tinypic touhouradio tumblr twimg twitch twitter vid
vimeo vine vkaao vocaroo voyagefusion walmart wciu wikimedia wikipedia xhamster xkcd xvideos
youtu youtube youtubedoubler ytimg zillexplorer
""".split())

# Megatron's list (its '.7z' '.ai' typo joined two entries; both are here), plus a few modern
# image/audio/package types it predates.
EXTENSION_BLACKLIST = tuple("""
.3gp .7z .ai .aif .apk .app .avi .bin .bmp .bz2 .css .csv .dat .deb .dmg .doc .docx .exe
.gif .gifv .gz .iso .jar .jpeg .jpg .js .log .mid .midi .mkv .mov .mp3 .mp4 .mpeg .mpg .ogg
.ogv .otf .pdf .pkg .png .pps .ppt .pptx .psd .py .qt .ram .rar .sql .svg .swf .tar.gz .tar
.tgz .tiff .ttf .txt .wav .webm .wma .wmv .xls .xlsx .xml .xz .zip
.webp .ico .heic .flac .m4a .aac .msi .rpm .zst .woff .woff2 .epub
""".split())

# Public suffixes of two labels under which the registered domain is the third label from the
# right (google.co.uk, amazon.co.jp); single-label suffixes need no list.
_TWO_LEVEL_SUFFIXES = frozenset("""
co.uk org.uk ac.uk gov.uk me.uk ltd.uk plc.uk net.uk sch.uk com.au net.au org.au edu.au
gov.au asn.au id.au co.nz net.nz org.nz ac.nz govt.nz co.jp ne.jp or.jp ac.jp go.jp co.kr
or.kr ne.kr ac.kr com.br net.br org.br gov.br com.cn net.cn org.cn gov.cn edu.cn com.mx
org.mx gob.mx com.ar org.ar com.tr org.tr gov.tr co.in net.in org.in gov.in ac.in co.za
org.za gov.za com.sg edu.sg com.hk org.hk com.tw org.tw co.il org.il ac.il co.id or.id
com.my com.ph com.vn com.ua com.pl com.ru com.sa com.eg com.pk com.co com.pe com.ve
""".split())

_HOST_LABEL = r"(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)"
_VALID_URL = re.compile(
    r"^https?://"
    r"(?:[^@/\s]+@)?"  # user info
    rf"(?:(?:{_HOST_LABEL}\.)+(?:[a-z]{{2,63}}|xn--[a-z0-9-]{{1,59}})\.?"  # domain name
    r"|\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})"  # or IPv4
    r"(?::\d{1,5})?"  # port
    r"(?:[/?]\S*)?$",
    re.IGNORECASE,
)
_DEFAULT_PORTS = {"http": "80", "https": "443"}


def normalize_url(url: str) -> str:
    """The URL with HTML entities unescaped (repeatedly), surrounding space removed, scheme and host lower-
    cased, the default port, the #fragment and an empty '?' dropped, and '/' as the empty path.
    Never raises: text that does not parse as a URL comes back unescaped and stripped."""
    url = url.strip()
    for _ in range(3):  # Reddit dumps hold doubly escaped URLs ("&amp;amp;")
        unescaped = html.unescape(url)
        if unescaped == url:
            break
        url = unescaped
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return url
    if not parts.scheme or not parts.hostname:
        return url
    scheme = parts.scheme.lower()
    netloc = parts.hostname.rstrip(".")
    if port is not None and str(port) != _DEFAULT_PORTS.get(scheme):
        netloc = f"{netloc}:{port}"
    if "@" in parts.netloc:
        netloc = f"{parts.netloc.rsplit('@', 1)[0]}@{netloc}"
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))


def dedup_key(normalized_url: str) -> str:
    """What two URLs must share to count as the same page: no scheme, no leading 'www.'."""
    rest = normalized_url.split("://", 1)[-1]
    return rest[4:] if rest.startswith("www.") else rest


def registered_domain_label(host: str) -> str:
    """'google' for 'maps.google.co.uk', 'youtu' for 'youtu.be'; '' for an IP address."""
    host = host.lower().rstrip(".").split(":", 1)[0]
    if re.fullmatch(r"[\d.]+", host):
        return ""
    labels = host.split(".")
    if len(labels) >= 3 and ".".join(labels[-2:]) in _TWO_LEVEL_SUFFIXES:
        return labels[-3]
    return labels[-2] if len(labels) >= 2 else labels[0]


def is_blacklisted(url: str) -> str | None:
    """The reason a (normalized) URL is dropped, or None to keep it."""
    if len(url) < MIN_URL_LENGTH:
        return "too_short"
    if len(url) > MAX_URL_LENGTH:
        return "too_long"
    if not _VALID_URL.match(url):
        return "malformed"
    parts = urlsplit(url)
    if registered_domain_label(parts.hostname or "") in DOMAIN_BLACKLIST:
        return "blacklisted_domain"
    if parts.path.lower().endswith(EXTENSION_BLACKLIST):
        return "blacklisted_extension"
    return None


def url_from_line(line: str) -> str | None:
    """The URL on one input line: the line itself, or the "u"/"url" field of a JSON object.
    None for a JSON line without a URL string."""
    line = line.strip()
    if not line.startswith("{"):
        return line
    try:
        record = json.loads(line)
    except ValueError:
        return None
    value = record.get("u", record.get("url")) if isinstance(record, dict) else None
    return value if isinstance(value, str) else None


def filter_urls(lines: Iterable[str]) -> tuple[list[str], Counter[str]]:
    """(kept normalized URLs in first-seen order, count of rejected lines by reason).
    Blank lines are not URLs and are not counted."""
    kept: list[str] = []
    rejected: Counter[str] = Counter()
    seen: set[str] = set()
    for line in lines:
        if not line.strip():
            continue
        raw_url = url_from_line(line)
        if raw_url is None:
            rejected["bad_json"] += 1
            continue
        url = normalize_url(raw_url)
        reason = is_blacklisted(url)
        if reason is None:
            key = dedup_key(url)
            if key in seen:
                reason = "duplicate"
            else:
                seen.add(key)
                kept.append(url)
                continue
        rejected[reason] += 1
    return kept, rejected


def read_url_lines(path: str) -> Iterator[str]:
    """The lines of a URL file (plain or gzip/bz2/xz/zstd compressed), decoded as UTF-8.
    Raises InputError naming the file when it is cut short or corrupt: a list that breaks off
    is not filtered as if it were whole."""
    try:
        with open_input(path) as raw:
            for _, line in iter_lines(open_decompressed(raw).stream, _MAX_LINE_BYTES):
                # a line over 1 MiB is no URL; an empty string is skipped by filter_urls
                yield "" if line is None else line.decode("utf-8", errors="replace")
    except InputError as error:
        raise InputError(f"{path}: {error.reason}: {error.detail}") from None


def write_filtered_urls(
    input_patterns: str | Sequence[str], output_path: str
) -> tuple[int, Counter[str]]:
    """Filter every URL file the patterns match (as one list, so duplicates across files are
    caught) and write the kept URLs, one a line, to `output_path` (atomically: a local path or
    any URL `common.storage` serves)."""
    def all_lines() -> Iterator[str]:
        for input_file in match_patterns(input_patterns):
            yield from read_url_lines(input_file.path)

    kept, rejected = filter_urls(all_lines())
    folder, name = parent_and_name(output_path)
    OutputDir(folder).write_with(name, lambda out: out.writelines(f"{u}\n".encode() for u in kept))
    return len(kept), rejected


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    add_input_arguments(parser, "URL files (plain or JSON lines)")
    parser.add_argument("--output", required=True, help="where to write the kept URLs")
    args = parser.parse_args(argv)
    try:
        kept, rejected = write_filtered_urls(parsed_inputs(args), args.output)
    except (InputError, OSError, ValueError) as error:  # ValueError: safe_io's refusals
        print(f"urls: error: {error}", file=sys.stderr)
        return 1
    print(f"kept: {kept}")
    for reason, count in sorted(rejected.items()):
        print(f"{reason}: {count}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
