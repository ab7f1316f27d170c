"""Does a remote input or output location answer? Checked by the launcher before anything else.

Without a network, Beam's GCS client retries a listing for minutes (2 min 24 s measured) and
then fails with a message that does not say the bucket could not be reached. One HTTP request
to the location's storage endpoint, with a timeout of a few seconds, tells the same thing at
once: any reply, an error status included, means the service answers.
"""

from __future__ import annotations

import http.client
import os
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

REACH_TIMEOUT_S = 5.0
# The storage service a remote scheme talks to, and the environment variable its client
# library (google-cloud-storage) reads another endpoint from: an emulator, a private endpoint.
_ENDPOINTS = {"gs": ("https://storage.googleapis.com", "STORAGE_EMULATOR_HOST")}


class UnreachableError(OSError):
    """A location's service did not answer; the message is the one line to print."""


def endpoint(location: str, env: Mapping[str, str] | None = None) -> str | None:
    """The URL of the service that holds `location` (gs://, http(s)://); None for a
    local path or a scheme whose endpoint we do not know (nothing is checked for those)."""
    env = os.environ if env is None else env
    scheme = urlsplit(location).scheme if "://" in location else ""
    if scheme in ("http", "https"):
        return location
    if scheme not in _ENDPOINTS:
        return None
    default, variable = _ENDPOINTS[scheme]
    url = env.get(variable) or default
    return url if "://" in url else f"http://{url}"


def check_reachable(location: str, timeout_s: float | None = None) -> None:
    """Return when `location`'s service answers an HTTP request within `timeout_s` (default
    REACH_TIMEOUT_S); else raise UnreachableError naming the location and the endpoint."""
    url = endpoint(location)
    if url is None:
        return
    timeout_s = REACH_TIMEOUT_S if timeout_s is None else timeout_s
    parts = urlsplit(url)
    connection_class = (
        http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    )
    connection = connection_class(parts.hostname, parts.port, timeout=timeout_s)
    try:
        connection.request("HEAD", "/")
        connection.getresponse()
    except TimeoutError:
        raise UnreachableError(
            f"{location} cannot be reached: {parts.netloc} did not answer within "
            f"{timeout_s:g} s (no network, a proxy or firewall in the way?)"
        ) from None
    except (OSError, http.client.HTTPException) as error:  # refused, no such host, TLS
        raise UnreachableError(f"{location} cannot be reached: {parts.netloc}: {error}") from None
    finally:
        connection.close()


def check_all_reachable(locations: Iterable[str], timeout_s: float | None = None) -> None:
    """check_reachable on one location of each service the locations are on: a run of ten
    thousand gs:// inputs asks the storage service once, not ten thousand times."""
    first: dict[str, str] = {}
    for location in locations:
        url = endpoint(location)
        if url is not None:
            first.setdefault(urlsplit(url).netloc, location)
    for location in first.values():
        check_reachable(location, timeout_s)
