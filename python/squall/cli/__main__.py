"""``python -m squall.cli``: the ``squall`` command."""

import sys

from squall.cli import main

sys.exit(main())
