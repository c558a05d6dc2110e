"""`python -m specdec.bench`: the bench alone, with the same options and exit codes as the CLI's."""

import sys

from .run import main

if __name__ == "__main__":
    sys.exit(main())
