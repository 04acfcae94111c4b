"""`python -m tensorlogic` is the `tl` command."""
import sys

from .cli import main

sys.exit(main())
