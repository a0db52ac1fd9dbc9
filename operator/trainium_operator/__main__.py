"""`python -m trainium_operator` is the `trainium` CLI."""

import sys

from trainium_operator.cli import main

sys.exit(main())
