"""`python -m hiredlock ...`: the same as the `hiredlock` command."""

import sys

from hiredlock.cli import main

if __name__ == "__main__":
    sys.exit(main())
