"""`python -m specdec <command>`: the command line lives in `specdec.cli.main`."""

import sys

from .cli.main import main

if __name__ == "__main__":
    sys.exit(main())
