"""The command line: `specdec <command>` / `python -m specdec <command>`; its parser and policy are in `main`."""
