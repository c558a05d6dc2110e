"""The page's first script (`static/early.js`), put first in its <head> by an ASGI middleware:
Gradio adds a `head=` of ours with its own scripts, after they have started, too late for a script
that must run before them (`early.js` says why). Only the page itself (GET and HEAD /, HTML, not
compressed) is touched; every other response passes as it came."""

from __future__ import annotations

from pathlib import Path

from starlette.middleware import Middleware

TAG = b"<script>" + (Path(__file__).parent / "static" / "early.js").read_bytes() + b"</script>"


class EarlyScript:
    """ASGI middleware: `TAG` right after the page's `<head>`, its Content-Length set again."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") not in ("GET", "HEAD") or scope.get("path") != "/":
            return await self.app(scope, receive, send)
        start, parts = None, []

        async def send_with_script(message):
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body" or start is None:
                return await send(message)
            parts.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body, headers = with_script(b"".join(parts), start.get("headers", []), scope["method"] == "HEAD")
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, send_with_script)


def with_script(body: bytes, headers: list, head_only: bool = False) -> tuple[bytes, list]:
    """(body, headers) with `TAG` after the first `<head>` where the body is uncompressed HTML; for
    a HEAD request (no body), the Content-Length the GET's body has with it."""
    named = {key.lower(): value for key, value in headers}
    if (not named.get(b"content-type", b"").startswith(b"text/html") or b"content-encoding" in named
            or not (b"content-length" in named if head_only else b"<head>" in body)):
        return body, headers
    if not head_only:
        body = body.replace(b"<head>", b"<head>" + TAG, 1)
    length = int(named[b"content-length"]) + len(TAG) if head_only else len(body)
    return body, [(k, str(length).encode() if k.lower() == b"content-length" else v) for k, v in headers]


def app_kwargs() -> dict:
    """`demo.launch(app_kwargs=...)`: the middleware on Gradio's FastAPI app."""
    return {"middleware": [Middleware(EarlyScript)]}
