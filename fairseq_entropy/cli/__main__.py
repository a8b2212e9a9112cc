"""``python -m fairseq_entropy.cli``: the ``fairseq-entropy`` command line."""

import sys

from . import main

sys.exit(main())
