import sys

from sim.cli.app import main

sys.exit(main())
