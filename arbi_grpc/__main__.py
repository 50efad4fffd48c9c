"""`python -m arbi_grpc` runs the CLI."""

import sys

from arbi_grpc.cli import main

sys.exit(main())
