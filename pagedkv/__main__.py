"""``python -m pagedkv``: the same as the ``pagedkv`` command."""

import sys

from pagedkv.entry import main

sys.exit(main())
