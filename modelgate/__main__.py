"""`python -m modelgate …`: the same as the `modelgate` command."""

import sys

from modelgate.cli import main

sys.exit(main())
