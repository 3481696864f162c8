# `python -m pybroker`: the same entry point as the `pybroker` console script.
import sys

from pybroker.cli import main

if __name__ == "__main__":
    sys.exit(main())
