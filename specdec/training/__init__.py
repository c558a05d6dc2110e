"""Building the bundled model pair: the training recipe (`recipe`) and its measured model cards
(`cards`). Run by `python -m specdec train` and `card`; never by the app. Uses the library only.
"""
