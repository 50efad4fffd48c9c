"""arbi-serve: a self-hosted LLM serving engine with a gRPC API.

The package root stays import-light (no torch) so the CLI and client work on a bare install.
"""

__version__ = "0.1.0"
