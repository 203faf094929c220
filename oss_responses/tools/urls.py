"""One canonical form of an http(s) URL, so that an allow-list compares what httpx will request.

httpx (like every WHATWG-style client) removes dot segments, decodes ``%2e``, lower-cases scheme and
host, drops the default port and reads legacy IPv4 forms (``127.1``, ``0x7f.0.0.1``); a prefix check
on the raw string therefore passes ``https://allowed.example/mcp/../admin``. :func:`normalise_url`
applies the same rules first (RFC 3986 section 6.2.2 plus those), and refuses what has no safe canonical
form: userinfo, backslashes, control characters, an encoded ``/`` or ``\\`` in the path, IPv6 zone ids.
The normalised URL is the one the connection uses, so the checked URL and the requested URL are one.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import idna

DEFAULT_PORTS = {"http": 80, "https": 443}

_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")
_FORBIDDEN = re.compile(r"[\x00-\x20\x7f\\]")
_LEGACY_IPV4 = re.compile(r"^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+)){0,3}\.?$")


class UnsafeUrl(ValueError):
    """The URL cannot be given one canonical form (the message says why, without the URL)."""


@dataclass(frozen=True)
class NormalUrl:
    scheme: str
    host: str  # IDNA ASCII, lower case; an IPv4 address dotted-quad; an IPv6 address compressed, no brackets
    port: int
    path: str  # dot segments removed, unreserved characters decoded, other escapes in upper case
    query: str

    @property
    def is_ip(self) -> bool:
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            return False
        return True

    def under(self, prefix: NormalUrl) -> bool:
        """Same origin, and the path is the prefix's path or below it at a segment boundary."""
        if (self.scheme, self.host, self.port) != (prefix.scheme, prefix.host, prefix.port):
            return False
        base = prefix.path.rstrip("/")
        return self.path == base or self.path.startswith(base + "/")

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = "" if DEFAULT_PORTS[self.scheme] == self.port else f":{self.port}"
        query = f"?{self.query}" if self.query else ""
        return f"{self.scheme}://{host}{port}{self.path}{query}"


def normalise_url(url: str) -> NormalUrl:
    """The canonical form of an http(s) URL; raises :class:`UnsafeUrl`."""
    if _FORBIDDEN.search(url):
        raise UnsafeUrl("it holds a space, a control character or a backslash")
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # a host with a character NFKC makes a delimiter ('\uff0f': '/'), an open bracket
        raise UnsafeUrl("it is not a valid URL") from exc
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.netloc:
        raise UnsafeUrl("it must be an absolute http(s) URL")
    if "@" in parts.netloc:
        raise UnsafeUrl("credentials in the URL (userinfo) are not accepted; use 'authorization' or 'headers'")
    try:
        port = parts.port or DEFAULT_PORTS[scheme]
    except ValueError as exc:
        raise UnsafeUrl("its port is not a number from 1 to 65535") from exc
    if port == 0:
        raise UnsafeUrl("its port is not a number from 1 to 65535")
    return NormalUrl(scheme, _host(parts.hostname or ""), port, _path(parts.path), parts.query)


def _host(raw: str) -> str:
    host = unquote(raw).rstrip(".").lower()
    if not host:
        raise UnsafeUrl("it has no host")
    if ":" in host:  # urlsplit strips the brackets of an IPv6 literal
        if "%" in host:
            raise UnsafeUrl("IPv6 zone ids are not accepted")
        try:
            return ipaddress.IPv6Address(host).compressed
        except ValueError as exc:
            raise UnsafeUrl("its IPv6 address is invalid") from exc
    if _LEGACY_IPV4.match(host):
        try:  # inet_aton reads the forms clients accept: 127.1, 0x7f.1, 2130706433
            return socket.inet_ntoa(socket.inet_aton(host))
        except OSError as exc:
            raise UnsafeUrl("its IPv4 address is invalid") from exc
    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except idna.IDNAError as exc:
        raise UnsafeUrl("its host name is not a valid (IDNA) name") from exc


def _path(raw: str) -> str:
    path = _PERCENT.sub(_decode_unreserved, raw)
    if re.search(r"%(2F|5C)", path):
        raise UnsafeUrl("an encoded '/' or '\\' in its path is not accepted")
    return _remove_dot_segments(path or "/")


def _decode_unreserved(match: re.Match[str]) -> str:
    char = chr(int(match.group(1), 16))
    return char if char in _UNRESERVED else f"%{match.group(1).upper()}"


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4 on an absolute path: ``/a/./b/../c`` → ``/a/c``; never above the root."""
    output: list[str] = []
    segments = path.split("/")[1:]
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == ".":
            if last:
                output.append("")
        elif segment == "..":
            if output:
                output.pop()
            if last:
                output.append("")
        else:
            output.append(segment)
    return "/" + "/".join(output)
