"""The page: what a visitor sees and clicks. The layout (`layout.build_app`), the events and
their handlers, the lab and speed tabs, and the page's own script and styles (`static/`).

The page may import what it shows (`specdec.app.shows`) and how it is served
(`specdec.app.server`); neither of those imports the page (ARCHITECTURE.md)."""
