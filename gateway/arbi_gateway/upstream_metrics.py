"""The engine's metric families on the gateway's `GET /metrics`: the upstream server's Prometheus exposition,
fetched at each scrape and appended after the gateway's own families. A family the gateway already exposes
is left out of the upstream's part, so no name appears twice in one exposition.
"""

from __future__ import annotations

import asyncio
import re
import urllib.error
import urllib.request

_FAMILY_LINE = re.compile(rb"^# (?:HELP|TYPE) (\S+)")
_SCRAPE_TIMEOUT_S = 2.0


class UpstreamMetrics:
    """Fetches the exposition at `url` (the server's own metrics endpoint)."""

    def __init__(self, url: str, timeout_s: float = _SCRAPE_TIMEOUT_S) -> None:
        self.url = url
        self._timeout_s = timeout_s

    async def scrape(self) -> bytes | None:
        """The upstream's exposition, or None when it cannot be read within the timeout."""
        return await asyncio.to_thread(self._fetch)

    def _fetch(self) -> bytes | None:
        try:
            with urllib.request.urlopen(self.url, timeout=self._timeout_s) as response:
                return response.read()
        except (OSError, urllib.error.URLError):
            return None


def family_names(exposition: bytes) -> set[bytes]:
    """The metric family names an exposition declares."""
    return {match.group(1) for line in exposition.splitlines() if (match := _FAMILY_LINE.match(line))}


def merged_exposition(own: bytes, upstream: bytes) -> bytes:
    """`own` followed by the families of `upstream` that `own` does not declare."""
    taken = family_names(own)
    kept, family = [], b""
    for line in upstream.splitlines(keepends=True):
        if match := _FAMILY_LINE.match(line):
            family = match.group(1)
        if family not in taken:
            kept.append(line)
    return own + b"".join(kept)
