"""specdec web app: `python app.py` locally, or as a Hugging Face Space.

Only builds and launches; the app lives in `specdec/app/` (see ARCHITECTURE.md): how it is served
to anyone (limits, input checks, housekeeping) in `specdec/app/server/serving.py`, every limit and its
environment variable in `specdec/app/server/limits.py`. Binds 127.0.0.1 unless GRADIO_SERVER_NAME says
otherwise (a Space sets it to 0.0.0.0); GRADIO_SERVER_PORT picks the port.
"""

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import torch  # noqa: E402

# The server's own torch work (the lab, charts) runs on one thread: on a 2-core machine (a free CPU
# Space, a laptop with the browser open) a second OpenMP thread spinning at barriers slows every
# request beside it. Each decoding run sets its own count (specdec/core/threads.py: one for the
# bundled pair's tiny models, the cores free at its start for the real model); SPECDEC_THREADS
# fixes every run's count instead.
torch.set_num_threads(int(os.environ.get("SPECDEC_THREADS") or 1))
if os.environ.get("SPECDEC_THREADS"):
    from specdec.core import threads  # noqa: E402

    threads.fix(int(os.environ["SPECDEC_THREADS"]))

from specdec.app.page.layout import build_app, launch_kwargs  # noqa: E402
from specdec.app.server import limits, workers  # noqa: E402
from specdec.app.server.pairs import preload  # noqa: E402
from specdec.app.server.runs import warm_up  # noqa: E402
from specdec.app.server.serving import configure, launch_options  # noqa: E402

demo = configure(build_app())   # queue, limits, input checks, housekeeping (specdec/app/server/serving.py)
workers.end_with_server()   # SIGTERM or exit ends the decode worker processes too (never left orphaned)
preload(then=warm_up)   # the bundled pair loads (and runs once) while the page opens
if limits.OPEN_ON != "bundled":   # the Space: the real model is fetched and loaded; the bundled pair serves meanwhile
    preload(limits.OPEN_ON, then=warm_up, fetch=True)

if __name__ == "__main__":
    demo.launch(server_name=os.environ.get("GRADIO_SERVER_NAME") or "127.0.0.1",
                server_port=int(os.environ.get("GRADIO_SERVER_PORT") or 7860),
                ssr_mode=False, **launch_options(), **launch_kwargs())
