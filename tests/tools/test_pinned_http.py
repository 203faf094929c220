"""The pinned httpx client: TCP goes to the checked addresses, the URL's host stays in Host."""

from __future__ import annotations

import asyncio
import datetime
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest

from oss_responses.tools.pinned_http import pinned_client_factory

pytestmark = pytest.mark.anyio


async def _echo_host(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    host = next(line.split(":", 1)[1].strip() for line in head.split("\r\n") if line.lower().startswith("host:"))
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s" % (len(host), host.encode()))
    await writer.drain()
    writer.close()


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    server = await asyncio.start_server(_echo_host, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


async def test_pinned_client_connects_unresolvable_name_to_pinned_address(echo_port: int) -> None:
    url = f"http://pinned.invalid:{echo_port}/mcp"
    async with pinned_client_factory(url, ["127.0.0.1"])() as client:
        response = await client.get(url)
    assert response.text == f"pinned.invalid:{echo_port}"


async def test_pinned_client_tries_next_address_when_first_refuses(echo_port: int) -> None:
    url = f"http://pinned.invalid:{echo_port}/"
    async with pinned_client_factory(url, ["127.0.0.2", "127.0.0.1"])() as client:
        assert (await client.get(url)).status_code == 200


async def test_pinned_client_refuses_other_hosts(echo_port: int) -> None:
    url = f"http://pinned.invalid:{echo_port}/"
    async with pinned_client_factory(url, ["127.0.0.1"])() as client:
        with pytest.raises(httpx2.ConnectError):
            await client.get(f"http://127.0.0.1:{echo_port}/")


async def _redirect_to_admin(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """``/mcp`` redirects to ``/mcp/``, ``/mcp/`` to ``/admin``; every request is answered with its path."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    path = head.split(" ", 2)[1]
    redirects = {"/mcp": "/mcp/", "/mcp/": "/admin"}
    if path in redirects:
        writer.write(b"HTTP/1.1 307 Temporary Redirect\r\nlocation: %s\r\ncontent-length: 0\r\n\r\n"
                     % redirects[path].encode())
    else:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
                     % (len(path), path.encode()))
    await writer.drain()
    writer.close()


@pytest.fixture
async def redirecting_port() -> AsyncIterator[int]:
    server = await asyncio.start_server(_redirect_to_admin, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


async def test_pinned_client_follows_redirect_under_its_url(redirecting_port: int) -> None:
    url = f"http://pinned.invalid:{redirecting_port}/mcp"
    async with pinned_client_factory(url, ["127.0.0.1"], within=[url])() as client:
        response = await client.get(url, follow_redirects=False)
        assert response.next_request is not None
        # The mcp SDK follows a redirect on the origin itself, through the client's send.
        assert (await client.send(response.next_request, follow_redirects=False)).status_code == 307


async def test_pinned_client_refuses_redirect_outside_its_allowed_prefix(redirecting_port: int) -> None:
    url = f"http://pinned.invalid:{redirecting_port}/mcp/"
    async with pinned_client_factory(url, ["127.0.0.1"], within=[url])() as client:
        response = await client.get(url, follow_redirects=False)
        assert response.next_request is not None
        with pytest.raises(httpx2.ConnectError, match="URL"):
            await client.send(response.next_request)


async def test_pinned_client_follows_redirect_under_its_allowed_prefix(redirecting_port: int) -> None:
    url = f"http://pinned.invalid:{redirecting_port}/mcp/"
    within = [f"http://pinned.invalid:{redirecting_port}/"]
    async with pinned_client_factory(url, ["127.0.0.1"], within=within)() as client:
        response = await client.get(url, follow_redirects=False)
        assert response.next_request is not None
        assert (await client.send(response.next_request)).text == "/admin"


def _self_signed(name: str) -> tuple[bytes, bytes]:
    """A certificate for ``name`` (and its key), as PEM: the test's own CA of one."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


async def test_pinned_client_keeps_sni_and_verifies_certificate_over_https(tmp_path: Path) -> None:
    cert, key = _self_signed("pinned.invalid")
    (tmp_path / "cert.pem").write_bytes(cert)
    (tmp_path / "key.pem").write_bytes(key)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    names: list[str | None] = []
    server_context.sni_callback = lambda _socket, name, _context: names.append(name)  # type: ignore[assignment,misc]
    server = await asyncio.start_server(_echo_host, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]
    client_context = ssl.create_default_context(cadata=cert.decode())
    url = f"https://pinned.invalid:{port}/mcp"
    try:
        async with pinned_client_factory(url, ["127.0.0.1"], ssl_context=client_context)() as client:
            response = await client.get(url)
    finally:
        server.close()
        await server.wait_closed()
    assert response.text == f"pinned.invalid:{port}"
    assert names == ["pinned.invalid"]  # SNI names the URL's host, and the certificate was checked against it


async def test_pinned_client_refuses_certificate_of_another_name_over_https(tmp_path: Path) -> None:
    cert, key = _self_signed("other.invalid")
    (tmp_path / "cert.pem").write_bytes(cert)
    (tmp_path / "key.pem").write_bytes(key)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    server = await asyncio.start_server(_echo_host, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]
    url = f"https://pinned.invalid:{port}/mcp"
    try:
        context = ssl.create_default_context(cadata=cert.decode())
        async with pinned_client_factory(url, ["127.0.0.1"], ssl_context=context)() as client:
            with pytest.raises(httpx2.ConnectError):
                await client.get(url)
    finally:
        server.close()
        await server.wait_closed()
