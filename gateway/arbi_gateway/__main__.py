"""`python -m arbi_gateway`: the gateway's command line."""

from arbi_gateway.cli import main

raise SystemExit(main())
