import sys

from snapeval.cli import main

sys.exit(main())
