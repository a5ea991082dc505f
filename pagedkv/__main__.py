"""``python -m pagedkv``: the same as the ``pagedkv`` command."""

import sys

from pagedkv.cli import main

sys.exit(main())
