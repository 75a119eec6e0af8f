import sys

from btfgen.cli import main

sys.exit(main())
