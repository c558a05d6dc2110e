"""Soak-test a server: 200 default runs against a fresh `python app.py`; resident memory after run 200 must be
within 5 % of after run 20, and the temp and Gradio cache folders grow by at most 5 MB.

    python scripts/soak.py                 # the full soak (about 4 minutes on 2 cores)
    python scripts/soak.py --runs 40       # a short form
    python scripts/soak.py --export        # also export the trace after every run
    python scripts/soak.py --imports 30    # 30 visitors each import a 2.1 MB trace, against a
                                           # byte budget of 40 MB (--budget-mb): memory must stay
                                           # within it (+40 MB slack), the first visitor told

Exit status 0 when both hold. The measuring lives in `serverload.py` beside it.
"""

import sys

from serverload import main_soak

if __name__ == "__main__":
    sys.exit(main_soak())
