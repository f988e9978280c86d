"""``python -m squall.cli.dask_worker``: the ``squall worker`` program under the module
path of distributed's (``distributed.cli.dask_worker``), for job scripts and deployers
that call that path, e.g. dask-jobqueue's ``worker_command``."""

import sys

from squall.worker.launcher import main

if __name__ == "__main__":
    sys.exit(main())
