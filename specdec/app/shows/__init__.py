"""What the page shows: figures, tables and words built from a trace, a lab result or a cost
profile. Views and charts of a run, the step viewer's charts, the lab's and the speed explorer's
charts, the glossary and the messages a visitor reads.

Pure functions of their inputs: nothing here imports how the app is served
(`specdec.app.server`) or the page (`specdec.app.page`) (ARCHITECTURE.md)."""
