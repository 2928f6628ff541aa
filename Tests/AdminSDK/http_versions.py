"""The HTTP versions of the answers the Admin SDK's asynchronous calls got (HTTP/2 over TLS, where ALPN offers
it), for the checks that print them. Importing this module wraps httpx.AsyncClient.send, which every request of an
httpx.AsyncClient goes through, once; the wrapper only records each answer's version and changes nothing."""

import httpx

async_versions = set()
_send = httpx.AsyncClient.send


async def _recording_send(self, request, **kwargs):
    response = await _send(self, request, **kwargs)
    async_versions.add(response.http_version)
    return response


httpx.AsyncClient.send = _recording_send
