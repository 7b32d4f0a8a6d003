"""``python -m renyiboost`` is the ``renyiboost`` command."""

import sys

from renyiboost.cli import main

sys.exit(main())
