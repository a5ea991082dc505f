"""``python -m pagedkv``: the same as the ``pagedkv`` command.

Guarded: ``check --workers`` starts its workers with the ``spawn`` method, which imports this
module again in each worker as ``__mp_main__``; unguarded, every worker would run the command
line again and start workers of its own without end.
"""

import sys

from pagedkv.entry import main

if __name__ == "__main__":
    sys.exit(main())
