"""A gradio_client Client for a specdec server, without the CA bundle's cost on plain HTTP."""

from __future__ import annotations


def app_client(url: str, **kwargs):
    """`gradio_client.Client(url, verbose=False, **kwargs)`, verifying certificates only where there
    are any (https://).

    Why: with `ssl_verify=True` httpx builds a fresh TLS context for every request the client makes,
    loading the system's CA bundle each time (220 KB of PEM here: 34 ms of CPU). A client makes
    three such requests to start (its config, its API description, its heartbeat stream) and two
    for each run, on the same cores as the server it measures. Over http:// there is no TLS, so there is
    nothing to verify, and the server tests make hundreds of such requests."""
    from gradio_client import Client

    return Client(url, verbose=False, ssl_verify=not url.startswith("http://"), **kwargs)
