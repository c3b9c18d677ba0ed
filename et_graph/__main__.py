"""``python -m et_graph``: the ``et-graph`` command."""
from .cli import console_main

raise SystemExit(console_main())
