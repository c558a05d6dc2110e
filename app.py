"""specdec web app: `python app.py` locally, or as a Hugging Face Space.

Only builds and launches; the app lives in `specdec/ui.py`. Binds 127.0.0.1 unless
GRADIO_SERVER_NAME says otherwise (a Space sets it to 0.0.0.0); GRADIO_SERVER_PORT picks the port.
"""

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from specdec.ui import build_app, launch_kwargs, preload  # noqa: E402

demo = build_app()
demo.queue(default_concurrency_limit=4, max_size=32)
preload()   # the bundled pair loads while the page opens

if __name__ == "__main__":
    demo.launch(server_name=os.environ.get("GRADIO_SERVER_NAME") or "127.0.0.1",
                server_port=int(os.environ.get("GRADIO_SERVER_PORT") or 7860),
                ssr_mode=False, **launch_kwargs())
