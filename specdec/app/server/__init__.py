"""How the app is served: what a request is (`api`), the runs and their flights, the decode
workers, the device queue, the pairs kept loaded, sessions, limits, the time budget,
housekeeping, and restoring a run from a link.

No Gradio layout here, and nothing imports the page (`specdec.app.page`): the CLI and the bench
use `limits` and `pairs` without building a page (ARCHITECTURE.md)."""
