import sys

from sealflow.cli import main

sys.exit(main())
