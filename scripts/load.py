"""Load-test a server: 16 gradio_client clients at once with different seeds, each result equal to the same
request run alone; then 40 at once against a server with a queue of 8: the excess is told to
retry, nothing else fails, and the server answers right after.

    python scripts/load.py
    python scripts/load.py --clients 4 --burst 12 --queue 2     # a short form
    python scripts/load.py --serialise --clients 8             # 8 at once through the device's line
                                                               # (SPECDEC_SERIALISE_DEVICE=1): each equal
                                                               # to the same request alone, waiting ones
                                                               # told their place

Exit status 0 when all of that holds. The measuring lives in `serverload.py` beside it.
"""

import sys

from serverload import main_load

if __name__ == "__main__":
    sys.exit(main_load())
