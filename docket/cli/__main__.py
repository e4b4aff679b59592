"""``python -m docket.cli``: the same as the ``docket`` command."""

import sys

from docket.cli import main

sys.exit(main())
