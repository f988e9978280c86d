"""``python -m squall.scheduler``: the ``squall scheduler`` program."""

import sys

from squall.scheduler.launcher import main

sys.exit(main())
