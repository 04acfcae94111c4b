"""`python -m tensorlogic` is the `tl` command."""
import sys

try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while the command is still importing
    sys.stderr.write("\ntl: interrupted\n")
    sys.exit(130)

sys.exit(main())
