"""`python -m specdec <command>`: the command line lives in `specdec.cli`."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
