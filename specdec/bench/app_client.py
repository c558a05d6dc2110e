"""A gradio_client Client for a specdec server: no CA bundle's cost on plain HTTP, and no call
cancelled by the stream of the call before it."""

from __future__ import annotations

import time

# How long a call waits for the previous call's event stream to close. The server closes it as soon
# as it has sent that call's last message, so the wait is a few milliseconds, even on a busy machine.
STREAM_CLOSE_WAIT_S = 30.0


def app_client(url: str, **kwargs):
    """`gradio_client.Client(url, verbose=False, **kwargs)`, verifying certificates only where there
    are any (https://), and submitting a call only once the previous call's stream has closed.

    Why no verification over http://: with `ssl_verify=True` httpx builds a fresh TLS context for
    every request the client makes, loading the system's CA bundle each time (220 KB of PEM here:
    34 ms of CPU). A client makes three such requests to start (its config, its API description,
    its heartbeat stream) and two for each run, on the same cores as the server it measures. Over
    http:// there is no TLS, so there is nothing to verify, and the server tests make hundreds of
    such requests."""
    from gradio_client import Client

    class AppClient(Client):
        """Why the wait (gradio_client 2.7.2): one client reads all its calls' messages from one
        event stream, which the server closes once no call of the session is pending. A call
        submitted after the previous call's result but before the client's reader thread has read
        that close joins the closing stream and is cancelled with it (CancelledError from
        `result()`). A busy machine delays that reader; tests/test_app_client.py delays it on
        purpose. Waiting until the reader is done makes the next call open a stream of its own."""

        def submit(self, *args, **kwargs):
            self.wait_for_stream_to_close()
            return super().submit(*args, **kwargs)

        def wait_for_stream_to_close(self, timeout: float = STREAM_CLOSE_WAIT_S) -> None:
            """Return once the event stream is closed or serves a call still pending (calls from
            several threads at once share it), or after `timeout` seconds."""
            lock = getattr(self, "pending_lock", None)   # gradio_client 2.7's; another version: no wait
            deadline = time.monotonic() + timeout
            while lock is not None and time.monotonic() < deadline:
                with lock:
                    reader, pending = self.streaming_future, bool(self.pending_event_ids)
                if reader is None or reader.done() or pending:
                    return
                time.sleep(0.002)

    return AppClient(url, verbose=False, ssl_verify=not url.startswith("http://"), **kwargs)
