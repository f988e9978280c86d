"""``python -m squall.cli.dask_scheduler``: the ``squall scheduler`` program under the
module path of distributed's (``distributed.cli.dask_scheduler``)."""

import sys

from squall.scheduler.launcher import main

if __name__ == "__main__":
    sys.exit(main())
