import sys

from skewgate.cli import main

sys.exit(main())
