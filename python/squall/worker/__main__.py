"""``python -m squall.worker``: the ``squall worker`` program."""

import sys

from squall.worker.launcher import main

sys.exit(main())
