"""The Gradio app over the library: its layout and handlers, its charts, the lab tab, and how it
is served to anyone (limits, input checks, housekeeping, the pairs it keeps loaded).

Importing this package loads nothing heavy: `specdec.app.server.limits` and `specdec.app.server.pairs` serve
the CLI and the bench without Gradio. `app.py` at the top of the repository builds and launches.
The layers are drawn in ARCHITECTURE.md: the library never imports this package.
"""
