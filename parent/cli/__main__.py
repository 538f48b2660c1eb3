"""`python -m tether.parent.cli`: the `tether` command."""

import sys

from tether.parent.cli.main import main

sys.exit(main())
