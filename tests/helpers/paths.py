"""Where things are, for tests at any depth of the tree (a moved test keeps its paths)."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
FAULT_SITE = TESTS / "server" / "fault_site"  # the sitecustomize that injects faults into a served process
MISBEHAVING_MCP = TESTS / "tools" / "misbehaving_server.py"
